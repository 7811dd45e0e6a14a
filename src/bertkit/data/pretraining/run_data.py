"""Everything a pretraining run reads, built in one call: `build(tokenizer, vocab, settings) -> PretrainingData`.

1. **Stores.** Each corpus of the mix becomes a token store: a store prepared with `bertkit prepare` is read as it
   is (made with this tokenizer, its inputs unchanged); text is tokenized once into the cache (store_cache.py),
   where later runs and `--resume` find it again.
2. **Documents** are split, seeded, into training and held-out ones: whole documents, so no held-out sentence was
   seen in training.
3. **The training plan**: packing.py's rule over the training documents, each as often as its corpus weighs,
   cached beside the first store (plans.py). The trainer draws instances by index, each assembled from the
   memory-mapped stores when its batch is drawn (instances.py): the corpus is never in memory.
4. **The held-out probe**: single segments masked as BERT masks (for masked-LM accuracy) and, for NSP / SOP,
   segment pairs of that task.
5. **Masking**: one MaskingSpec for the run, the dataset (static masking: each copy masked from its seed) and the
   collator (dynamic masking: masked afresh each time an instance is batched).

Everything is seeded, so a resumed run continues with exactly the data it would have had.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.instances import Instance, MaskingSpec, PretrainingCollator, PretrainingDataset
from bertkit.data.pretraining.mix import CorpusMix
from bertkit.data.pretraining.packing import MLM, MLM_NSP, Packing
from bertkit.data.pretraining.plans import cached_plan
from bertkit.data.pretraining.records import check_corpus_unchanged, record_stores
from bertkit.data.pretraining.store import TokenStore, is_store
from bertkit.data.pretraining.store_cache import cached_store
from bertkit.data.quality import DataReport
from bertkit.data.readers import DataWarning
from bertkit.errors import InputError
from bertkit.tokenizer.bpe import BPETokenizer

# The held-out probe is the same whatever the run's recipe: BERT's masking (15%, 80/10/10) of single
# segments at the run's sequence length, so accuracies of runs with other masking rates compare.
PROBE_MLM_PROBABILITY = 0.15
# Below this many held-out pairs an NSP / SOP accuracy says little (3 pairs: 0, 1/3, 2/3 or 1): it is not reported.
MIN_PAIRS = 20


@dataclass(frozen=True)
class DataSettings:
    """What decides a run's data (the pretraining options of the same names)."""

    corpus: CorpusMix
    max_seq_length: int
    objective: str
    short_seq_prob: float
    mlm_probability: float
    max_predictions_per_seq: int | None  # None: mlm_probability of max_seq_length, rounded up
    wwm: bool
    masking: str                          # "static" or "dynamic"
    dupe_factor: int                      # static masking: differently masked copies
    eval_fraction: float
    max_eval_instances: int
    encoding: str
    seed: int


@dataclass
class PretrainingData:
    """A run's data: the training instances, the held-out probe, how they are masked and batched, its report."""

    mix: CorpusMix
    stores: list[TokenStore]              # one per corpus of the mix
    train_dataset: PretrainingDataset
    eval_singles: list[Instance]
    eval_pairs: list[Instance]
    masking: MaskingSpec
    collator: PretrainingCollator
    report: DataReport

    def eval_collator(self, pad_token_id: int) -> PretrainingCollator:
        """The probe's collator: the probe is masked already, so a static one."""
        return PretrainingCollator(pad_token_id, self.masking)

    def record(self, out: Path) -> None:
        """Write into the run's directory `out` which store each corpus was read from, and the data report."""
        record_stores(self.mix, self.stores, out)
        self.report.save(out)


def build(tokenizer, vocab: str | Path, settings: DataSettings, *, progress: bool = True,
          resumed: Path | None = None) -> PretrainingData:
    """The data of a run (see the module's steps). `vocab` names the tokenizer in messages; `progress`: show a bar
    while a corpus is tokenized (the main process of a multi-process run, only); `resumed`: the directory of the run
    this one resumes, whose corpus must be the text it started with (checked before anything is read)."""
    mix = settings.corpus
    if settings.wwm and isinstance(tokenizer, BPETokenizer):
        raise InputError(f"whole-word masking (--wwm) is not implemented for the byte-level BPE tokenizer of {vocab}: "
                         "it tokenizes jieba's words one by one, and BPE's ids depend on the space before a word")
    if resumed is not None:
        check_corpus_unchanged(mix, resumed, tokenizer, settings.wwm, settings.encoding)
    stores = corpus_stores(mix, tokenizer, vocab, settings.wwm, settings.encoding, progress)
    corpus = StoreChain(stores)
    need = 2 if settings.objective == MLM_NSP else 1
    train, held = training_documents(mix, stores, settings.eval_fraction, settings.seed, need)
    report = DataReport("the training corpus").unknown_tokens(
        sum(w * s.meta["unknown_tokens"] for w, s in zip(mix.weights, stores)),
        sum(w * s.num_tokens for w, s in zip(mix.weights, stores)), f"the vocabulary {vocab}")
    report.measured.update(documents=len(train), held_out_documents=len(held))
    report.check(stacklevel=4)

    max_predictions = settings.max_predictions_per_seq or math.ceil(settings.mlm_probability * settings.max_seq_length)
    masking = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                          special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=settings.mlm_probability,
                          max_predictions_per_seq=max_predictions, whole_word=settings.wwm)
    static = settings.masking == "static"
    subword = subword_table(tokenizer)
    packing = Packing(settings.max_seq_length, settings.objective, settings.short_seq_prob, settings.seed)
    train_dataset = PretrainingDataset(corpus, cached_plan(corpus, train, packing), cls_id=tokenizer.cls_token_id,
                                       sep_id=tokenizer.sep_token_id, pair=packing.pair, subword=subword,
                                       masking=masking if static else None, seed=settings.seed,
                                       copies=settings.dupe_factor if static else 1)
    check_plan_uses_the_text(train_dataset.plan, settings.max_seq_length, report)
    eval_singles, eval_pairs = heldout_instances(corpus, held, tokenizer, subword, settings.max_seq_length,
                                                 settings.objective, settings.seed + 1, settings.max_eval_instances)
    collator = PretrainingCollator(tokenizer.pad_token_id, masking, dynamic=not static)
    return PretrainingData(mix, stores, train_dataset, eval_singles, eval_pairs, masking, collator, report)


def check_plan_uses_the_text(plan, max_seq_length: int, report: DataReport) -> None:
    """Warn when the plan's instances hold less than half of the training documents' tokens: sentences longer than
    an instance are cut to fit it (text without sentence ends, one long line), and the rest is never trained on."""
    if not plan.tokens.get("document_tokens"):
        return  # a plan cached before its tokens were counted, or no text
    planned, total = plan.tokens["planned_tokens"], plan.tokens["document_tokens"]
    report.measured.update(planned_tokens=planned, document_tokens=total)
    if planned < total / 2:
        warnings.warn(DataWarning(f"the training instances hold {planned:,} of the training documents' {total:,} "
                                  f"tokens ({planned / total:.1%}): sentences longer than --max-seq-length "
                                  f"{max_seq_length} are cut to fit and the rest is never trained on; split the text "
                                  "into sentences (or lines), or raise --max-seq-length"), stacklevel=4)


def corpus_stores(mix: CorpusMix, tokenizer, vocab: str | Path, wwm: bool, encoding: str,
                  progress: bool) -> list[TokenStore]:
    """A store per corpus of the mix, in its order: a prepared store as it is (made with this tokenizer, its
    inputs unchanged), text from the cache (prepared there on first use)."""
    stores = []
    for spec in mix.corpora:
        if is_store(spec):
            store = TokenStore.open(spec)
            store.check_tokenizer(tokenizer, str(vocab))
            store.check_inputs()
            if wwm and not store.meta["whole_word"]:
                raise InputError(f"{spec} was prepared without whole-word masking: --wwm needs jieba's word starts; "
                                 "prepare it again with --wwm")
        else:
            store = cached_store([spec], tokenizer, whole_word=wwm, encoding=encoding, progress=progress)
        stores.append(store)
    return stores


def split_documents(count: int, fraction: float, seed: int, need: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out) document numbers: a seeded share of whole documents held out (at least 2, so NSP has a
    random document to draw from, and at most half). `need`: the documents each side must keep (2 for NSP, whose
    random next segment comes from another document); a corpus too small for that holds nothing out, and a warning
    says so."""
    n_eval = min(max(2, round(count * fraction)), count // 2) if fraction > 0 else 0
    if n_eval and (n_eval < need or count - n_eval < need):
        warnings.warn(DataWarning(f"the corpus has {count} documents: too few to hold any out for the held-out "
                                  f"evaluation (training and held-out documents need {need} each); all of them train, "
                                  "and no held-out figures are reported"), stacklevel=4)
        n_eval = 0
    held = np.zeros(count, bool)
    held[np.random.default_rng(seed).permutation(count)[:n_eval]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def training_documents(mix: CorpusMix, stores: list[TokenStore], fraction: float, seed: int,
                       need: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(training entries, held-out documents) of the mix over its `stores`. A corpus of weight k weighs k times in
    training (each copy packed and masked afresh), but is read, and split, once: no held-out document has a copy
    in training."""
    train, held = split_documents(sum(s.num_documents for s in stores), fraction, seed, need)
    if set(mix.weights) == {1}:
        return train, held
    copies = np.repeat(mix.weights, [s.num_documents for s in stores])
    return np.repeat(train, copies[train]), held


def subword_table(tokenizer) -> np.ndarray:
    """Per token id: is it a "##" piece (a word goes on), so that a word starts wherever it is not."""
    table = np.zeros(len(tokenizer), bool)
    for token, index in tokenizer.get_vocab().items():
        table[index] = token.startswith("##")
    return table


def heldout_instances(corpus: StoreChain, documents: np.ndarray, tokenizer, subword: np.ndarray, max_seq_length: int,
                      objective: str, seed: int, limit: int) -> tuple[list[Instance], list[Instance]]:
    """The held-out probe: up to `limit` single segments of the held-out `documents` masked as BERT masks, for
    masked-LM accuracy, and (for "mlm+nsp" / "mlm+sop") up to `limit` segment pairs of that task, for NSP / SOP
    accuracy. A seeded choice among the instances of a seeded choice of documents, as few as give `limit`
    instances (a big corpus holds out many thousand documents; the probe needs a few hundred instances)."""
    spec = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=PROBE_MLM_PROBABILITY,
                       max_predictions_per_seq=math.ceil(PROBE_MLM_PROBABILITY * max_seq_length))
    order = np.random.default_rng(seed).permutation(len(documents))

    def probe(kind: str) -> list[Instance]:
        packing = Packing(max_seq_length, kind, short_seq_prob=0.0, seed=seed)
        take = min(len(documents), max(limit, 2))
        while True:  # planned (and cached) apart, like the training plan: this process reads no sentence offsets
            plan = cached_plan(corpus, np.sort(documents[order[:take]]), packing)
            if len(plan) >= limit or take == len(documents):
                break
            take = min(len(documents), 2 * take)
        dataset = PretrainingDataset(corpus, plan, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id,
                                     pair=packing.pair, subword=subword, masking=spec, seed=seed)
        chosen = np.random.default_rng(seed).permutation(len(dataset))[:limit]
        return [dataset[int(i)] for i in chosen]

    if not len(documents):
        return [], []
    return probe(MLM), probe(objective) if objective != MLM else []
