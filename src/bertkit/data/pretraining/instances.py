"""Pretraining data: a plan of instances over token stores -> instances assembled when drawn -> masked batches.

After google-research/bert's `create_pretraining_data.py` (packing.py holds the packing rule):
- an instance packs consecutive sentences of one document up to `max_seq_length` tokens (shorter with
  probability `short_seq_prob`, so the model also sees short inputs);
- NSP: segment B is the real continuation (label 0) or, half the time, text from another document (1);
- SOP (ALBERT): B is the real continuation (0) or A and B are swapped (1): same topic, order differs;
- MLM only (RoBERTa): one segment, no sentence label;
- masking: 15% of the non-special tokens are predicted; of those 80% become [MASK], 10% a random token,
  10% stay. Static masking fixes the choice per instance and copy (`dupe_factor` differently masked copies, each
  seeded by (seed, copy, instance), none stored); dynamic masking draws it afresh every time an instance is
  batched (RoBERTa). Whole-word masking masks all pieces of a word together (for Chinese, words from jieba).

`PretrainingDataset` is what the trainer trains on: `dataset[i]` reads instance i's two token ranges from the
memory-mapped store and assembles it, so the corpus is never in memory, whatever its size.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.packing import MASKING, OBJECTIVES, Plan
from bertkit.errors import DataError
from bertkit.utils.constants import IGNORE_INDEX
from bertkit.utils.rng import draw

__all__ = ["IGNORE_INDEX", "OBJECTIVES", "Instance", "MaskingSpec", "PretrainingCollator", "PretrainingDataset",
           "mask_tokens"]


@dataclass
class Instance:
    """One training sequence: [CLS] A [SEP] (B [SEP]), its segment ids, and (static masking) its masks."""

    input_ids: list[int]
    token_type_ids: list[int]
    word_starts: list[bool]
    special: list[bool]
    next_sentence_label: int | None = None
    masked_input_ids: list[int] | None = None  # static masking: fixed at build time
    labels: list[int] | None = None


@dataclass
class MaskingSpec:
    """What masking needs to know of the vocabulary."""

    mask_token_id: int
    vocab_size: int
    special_ids: frozenset[int]
    mlm_probability: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word: bool = False


# ---- instances from a plan -----------------------------------------------------------------------

class PretrainingDataset:
    """The instances of `plan` over `corpus`, `copies` times: item i is copy i // len(plan) of instance i % len(plan).

    With `masking` (static) each copy is masked once and for all, seeded by (seed, copy, instance); without it the
    collator masks afresh from the trainer's per-example seeds (dynamic). `subword[id]` says whether a token is a
    "##" piece: a word starts at every other token (whole-word stores keep jieba's starts instead).
    """

    def __init__(self, corpus: StoreChain, plan: Plan, *, cls_id: int, sep_id: int, pair: bool, subword: np.ndarray,
                 masking: MaskingSpec | None = None, seed: int = 0, copies: int = 1) -> None:
        self.corpus, self.plan, self.cls_id, self.sep_id, self.pair = corpus, plan, cls_id, sep_id, pair
        self.subword, self.masking, self.seed, self.copies = subword, masking, seed, copies

    def __len__(self) -> int:
        return len(self.plan) * self.copies

    def lengths(self) -> np.ndarray:
        """Tokens per item, read from the plan (for batches of like lengths; no instance is assembled)."""
        lengths = self.plan.lengths(3 if self.pair else 2)
        return np.tile(lengths, self.copies) if self.copies > 1 else lengths

    def __getitem__(self, index: int) -> Instance:
        if not 0 <= index < len(self):
            raise IndexError(f"instance {index} of {len(self)}")
        copy, k = divmod(int(index), len(self.plan))
        a_start, a_len, b_start, b_len, label = self.plan.row(k)
        a = self._segment(a_start, a_len)
        b = self._segment(b_start, b_len) if self.pair else None
        instance = _assemble(a, b, label if self.pair else None, self.cls_id, self.sep_id)
        if self.masking is not None:
            seed = int(draw(self.seed, k, copy, MASKING)[0] >> np.uint64(1))
            instance.masked_input_ids, instance.labels = mask_tokens(instance, self.masking, random.Random(seed))
        return instance

    def _segment(self, start: int, length: int) -> tuple[list[int], list[bool]]:
        ids = self.corpus.tokens(start, length)
        if len(ids) and int(ids.max()) >= len(self.subword):
            store, _ = self.corpus._store_of(start)
            raise DataError(f"{store.path} holds token id {int(ids.max())} past the vocabulary's {len(self.subword)} "
                            "tokens: the store is damaged, or was made with another vocabulary; prepare it again")
        starts = self.corpus.word_starts(start, length)
        if starts is None:
            starts = ~self.subword[ids]
        if length:
            starts[0] = True  # a segment cut inside a word: its remaining pieces form a word of their own
        return ids.tolist(), starts.tolist()


def _assemble(a: tuple[list[int], list[bool]], b: tuple[list[int], list[bool]] | None, label: int | None,
              cls_id: int, sep_id: int) -> Instance:
    """[CLS] A [SEP] (B [SEP]) with its segment ids, word starts and special-token flags."""
    (a_ids, a_starts) = a
    ids = [cls_id, *a_ids, sep_id]
    types = [0] * len(ids)
    starts = [True, *a_starts, True]
    if b is not None:
        ids += [*b[0], sep_id]
        types += [1] * (len(b[0]) + 1)
        starts += [*b[1], True]
    special = [False] * len(ids)
    for k in (0, len(a_ids) + 1, len(ids) - 1):  # [CLS], the first [SEP], the last [SEP]
        special[k] = True
    return Instance(ids, types, starts, special, label)


# ---- masking -------------------------------------------------------------------------------------

def mask_tokens(instance: Instance, spec: MaskingSpec, rng: random.Random) -> tuple[list[int], list[int]]:
    """Choose ~15% of the non-special tokens (whole words with `whole_word`) -> (input ids, labels)."""
    ids = instance.input_ids
    words: list[list[int]] = []
    for k, is_special in enumerate(instance.special):
        if is_special:
            continue
        if spec.whole_word and words and not instance.word_starts[k] and words[-1][-1] == k - 1:
            words[-1].append(k)
        else:
            words.append([k])
    rng.shuffle(words)
    n_tokens = sum(len(w) for w in words)
    budget = min(spec.max_predictions_per_seq, max(1, round(n_tokens * spec.mlm_probability)))
    masked, labels = list(ids), [IGNORE_INDEX] * len(ids)
    chosen = 0
    for word in words:
        if chosen >= budget:
            break
        if chosen + len(word) > budget:  # a whole word or nothing
            continue
        for k in word:
            labels[k] = ids[k]
            r = rng.random()
            if r < 0.8:
                masked[k] = spec.mask_token_id
            elif r < 0.9:
                masked[k] = _random_token(spec, rng)
            chosen += 1
    return masked, labels


def _random_token(spec: MaskingSpec, rng: random.Random) -> int:
    while True:  # specials are never inserted as "random words"
        t = rng.randrange(spec.vocab_size)
        if t not in spec.special_ids:
            return t


# ---- batching ------------------------------------------------------------------------------------

class PretrainingCollator:
    """Pads a list of instances into tensors; with `dynamic` masking, masks each instance from its seed."""

    def __init__(self, pad_token_id: int, masking: MaskingSpec, dynamic: bool = False) -> None:
        self.pad_token_id = pad_token_id
        self.masking = masking
        self.dynamic = dynamic

    def __call__(self, instances: Sequence[Instance], seeds: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        if not instances:
            raise ValueError("cannot collate an empty batch")
        rows = []
        for j, inst in enumerate(instances):
            if self.dynamic or inst.masked_input_ids is None:
                if seeds is None:
                    raise ValueError("dynamic masking needs one seed per instance")
                rows.append(mask_tokens(inst, self.masking, random.Random(seeds[j])))
            else:
                rows.append((inst.masked_input_ids, inst.labels))
        T = max(len(inst.input_ids) for inst in instances)
        B = len(instances)
        # filled in numpy, one tensor each at the end: a tensor per row costs more than the row (it runs every step)
        input_ids = np.full((B, T), self.pad_token_id, dtype=np.int64)
        token_type_ids = np.zeros((B, T), dtype=np.int64)
        attention_mask = np.zeros((B, T), dtype=np.int64)
        labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
        for j, (inst, (masked, row_labels)) in enumerate(zip(instances, rows)):
            n = len(masked)
            input_ids[j, :n] = masked
            token_type_ids[j, :n] = inst.token_type_ids
            attention_mask[j, :n] = 1
            labels[j, :n] = row_labels
        batch = {"input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
                 "attention_mask": torch.from_numpy(attention_mask), "labels": torch.from_numpy(labels)}
        if all(len(inst.input_ids) == T for inst in instances):
            # nothing padded, known here for free: with no mask the model's fused attention takes its fastest kernel
            # (on a GPU, flash attention, which takes no mask), and no device has to read a mask back to find out
            del batch["attention_mask"]
        if instances[0].next_sentence_label is not None:
            batch["next_sentence_label"] = torch.tensor([inst.next_sentence_label for inst in instances])
        return batch
