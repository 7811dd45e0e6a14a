"""Pretraining, end to end: options -> data -> model -> Trainer -> checkpoint.

`pretrain(PretrainOptions(...))` is what `bertkit pretrain` runs. The data, from corpus to masked batches, is
`bertkit.data.pretraining.run_data`'s (token stores, the held-out split and probe, the plan of instances, masking);
this module adds the tokenizer, the model (fresh weights of a preset's shape, or an --init model), the step count
that fits `--minutes`, and the trainer, which checkpoints the run in --out so that `--resume` continues it exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.data.pretraining import CorpusMix, DataSettings, PretrainingData, build
from bertkit.data.pretraining.packing import MLM
from bertkit.data.quality import check_positions_fit
from bertkit.errors import InputError
from bertkit.models.bert.heads import BertForMaskedLM, BertForPreTraining
from bertkit.models.modernbert.configuration import ModernBertConfig
from bertkit.models.modernbert.modeling import ModernBertForMaskedLM
from bertkit.models.registry import family_of
from bertkit.pipelines.options import PretrainOptions
from bertkit.pipelines.presets import model_config
from bertkit.pipelines.run_directory import run_directory
from bertkit.training.budget import forward_seconds, plan_for_budget, seconds_per_step, timing_batches
from bertkit.training.checkpointing import check_not_finished
from bertkit.training.data_order import loader_workers
from bertkit.training.distributed import process_count, process_rank
from bertkit.training.pretraining_eval import pretraining_eval
from bertkit.training.trainer import Trainer
from bertkit.utils.devices import device_name, resolve_device

OPTIONS_NAME = "pretrain_options.json"


@dataclass
class PretrainingRun:
    """Everything a pretraining run trains with, built from its options (see `prepare`)."""

    tokenizer: Any
    data: PretrainingData
    model: torch.nn.Module
    options: PretrainOptions

    def eval_fn(self):
        """The held-out evaluation (`pretraining_eval`), or None without held-out documents."""
        if not self.data.eval_singles:
            return None
        return pretraining_eval(self.data.eval_singles, self.data.eval_collator(self.tokenizer.pad_token_id),
                                self.data.eval_pairs)


def data_settings(options: PretrainOptions) -> DataSettings:
    """The options that decide the run's data, the corpus values read as a mix once."""
    named = {f.name: getattr(options, f.name) for f in dataclasses.fields(DataSettings) if f.name != "corpus"}
    return DataSettings(corpus=CorpusMix.parse(options.corpus), **named)


def prepare(options: PretrainOptions, resumed: Path | None = None) -> PretrainingRun:
    """The tokenizer, the data and the freshly initialised model. The corpus is tokenized only where no store holds
    it yet, and the plan built only where none of these settings is cached beside the store: runs of one corpus that
    differ in other options (an ablation), later runs and resumed ones read both back. `resumed`: the directory of
    the run this one continues (its corpus is checked first)."""
    from bertkit.tokenizer import load_tokenizer

    directory = tokenizer_directory(options)
    tokenizer = load_tokenizer(directory)
    data = build(tokenizer, directory, data_settings(options), progress=options.progress and process_rank() == 0,
                 resumed=resumed)
    return PretrainingRun(tokenizer, data, initial_model(options, tokenizer, directory), options)


def tokenizer_directory(options: PretrainOptions) -> Path:
    """Where the run's tokenizer comes from: --vocab, or the --init model's own (a --vocab beside --init must hold
    the same vocabulary: the model's embedding rows are indexed by it)."""
    from bertkit.data.sources import resolve_model
    from bertkit.models.registry import require
    from bertkit.tokenizer import load_tokenizer

    if options.init is None:
        return Path(options.vocab)
    model = resolve_model(options.init)
    require(model, "pretrain")  # a BERT: another family's weights mean nothing here
    if options.vocab is not None and Path(options.vocab).resolve() != model.resolve():
        if load_tokenizer(options.vocab).get_vocab() != load_tokenizer(model).get_vocab():
            raise InputError(f"--vocab {options.vocab} is not the vocabulary of --init {options.init}: the model's "
                             "embeddings are indexed by its own; leave --vocab out")
    return model


def initial_model(options: PretrainOptions, tokenizer, directory: Path | None = None) -> torch.nn.Module:
    """The model a run starts from: fresh weights of --config's shape, or the --init model's encoder (and the
    pretraining heads its checkpoint has; those it lacks start fresh, and a warning says which) from `directory`
    (`tokenizer_directory`'s, unless given)."""
    head = BertForMaskedLM if options.objective == MLM else BertForPreTraining
    torch.manual_seed(options.seed)  # fresh weights, and fresh heads of an --init model, are seeded
    if options.init is None:
        config = model_config(options.config, len(tokenizer), options.albert, options.max_seq_length,
                              tokenizer.pad_token_id)
        if isinstance(config, ModernBertConfig):
            return ModernBertForMaskedLM(modern_config(config, options))
        if options.normalize_before:
            config = config.replace(normalize_before=True)
        if not options.use_bias:
            config = config.replace(use_bias=False)
        if options.dropout is not None:
            config = config.replace(hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout)
        return head(config)
    return init_model(head, directory or tokenizer_directory(options), options, len(tokenizer))


def init_model(head: type, directory: Path, options: PretrainOptions, vocab_size: int) -> torch.nn.Module:
    """`head` (BertForPreTraining or BertForMaskedLM; a ModernBERT's masked-LM model for a ModernBERT directory)
    loaded from the model `directory` for --init, in train mode."""
    config = family_of(directory).load_config(directory)
    if isinstance(config, ModernBertConfig):
        head, config = ModernBertForMaskedLM, modern_config(config, options)
    if config.vocab_size != vocab_size:
        raise InputError(f"{directory} has {config.vocab_size} embedding rows but its tokenizer {vocab_size} tokens: "
                         "--init needs a model and vocabulary that belong together")
    check_positions_fit(options.max_seq_length, config.max_position_embeddings, "--max-seq-length",
                        f"--init {options.init}")
    if options.dropout is not None and not isinstance(config, ModernBertConfig):  # a ModernBERT's: modern_config
        config = config.replace(hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout)
    return head.from_pretrained(directory, config=config).train()


def modern_config(config: ModernBertConfig, options: PretrainOptions) -> ModernBertConfig:
    """A ModernBERT's config for a pretraining run: masked LM only (ModernBERT has no sentence head), the options
    that remake a BERT's layers refused, --dropout for its three dropouts."""
    if options.objective != MLM:
        raise InputError(f"a ModernBERT pretrains with masked LM alone (it has no sentence head): give --objective "
                         f"{MLM}, not {options.objective}")
    refused = [flag for flag, given in (("--albert", options.albert), ("--normalize-before", options.normalize_before),
                                        ("--no-bias", not options.use_bias)) if given]
    if refused:
        raise InputError(f"{', '.join(refused)} remake{'s' if len(refused) == 1 else ''} a BERT's layers; a ModernBERT "
                         "is pre-norm and without biases already")
    if options.dropout is not None:
        config = config.replace(embedding_dropout=options.dropout, mlp_dropout=options.dropout,
                                attention_dropout=options.dropout)
    return config


def step_seconds(run: PretrainingRun, hold: tuple[str, ...] = ()) -> float:
    """Seconds of one of the run's training steps on the device it will train on: its batch assembled and masked,
    then the model's step, timed on a copy of the model (`seconds_per_step`); `hold`: parameter prefixes held as the
    trainer holds them. On the CPU one follows the other; on a GPU the data loader's workers assemble the next
    batches while the GPU computes, so a step costs the slower of the two."""
    batches, assembling = timing_batches(run.data.train_dataset, run.data.collator, run.options.batch_size,
                                         run.options.group_by_length)
    device = resolve_device(run.options.device)
    step = seconds_per_step(run.model, batches, run.options.bf16, hold=hold, device=device, compile=run.options.compile)
    workers = loader_workers(run.options.dataloader_workers, device)
    return max(step, assembling / workers) if device.type == "cuda" and workers else assembling + step


def plan_steps(run: PretrainingRun, options: PretrainOptions,
               say: Callable[[str], None] = lambda line: None) -> int:
    """The steps that fit in `options.minutes` (`steps_for_budget`, its default reserve), the held-out evaluations
    paid first: ten of them as a fixed overhead, or with `--eval-every` a share of each step. `say` is told the
    plan, and the device it was timed on."""
    step = step_seconds(run)
    evaluation = (forward_seconds(len(run.data.eval_singles) + len(run.data.eval_pairs), options.batch_size, step)
                  if run.data.eval_singles else 0.0)  # no held-out documents: no evaluation (`eval_fn`)
    device = resolve_device(options.device)
    steps = plan_for_budget(step, minutes=options.minutes, device=device, evaluation=evaluation,
                            eval_every=options.eval_every)
    say(f"--minutes {options.minutes:g}: {steps:,} steps of {options.batch_size} sequences planned, a step timed at "
        f"{step * 1e3:.1f} ms on {device_name(device)}")
    return steps


def pretrain(options: PretrainOptions, resume: bool = False, prepared: PretrainingRun | None = None,
             say: Callable[[str], None] = lambda line: None):
    """Build the data and model and train in options.out, holding it for the run (`run_directory`: an earlier run or
    model there is refused unless options.overwrite); returns the trainer's final TrainState. `prepared`: the data
    and model `prepare` made for these options already (the main job times its steps before it trains it); they
    must not have been trained. `say`: told a `--minutes` run's plan."""
    options.start()  # a GPU this machine lacks is refused before anything is read or written; the threads
    with run_directory(options.out, "bertkit pretrain", overwrite=options.overwrite, resume=resume,
                       main=process_rank() == 0, inputs=options.inputs()):
        out = Path(options.out)
        run = prepared if prepared is not None and not resume else prepare(options, out if resume else None)
        if not resume:
            if options.max_steps is None:
                if process_count() > 1:  # each process would time itself differently
                    raise InputError("under torchrun give --max-steps (a time budget alone sizes the schedule per "
                                     "process)")
                options = dataclasses.replace(options, max_steps=plan_steps(run, options, say))
            if process_rank() == 0:
                out.mkdir(parents=True, exist_ok=True)
                options.save(out / OPTIONS_NAME)
                run.data.record(out)
        args = options.training_arguments(options.max_steps, save_total_limit=2,
                                          freeze=(f"{run.model.base_model_prefix}.",) if options.freeze_encoder_steps
                                          else (),
                                          freeze_steps=options.freeze_encoder_steps)
        trainer = Trainer(run.model, args, run.data.train_dataset, run.data.collator, eval_fn=run.eval_fn(),
                          count_items=run.model.count_loss_items, tokenizer=run.tokenizer)
        return trainer.train(resume=resume)


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
