"""Pretraining instances assembled from a token store, and masking: rates, balance, whole words, specials,
determinism, static copies."""

import random

import numpy as np
import pytest
import torch

from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.instances import (
    IGNORE_INDEX,
    MaskingSpec,
    PretrainingCollator,
    PretrainingDataset,
    mask_tokens,
)
from bertkit.data.pretraining.packing import Packing, plan_in_memory
from toy_store import write_store

CLS, SEP, MASK, PAD = 101, 102, 103, 0
SPECIALS = frozenset({PAD, CLS, SEP, MASK})
SPEC = MaskingSpec(mask_token_id=MASK, vocab_size=1000, special_ids=SPECIALS, max_predictions_per_seq=1000)
SUBWORD = np.zeros(4000, bool)  # no "##" pieces: without stored word starts every token starts a word


def make_documents(n_docs=40, n_sents=8, seed=0, word_len=(1, 3)):
    """Synthetic documents whose token ids encode (document, sentence), so tests can read where text came from,
    and jieba-like word starts (words of `word_len` tokens)."""
    rng = random.Random(seed)
    docs, starts = [], []
    for d in range(n_docs):
        doc, doc_starts = [], []
        for s in range(n_sents):
            ids, flags = [], []
            while len(ids) < rng.randint(6, 14):
                w = rng.randint(*word_len)
                ids += [200 + d * 10 + (s % 10)] * w  # id tells the document and sentence
                flags += [True] + [False] * (w - 1)
            doc.append(ids)
            doc_starts.append(flags)
        docs.append(doc)
        starts.append(doc_starts)
    return docs, starts


def make_instances(tmp_path, max_seq_length, objective, seed=0, masking=None, copies=1, whole_words=False,
                   short_seq_prob=0.1, **documents):
    """Every instance of a toy store's plan, assembled as the trainer draws them."""
    docs, starts = make_documents(**documents)
    name = f"store-{seed}-{'-'.join(f'{k}{v}' for k, v in sorted(documents.items()))}-{whole_words}"
    store = write_store(tmp_path / name, docs, starts if whole_words else None)
    rule = Packing(max_seq_length, objective, seed=seed, short_seq_prob=short_seq_prob)
    corpus = StoreChain([store])
    dataset = PretrainingDataset(corpus, plan_in_memory(corpus, np.arange(len(docs)), rule), cls_id=CLS, sep_id=SEP,
                                 pair=rule.pair, subword=SUBWORD, masking=masking, seed=seed, copies=copies)
    return [dataset[i] for i in range(len(dataset))]


def test_instances_fit_and_are_well_formed(tmp_path):
    instances = make_instances(tmp_path, 32, "mlm+nsp", seed=1)
    assert len(instances) > 40
    for inst in instances:
        n = len(inst.input_ids)
        assert n <= 32 and inst.input_ids[0] == CLS and inst.input_ids[-1] == SEP
        assert inst.input_ids.count(SEP) == 2 and sum(inst.special) == 3
        first_sep = inst.input_ids.index(SEP)
        assert inst.token_type_ids == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
        assert len(inst.word_starts) == n


def _doc_of(token):
    return (token - 200) // 10


def test_nsp_is_balanced_and_random_next_comes_from_another_document(tmp_path):
    instances = make_instances(tmp_path, 48, "mlm+nsp", seed=2, n_docs=200)
    labels = [inst.next_sentence_label for inst in instances]
    assert 0.45 < sum(labels) / len(labels) < 0.55
    for inst in instances:
        sep = inst.input_ids.index(SEP)
        a, b = inst.input_ids[1:sep], inst.input_ids[sep + 1:-1]
        same_doc = _doc_of(a[-1]) == _doc_of(b[0])
        assert same_doc == (inst.next_sentence_label == 0)


def test_sop_swaps_order_within_a_document(tmp_path):
    instances = make_instances(tmp_path, 48, "mlm+sop", seed=3, n_docs=200)
    labels = [inst.next_sentence_label for inst in instances]
    assert 0.45 < sum(labels) / len(labels) < 0.55
    for inst in instances:
        sep = inst.input_ids.index(SEP)
        a, b = inst.input_ids[1:sep], inst.input_ids[sep + 1:-1]
        assert _doc_of(a[0]) == _doc_of(b[0])                       # SOP never leaves the document
        if len({t % 10 for t in a + b}) > 1 and a[-1] != b[0]:        # distinct sentences at the cut
            assert (a[-1] < b[0]) == (inst.next_sentence_label == 0)  # in order, or swapped


def test_mlm_only_is_one_segment(tmp_path):
    instances = make_instances(tmp_path, 40, "mlm", seed=4)
    assert all(inst.next_sentence_label is None and inst.input_ids.count(SEP) == 1 for inst in instances)
    assert all(set(inst.token_type_ids) == {0} for inst in instances)


def test_masking_rates(tmp_path):
    inst = make_instances(tmp_path, 128, "mlm", n_docs=2, n_sents=40, word_len=(1, 1), short_seq_prob=0)[0]
    n_tokens = len(inst.input_ids) - 2
    chosen = as_mask = as_random = as_same = 0
    rng = random.Random(0)
    for _ in range(400):
        masked, labels = mask_tokens(inst, SPEC, rng)
        for k, label in enumerate(labels):
            if label == IGNORE_INDEX:
                assert masked[k] == inst.input_ids[k]
                continue
            chosen += 1
            if masked[k] == MASK:
                as_mask += 1
            elif masked[k] == inst.input_ids[k]:
                as_same += 1
            else:
                as_random += 1
                assert masked[k] not in SPECIALS
    assert chosen == 400 * round(n_tokens * 0.15)
    assert abs(as_mask / chosen - 0.8) < 0.02
    assert abs(as_random / chosen - 0.1) < 0.015 and abs(as_same / chosen - 0.1) < 0.015


def test_special_tokens_are_never_masked_and_budget_is_capped(tmp_path):
    spec = MaskingSpec(MASK, 1000, SPECIALS, mlm_probability=0.9, max_predictions_per_seq=5)
    rng = random.Random(1)
    for inst in make_instances(tmp_path, 64, "mlm+nsp", seed=5):
        masked, labels = mask_tokens(inst, spec, rng)
        for k, special in enumerate(inst.special):
            if special:
                assert labels[k] == IGNORE_INDEX and masked[k] == inst.input_ids[k]
        assert 1 <= sum(label != IGNORE_INDEX for label in labels) <= 5


def test_whole_word_masking_masks_whole_words(tmp_path):
    spec = MaskingSpec(MASK, 1000, SPECIALS, whole_word=True, max_predictions_per_seq=1000)
    rng = random.Random(2)
    partial_seen = False
    for inst in make_instances(tmp_path, 64, "mlm+nsp", seed=6, word_len=(2, 4), whole_words=True):
        assert not all(inst.word_starts)  # the store's word starts, not a word per token
        _, labels = mask_tokens(inst, spec, rng)
        words, current = [], []
        for k, start in enumerate(inst.word_starts):
            if inst.special[k]:
                continue
            if start and current:
                words.append(current)
                current = []
            current.append(k)
        words.append(current)
        for word in words:
            flags = {labels[k] != IGNORE_INDEX for k in word}
            assert len(flags) == 1, "a word is masked whole or not at all"
        _, token_labels = mask_tokens(inst, SPEC, rng)  # without whole-word masking, words get split
        partial_seen |= any(len({token_labels[k] != IGNORE_INDEX for k in w}) == 2 for w in words)
    assert partial_seen


def test_static_copies_are_masked_once_each_and_the_same_every_time(tmp_path):
    a = make_instances(tmp_path, 32, "mlm+nsp", seed=7, masking=SPEC, copies=3)
    b = make_instances(tmp_path, 32, "mlm+nsp", seed=7, masking=SPEC, copies=3)
    c = make_instances(tmp_path, 32, "mlm+nsp", seed=8, masking=SPEC, copies=3)
    assert [(i.input_ids, i.masked_input_ids, i.labels) for i in a] == \
           [(i.input_ids, i.masked_input_ids, i.labels) for i in b]
    assert [i.input_ids for i in a] != [i.input_ids for i in c]
    n = len(a) // 3
    assert [i.input_ids for i in a[:n]] == [i.input_ids for i in a[n:2 * n]]              # one plan, three copies
    assert [i.labels for i in a[:n]] != [i.labels for i in a[n:2 * n]]                    # each masked its own way


def test_collator_static_and_dynamic(tmp_path):
    instances = make_instances(tmp_path, 32, "mlm+nsp", seed=9, masking=SPEC)[:4]
    static = PretrainingCollator(PAD, SPEC)
    b1, b2 = static(instances, [1, 2, 3, 4]), static(instances, [5, 6, 7, 8])
    assert torch.equal(b1["input_ids"], b2["input_ids"])                      # fixed at build time
    T = max(len(i.input_ids) for i in instances)
    assert b1["input_ids"].shape == (4, T) and b1["next_sentence_label"].shape == (4,)
    assert "attention_mask" not in b1                                       # a batch with no padding has no mask
    built = make_instances(tmp_path, 32, "mlm+nsp", seed=9, masking=SPEC)
    padded = [max(built, key=lambda i: len(i.input_ids)), min(built, key=lambda i: len(i.input_ids))]
    b3 = static(padded, [1, 2])
    assert b3["attention_mask"].sum().item() == sum(len(i.input_ids) for i in padded) < b3["input_ids"].numel()
    assert (b3["labels"][b3["attention_mask"] == 0] == IGNORE_INDEX).all()

    dynamic = PretrainingCollator(PAD, SPEC, dynamic=True)
    d1, d2, d3 = dynamic(instances, [1, 2, 3, 4]), dynamic(instances, [1, 2, 3, 4]), dynamic(instances, [9, 2, 3, 4])
    assert torch.equal(d1["labels"], d2["labels"])                            # same seeds, same masks
    assert not torch.equal(d1["labels"][0], d3["labels"][0])                  # a new epoch's seed, new masks
    assert torch.equal(d1["labels"][1:], d3["labels"][1:])                    # per instance, not per batch
    with pytest.raises(ValueError, match="empty batch"):
        dynamic([], [])


def test_a_token_past_the_vocabulary_names_the_store(tmp_path):
    store = write_store(tmp_path / "store", [[[5, 6, 7, 999]], [[8, 9]]])
    corpus = StoreChain([store])
    plan = plan_in_memory(corpus, np.arange(2), Packing(16, "mlm"))
    dataset = PretrainingDataset(corpus, plan, cls_id=CLS, sep_id=SEP, pair=False, subword=np.zeros(500, bool))
    with pytest.raises(ValueError, match=f"{tmp_path / 'store'} holds token id 999 past the vocabulary's 500"):
        dataset[0]
