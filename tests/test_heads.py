"""Task heads against transformers: same weights and batch give the same loss, gradients and logits."""

import pytest
import torch
import transformers

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from tolerance import assert_close

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def batch(seed=0, B=4, T=12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[3, 5:] = 0
    ids = ids * mask
    types = (torch.arange(T) >= T // 2).long().expand(B, T) * mask
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(B, T, generator=g) < 0.3) & mask.bool()
    labels[chosen] = torch.randint(5, 99, (int(chosen.sum()),), generator=g)
    return ids, mask, types, labels


def randomise(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def test_pretraining_loss_and_gradients_match_transformers(tmp_path):
    torch.manual_seed(0)
    hf = randomise(transformers.BertForPreTraining(transformers.BertConfig(**TINY)))
    hf.save_pretrained(tmp_path)
    ours = BertForPreTraining.from_pretrained(tmp_path).train()
    hf.train()
    ids, mask, types, labels = batch()
    nsp = torch.tensor([0, 1, 1, 0])
    a = ours(ids, mask, types, labels=labels, next_sentence_label=nsp)
    b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)
    assert_close(a.loss, b.loss, msg="loss")
    # Only the predicted rows are scored, and they equal HF's full logits at those rows.
    assert_close(a.prediction_logits, b.prediction_logits[labels != -100], msg="prediction_logits")
    assert_close(a.seq_relationship_logits, b.seq_relationship_logits, msg="seq_relationship_logits")
    n = int((labels != -100).sum())
    torch.testing.assert_close(a.loss_sums["mlm"] / n + a.loss_sums["nsp"] / 4, a.loss)
    assert BertForPreTraining.count_loss_items({"labels": labels, "next_sentence_label": nsp}) == {"mlm": n, "nsp": 4}
    a.loss.backward()
    b.loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        assert_close(p.grad, theirs[name].grad, rtol=1e-4, msg=name)
    # Without labels the head scores every position, as transformers does.
    with torch.no_grad():
        full = ours(ids, mask, types).prediction_logits
    assert full.shape == (4, 12, 99)
    assert_close(full[mask.bool()], b.prediction_logits[mask.bool()])


def test_pretraining_checkpoint_loads_in_transformers(tmp_path):
    torch.manual_seed(1)
    ours = BertForPreTraining(BertConfig(**TINY)).eval()
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight
    ours.save_pretrained(tmp_path)
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    ids, mask, types, labels = batch(1)
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert_close(a.prediction_logits[mask.bool()], b.prediction_logits[mask.bool()], msg="prediction_logits")
    assert_close(a.seq_relationship_logits, b.seq_relationship_logits, msg="seq_relationship_logits")
    again = BertForPreTraining.from_pretrained(tmp_path)
    assert again.cls.predictions.decoder.weight is again.bert.embeddings.word_embeddings.weight


def test_masked_lm_matches_transformers_and_loads_pretraining_checkpoints(tmp_path):
    torch.manual_seed(2)
    BertForPreTraining(BertConfig(**TINY)).save_pretrained(tmp_path)
    ours = BertForMaskedLM.from_pretrained(tmp_path)   # NSP head and pooler are another model's: ignored
    assert "cls.seq_relationship.weight" in ours.loaded_but_unused
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask, types, labels = batch(2)
    with torch.no_grad():
        a = ours(ids, mask, types, labels=labels)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    assert_close(a.loss, b.loss)


@pytest.mark.parametrize("ours_cls, hf_cls", [
    (BertForSequenceClassification, transformers.BertForSequenceClassification),
    (BertForTokenClassification, transformers.BertForTokenClassification),
])
def test_classifiers_round_trip_with_transformers(tmp_path, ours_cls, hf_cls):
    torch.manual_seed(3)
    cfg = BertConfig(**TINY, id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    ours = randomise(ours_cls(cfg)).eval()
    ours.save_pretrained(tmp_path / "ours")
    hf = hf_cls.from_pretrained(tmp_path / "ours").eval()
    assert hf.config.id2label == {0: "O", 1: "B-PER", 2: "I-PER"}
    ids, mask, types, _ = batch(3)
    with torch.no_grad():
        a, b = ours(ids, mask, types).logits, hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    keep = mask.bool() if a.dim() == 3 else slice(None)
    assert_close(a[keep], b[keep])
    hf.save_pretrained(tmp_path / "hf")                               # and back
    back = ours_cls.from_pretrained(tmp_path / "hf")
    with torch.no_grad():
        assert_close(back(ids, mask, types).logits[keep], a[keep], rtol=1e-6)


def test_loss_matches_transformers_for_classifiers(tmp_path):
    torch.manual_seed(4)
    cfg = BertConfig(**TINY, id2label={0: "a", 1: "b", 2: "c"})
    ours = BertForTokenClassification(cfg).eval()
    ours.save_pretrained(tmp_path)
    hf = transformers.BertForTokenClassification.from_pretrained(tmp_path).eval()
    ids, mask, types, _ = batch(4)
    tags = torch.randint(0, 3, ids.shape).masked_fill(~mask.bool(), -100)
    with torch.no_grad():
        assert_close(ours(ids, mask, types, labels=tags).loss,
                     hf(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=tags).loss)
    with pytest.raises(ValueError, match=r"label ids must be in \[0, 3\)"):
        ours(ids, mask, types, labels=tags.masked_fill(tags == 2, 3))


def test_base_checkpoint_into_task_model_starts_a_fresh_head(tmp_path):
    torch.manual_seed(5)
    from bertkit.models.bert.modeling import BertModel

    BertModel(BertConfig(**TINY)).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="classifier.bias, classifier.weight; initialised fresh"):
        model = BertForSequenceClassification.from_pretrained(tmp_path, id2label={0: "neg", 1: "pos"})
    assert model.classifier.weight.shape == (2, 32) and model.classifier.weight.std() > 0


def test_albert_pretraining_head_and_parameter_count():
    cfg = BertConfig(**{**TINY, "num_hidden_layers": 6}, embedding_size=8, share_layers=True)
    model = BertForPreTraining(cfg)
    V, E, C, F, P = 99, 8, 32, 37, 64
    embeddings = V * E + P * E + 2 * E + 2 * E
    layer = 4 * (C * C + C) + 2 * 2 * C + (C * F + F) + (F * C + C)
    heads = (C * C + C) + (C * E + E) + 2 * E + V + (2 * C + 2)   # pooler, transform, LN, decoder bias, NSP
    assert model.num_parameters() == embeddings + (E * C + C) + layer + heads
    ids, mask, types, labels = batch(6)
    loss = model(ids, mask, types, labels=labels, next_sentence_label=torch.tensor([0, 1, 0, 1])).loss
    loss.backward()
    assert torch.isfinite(loss) and model.bert.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0
