"""Pretraining data: documents of sentences -> instances (segment pairs) -> masked batches.

Follows google-research/bert's `create_pretraining_data.py`:
- an instance packs consecutive sentences of one document up to `max_seq_length` tokens (shorter with
  probability `short_seq_prob`, so the model also sees short inputs);
- NSP: segment B is the real continuation (label 0) or, half the time, text from another document (1);
- SOP (ALBERT): B is the real continuation (0) or A and B are swapped (1): same topic, order differs;
- MLM only (RoBERTa): one segment, no sentence label;
- masking: 15% of the non-special tokens are predicted; of those 80% become [MASK], 10% a random token,
  10% stay. Static masking fixes the choice when instances are built (`dupe_factor` differently masked
  copies); dynamic masking draws it afresh every time an instance is batched (RoBERTa). Whole-word
  masking masks all pieces of a word together (for Chinese, words from jieba).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bertkit.models.functional import IGNORE_INDEX

OBJECTIVES = ("mlm+nsp", "mlm+sop", "mlm")


@dataclass
class Segment:
    """One sentence as token ids, with a flag per token: does a new word start here (for whole-word masking)."""

    ids: list[int]
    word_starts: list[bool]


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


# ---- sentences -> token segments -----------------------------------------------------------------

def tokenize_documents(documents: Sequence[Sequence[str]], tokenizer, whole_word: bool = False) -> list[list[Segment]]:
    """Tokenize every sentence; word starts come from `##` pieces, or from jieba's words when `whole_word`.

    Chinese is tokenized one character per token, so without jieba every character would be a "word";
    whole-word masking for Chinese therefore asks jieba where words begin and end.
    """
    sentences = [s for doc in documents for s in doc]
    if whole_word:
        import jieba

        jieba.setLogLevel(60)  # jieba prints its dictionary loading to stderr otherwise
        words_per_sentence = [[w for w in jieba.lcut(s) if w.strip()] for s in sentences]
        flat_words = [w for words in words_per_sentence for w in words]
        word_ids = _encode(tokenizer, flat_words)
        segments, k = [], 0
        for words in words_per_sentence:
            ids, starts = [], []
            for _ in words:
                piece_ids = word_ids[k]
                k += 1
                ids += piece_ids
                starts += [True] + [False] * (len(piece_ids) - 1)
            segments.append(Segment(ids, starts))
    else:
        segments = []
        for ids in _encode(tokenizer, sentences):
            tokens = tokenizer.convert_ids_to_tokens(ids)
            segments.append(Segment(ids, [not t.startswith("##") for t in tokens]))
    out, k = [], 0
    for doc in documents:
        segs = [s for s in segments[k:k + len(doc)] if s.ids]
        k += len(doc)
        if segs:
            out.append(segs)
    return out


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    # long sentences are fine here: instances are cut to max_seq_length later, so no length warning
    return tokenizer(texts, add_special_tokens=False, return_token_type_ids=False, return_attention_mask=False,
                     verbose=False)["input_ids"]


# ---- segments -> instances -----------------------------------------------------------------------

def create_instances(documents: list[list[Segment]], max_seq_length: int, cls_id: int, sep_id: int,
                     objective: str = "mlm+nsp", short_seq_prob: float = 0.1, dupe_factor: int = 1,
                     masking: MaskingSpec | None = None, seed: int = 12345) -> list[Instance]:
    """Build instances from every document, `dupe_factor` times; with `masking`, mask each copy (static)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if max_seq_length < 8:
        raise ValueError(f"max_seq_length {max_seq_length} is too short for pretraining instances (need >= 8)")
    if objective == "mlm+nsp" and len(documents) < 2:
        raise ValueError(f"next-sentence prediction needs at least 2 documents, and the corpus has {len(documents)} "
                         "(random next segments come from another document; a blank line separates documents); use "
                         "objective mlm+sop or mlm, or give more documents")
    rng = random.Random(seed)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances += _instances_from_document(documents, index, max_seq_length, cls_id, sep_id, objective,
                                                  short_seq_prob, rng)
    rng.shuffle(instances)
    if masking is not None:
        for inst in instances:
            inst.masked_input_ids, inst.labels = mask_tokens(inst, masking, rng)
    return instances


def _instances_from_document(documents, index, max_seq_length, cls_id, sep_id, objective, short_seq_prob, rng):
    document = documents[index]
    pair = objective != "mlm"
    max_tokens = max_seq_length - (3 if pair else 2)        # room for [CLS] and one or two [SEP]
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i].ids)
        if i == len(document) - 1 or length >= target:
            if not pair:
                a, b, label = _concat(chunk), None, None
            else:
                a, b, label, unused = _make_pair(chunk, documents, index, target, objective, rng)
                i -= unused                                   # put back what a random B did not use
            _truncate(a, b, max_tokens, rng)
            if a.ids and (b is None or b.ids):
                instances.append(_assemble(a, b, label, cls_id, sep_id))
            chunk, length = [], 0
        i += 1
    return instances


def _make_pair(chunk, documents, index, target, objective, rng):
    """Split the chunk into A and B; NSP may replace B by text from another document, SOP may swap them.

    Returns (A, B, label, unused): `unused` is how many of the chunk's sentences a random B left over,
    to be read again for the next instance (as google-research/bert does).
    """
    single = len(chunk) == 1
    if single:  # one long sentence: split it in two at a random token
        only = chunk[0]
        cut = rng.randint(1, len(only.ids) - 1) if len(only.ids) > 1 else 1
        chunk = [Segment(only.ids[:cut], only.word_starts[:cut]), Segment(only.ids[cut:], only.word_starts[cut:])]
    a_end = rng.randint(1, len(chunk) - 1)
    a, b = _concat(chunk[:a_end]), _concat(chunk[a_end:])
    if objective == "mlm+nsp" and rng.random() < 0.5:
        other = index
        for _ in range(10):
            other = rng.randint(0, len(documents) - 1)
            if other != index:
                break
        random_doc = documents[other]
        b = Segment([], [])
        for seg in random_doc[rng.randint(0, len(random_doc) - 1):]:
            b.ids += seg.ids
            b.word_starts += seg.word_starts
            if len(b.ids) >= max(1, target - len(a.ids)):
                break
        return a, b, 1, 0 if single else len(chunk) - a_end
    if objective == "mlm+sop" and rng.random() < 0.5:
        return b, a, 1, 0
    return a, b, 0, 0


def _concat(segments: list[Segment]) -> Segment:
    return Segment([t for s in segments for t in s.ids], [w for s in segments for w in s.word_starts])


def _truncate(a: Segment, b: Segment | None, max_tokens: int, rng: random.Random) -> None:
    """Trim the longer segment, from the front or back at random, until the pair fits."""
    while len(a.ids) + (len(b.ids) if b else 0) > max_tokens:
        longer = a if b is None or len(a.ids) > len(b.ids) else b
        cut = 0 if rng.random() < 0.5 else -1
        del longer.ids[cut], longer.word_starts[cut]
    for seg in (a, b):
        if seg is not None and seg.word_starts:
            seg.word_starts[0] = True  # a trimmed word's remaining pieces form a word of their own


def _assemble(a: Segment, b: Segment | None, label: int | None, cls_id: int, sep_id: int) -> Instance:
    ids = [cls_id] + a.ids + [sep_id]
    types = [0] * len(ids)
    starts = [True] + a.word_starts + [True]
    if b is not None:
        ids += b.ids + [sep_id]
        types += [1] * (len(b.ids) + 1)
        starts += b.word_starts + [True]
    special = [False] * len(ids)
    for k in (0, len(a.ids) + 1, len(ids) - 1):  # [CLS], the first [SEP], the last [SEP]
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
        batch = {
            "input_ids": torch.full((B, T), self.pad_token_id, dtype=torch.long),
            "token_type_ids": torch.zeros((B, T), dtype=torch.long),
            "attention_mask": torch.zeros((B, T), dtype=torch.long),
            "labels": torch.full((B, T), IGNORE_INDEX, dtype=torch.long),
        }
        for j, (inst, (masked, labels)) in enumerate(zip(instances, rows)):
            n = len(masked)
            batch["input_ids"][j, :n] = torch.tensor(masked)
            batch["token_type_ids"][j, :n] = torch.tensor(inst.token_type_ids)
            batch["attention_mask"][j, :n] = 1
            batch["labels"][j, :n] = torch.tensor(labels)
        if instances[0].next_sentence_label is not None:
            batch["next_sentence_label"] = torch.tensor([inst.next_sentence_label for inst in instances])
        return batch
