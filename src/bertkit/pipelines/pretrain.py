"""Pretraining, end to end: corpus -> token stores -> a plan of instances -> BertForPreTraining -> Trainer.

`pretrain(PretrainOptions(...))` is what `bertkit pretrain` runs. Each --corpus value becomes a token store
(`data/store.py`): a store prepared with `bertkit prepare` is read as it is; text is tokenized once into a store in
$BERTKIT_HOME/stores, which later runs and `--resume` find again. Documents are split into training and held-out
ones, the packing rule plans the training instances (`data/packing.py`, cached beside the store), and the trainer
draws them by index, each assembled from the memory-mapped store when its batch is drawn. Everything is seeded,
so a resumed run continues with exactly the data it would have had.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.packing import Packing, StoreChain, cached_plan
from bertkit.data.pretraining import (
    IGNORE_INDEX,
    Instance,
    MaskingSpec,
    PretrainingCollator,
    PretrainingDataset,
)
from bertkit.data.quality import DataReport, check_positions_fit
from bertkit.data.store import FILES, META, TokenStore, cached_store, store_key
from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForMaskedLM, BertForPreTraining
from bertkit.pipelines.options import PretrainOptions
from bertkit.pipelines.presets import PRESETS
from bertkit.pipelines.run_directory import run_directory
from bertkit.training.budget import EVALUATIONS, forward_seconds, length_probes, seconds_per_step, steps_for_budget
from bertkit.training.checkpointing import check_not_finished
from bertkit.training.distributed import process_count, process_rank
from bertkit.training.trainer import Trainer

OPTIONS_NAME = "pretrain_options.json"
STORES_NAME = "corpus_stores.json"  # which store each --corpus value was read from: a resumed run checks it


def is_store(spec: str) -> bool:
    """Whether a --corpus value is a prepared token store: a directory holding store.json, or the arrays of a store
    whose store.json is gone (its preparation did not finish: TokenStore.open says so)."""
    return (Path(spec) / META).is_file() or (Path(spec) / FILES["ids"]).is_file()


def corpus_stores(specs: list[str], tokenizer, vocab: Path, options: PretrainOptions) -> list[TokenStore]:
    """A store per distinct --corpus value, in order of first appearance: a prepared store as it is (made with
    this tokenizer, its inputs unchanged), text from the cache (prepared there on first use)."""
    stores = []
    for spec in dict.fromkeys(specs):
        if is_store(spec):
            store = TokenStore.open(spec)
            store.check_tokenizer(tokenizer, str(vocab))
            store.check_inputs()
            if options.wwm and not store.meta["whole_word"]:
                raise InputError(f"{spec} was prepared without whole-word masking: --wwm needs jieba's word starts; "
                                 "prepare it again with --wwm")
        else:
            store = cached_store([spec], tokenizer, whole_word=options.wwm, encoding=options.encoding,
                                 progress=options.progress and process_rank() == 0)
        stores.append(store)
    return stores


def split_documents(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out) document numbers: a seeded share of whole documents held out (at least 2, so NSP has a
    random document to draw from, and at most half)."""
    n_eval = min(max(2, round(count * fraction)), count // 2) if fraction > 0 else 0
    held = np.zeros(count, bool)
    held[np.random.default_rng(seed).permutation(count)[:n_eval]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


def training_documents(specs: list[str], stores: list[TokenStore], fraction: float,
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training entries, held-out documents) of the corpus `specs` over their `stores`. A corpus named k times
    weighs k times in training (each copy packed and masked afresh), but is read, and split, once: no held-out
    document has a copy in training."""
    counts = Counter(specs)
    train, held = split_documents(sum(s.num_documents for s in stores), fraction, seed)
    if set(counts.values()) == {1}:
        return train, held
    copies = np.repeat([counts[spec] for spec in dict.fromkeys(specs)], [s.num_documents for s in stores])
    return np.repeat(train, copies[train]), held


def model_config(spec: str, vocab_size: int, albert: bool, max_seq_length: int, pad_token_id: int) -> BertConfig:
    """A BertConfig from a preset name or a JSON file, sized to the vocabulary."""
    if spec in PRESETS:
        config = BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id,
                            max_position_embeddings=max(512, max_seq_length), **PRESETS[spec])
    elif Path(spec).is_file():
        config = BertConfig.from_json_file(spec)
        if config.vocab_size != vocab_size:
            raise InputError(f"{spec} says vocab_size {config.vocab_size}, the tokenizer has {vocab_size} tokens")
    else:
        raise FileNotFoundError(f"--config {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a JSON file")
    if albert:
        config = config.replace(embedding_size=min(128, config.hidden_size), share_layers=True)
    check_positions_fit(max_seq_length, config.max_position_embeddings, "--max-seq-length", f"--config {spec}")
    return config


# The held-out probe is the same whatever the run's recipe: BERT's masking (15%, 80/10/10) of single
# segments at the run's sequence length, so accuracies of runs with other masking rates compare.
PROBE_MLM_PROBABILITY = 0.15


def subword_table(tokenizer) -> np.ndarray:
    """Per token id: is it a "##" piece (a word goes on), so that a word starts wherever it is not."""
    table = np.zeros(len(tokenizer), bool)
    for token, index in tokenizer.get_vocab().items():
        table[index] = token.startswith("##")
    return table


def heldout_instances(corpus: StoreChain, documents: np.ndarray, tokenizer, max_seq_length: int, objective: str,
                      seed: int, limit: int) -> tuple[list[Instance], list[Instance]]:
    """The held-out probe: up to `limit` single segments of the held-out `documents` masked as BERT masks, for
    masked-LM accuracy, and (for "mlm+nsp" / "mlm+sop") up to `limit` segment pairs of that task, for NSP / SOP
    accuracy. A seeded choice among the instances of a seeded choice of documents, as few as give `limit`
    instances (a big corpus holds out many thousand documents; the probe needs a few hundred instances)."""
    spec = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=PROBE_MLM_PROBABILITY,
                       max_predictions_per_seq=math.ceil(PROBE_MLM_PROBABILITY * max_seq_length))
    subword = subword_table(tokenizer)

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
    return probe("mlm"), probe(objective) if objective != "mlm" else []


def pretraining_eval(instances: list, collator: PretrainingCollator, pairs: list | None = None,
                     batch_size: int = 64):
    """An eval_fn: masked-LM accuracy, loss and perplexity on held-out `instances`, and NSP/SOP accuracy on
    held-out `pairs` (instances with a sentence label). Both are masked already: `collator` must be static."""
    def batches(items: list) -> list[dict]:
        return [collator(items[i:i + batch_size], list(range(i, i + batch_size)))
                for i in range(0, len(items), batch_size)]

    mlm_batches, pair_batches = batches(instances), batches(pairs or [])

    @torch.no_grad()
    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        correct = total = nsp_correct = nsp_total = 0
        loss_sum = 0.0
        for batch in mlm_batches:
            batch = {k: v.to(device) for k, v in batch.items() if k != "next_sentence_label"}
            out = model(**batch)
            logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
            targets = batch["labels"][batch["labels"] != IGNORE_INDEX]
            correct += int((logits.argmax(-1) == targets).sum())
            total += targets.numel()
            loss_sum += float(out.loss_sums["mlm"])
        if hasattr(model, "cls") and hasattr(model.cls, "seq_relationship"):
            for batch in pair_batches:
                batch = {k: v.to(device) for k, v in batch.items() if k != "labels"}
                out = model(**batch)
                nsp_correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
                nsp_total += batch["next_sentence_label"].numel()
        mlm_loss = loss_sum / max(total, 1)
        metrics = {"mlm_accuracy": correct / max(total, 1), "mlm_loss": mlm_loss,
                   "mlm_perplexity": math.exp(min(mlm_loss, 50.0))}
        if nsp_total:
            metrics["nsp_accuracy"] = nsp_correct / nsp_total
        return metrics

    return evaluate


@dataclass
class PretrainingRun:
    """Everything a pretraining run trains with, built from its options (see `prepare`)."""

    tokenizer: Any
    train_dataset: PretrainingDataset
    eval_singles: list[Instance]
    eval_pairs: list[Instance]
    spec: MaskingSpec
    collator: PretrainingCollator
    model: torch.nn.Module
    report: DataReport
    stores: list[TokenStore]
    options: PretrainOptions

    def eval_fn(self):
        """The held-out evaluation (`pretraining_eval`), or None without held-out documents. The probe is masked
        already, so its collator is a static one."""
        if not self.eval_singles:
            return None
        return pretraining_eval(self.eval_singles, PretrainingCollator(self.tokenizer.pad_token_id, self.spec),
                                self.eval_pairs)


def tokenizer_directory(options: PretrainOptions) -> Path:
    """Where the run's tokenizer comes from: --vocab, or the --init model's own (a --vocab beside --init must hold
    the same vocabulary: the model's embedding rows are indexed by it)."""
    from bertkit.data.sources import resolve_model
    from bertkit.models.registry import require
    from bertkit.tokenizer import BertTokenizer

    if options.init is None:
        return Path(options.vocab)
    model = resolve_model(options.init)
    require(model, "pretrain")  # a BERT: another family's weights mean nothing here
    if options.vocab is not None and Path(options.vocab).resolve() != model.resolve():
        if BertTokenizer.from_pretrained(options.vocab).get_vocab() != BertTokenizer.from_pretrained(model).get_vocab():
            raise InputError(f"--vocab {options.vocab} is not the vocabulary of --init {options.init}: the model's "
                             "embeddings are indexed by its own; leave --vocab out")
    return model


def initial_model(options: PretrainOptions, tokenizer) -> torch.nn.Module:
    """The model a run starts from: fresh weights of --config's shape, or the --init model's encoder (and the
    pretraining heads its checkpoint has; those it lacks start fresh, and a warning says which)."""
    head = BertForMaskedLM if options.objective == "mlm" else BertForPreTraining
    torch.manual_seed(options.seed)  # fresh weights, and fresh heads of an --init model, are seeded
    if options.init is None:
        config = model_config(options.config, len(tokenizer), options.albert, options.max_seq_length,
                              tokenizer.pad_token_id)
        if options.normalize_before:
            config = config.replace(normalize_before=True)
        if not options.use_bias:
            config = config.replace(use_bias=False)
        if options.dropout is not None:
            config = config.replace(hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout)
        return head(config)
    return init_model(head, tokenizer_directory(options), options, len(tokenizer))


def init_model(head: type, directory: Path, options: PretrainOptions, vocab_size: int) -> torch.nn.Module:
    """`head` (BertForPreTraining or BertForMaskedLM) loaded from the model `directory` for --init, in train mode."""
    config = BertConfig.from_pretrained(directory)
    if config.vocab_size != vocab_size:
        raise InputError(f"{directory} has {config.vocab_size} embedding rows but its tokenizer {vocab_size} tokens: "
                         "--init needs a model and vocabulary that belong together")
    check_positions_fit(options.max_seq_length, config.max_position_embeddings, "--max-seq-length",
                        f"--init {options.init}")
    if options.dropout is not None:
        config = config.replace(hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout)
    return head.from_pretrained(directory, config=config).train()


def prepare(options: PretrainOptions) -> PretrainingRun:
    """The tokenizer, the data (the training instances' plan, the held-out probe) and the freshly initialised model.

    The corpus is tokenized only where no store holds it yet (`corpus_stores`), and the plan is built only where
    none of these settings is cached beside the store: runs of one corpus that differ in other options (an
    ablation), later runs and resumed ones read both back.
    """
    from bertkit.tokenizer import BertTokenizer

    vocab = tokenizer_directory(options)
    tokenizer = BertTokenizer.from_pretrained(vocab)
    stores = corpus_stores(options.corpus, tokenizer, vocab, options)
    corpus = StoreChain(stores)
    train, held = training_documents(options.corpus, stores, options.eval_fraction, options.seed)
    counts = Counter(options.corpus)
    weights = [counts[spec] for spec in dict.fromkeys(options.corpus)]
    report = DataReport("the training corpus").unknown_tokens(
        sum(w * s.meta["unknown_tokens"] for w, s in zip(weights, stores)),
        sum(w * s.num_tokens for w, s in zip(weights, stores)), f"the vocabulary {vocab}")
    report.measured["documents"] = len(train)
    report.check(stacklevel=3)
    max_predictions = options.max_predictions_per_seq or math.ceil(options.mlm_probability * options.max_seq_length)
    spec = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=options.mlm_probability,
                       max_predictions_per_seq=max_predictions, whole_word=options.wwm)
    static = options.masking == "static"
    packing = Packing(options.max_seq_length, options.objective, options.short_seq_prob, options.seed)
    plan = cached_plan(corpus, train, packing)
    train_dataset = PretrainingDataset(corpus, plan, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id,
                                       pair=packing.pair, subword=subword_table(tokenizer),
                                       masking=spec if static else None, seed=options.seed,
                                       copies=options.dupe_factor if static else 1)
    eval_singles, eval_pairs = heldout_instances(corpus, held, tokenizer, options.max_seq_length, options.objective,
                                                 options.seed + 1, options.max_eval_instances)

    model = initial_model(options, tokenizer)
    collator = PretrainingCollator(tokenizer.pad_token_id, spec, dynamic=not static)
    return PretrainingRun(tokenizer, train_dataset, eval_singles, eval_pairs, spec, collator, model, report, stores,
                          options)


def timing_batches(run: PretrainingRun) -> tuple[list[dict[str, torch.Tensor]], float]:
    """Batches to time the run's training steps on (with batches of like lengths, seven of them, short to long), and
    the seconds it took to assemble and mask one: a training step pays that too, before the model sees its batch."""
    B, dataset = run.options.batch_size, run.train_dataset
    if run.options.group_by_length:
        chosen = length_probes(dataset.lengths(), B, (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95))
    else:
        chosen = [list(range(i * B, min((i + 1) * B, len(dataset)))) for i in range(4)]
    start = time.perf_counter()
    batches = [run.collator([dataset[i] for i in batch], list(range(len(batch)))) for batch in chosen]
    return batches, (time.perf_counter() - start) / len(batches)


def step_seconds(run: PretrainingRun, hold: tuple[str, ...] = ()) -> float:
    """Seconds of one of the run's training steps: its batch assembled and masked, then the model's step, timed on a
    copy of the model (`seconds_per_step`); `hold`: parameter prefixes held as the trainer holds them."""
    batches, assembling = timing_batches(run)
    return assembling + seconds_per_step(run.model, batches, run.options.bf16, hold=hold)


def plan_steps(run: PretrainingRun, options: PretrainOptions) -> int:
    """The steps that fit in `options.minutes` (`steps_for_budget`, its default reserve), the held-out evaluations
    paid first: ten of them as a fixed overhead, or with `--eval-every` a share of each step."""
    step = step_seconds(run)
    evaluation = (forward_seconds(len(run.eval_singles) + len(run.eval_pairs), options.batch_size, step)
                  if run.eval_singles else 0.0)  # no held-out documents: no evaluation (`eval_fn`)
    if options.eval_every:
        return steps_for_budget(step + evaluation / options.eval_every, minutes=options.minutes)
    return steps_for_budget(step, minutes=options.minutes, overhead=EVALUATIONS * evaluation)


def pretrain(options: PretrainOptions, resume: bool = False, prepared: PretrainingRun | None = None):
    """Build the data and model and train in options.out, holding it for the run (`bertkit.pipelines.run_directory`: an
    earlier run or model there is refused unless options.overwrite); returns the trainer's final TrainState.
    `prepared`: the data and model `prepare` made for these options already (the main job times its steps before
    it trains it); they must not have been trained."""
    with run_directory(options.out, "bertkit pretrain", overwrite=options.overwrite, resume=resume,
                       main=process_rank() == 0, inputs=options.inputs()):
        return _pretrain(options, resume, prepared)


def _pretrain(options: PretrainOptions, resume: bool, prepared: PretrainingRun | None = None):
    out = Path(options.out)
    if resume:
        check_corpus_unchanged(options, out)
    run = prepared if prepared is not None and not resume else prepare(options)
    if not resume:
        if options.max_steps is None:
            if process_count() > 1:  # each process would time itself differently
                raise InputError("under torchrun give --max-steps (a time budget alone sizes the schedule per "
                                 "process)")
            options = dataclasses.replace(options, max_steps=plan_steps(run, options))
        if process_rank() == 0:
            out.mkdir(parents=True, exist_ok=True)
            options.save(out / OPTIONS_NAME)
            run.report.save(out)
            record_stores(options, run.stores, out)
    args = options.training_arguments(options.max_steps, save_total_limit=2,
                                      freeze=("bert.",) if options.freeze_encoder_steps else (),
                                      freeze_steps=options.freeze_encoder_steps)
    trainer = Trainer(run.model, args, run.train_dataset, run.collator, eval_fn=run.eval_fn(),
                      count_items=run.model.count_loss_items, tokenizer=run.tokenizer)
    return trainer.train(resume=resume)


def record_stores(options: PretrainOptions, stores: list[TokenStore], out: Path) -> None:
    """Write which store each --corpus value was read from (and its key), for `check_corpus_unchanged`."""
    from bertkit.utils.atomic import atomic_write_text

    records = [{"corpus": spec, "store": str(store.path.resolve()), "key": store.meta.get("key")}
               for spec, store in zip(dict.fromkeys(options.corpus), stores)]
    atomic_write_text(out / STORES_NAME, json.dumps(records, indent=2, ensure_ascii=False) + "\n")


def check_corpus_unchanged(options: PretrainOptions, out: Path) -> None:
    """A ValueError naming a corpus file that changed since the run in `out` started: resuming would train on
    other text than the run's data order and plan were made for."""
    from bertkit.data.corpus_stream import corpus_inputs
    from bertkit.tokenizer import BertTokenizer

    path = out / STORES_NAME
    if not path.is_file():
        return  # a run from before stores were recorded
    tokenizer = BertTokenizer.from_pretrained(tokenizer_directory(options))
    # the options' paths are resolved for where the run now is; the records are in the same order
    for spec, record in zip(dict.fromkeys(options.corpus), json.loads(path.read_text(encoding="utf-8"))):
        if is_store(spec) or record.get("key") is None:
            continue  # a prepared store checks its own inputs when opened
        inputs = corpus_inputs([spec])
        if store_key(inputs, tokenizer, options.wwm, options.encoding) == record["key"]:
            continue
        then = {}
        with contextlib.suppress(OSError, ValueError, KeyError):
            then = {i.get("path"): i for i in json.loads((Path(record["store"]) / META).read_text())["inputs"]}
        changed = [i.name for i in inputs if i.kind != "corpus" and i.identity() != then.get(i.identity()["path"])]
        raise InputError(f"{', '.join(changed) or spec} changed since the run in {out} started (its size or time "
                         "differ): resuming would train on other text than the run's; put back the corpus it started "
                         "with, or start a new run")


def resume_pretraining(out: str | Path, given: dict | None = None):
    """Continue the run in `out`, wherever it now is, exactly where its newest checkpoint left it.

    Its saved options' paths are resolved against `out`; `given` options (flags typed with --resume) must
    agree with them (`Options.resumed`)."""
    path = Path(out) / OPTIONS_NAME
    if Path(out).is_file():
        raise InputError(f"{out} is a file; --resume takes the directory of a pretraining run (its --out)")
    if not Path(out).is_dir():
        raise FileNotFoundError(f"{out} does not exist; --resume takes the directory of a pretraining run (its --out)")
    if not path.is_file():
        raise FileNotFoundError(f"{out} holds no {OPTIONS_NAME}: it is not a bertkit pretraining run")
    check_not_finished(out)
    options = PretrainOptions.load(path).resumed(out, given)
    gone = options.missing_paths()
    if gone:
        raise FileNotFoundError(f"the run in {out} reads inputs that are no longer there: {', '.join(gone)}; put "
                                "them back where they were to resume it")
    return pretrain(options, resume=True)
