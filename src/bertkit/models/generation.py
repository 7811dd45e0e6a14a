"""Decoding: greedy search, beam search and sampling, for any model that predicts the next token.

A model plugs in through `start_decoding(...)`, which runs whatever comes first (the encoder, or nothing)
and returns a `DecodingState`: `step(tokens)` feeds new tokens and returns the logits of the next position,
`reorder(index)` keeps batch rows (beam search repeats and reorders its hypotheses this way). With a KV cache
a step costs one position; without one the state re-runs the whole prefix, which the tests use as reference.

Dimension letters: B batch, K beams, V vocabulary, T length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bertkit.errors import InputError
from bertkit.utils.devices import to_device


class KVCache:
    """Keys and values of the positions decoded so far, per layer, so each new token costs O(S), not O(S²).

    Each layer's entry holds `self` (B, H, S, D) pairs that grow by one position per step and, in a decoder
    with cross-attention, `cross` pairs projected from the encoder output once.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers: list[dict[str, tuple[Tensor, Tensor]]] = [{} for _ in range(num_layers)]

    def __len__(self) -> int:
        """Positions cached so far (the self-attention key length)."""
        first = self.layers[0].get("self") if self.layers else None
        return 0 if first is None else first[0].size(2)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (beam search picks, and first repeats, its hypotheses this way)."""
        for layer in self.layers:
            for name, (k, v) in layer.items():
                layer[name] = (k.index_select(0, index), v.index_select(0, index))


def extend_self_attention_cache(cache: dict | None, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """New keys and values (B, H, T, D) join a layer's cached ones; returns all (B, H, S, D) and caches them."""
    if cache is None:
        return k, v
    if "self" in cache:
        k = torch.cat([cache["self"][0], k], dim=2)
        v = torch.cat([cache["self"][1], v], dim=2)
    cache["self"] = (k, v)
    return k, v



class DecodingState:
    """Where a model is in decoding a batch; models subclass it."""

    start: Tensor                   # (B, T0) tokens fed by the first step: a decoder start token or a prompt
    max_new_tokens: int | None = None  # positions the model has left after `start`; None = unbounded
    default_max_new_tokens: int | None = None  # a length suited to the input (e.g. twice the source's)

    def step(self, tokens: Tensor) -> Tensor:
        """Feed tokens (B, T_new) that follow those fed before; return the next position's logits (B, V)."""
        raise NotImplementedError

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (B',), in that order."""
        raise NotImplementedError


def top_k_top_p_filter(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Logits outside the k most likely tokens, or outside the smallest set whose probability reaches p, -> -inf."""
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs                # mass of the more likely tokens; the first is always kept
        remove = (before >= top_p).scatter(-1, order, before >= top_p)
        logits = logits.masked_fill(remove, -math.inf)
    return logits


@dataclass(frozen=True)
class Constraints:
    """What a decoder may not write, whatever its logits say.

    suppress_tokens: ids never written (a writer's [CLS], [PAD], [MASK], [UNK]).
    no_repeat_ngram_size n: no n-gram twice in what is written (from the first new token on; 0 = off), the usual
    cure for a title that says a phrase twice (fairseq's and transformers' option of that name).
    """

    suppress_tokens: tuple[int, ...] = ()
    no_repeat_ngram_size: int = 0

    def apply(self, logits: Tensor, written: Tensor) -> Tensor:
        """logits (B, V) of the next token after `written` (B, t) -> the same with forbidden tokens at -inf."""
        n = self.no_repeat_ngram_size
        if not self.suppress_tokens and not (n and written.size(1) >= n):
            return logits
        logits = logits.clone()
        if self.suppress_tokens:
            logits[:, list(self.suppress_tokens)] = -math.inf
        if n and written.size(1) >= n:
            for row, ids in enumerate(written.tolist()):
                prefix = ids[len(ids) - n + 1:]                              # the n - 1 tokens just written
                repeated = [ids[i + n - 1] for i in range(len(ids) - n + 1) if ids[i: i + n - 1] == prefix]
                if repeated:
                    logits[row, repeated] = -math.inf
        return logits


def _decode(state: DecodingState, max_new_tokens: int, pick, eos_token_id: int | None, pad_token_id: int,
            constraints: Constraints = Constraints()) -> Tensor:
    """The loop greedy search and sampling share: pick a token per row until every row has said eos."""
    sequences = tokens = state.start
    T0 = sequences.size(1)
    finished = torch.zeros(sequences.size(0), dtype=torch.bool, device=sequences.device)
    for _ in range(max_new_tokens):
        next_tokens = pick(constraints.apply(state.step(tokens).float(), sequences[:, T0:]))
        next_tokens = next_tokens.masked_fill(finished, pad_token_id)  # rows already done get padding
        sequences = torch.cat([sequences, next_tokens[:, None]], dim=1)
        if eos_token_id is not None:
            finished |= next_tokens == eos_token_id
            if bool(finished.all()):
                break
        tokens = next_tokens[:, None]
    return sequences


def greedy_search(state: DecodingState, max_new_tokens: int, eos_token_id: int | None = None,
                  pad_token_id: int = 0, constraints: Constraints = Constraints()) -> Tensor:
    """Take the most likely next token each step. Returns (B, T0 + new) ids, padded after eos."""
    return _decode(state, max_new_tokens, lambda logits: logits.argmax(dim=-1), eos_token_id, pad_token_id,
                   constraints)


def sample(state: DecodingState, max_new_tokens: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           eos_token_id: int | None = None, pad_token_id: int = 0, generator: torch.Generator | None = None,
           constraints: Constraints = Constraints()) -> Tensor:
    """Draw each next token from softmax(logits / temperature), restricted to the top-k / top-p set."""
    if temperature <= 0:
        raise InputError(f"temperature must be positive (use greedy search for 0), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p must be in (0, 1], got {top_p}")

    def pick(logits: Tensor) -> Tensor:
        probs = top_k_top_p_filter(logits / temperature, top_k, top_p).softmax(dim=-1)
        if generator is not None and generator.device != probs.device:  # drawn where the generator is (a CPU
            # generator's, on the CPU: a seed draws as it does there, whichever device computed the probabilities)
            return torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(1).to(probs.device)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return _decode(state, max_new_tokens, pick, eos_token_id, pad_token_id, constraints)


def beam_search(state: DecodingState, max_new_tokens: int, num_beams: int = 4, length_penalty: float = 1.0,
                eos_token_id: int | None = None, pad_token_id: int = 0,
                constraints: Constraints = Constraints()) -> Tensor:
    """Keep the K best partial hypotheses by summed log-probability; finished ones score sum / length^α.

    A source is done when it has K finished hypotheses and its best running one, at its current length,
    scores no better than the worst finished (Hugging Face's rule). Returns the best hypothesis per source.
    """
    if num_beams < 1:
        raise InputError(f"num_beams must be at least 1, got {num_beams}")
    B, K, device = state.start.size(0), num_beams, state.start.device
    rows = torch.arange(B, device=device).repeat_interleave(K)
    state.reorder(rows)
    sequences = tokens = state.start[rows]                                     # (B·K, T0)
    scores = torch.full((B, K), -math.inf, device=device)
    scores[:, 0] = 0.0                        # the K copies are identical: let only the first one expand at first
    finished: list[list[tuple[float, Tensor]]] = [[] for _ in range(B)]
    done = [False] * B
    for step in range(1, max_new_tokens + 1):
        logits = constraints.apply(state.step(tokens).float(), sequences[:, state.start.size(1):])
        logprobs = logits.log_softmax(dim=-1)                                   # (B·K, V)
        V = logprobs.size(-1)
        candidates = (scores.reshape(-1, 1) + logprobs).view(B, K * V)
        # 2K candidates: even if K of them end in eos, K others continue
        top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=1)
        next_rows, next_tokens, next_scores = [], [], []
        for b in range(B):
            if done[b]:  # keep the batch shape; these rows are never read again
                next_rows += [b * K] * K
                next_tokens += [pad_token_id] * K
                next_scores += [0.0] * K
                continue
            kept = 0
            for rank, (score, index) in enumerate(zip(top_scores[b].tolist(), top_index[b].tolist())):
                beam, token = divmod(index, V)
                if eos_token_id is not None and token == eos_token_id:
                    if rank < K:
                        hypothesis = torch.cat([sequences[b * K + beam], sequences.new_tensor([token])])
                        _add_finished(finished[b], score / step ** length_penalty, hypothesis, K)
                    continue
                next_rows.append(b * K + beam)
                next_tokens.append(token)
                next_scores.append(score)
                kept += 1
                if kept == K:
                    break
            best_running = next_scores[-kept] / step ** length_penalty
            done[b] = len(finished[b]) == K and finished[b][-1][0] >= best_running
        index = torch.tensor(next_rows, device=device)
        tokens = torch.tensor(next_tokens, device=device)[:, None]
        sequences = torch.cat([sequences[index], tokens], dim=1)
        scores = torch.tensor(next_scores, device=device).view(B, K)
        if all(done):
            break
        state.reorder(index)
    for b in range(B):
        if not done[b]:  # ran out of length: the running hypotheses compete with the finished ones
            length = sequences.size(1) - state.start.size(1)
            for k in range(K):
                _add_finished(finished[b], scores[b, k].item() / length ** length_penalty, sequences[b * K + k], K)
    best = [hyps[0][1] for hyps in finished]
    out = torch.full((B, max(len(h) for h in best)), pad_token_id, dtype=sequences.dtype, device=device)
    for b, hypothesis in enumerate(best):
        out[b, : len(hypothesis)] = hypothesis
    return out


def _add_finished(hypotheses: list[tuple[float, Tensor]], score: float, tokens: Tensor, capacity: int) -> None:
    """Insert keeping the list sorted best-first and at most `capacity` long."""
    if len(hypotheses) == capacity and score <= hypotheses[-1][0]:
        return
    hypotheses.append((score, tokens))
    hypotheses.sort(key=lambda h: -h[0])
    del hypotheses[capacity:]


class GenerationMixin:
    """`model.generate(...)`, Hugging Face style, for models that implement `start_decoding`."""

    def start_decoding(self, input_ids: Tensor | None, attention_mask: Tensor | None,
                       use_cache: bool) -> DecodingState:
        raise NotImplementedError

    @torch.no_grad()
    def generate(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None, *,
                 max_new_tokens: int | None = None, num_beams: int = 1, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, length_penalty: float = 1.0,
                 eos_token_id: int | None = -1, pad_token_id: int | None = None, use_cache: bool = True,
                 generator: torch.Generator | None = None, suppress_tokens: tuple[int, ...] = (),
                 no_repeat_ngram_size: int = 0) -> Tensor:
        """Decode a batch: greedy (default), beam search (`num_beams` > 1) or sampling (`do_sample`).

        Returns ids (B, T): for an encoder–decoder the decoder's tokens from its start token, for a language
        model the prompt and its continuation; padded after each row's eos. `eos_token_id=None` never stops early.
        `suppress_tokens` and `no_repeat_ngram_size`: what may not be written (`Constraints`).
        """
        config = self.config
        eos = getattr(config, "eos_token_id", None) if eos_token_id == -1 else eos_token_id
        pad = config.pad_token_id if pad_token_id is None else pad_token_id
        vocab_size = getattr(config, "target_vocab_size", None) or config.vocab_size
        if eos is not None and not 0 <= eos < vocab_size:  # a token the model cannot produce ends no row
            eos = None
        if pad is None:  # GPT-2 has no padding token: rows that have finished repeat eos, as in transformers
            pad = eos if eos is not None else 0
        if eos is not None and not 0 <= pad < vocab_size:
            raise InputError(f"pad_token_id {pad} is outside the vocabulary (size {vocab_size}): rows that end early "
                             "would be padded with it; give a pad_token_id inside the vocabulary")
        device = next(self.parameters()).device  # the inputs follow the model (a batch made on the CPU, say)
        input_ids, attention_mask = to_device(input_ids, device), to_device(attention_mask, device)
        state = self.start_decoding(input_ids, attention_mask, use_cache)
        limit = state.max_new_tokens
        if max_new_tokens is None:
            max_new_tokens = next(n for n in (state.default_max_new_tokens, limit, 64) if n is not None)
        elif limit is not None and max_new_tokens > limit:
            raise InputError(f"max_new_tokens {max_new_tokens} goes past the model's positions "
                             f"({limit} left after the {state.start.size(1)} given)")
        if do_sample and num_beams > 1:
            raise InputError("choose sampling or beam search, not both")
        if no_repeat_ngram_size < 0:
            raise InputError(f"no_repeat_ngram_size must be 0 (off) or more, got {no_repeat_ngram_size}")
        bad = [t for t in suppress_tokens if not 0 <= t < vocab_size]
        if bad:
            raise InputError(f"suppress_tokens {bad} are outside the vocabulary (size {vocab_size})")
        constraints = Constraints(tuple(suppress_tokens), no_repeat_ngram_size)
        if do_sample:
            return sample(state, max_new_tokens, temperature, top_k, top_p, eos, pad, generator, constraints)
        if num_beams > 1:
            return beam_search(state, max_new_tokens, num_beams, length_penalty, eos, pad, constraints)
        return greedy_search(state, max_new_tokens, eos, pad, constraints)
