"""Decoding: greedy, beam search and sampling on hand-made distributions and on the real models.

The models' KV caches are checked against re-running the whole prefix; beam size 1 against greedy.
"""

import itertools
import math

import pytest
import torch

from bertkit.models.generation import DecodingState, beam_search, greedy_search, sample, top_k_top_p_filter
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.layers import KVCache
from bertkit.models.seq2seq.transformer import build_seq2seq
from tolerance import assert_close

PAD, EOS, BOS = 0, 1, 2


class TableState(DecodingState):
    """Next-token log-probabilities from a table indexed by the last token: a Markov chain to decode."""

    def __init__(self, table: torch.Tensor, batch: int = 1) -> None:
        self.table = table.log()
        self.start = torch.full((batch, 1), BOS)
        self.fed: list[torch.Tensor] = []            # what each step received, to check reorder bookkeeping

    def step(self, tokens):
        self.fed.append(tokens)
        return self.table[tokens[:, -1]]

    def reorder(self, index):
        pass                                         # the state is the last token alone: nothing to keep


def chain(rows: dict[int, list[float]], vocab: int = 5) -> torch.Tensor:
    table = torch.full((vocab, vocab), 1e-9)
    for token, probs in rows.items():
        table[token, : len(probs)] = torch.tensor(probs)
    return table / table.sum(1, keepdim=True)


# From BOS: 3 is likelier than 4, but after 3 the chain dithers, while after 4 it ends at once.
TRAP = chain({BOS: [0, 0, 0, 0.6, 0.4], 3: [0, 0.3, 0, 0.35, 0.35], 4: [0, 0.9, 0, 0.05, 0.05]})


def test_greedy_takes_the_likeliest_token_and_pads_after_eos():
    seqs = greedy_search(TableState(TRAP, batch=2), max_new_tokens=4, eos_token_id=EOS)
    assert seqs.tolist() == [[BOS, 3, 3, 3, 3]] * 2          # 0.35 ties broken towards the lower id
    table = chain({BOS: [0, 0, 0, 1.0], 3: [0, 1.0]})
    state = TableState(table, batch=1)
    assert greedy_search(state, max_new_tokens=5, eos_token_id=EOS).tolist() == [[BOS, 3, EOS]]
    assert len(state.fed) == 2                               # stopped at eos, not at max length


def test_beam_search_escapes_the_greedy_trap():
    seqs = beam_search(TableState(TRAP), max_new_tokens=4, num_beams=2, length_penalty=0.0, eos_token_id=EOS)
    assert seqs.tolist() == [[BOS, 4, EOS]]                  # log 0.36 beats every continuation of 3


def _brute_force(table: torch.Tensor, max_new: int, alpha: float) -> tuple[list[int], float]:
    """Best complete hypothesis by enumeration: ends in eos or at max length, score sum / length^alpha."""
    logp = table.log()
    best, best_score = None, -math.inf
    for length in range(1, max_new + 1):
        for tokens in itertools.product(range(1, table.size(0)), repeat=length):
            if EOS in tokens[:-1] or (length < max_new and tokens[-1] != EOS):
                continue
            prev, total = BOS, 0.0
            for t in tokens:
                total += logp[prev, t].item()
                prev = t
            score = total / length ** alpha
            if score > best_score:
                best, best_score = [BOS, *tokens], score
    return best, best_score


@pytest.mark.parametrize("seed", range(5))
def test_wide_beam_equals_exhaustive_search(seed):
    g = torch.Generator().manual_seed(seed)
    table = torch.rand(5, 5, generator=g) ** 3 + 1e-3
    table[:, PAD] = 1e-9
    table = table / table.sum(1, keepdim=True)
    best, _ = _brute_force(table, max_new=3, alpha=0.0)
    got = beam_search(TableState(table), max_new_tokens=3, num_beams=64, length_penalty=0.0, eos_token_id=EOS)
    assert got[0, : len(best)].tolist() == best


def test_length_penalty_prefers_longer_hypotheses():
    table = chain({BOS: [0, 0.5, 0, 0.5], 3: [0, 0.4, 0, 0.6]})
    short = beam_search(TableState(table), max_new_tokens=6, num_beams=3, length_penalty=0.0, eos_token_id=EOS)
    long = beam_search(TableState(table), max_new_tokens=6, num_beams=3, length_penalty=3.0, eos_token_id=EOS)
    assert short.tolist() == [[BOS, EOS]]
    assert long.size(1) > 3 and long[0, 1].item() == 3


def test_top_k_top_p_filter():
    logits = torch.tensor([[math.log(p) for p in (0.5, 0.2, 0.15, 0.1, 0.05)]])
    kept = lambda out: (out > -math.inf).nonzero()[:, 1].tolist()
    assert kept(top_k_top_p_filter(logits, top_k=2)) == [0, 1]
    assert kept(top_k_top_p_filter(logits, top_p=0.6)) == [0, 1]          # 0.5 < 0.6 ≤ 0.7
    assert kept(top_k_top_p_filter(logits, top_p=0.5)) == [0]
    assert kept(top_k_top_p_filter(logits, top_p=0.86)) == [0, 1, 2, 3]
    assert kept(top_k_top_p_filter(logits[:, [3, 0, 4, 2, 1]], top_p=0.6)) == [1, 4]   # order does not matter
    torch.testing.assert_close(top_k_top_p_filter(logits)[0], logits[0])


def test_sampling_follows_the_filtered_distribution():
    table = chain({BOS: [0, 0, 0, 0.5, 0.3, 0.2]}, vocab=6)
    g = torch.Generator().manual_seed(0)
    draws = sample(TableState(table, batch=4000), max_new_tokens=1, top_k=2, generator=g)[:, 1]
    assert set(draws.tolist()) == {3, 4}
    assert abs((draws == 3).float().mean().item() - 0.5 / 0.8) < 0.03
    hot = sample(TableState(table, batch=4000), max_new_tokens=1, temperature=0.25, generator=g)[:, 1]
    assert (hot == 3).float().mean().item() > 0.8                # 0.5^4 : 0.3^4 : 0.2^4 ≈ 0.87 : 0.11 : 0.02
    with pytest.raises(ValueError, match="temperature"):
        sample(TableState(table), max_new_tokens=1, temperature=0.0)


# ---- on the models ------------------------------------------------------------------------------------

def tiny_seq2seq(architecture="transformer", **kw):
    torch.manual_seed(0)
    kw = dict(dict(vocab_size=30, decoder_vocab_size=25, d_model=16, encoder_layers=2, decoder_layers=2,
                   attention_heads=4, ffn_dim=32, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS), **kw)
    cfg = Seq2SeqConfig(architecture=architecture, **kw)
    return build_seq2seq(cfg).eval()


def tiny_gpt(**kw):
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=16, n_layer=2, n_head=4, n_positions=32, pad_token_id=0,
                                       bos_token_id=2, eos_token_id=3, **kw)).eval()


def source_batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 30, (3, 7), generator=g)
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    return src * mask, mask


@pytest.mark.parametrize("normalize_before", [False, True])
def test_seq2seq_kv_cache_logits_equal_full_recomputation(normalize_before):
    model = tiny_seq2seq(normalize_before=normalize_before)
    src, mask = source_batch()
    memory, memory_bias, _ = model.encode(src, mask)
    target = torch.randint(3, 25, (3, 6))
    full = model.lm_head(model.decode(target, memory, memory_bias)[0])
    cache = KVCache(len(model.decoder.layers))
    # one token, then two at once, then three: chunks of any size continue the cache
    chunks = [target[:, :1], target[:, 1:3], target[:, 3:]]
    stepped = torch.cat([model.lm_head(model.decode(c, memory, memory_bias, cache)[0]) for c in chunks], dim=1)
    assert len(cache) == 6
    assert_close(stepped, full)


def test_gpt_kv_cache_logits_equal_full_recomputation():
    model = tiny_gpt()
    ids = torch.randint(0, 40, (2, 9))
    full = model(ids).logits
    cache = KVCache(2)
    parts = [model(ids[:, a:b], past_key_values=cache).logits for a, b in ((0, 4), (4, 5), (5, 9))]
    assert_close(torch.cat(parts, dim=1), full)


@pytest.mark.parametrize("make", [lambda: tiny_seq2seq(), lambda: tiny_seq2seq(normalize_before=True,
                                                                               share_encoder_decoder_embeddings=True,
                                                                               decoder_vocab_size=None)])
def test_seq2seq_generation_with_and_without_cache_agree(make):
    model = make()
    src, mask = source_batch()
    for kwargs in (dict(), dict(num_beams=3), dict(do_sample=True, top_k=5, top_p=0.9)):
        outs = [model.generate(src, mask, max_new_tokens=12, use_cache=use_cache,
                               generator=torch.Generator().manual_seed(3), **kwargs) for use_cache in (True, False)]
        assert torch.equal(outs[0], outs[1]), kwargs
        assert outs[0].size(1) > 1 and (outs[0][:, 0] == BOS).all()


def test_gpt_generation_with_and_without_cache_agree():
    model = tiny_gpt()
    prompt = torch.randint(0, 40, (2, 5))
    for kwargs in (dict(), dict(num_beams=3), dict(do_sample=True, temperature=0.7)):
        outs = [model.generate(prompt, max_new_tokens=10, eos_token_id=None, use_cache=use_cache,
                               generator=torch.Generator().manual_seed(3), **kwargs) for use_cache in (True, False)]
        assert torch.equal(outs[0], outs[1]), kwargs
        assert outs[0].shape == (2, 15) and torch.equal(outs[0][:, :5], prompt)


@pytest.mark.parametrize("make", [lambda: tiny_seq2seq(), lambda: tiny_seq2seq("rnn"),
                                  lambda: tiny_seq2seq("rnn", rnn_cell="lstm", rnn_attention=False)])
def test_beam_size_one_equals_greedy(make):
    model = make()
    src, mask = source_batch()
    greedy = model.generate(src, mask, max_new_tokens=15)
    assert torch.equal(model.generate(src, mask, max_new_tokens=15, num_beams=1), greedy)
    assert torch.equal(beam_search(model.start_decoding(src, mask), 15, num_beams=1, eos_token_id=EOS), greedy)


def test_beam_search_scores_at_least_as_well_as_greedy():
    model = tiny_seq2seq()
    src, mask = source_batch()

    def logprob(seq):  # summed log-probability of a decoded row, eos included, padding excluded
        length = int((seq != PAD).sum()) if EOS not in seq.tolist() else seq.tolist().index(EOS) + 1
        logits = model(src[i:i + 1], mask[i:i + 1], decoder_input_ids=seq[None, : length - 1]).logits
        return logits.log_softmax(-1)[0].gather(1, seq[1:length, None]).sum().item()

    greedy = model.generate(src, mask, max_new_tokens=8)
    beam = model.generate(src, mask, max_new_tokens=8, num_beams=5, length_penalty=0.0)
    for i in range(3):
        assert logprob(beam[i]) >= logprob(greedy[i]) - 1e-5


def test_generate_limits_and_errors():
    model = tiny_gpt()
    with pytest.raises(ValueError, match="positions"):
        model.generate(torch.zeros(1, 30, dtype=torch.long), max_new_tokens=5)
    assert model.generate(torch.zeros(1, 30, dtype=torch.long), eos_token_id=None).shape == (1, 32)
    with pytest.raises(ValueError, match="equal length"):
        model.generate(torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match="source"):
        tiny_seq2seq().generate(None)
    with pytest.raises(ValueError, match="not both"):
        tiny_seq2seq().generate(*source_batch(), num_beams=2, do_sample=True)
