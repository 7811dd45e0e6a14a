"""UniLM: the mask, the loss on target tokens only, cached decoding equal to uncached, saving and loading."""

import pytest
import torch

from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.unilm import BertForUniLM, next_token_labels
from bertkit.models.functional import unilm_mask
from bertkit.models.generation import Constraints
from bertkit.models.losses import IGNORE_INDEX

CONFIG = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny(seed=0, **changes):
    torch.manual_seed(seed)
    return BertForUniLM(BertConfig(**{**CONFIG, **changes})).eval()


def pair(source, target):
    """[CLS]=2 source [SEP]=3 target [SEP]=3 -> ids, segments, labels (the target and its [SEP])."""
    ids = [2, *source, 3, *target, 3]
    segments = [0] * (len(source) + 2) + [1] * (len(target) + 1)
    labels = [IGNORE_INDEX] * (len(source) + 2) + [*target, 3]
    return torch.tensor([ids]), torch.tensor([segments]), torch.tensor([labels])


def test_mask_source_sees_source_target_sees_source_and_its_past():
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 0]])            # 3 source, 3 target, 1 padding
    keep = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    mask = unilm_mask(segments, keep)[0].int()
    expected = torch.tensor([[1, 1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 1, 0, 0, 0],
                             [1, 1, 1, 1, 1, 0, 0],
                             [1, 1, 1, 1, 1, 1, 0],
                             [1, 1, 1, 1, 1, 1, 0]])
    assert torch.equal(mask, expected)


def test_logits_at_target_position_t_ignore_later_target_tokens_and_read_every_source_token():
    model = tiny()
    source, target = [10, 11, 12, 13], [20, 21, 22, 23, 24]
    ids, segments, _ = pair(source, target)
    base = model(ids, token_type_ids=segments).logits[0]
    t = len(source) + 2 + 2                                       # the third target token's position
    later = ids.clone()
    later[0, t + 1:] = torch.tensor([40, 41, 42, 43][: later.size(1) - t - 1])
    changed = model(later, token_type_ids=segments).logits[0]
    assert torch.allclose(changed[: t + 1], base[: t + 1], atol=1e-6)  # every position up to t: the same
    assert not torch.allclose(changed[t + 1:], base[t + 1:], atol=1e-3)
    for i in range(1, len(source) + 1):                          # each source token moves the logits at t
        other = ids.clone()
        other[0, i] = 50
        assert (model(other, token_type_ids=segments).logits[0, t] - base[t]).abs().max() > 1e-4


def test_source_positions_never_see_the_target():
    model = tiny()
    ids, segments, _ = pair([10, 11, 12], [20, 21])
    other = ids.clone()
    other[0, 5:] = torch.tensor([30, 31, 3])
    S = 5
    assert torch.allclose(model(ids, token_type_ids=segments).logits[0, :S],
                          model(other, token_type_ids=segments).logits[0, :S], atol=1e-6)


def test_loss_is_next_token_cross_entropy_over_target_tokens_only():
    model = tiny()
    ids, segments, labels = pair([10, 11, 12], [20, 21, 22])
    out = model(ids, token_type_ids=segments, labels=labels)
    full = model(ids, token_type_ids=segments).logits[0]
    targets = next_token_labels(labels)[0]
    keep = targets != IGNORE_INDEX
    assert int(keep.sum()) == 4 == out.logits.size(0)            # [SEP] -> 20, 20 -> 21, 21 -> 22, 22 -> [SEP]
    expected = torch.nn.functional.cross_entropy(full[keep], targets[keep])
    assert torch.allclose(out.loss, expected, atol=1e-6)
    assert BertForUniLM.count_loss_items({"labels": labels}) == {"lm": 4}
    out.loss.backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_padded_batch_equals_each_pair_alone():
    model = tiny()
    a, sa, la = pair([10, 11, 12, 13, 14], [20, 21])
    b, sb, lb = pair([15, 16], [22, 23, 24])
    T = max(a.size(1), b.size(1))
    pad = lambda x, v: torch.nn.functional.pad(x, (0, T - x.size(1)), value=v)  # noqa: E731
    ids = torch.cat([pad(a, 0), pad(b, 0)])
    segments = torch.cat([pad(sa, 0), pad(sb, 0)])
    labels = torch.cat([pad(la, IGNORE_INDEX), pad(lb, IGNORE_INDEX)])
    keep = (torch.arange(T)[None] < torch.tensor([[a.size(1)], [b.size(1)]])).long()
    batch = model(ids, keep, segments, labels=labels)
    alone = [model(x, token_type_ids=s, labels=y) for x, s, y in ((a, sa, la), (b, sb, lb))]
    assert torch.allclose(batch.logits, torch.cat([o.logits for o in alone]), atol=1e-5)


def sources():
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 3], [2, 15, 16, 3, 0, 0, 0]])
    return ids, (ids != 0).long()


@pytest.mark.parametrize("num_beams", [1, 3])
def test_cached_decoding_writes_the_same_tokens_as_uncached(num_beams):
    model = tiny(seed=3)
    ids, keep = sources()
    kwargs = dict(max_new_tokens=8, num_beams=num_beams, eos_token_id=3, pad_token_id=0)
    cached = model.generate(ids, keep, use_cache=True, **kwargs)
    uncached = model.generate(ids, keep, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    assert cached.size(1) >= 2


def test_cached_step_logits_equal_uncached_and_a_full_forward():
    model = tiny(seed=4)
    ids, keep = sources()
    fast = model.start_decoding(ids, keep, use_cache=True)
    slow = model.start_decoding(ids, keep, use_cache=False)
    written = torch.tensor([[30, 31, 32, 33], [34, 35, 36, 37]])
    logits = [fast.step(fast.start), ]
    assert torch.allclose(logits[0], slow.step(slow.start), atol=1e-5)
    for t in range(written.size(1)):
        step = written[:, t: t + 1]
        logits.append(fast.step(step))
        assert torch.allclose(logits[-1], slow.step(step), atol=1e-5)
    # the second source alone, its target after its own [SEP]: the same logits as in the padded batch
    alone = torch.cat([ids[1:, :4], written[1:]], dim=1)
    segments = torch.tensor([[0] * 4 + [1] * 4])
    full = model(alone, token_type_ids=segments).logits[0, 3:]
    assert torch.allclose(torch.stack([x[1] for x in logits]), full, atol=1e-5)


def test_beam_reorders_keep_cache_and_source_rows_together():
    model = tiny(seed=5)
    ids, keep = sources()
    both = model.generate(ids, keep, max_new_tokens=6, num_beams=3, eos_token_id=3)
    second = model.generate(ids[1:, :4], keep[1:, :4], max_new_tokens=6, num_beams=3, eos_token_id=3)
    assert torch.equal(both[1, : second.size(1)], second[0])


def test_constraints_suppress_tokens_and_repeated_ngrams():
    logits = torch.zeros(2, 8)
    written = torch.tensor([[1, 2, 3, 1], [4, 5, 6, 7]])
    out = Constraints(suppress_tokens=(0,), no_repeat_ngram_size=2).apply(logits, written)
    assert out[0, 0] == -torch.inf and out[1, 0] == -torch.inf
    assert out[0, 2] == -torch.inf                               # "1 2" was written: 2 may not follow 1 again
    assert torch.isfinite(out[0, 3:]).all() and torch.isfinite(out[1, 1:]).all()
    model = tiny(seed=6)
    ids, keep = sources()
    text = model.generate(ids, keep, max_new_tokens=20, eos_token_id=None, no_repeat_ngram_size=2,
                          suppress_tokens=(0, 2))
    for row in text.tolist():
        grams = list(zip(row, row[1:]))
        assert len(grams) == len(set(grams)) and 0 not in row and 2 not in row


def test_save_load_and_transformers_reads_the_weights_as_a_masked_lm(tmp_path):
    model = tiny(seed=7)
    model.save_pretrained(tmp_path)
    from bertkit.models.registry import family_of
    loaded = family_of(tmp_path).load(tmp_path)
    assert type(loaded) is BertForUniLM
    ids, segments, _ = pair([10, 11], [20])
    assert torch.allclose(loaded(ids, token_type_ids=segments).logits, model(ids, token_type_ids=segments).logits)
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    mask = unilm_mask(segments, torch.ones_like(ids))[:, None]    # (B, 1, T, T): transformers takes it as it is
    with torch.no_grad():
        expected = theirs(input_ids=ids, token_type_ids=segments, attention_mask=mask).logits
    assert torch.allclose(model(ids, token_type_ids=segments).logits, expected, atol=1e-5)


def test_refusals():
    with pytest.raises(InputError, match="segment"):
        BertForUniLM(BertConfig(**{**CONFIG, "type_vocab_size": 1}))
    model = tiny()
    with pytest.raises(InputError, match="token_type_ids"):
        model(torch.tensor([[2, 10, 3]]))
    with pytest.raises(InputError, match="sources' input_ids"):
        model.generate(None)


def test_explain_unilm_shows_who_sees_whom_under_each_mask(tmp_path):
    from bertkit.pictures.explain import explain

    result = explain("unilm", out=tmp_path)
    numbers = result.numbers
    for name in ("causal", "unilm"):                             # writing: the written token's vector ignores later
        assert numbers[name]["target_by_later_target"] == 0 and numbers[name]["source_by_target"] == 0
        assert numbers[name]["target_by_source"] > 0.05
    assert numbers["bidirectional"]["target_by_later_target"] > 0.05    # filling blanks reads both sides
    assert numbers["unilm"]["source_by_later_source"] > 0.05            # UniLM reads the source both ways, GPT not
    assert numbers["causal"]["source_by_later_source"] == 0
    assert [p.name for p in result.pictures] == ["unilm_masks.png"]


@pytest.fixture
def writer_dir(tmp_path):
    from bertkit.tokenizer import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天下雨带伞北京新闻"]
    model = tiny(seed=9, vocab_size=len(vocab))
    path = tmp_path / "writer"
    model.save_pretrained(path)
    BertTokenizer({t: i for i, t in enumerate(vocab)}).save_pretrained(path)
    return path


def test_attention_draws_a_writers_mask_and_heads_for_its_own_title(writer_dir, tmp_path, capsys):
    from test_bad_input import run

    page, picture = tmp_path / "a.html", tmp_path / "a.png"
    code, stdout, err = run(capsys, "attention", "--model", writer_dir, "今天下雨", "--target", "带伞", "--out", page,
                            "--picture", picture)
    assert code == 0, err
    assert "target: 带伞" in stdout and "[CLS] 今 天 下 雨 [SEP] 带 伞 [SEP]" in stdout
    assert page.stat().st_size > 1000 and picture.stat().st_size > 1000
    code, stdout, err = run(capsys, "attention", "--model", writer_dir, "今天下雨", "--out", tmp_path / "b.html")
    assert code == 0, err and "target: " in stdout


def test_unilm_attentions_follow_the_mask(writer_dir):
    import numpy as np

    from bertkit.pictures.attention_view import unilm_attentions
    from bertkit.pipelines.summarization import load_summarizer

    model, tokenizer = load_summarizer(writer_dir)
    sentence = unilm_attentions(model, tokenizer, "今天下雨", "带伞")
    allowed = unilm_mask(torch.tensor([sentence.token_type_ids]))[0].numpy()
    assert sentence.attentions.shape == (2, 4, 9, 9)
    assert np.all(sentence.attentions[:, :, ~allowed] == 0)
    assert np.allclose(sentence.attentions.sum(-1), 1, atol=1e-5)
