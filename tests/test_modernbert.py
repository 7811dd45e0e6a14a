"""ModernBERT against transformers' implementation: random configs with local and global layers, sequences longer
than the local window, padded batches; hidden states, masked-LM, classifier, tagger and reader logits and losses
within 1e-5 (fp32), with checkpoints both ways. And the maths alone: rotary positions make a score depend on the
offset only."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
import torch

from bertkit.models.functional import rotary_tables, rotate, window_mask
from bertkit.models.modernbert.configuration import FULL, SLIDING, ModernBertConfig
from bertkit.models.modernbert.modeling import (
    ModernBertForMaskedLM,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)
from bertkit.models.registry import family_of
from tolerance import assert_close

transformers = pytest.importorskip("transformers")

CONFIGS = [  # (local_attention, a global layer every n, bases global / local, classifier pooling)
    dict(local_attention=8, global_attn_every_n_layers=3, global_rope_theta=160_000.0, local_rope_theta=10_000.0,
         classifier_pooling="cls"),
    dict(local_attention=4, global_attn_every_n_layers=2, global_rope_theta=1_000.0, local_rope_theta=50.0,
         classifier_pooling="mean"),
]


def hf_config(overrides: dict, **extra) -> transformers.ModernBertConfig:
    config = transformers.ModernBertConfig(
        vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
        **overrides, **extra)
    config._attn_implementation = "eager"
    return config


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three texts of 21, 15 and 5 tokens (the window holds 5 or 9): padded to 21."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 99, (3, 21), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 15:], mask[2, 5:] = 0, 0
    return ids.masked_fill(mask == 0, 0), mask


def transformers_model(cls, config):
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # away from the initialisation's zeros and ones, so that every weight counts
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def output_of(out) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


@pytest.mark.parametrize("overrides", CONFIGS)
@pytest.mark.parametrize("names", [("ModernBertModel", ModernBertModel),
                                   ("ModernBertForMaskedLM", ModernBertForMaskedLM),
                                   ("ModernBertForSequenceClassification", ModernBertForSequenceClassification)])
def test_equals_transformers_both_ways(tmp_path, overrides, names):
    hf_name, ours = names
    hf_class = getattr(transformers, hf_name)
    config = hf_config(overrides, **({"num_labels": 3} if "Classification" in hf_name else {}))
    theirs = transformers_model(hf_class, config)
    theirs.save_pretrained(tmp_path / "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers' config.json reads without a word
        model = ours.from_pretrained(tmp_path / "hf").eval()
    layer_types = model.config.layer_types
    assert FULL in layer_types and SLIDING in layer_types
    ids, mask = batch()
    with torch.no_grad():
        expected, got = output_of(theirs(input_ids=ids, attention_mask=mask)), output_of(model(ids, mask))
    real = mask.bool() if expected.dim() == 3 else slice(None)  # padded positions hold nothing to compare
    assert_close(got[real], expected[real], msg=hf_name)

    model.save_pretrained(tmp_path / "ours")
    back = hf_class.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    with torch.no_grad():
        assert_close(output_of(back(input_ids=ids, attention_mask=mask))[real], got[real],
                     msg=f"{hf_name}, saved by bertkit")
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [hf_name]


def head_outputs(model, ids, mask, targets, ours: bool) -> dict[str, torch.Tensor]:
    """A tagger's logits or a reader's start and end logits, and the loss on `targets`, of either library's model."""
    with torch.no_grad():
        out = model(ids, mask, **targets) if ours else model(input_ids=ids, attention_mask=mask, **targets)
    if hasattr(out, "start_logits"):
        return {"start_logits": out.start_logits, "end_logits": out.end_logits, "loss": out.loss}
    return {"logits": out.logits, "loss": out.loss}


@pytest.mark.parametrize("overrides", CONFIGS)
@pytest.mark.parametrize("names", [("ModernBertForTokenClassification", ModernBertForTokenClassification),
                                   ("ModernBertForQuestionAnswering", ModernBertForQuestionAnswering)])
def test_tagger_and_reader_equal_transformers_both_ways(tmp_path, overrides, names):
    """The NER and QA heads, in both libraries' directories: logits at every real token of the padded batch, and the
    losses (tags ignored at [CLS] and padding; one answer at [CLS], one cut off beyond the input, as windows make
    them). A reader's loss is a softmax over every position, padding too, and a pad with no text inside its local
    window holds another vector in each library (neither is read: `padded positions hold nothing`), so its loss is
    compared on the three rows unpadded, and on the padded batch against transformers' loss of bertkit's logits."""
    hf_name, ours = names
    hf_class = getattr(transformers, hf_name)
    tagger = ours is ModernBertForTokenClassification
    theirs = transformers_model(hf_class, hf_config(overrides, **({"num_labels": 5} if tagger else {})))
    theirs.save_pretrained(tmp_path / "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = ours.from_pretrained(tmp_path / "hf").eval()
    ids, mask = batch()
    real = mask.bool()
    if tagger:
        tags = torch.randint(0, 5, ids.shape, generator=torch.Generator().manual_seed(2))
        tags[:, 0] = -100
        targets = {"labels": tags.masked_fill(mask == 0, -100)}
    else:  # an answer inside the text, one at [CLS] (none in this window), one beyond the input's 21 tokens
        targets = {"start_positions": torch.tensor([3, 0, 4]), "end_positions": torch.tensor([6, 0, 30])}
    unpadded = torch.randint(3, 99, ids.shape, generator=torch.Generator().manual_seed(3)), torch.ones_like(mask)

    def compare(one, other, what: str) -> None:
        for name in other:
            if name == "loss" and tagger:
                assert_close(one[name], other[name], msg=f"{what} loss")
            elif name != "loss":
                assert_close(one[name][real], other[name][real], msg=f"{what} {name}")

    expected, got = (head_outputs(m, ids, mask, targets, ours=m is model) for m in (theirs, model))
    compare(got, expected, hf_name)
    if not tagger:
        assert_close(got["loss"], theirs.loss_function(got["start_logits"], got["end_logits"], **targets))
        assert_close(head_outputs(model, *unpadded, targets, ours=True)["loss"],
                     head_outputs(theirs, *unpadded, targets, ours=False)["loss"], msg=f"{hf_name} loss")

    model.save_pretrained(tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [hf_name]
    back = hf_class.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    compare(head_outputs(back, ids, mask, targets, ours=False), got, f"{hf_name}, saved by bertkit")
    assert_close(head_outputs(back, *unpadded, targets, ours=False)["loss"],
                 head_outputs(model, *unpadded, targets, ours=True)["loss"], msg=f"{hf_name} loss, saved by bertkit")


def test_a_reader_has_two_outputs_and_keeps_its_settings(tmp_path):
    from bertkit.errors import ConfigError

    config = ModernBertConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                              num_attention_heads=4, local_attention=4, pad_token_id=0,
                              layer_types=[FULL, SLIDING, SLIDING])
    with pytest.raises(ConfigError, match="a question-answering head has 2 outputs"):
        ModernBertForQuestionAnswering(config.replace(id2label={0: "a", 1: "b", 2: "c"}))
    settings = {"max_length": 24, "doc_stride": 6, "max_answer_length": 4, "impossible": False}
    ModernBertForQuestionAnswering(config.replace(qa=settings)).save_pretrained(tmp_path)
    assert ModernBertConfig.from_pretrained(tmp_path).qa == settings
    assert "qa" not in json.loads(config.to_json_string())  # written only where a reader has it
    with pytest.raises(ConfigError, match="qa must be a dict"):
        config.replace(qa={"stride": 3})


def test_a_text_alone_equals_itself_in_a_padded_batch():
    config = ModernBertConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                              num_attention_heads=4, local_attention=4, pad_token_id=0,
                              layer_types=[FULL, SLIDING, SLIDING])
    torch.manual_seed(0)
    model = ModernBertModel(config).eval()
    ids, mask = batch()
    with torch.no_grad():
        together = model(ids, mask).last_hidden_state
        alone = model(ids[2:, :5]).last_hidden_state
    assert torch.isfinite(together).all()  # a padded row far from any text sees no key: uniform, never NaN
    assert_close(together[2, :5], alone[0])


def test_masked_lm_loss_reads_the_masked_positions_only(tmp_path):
    config = hf_config(CONFIGS[0])
    theirs = transformers_model(transformers.ModernBertForMaskedLM, config)
    theirs.save_pretrained(tmp_path)
    model = ModernBertForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask = batch()
    labels = torch.full_like(ids, -100)
    labels[0, [2, 7, 19]], labels[1, 4] = ids[0, [2, 7, 19]], ids[1, 4]
    with torch.no_grad():
        expected, out = theirs(input_ids=ids, attention_mask=mask, labels=labels), model(ids, mask, labels=labels)
    assert out.logits.shape == (4, 99)  # only the four masked positions reach the decoder
    assert_close(out.loss, expected.loss, rtol=1e-6)
    assert out.loss_sums["mlm"].item() == pytest.approx(4 * out.loss.item(), rel=1e-6)
    assert model.decoder.weight.data_ptr() == model.model.embeddings.tok_embeddings.weight.data_ptr()  # tied


def test_older_config_files_read_as_the_new_fields():
    config = ModernBertConfig.from_dict({"model_type": "modernbert", "num_hidden_layers": 5,
                                         "global_attn_every_n_layers": 2, "global_rope_theta": 1000.0,
                                         "local_rope_theta": 50.0, "vocab_size": 99, "pad_token_id": 0})
    assert config.layer_types == [FULL, SLIDING, FULL, SLIDING, FULL]
    assert config.rope_theta(FULL) == 1000.0 and config.rope_theta(SLIDING) == 50.0
    assert ModernBertConfig(num_hidden_layers=4, layer_types=[FULL] * 4).sliding_window == 64


def test_rotary_scores_depend_on_the_offset_only():
    """⟨R_t q, R_s k⟩ = ⟨R_(t-s) q, k⟩: one query and one key, rotated to every pair of positions."""
    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)
    cos, sin = rotary_tables(40, 16, 10_000.0)
    rq, rk = rotate(q.expand(40, 16), cos, sin), rotate(k.expand(40, 16), cos, sin)
    scores = (rq @ rk.T).numpy()                                                   # scores[t, s]
    for offset in (-7, 0, 3, 12):
        diagonal = np.diagonal(scores, offset=-offset)                            # every t - s == offset
        assert np.ptp(diagonal) < 1e-4 * np.abs(diagonal).max(), offset
    assert abs(scores[5, 0] - scores[0, 5]) > 1e-3  # the sign of the offset matters: no symmetric distance
    assert torch.equal(rq[0], q)                     # position 0 is not turned


def test_window_mask_and_config_errors():
    assert window_mask(5, 1).int().tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0],
                                                [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]
    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match="layer_types must give each of the 2 layers"):
        ModernBertConfig(num_hidden_layers=2, layer_types=[FULL])
    with pytest.raises(ConfigError, match="must be even"):
        ModernBertConfig(hidden_size=30, num_attention_heads=2, layer_types=[FULL] * 22)


def test_the_registry_knows_the_family_and_encode_reads_it(tmp_path):
    """A ModernBERT directory with a WordPiece vocabulary: `bertkit encode` gives transformers' vectors."""
    from bertkit.cli import main
    from bertkit.tokenizer import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天天气很好明天会下雨我们去公园"]
    (tmp_path / "vocab.txt").write_text("\n".join(dict.fromkeys(words)) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(tmp_path / "vocab.txt"))
    config = hf_config(CONFIGS[0])
    config.vocab_size = len(tokenizer)
    theirs = transformers_model(transformers.ModernBertModel, config)
    theirs.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert family_of(tmp_path / "model").name == "ModernBERT"
    out = tmp_path / "vectors.npy"
    texts = ["今天天气很好", "明天会下雨，我们去公园"]
    assert main(["encode", "--model", str(tmp_path / "model"), *texts, "--pooling", "mean", "--out", str(out)]) == 0
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * weights).sum(1) / weights.sum(1)).numpy()
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_unpadded_equals_padded(overrides, tmp_path):
    """The batch's real tokens packed (every step but attention skips the padding) give the padded outputs, and
    zeros at padding; through a task head too."""
    theirs = transformers_model(transformers.ModernBertForMaskedLM, hf_config(overrides))
    theirs.save_pretrained(tmp_path)
    model = ModernBertForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask = batch()
    with torch.no_grad():
        model.model.unpad = False
        padded = model.model(ids, mask).last_hidden_state
        padded_logits = model(ids, mask).logits
        model.model.unpad = True
        unpadded = model.model(ids, mask).last_hidden_state
        unpadded_logits = model(ids, mask).logits
    real = mask.bool()
    assert_close(unpadded[real], padded[real])
    assert_close(unpadded_logits[real], padded_logits[real])
    assert (unpadded[~real] == 0).all()


def test_finetune_trains_a_modernbert_classifier(tmp_path, capsys):
    """`bertkit finetune --task classify` on a ModernBERT directory: its own family's head, trained and scored; the
    best model is a ModernBertForSequenceClassification transformers loads. A family without a head for a task (a
    ModernBERT's cloze prompt) is refused by name."""
    from bertkit.cli import main
    from bertkit.tokenizer import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"好坏的很太不是"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(tmp_path / "vocab.txt"))
    config = hf_config(CONFIGS[0])
    config.vocab_size = len(tokenizer)
    transformers_model(transformers.ModernBertForMaskedLM, config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    for split, count in (("train", 160), ("dev", 40), ("test", 40)):
        rows = []
        for i in range(count):
            label = ["good", "bad"][i % 2]
            filler = "".join(rng.choice(list("的很太不是"), size=rng.integers(1, 6)))
            rows.append(f"{filler}{'好' if label == 'good' else '坏'}{filler}\t{label}")
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    common = ["finetune", "--model", str(tmp_path / "model"), "--train", str(tmp_path / "train.tsv"), "--dev",
              str(tmp_path / "dev.tsv"), "--test", str(tmp_path / "test.tsv"), "--max-length", "16", "--no-progress"]
    assert main([*common, "--task", "classify", "--max-steps", "40", "--batch-size", "16", "--learning-rate", "3e-3",
                 "--out", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "finetune_results.json").read_text())
    assert results["test_accuracy"] >= 0.9
    best = transformers.ModernBertForSequenceClassification.from_pretrained(tmp_path / "run" / "best")
    assert best.config.id2label == {0: "bad", 1: "good"}
    # predict, evaluate and the server read it as the classifier it is
    from bertkit.inference.serving import ServedModel

    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "run" / "best"), "很好", "太坏"]) == 0
    printed = capsys.readouterr().out
    assert "good" in printed.splitlines()[0] and "bad" in printed.splitlines()[1]
    assert main(["evaluate", "--model", str(tmp_path / "run" / "best"), "--data", str(tmp_path / "test.tsv"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == results["test_accuracy"]
    served = ServedModel.load(tmp_path / "run" / "best")
    assert served.task == "classifier" and served.labels == ["bad", "good"]
    assert ServedModel.load(tmp_path / "model").task == "embedding"  # a masked-LM directory: its encoder's vectors
    capsys.readouterr()
    assert main([*common, "--task", "classify", "--prompt", "[MASK]{text}", "--label-words", "good=好", "bad=坏",
                 "--max-steps", "2", "--out", str(tmp_path / "prompt")]) == 2
    assert "a ModernBERT model has no head for the 'prompt' task" in capsys.readouterr().err


def modern_directory(path, tokens) -> tuple:
    """A tiny ModernBERT directory (transformers' masked-LM model, random weights) with a WordPiece vocabulary of
    `tokens` beside the special ones; (its path, its tokenizer)."""
    from bertkit.tokenizer import BertTokenizer

    words = dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *tokens])
    tokenizer = BertTokenizer({token: i for i, token in enumerate(words)})
    config = hf_config(CONFIGS[0])
    config.vocab_size = len(tokenizer)
    transformers_model(transformers.ModernBertForMaskedLM, config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, tokenizer


def conll_sentences(count: int, seed: int) -> str:
    """"[今天] PERSON 在 PLACE VERB": 张三 or 李四 (PER), 北京 or 上海 (LOC), a tag per character."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        start = rng.choice(["", "今天"])
        person, place, verb = rng.choice(["张三", "李四"]), rng.choice(["北京", "上海"]), rng.choice(["工作", "学习"])
        tags = ["O"] * len(start) + ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "O"]
        sentences.append("\n".join(f"{c} {t}" for c, t in zip(start + person + "在" + place + verb, tags)))
    return "\n\n".join(sentences) + "\n"


def encoder_moved(before, after) -> bool:
    """Whether fine-tuning changed the encoder's weights, not only the fresh head's."""
    return not torch.equal(before.model.layers[1].attn.Wqkv.weight, after.model.layers[1].attn.Wqkv.weight)


def test_finetune_trains_a_modernbert_tagger_that_predict_and_serve_read(tmp_path, capsys):
    """`bertkit finetune --task ner` on a ModernBERT directory trains its own family's tagger: the encoder's weights
    move, transformers' ModernBertForTokenClassification loads the best model with bertkit's logits, `predict`
    finds the entities, and `bertkit serve` answers /predict with predict's spans."""
    from bertkit.cli import main
    from bertkit.inference.loading import load_text_model
    from serve_helpers import ServerProcess, assert_same_entities

    model_dir, tokenizer = modern_directory(tmp_path / "model", "今天张三李四在北京上海工作学习")
    for split, count, seed in (("train", 64, 0), ("dev", 16, 1), ("test", 16, 2)):
        (tmp_path / f"{split}.conll").write_text(conll_sentences(count, seed), encoding="utf-8")
    assert main(["finetune", "--task", "ner", "--model", str(model_dir), "--train", str(tmp_path / "train.conll"),
                 "--dev", str(tmp_path / "dev.conll"), "--test", str(tmp_path / "test.conll"), "--max-length", "16",
                 "--max-steps", "30", "--batch-size", "16", "--learning-rate", "3e-3", "--no-progress", "--out",
                 str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "finetune_results.json").read_text())
    assert results["labels"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"] and results["test_f1"] >= 0.9
    best = tmp_path / "run" / "best"
    theirs = transformers.ModernBertForTokenClassification.from_pretrained(best, attn_implementation="eager").eval()
    assert encoder_moved(transformers.ModernBertForMaskedLM.from_pretrained(model_dir), theirs)
    ours, _ = load_text_model(best, "predict")
    assert type(ours).__name__ == "ModernBertForTokenClassification"
    texts = ["张三在北京工作", "今天李四在上海学习"]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    real = encoded["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).logits
        assert_close(ours(encoded["input_ids"], encoded["attention_mask"]).logits[real], expected[real])

    capsys.readouterr()
    assert main(["predict", "--model", str(best), *texts, "--json"]) == 0
    predicted = [json.loads(line)["entities"] for line in capsys.readouterr().out.splitlines()]
    assert [[(e["entity"], e["text"]) for e in found] for found in predicted] == [[("PER", "张三"), ("LOC", "北京")],
                                                                                  [("PER", "李四"), ("LOC", "上海")]]
    with ServerProcess(best) as server:
        status, served = server.post("/predict", {"inputs": [[text] for text in texts]})
    assert status == 200
    assert_same_entities(served, predicted)


def test_finetune_trains_a_modernbert_reader_that_predict_and_serve_read(tmp_path, capsys):
    """`bertkit finetune --task qa` on a ModernBERT directory trains its own family's reader (its window settings
    saved in config.json): the encoder's weights move, transformers' ModernBertForQuestionAnswering loads the best
    model with bertkit's start and end logits, `predict` answers with a span of the context, and `bertkit serve`
    answers /predict as predict does."""
    from bertkit.cli import main
    from bertkit.inference.loading import load_text_model
    from serve_helpers import ServerProcess
    from test_qa_cli import VOCAB, WORDS, toy_squad

    model_dir, tokenizer = modern_directory(tmp_path / "model", VOCAB)
    for split, count, seed in (("train", 48, 0), ("dev", 12, 1)):
        (tmp_path / f"{split}.json").write_text(json.dumps(toy_squad(count, seed)), encoding="utf-8")
    assert main(["finetune", "--task", "qa", "--model", str(model_dir), "--train", str(tmp_path / "train.json"),
                 "--dev", str(tmp_path / "dev.json"), "--max-length", "24", "--doc-stride", "6",
                 "--max-answer-length", "4", "--max-steps", "6", "--batch-size", "8", "--learning-rate", "1e-3",
                 "--eval-every", "3", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    best = tmp_path / "run" / "best"
    config = json.loads((best / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForQuestionAnswering"]
    assert config["qa"] == {"max_length": 24, "doc_stride": 6, "max_answer_length": 4, "impossible": False}
    theirs = transformers.ModernBertForQuestionAnswering.from_pretrained(best, attn_implementation="eager").eval()
    assert encoder_moved(transformers.ModernBertForMaskedLM.from_pretrained(model_dir), theirs)
    ours, _ = load_text_model(best, "predict")
    assert type(ours).__name__ == "ModernBertForQuestionAnswering"
    context = " ".join(WORDS[:30]) + " ."
    questions = ["where is w3 ?", "where is w20 ?"]
    encoded = tokenizer(questions, [context] * 2, padding=True, return_tensors="pt")
    real = encoded["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
        got = ours(encoded["input_ids"], encoded["attention_mask"])
    assert_close(got.start_logits[real], expected.start_logits[real])
    assert_close(got.end_logits[real], expected.end_logits[real])

    capsys.readouterr()
    argv = ["predict", "--model", str(best), "--json", "--context", context]
    assert main([*argv, *(arg for question in questions for arg in ("--question", question))]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(answers) == 2
    for answer in answers:
        assert context[answer["start"]:answer["end"]] == answer["answer"] != "" and 0 < answer["score"] <= 1
    with ServerProcess(best) as server:
        status, served = server.post("/predict", {"inputs": [{"question": q, "context": context} for q in questions]})
    assert status == 200
    for got, want in zip(served, answers):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        assert got["score"] == pytest.approx(want["score"], abs=1e-5)


def test_attention_shows_every_layer_and_the_local_layers_band(tmp_path, capsys):
    """`bertkit attention` on a ModernBERT directory (a masked-LM model: its encoder's attention) and a text longer
    than the window: the page holds each layer's heads, transformers' attention probabilities to the page's 4
    decimals; a local layer's weights are zero beyond its window of 4 tokens each side (a band around the
    diagonal), a global layer's are not; --picture draws a layer's heads; --pair reads a pair, as the classifier
    of pairs does."""
    from bertkit.cli import main
    from test_attention_viewer import page_data
    from test_figures import assert_real_picture

    model_dir, tokenizer = modern_directory(tmp_path / "model", "今天天气很好明天会下雨我们去公园")
    text = "今天天气很好明天会下雨我们去公园"                                     # 16 characters: 18 tokens
    page, picture = tmp_path / "attention.html", tmp_path / "layer.png"
    capsys.readouterr()
    assert main(["attention", text, "--model", str(model_dir), "--out", str(page), "--picture", str(picture),
                 "--layer", "1"]) == 0
    assert "18 tokens: [CLS] 今 天" in capsys.readouterr().out
    assert_real_picture(picture)
    [kind] = page_data(page.read_text(encoding="utf-8"))["kinds"]
    weights = np.array(kind["attentions"])
    assert kind["name"] == "self" and weights.shape == (4, 4, 18, 18)
    encoded = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        theirs = transformers.ModernBertModel.from_pretrained(model_dir, attn_implementation="eager")(
            **{k: encoded[k] for k in ("input_ids", "attention_mask")}, output_attentions=True).attentions
    np.testing.assert_allclose(weights, torch.cat(theirs).numpy(), atol=6e-5, rtol=0)
    offset = np.abs(np.arange(18)[:, None] - np.arange(18)[None, :])
    layer_types = json.loads((model_dir / "config.json").read_text())["layer_types"]
    for layer, kind_of_layer in enumerate(layer_types):
        beyond = weights[layer][:, offset > 4]                                        # (H, pairs beyond the window)
        assert (beyond == 0).all() if kind_of_layer == SLIDING else (beyond > 0).all(), (layer, kind_of_layer)
    assert SLIDING in layer_types and FULL in layer_types
    assert main(["attention", "今天天气很好", "--pair", "明天会下雨", "--model", str(model_dir), "--out",
                 str(tmp_path / "pair.html")]) == 0
    [kind] = page_data((tmp_path / "pair.html").read_text(encoding="utf-8"))["kinds"]
    assert kind["query_types"] == [0] * 8 + [1] * 6  # [CLS] 6 [SEP] | 5 [SEP]


def test_pretrain_a_modern_encoder_and_continue_it(tmp_path, capsys):
    """`bertkit pretrain --config modern-tiny --objective mlm`: a ModernBERT pretrained by masked LM alone, which
    transformers loads; `--init` continues it; a sentence objective is refused by name."""
    import random

    from bertkit.cli import main
    from bertkit.data.vocab import build_vocab

    rng = random.Random(0)
    chars = "今天天气很好我们去公园散步明天会下雨记得带伞这家店的菜很好吃服务也不错价格实惠环境干净"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("".join("".join(rng.choice(chars) for _ in range(rng.randint(8, 30))) + "。\n"
                                      for _ in range(6)) + "\n" for _ in range(60)), encoding="utf-8")
    build_vocab(corpus.read_text(encoding="utf-8").split(), tmp_path / "vocab")
    common = ["--corpus", str(corpus), "--batch-size", "16", "--max-seq-length", "64", "--no-progress"]
    assert main(["pretrain", "--config", "modern-tiny", "--objective", "mlm", "--vocab", str(tmp_path / "vocab"),
                 "--out", str(tmp_path / "pre"), "--max-steps", "40", *common]) == 0
    records = [json.loads(line) for line in (tmp_path / "pre" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    vocab_size = len((tmp_path / "vocab" / "vocab.txt").read_text(encoding="utf-8").split())
    assert losses[-1] < losses[0] - 0.1  # it learns: held-out accuracy well above a guess among the characters
    assert records[-1]["eval_mlm_accuracy"] > 3 / vocab_size
    model = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "pre")
    assert model.config.num_hidden_layers == 3 and model.config.layer_types[0] == "full_attention"
    # encode reads the pretrained directory's encoder (inside its masked-LM model), as transformers' does
    from bertkit.tokenizer import BertTokenizer

    assert main(["encode", "--model", str(tmp_path / "pre"), "今天天气很好", "--pooling", "mean", "--out",
                 str(tmp_path / "v.npy")]) == 0
    encoded = BertTokenizer.from_pretrained(tmp_path / "pre")(["今天天气很好"], return_tensors="pt")
    with torch.no_grad():
        hidden = transformers.ModernBertModel.from_pretrained(tmp_path / "pre")(
            input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), hidden.mean(1).numpy(), atol=1e-5, rtol=0)
    assert main(["pretrain", "--init", str(tmp_path / "pre"), "--objective", "mlm", "--out", str(tmp_path / "more"),
                 "--max-steps", "3", *common]) == 0
    capsys.readouterr()
    assert main(["pretrain", "--config", "modern-tiny", "--vocab", str(tmp_path / "vocab"), "--out",
                 str(tmp_path / "nsp"), "--max-steps", "2", *common]) == 2
    assert "a ModernBERT pretrains with masked LM alone" in capsys.readouterr().err
