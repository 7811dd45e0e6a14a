"""Pretraining, end to end: corpus -> tokenized documents -> instances -> BertForPreTraining -> Trainer.

`pretrain(PretrainOptions(...))` is what `bertkit pretrain` runs. Everything is seeded, so a resumed
run rebuilds exactly the same instances and the trainer continues from its saved data position.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.data.pretraining import (
    IGNORE_INDEX,
    Instance,
    MaskingSpec,
    PretrainingCollator,
    Segment,
    create_instances,
    tokenize_documents,
)
from bertkit.data.quality import DataReport, count_unknown
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForMaskedLM, BertForPreTraining
from bertkit.pipelines.options import PretrainOptions
from bertkit.pipelines.presets import PRESETS
from bertkit.pipelines.run_directory import run_directory
from bertkit.training.budget import length_probes, steps_in_budget
from bertkit.training.checkpointing import check_not_finished
from bertkit.training.distributed import process_count, process_rank
from bertkit.training.trainer import Trainer, example_length

OPTIONS_NAME = "pretrain_options.json"


def load_corpus(specs: list[str], encoding: str = "utf-8") -> list[list[str]]:
    """Documents of sentences from files (plain text, blank line between documents, read as `encoding`) or named
    corpora."""
    from bertkit.data.corpus import CORPORA, load_documents, read_text_documents

    documents = []
    for spec in specs:
        if Path(spec).exists():
            documents += read_text_documents([spec], encoding=encoding)
        elif spec == "zh" or spec in CORPORA:
            documents += load_documents(spec)
        else:
            raise FileNotFoundError(f"corpus {spec!r} is neither a file nor one of zh, {', '.join(sorted(CORPORA))}")
    if not documents:
        raise ValueError(f"the corpus {specs} holds no text")
    return documents


def model_config(spec: str, vocab_size: int, albert: bool, max_seq_length: int, pad_token_id: int) -> BertConfig:
    """A BertConfig from a preset name or a JSON file, sized to the vocabulary."""
    if spec in PRESETS:
        config = BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id,
                            max_position_embeddings=max(512, max_seq_length), **PRESETS[spec])
    elif Path(spec).is_file():
        config = BertConfig.from_json_file(spec)
        if config.vocab_size != vocab_size:
            raise ValueError(f"{spec} says vocab_size {config.vocab_size}, the tokenizer has {vocab_size} tokens")
    else:
        raise FileNotFoundError(f"--config {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a JSON file")
    if albert:
        config = config.replace(embedding_size=min(128, config.hidden_size), share_layers=True)
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(f"max_seq_length {max_seq_length} exceeds the model's {config.max_position_embeddings} "
                         "positions")
    return config


def corpus_split(specs: list[str], fraction: float, seed: int,
                 encoding: str = "utf-8") -> tuple[list[list[str]], list[list[str]]]:
    """(training documents, held-out documents) of a corpus list. A corpus named k times weighs k times in
    training (each copy masked afresh), but is read, and split, once: no held-out document has a copy in training."""
    counts: dict[str, int] = {}
    for spec in specs:
        counts[spec] = counts.get(spec, 0) + 1
    sources = [(spec, load_corpus([spec], encoding)) for spec in counts]
    documents = [doc for _, docs in sources for doc in docs]
    copies = [counts[spec] for spec, docs in sources for _ in docs]
    train, held = split_documents(list(range(len(documents))), fraction, seed)
    return [documents[i] for i in train for _ in range(copies[i])], [documents[i] for i in held]


def split_documents(documents: list, fraction: float, seed: int) -> tuple[list, list]:
    """Hold out a seeded share of whole documents (at least 2, so NSP has a random document to draw from)."""
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    n_eval = min(max(2, round(len(documents) * fraction)), len(documents) // 2) if fraction > 0 else 0
    held = set(order[:n_eval])
    return ([d for i, d in enumerate(documents) if i not in held], [d for i, d in enumerate(documents) if i in held])


# The held-out probe is the same whatever the run's recipe: BERT's masking (15%, 80/10/10) of single
# segments at the run's sequence length, so accuracies of runs with other masking rates compare.
PROBE_MLM_PROBABILITY = 0.15


def heldout_instances(documents: list[list[Segment]], tokenizer, max_seq_length: int, objective: str,
                      seed: int, limit: int) -> tuple[list[Instance], list[Instance]]:
    """The held-out probe: up to `limit` single segments masked as BERT masks, for masked-LM accuracy, and
    (for "mlm+nsp" / "mlm+sop") up to `limit` segment pairs of that task, for NSP / SOP accuracy."""
    spec = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=PROBE_MLM_PROBABILITY,
                       max_predictions_per_seq=math.ceil(PROBE_MLM_PROBABILITY * max_seq_length))
    build = dict(max_seq_length=max_seq_length, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id,
                 short_seq_prob=0.0, masking=spec, seed=seed)
    singles = create_instances(documents, objective="mlm", **build)[:limit]
    pairs = create_instances(documents, objective=objective, **build)[:limit] if objective != "mlm" else []
    return singles, pairs


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
    train_instances: list[Instance]
    eval_singles: list[Instance]
    eval_pairs: list[Instance]
    spec: MaskingSpec
    collator: PretrainingCollator
    model: torch.nn.Module
    report: DataReport


def prepare(options: PretrainOptions, tokenized: dict | None = None) -> PretrainingRun:
    """The tokenizer, the instances (training, and the held-out probe) and the freshly initialised model.

    `tokenized`, a dict shared between calls, keeps the tokenized corpus of each (corpus, vocab, whole-word
    setting): runs of one corpus that differ in other options (an ablation) tokenize it once.
    """
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(options.vocab)
    key = (tuple(options.corpus), str(options.vocab), options.wwm, options.eval_fraction, options.seed)
    if tokenized is None or key not in tokenized:
        train_docs, eval_docs = corpus_split(options.corpus, options.eval_fraction, options.seed, options.encoding)
        documents = (tokenize_documents(train_docs, tokenizer, options.wwm), tokenize_documents(eval_docs, tokenizer))
        if tokenized is not None:
            tokenized[key] = documents
    else:
        documents = tokenized[key]
    train_docs, eval_docs = documents
    report = DataReport("the training corpus").unknown_tokens(
        *count_unknown((segment.ids for document in train_docs for segment in document), tokenizer.unk_token_id),
        f"the vocabulary {options.vocab}")
    report.measured["documents"] = len(train_docs)
    report.check(stacklevel=3)
    max_predictions = options.max_predictions_per_seq or math.ceil(options.mlm_probability * options.max_seq_length)
    spec = MaskingSpec(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       special_ids=frozenset(tokenizer.all_special_ids), mlm_probability=options.mlm_probability,
                       max_predictions_per_seq=max_predictions, whole_word=options.wwm)
    static = options.masking == "static"
    train_instances = create_instances(
        train_docs, max_seq_length=options.max_seq_length, cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id, objective=options.objective, short_seq_prob=options.short_seq_prob,
        dupe_factor=options.dupe_factor if static else 1, masking=spec if static else None, seed=options.seed)
    eval_singles, eval_pairs = [], []
    if eval_docs:
        eval_singles, eval_pairs = heldout_instances(eval_docs, tokenizer, options.max_seq_length, options.objective,
                                                     options.seed + 1, options.max_eval_instances)

    config = model_config(options.config, len(tokenizer), options.albert, options.max_seq_length,
                          tokenizer.pad_token_id)
    if options.normalize_before:
        config = config.replace(normalize_before=True)
    if not options.use_bias:
        config = config.replace(use_bias=False)
    if options.dropout is not None:
        config = config.replace(hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout)
    torch.manual_seed(options.seed)
    model = (BertForMaskedLM if options.objective == "mlm" else BertForPreTraining)(config)
    collator = PretrainingCollator(tokenizer.pad_token_id, spec, dynamic=not static)
    return PretrainingRun(tokenizer, train_instances, eval_singles, eval_pairs, spec, collator, model, report)


def plan_steps(run: PretrainingRun, options: PretrainOptions) -> int:
    """The steps that fit in `options.minutes`, from training steps timed on a copy of the run's model."""
    B, instances = options.batch_size, run.train_instances
    if options.group_by_length:  # batches of like lengths: time seven, short to long
        batches = length_probes([example_length(i) for i in instances], B, (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95))
    else:
        batches = [list(range(i * B, min((i + 1) * B, len(instances)))) for i in range(4)]
    probes = [run.collator([instances[i] for i in batch], list(range(len(batch)))) for batch in batches]
    return steps_in_budget(run.model, probes, options.minutes * 60, options.bf16)


def pretrain(options: PretrainOptions, resume: bool = False, tokenized: dict | None = None):
    """Build the data and model and train in options.out, holding it for the run (`bertkit.pipelines.run_directory`: an
    earlier run or model there is refused unless options.overwrite); returns the trainer's final TrainState."""
    with run_directory(options.out, "bertkit pretrain", overwrite=options.overwrite, resume=resume,
                       main=process_rank() == 0, inputs=options.inputs()):
        return _pretrain(options, resume, tokenized)


def _pretrain(options: PretrainOptions, resume: bool, tokenized: dict | None):
    out = Path(options.out)
    run = prepare(options, tokenized)
    if not resume:
        if options.max_steps is None:
            if process_count() > 1:  # each process would time itself differently
                raise ValueError("under torchrun give --max-steps (a time budget alone sizes the schedule per "
                                 "process)")
            options = dataclasses.replace(options, max_steps=plan_steps(run, options))
        if process_rank() == 0:
            out.mkdir(parents=True, exist_ok=True)
            options.save(out / OPTIONS_NAME)
            run.report.save(out)
    args = options.training_arguments(options.max_steps, save_total_limit=2)
    eval_fn = None
    if run.eval_singles:  # the probe is masked already: a static collator
        eval_fn = pretraining_eval(run.eval_singles, PretrainingCollator(run.tokenizer.pad_token_id, run.spec),
                                   run.eval_pairs)
    trainer = Trainer(run.model, args, run.train_instances, run.collator, eval_fn=eval_fn,
                      count_items=run.model.count_loss_items, tokenizer=run.tokenizer)
    return trainer.train(resume=resume)


def resume_pretraining(out: str | Path, given: dict | None = None):
    """Continue the run in `out`, wherever it now is, exactly where its newest checkpoint left it.

    Its saved options' paths are resolved against `out`; `given` options (flags typed with --resume) must
    agree with them (`Options.resumed`)."""
    path = Path(out) / OPTIONS_NAME
    if Path(out).is_file():
        raise ValueError(f"{out} is a file; --resume takes the directory of a pretraining run (its --out)")
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
