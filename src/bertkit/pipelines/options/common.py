"""What every training command's options share: the base class `TrainingOptions` (where a run writes, how long it
trains, its precision, threads and progress bars, and the one mapping to `TrainingArguments`), the names that
name-or-path options take besides paths, and the checks several commands make. Nothing here imports torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.sources import model_names
from bertkit.data.tasks import TRANSLATION_LANGUAGES
from bertkit.errors import InputError
from bertkit.pipelines.option_fields import Names, Options, option, overwrite_option, progress_option, warn_unused
from bertkit.pipelines.presets import ENCODER_PRESETS
from bertkit.utils.devices import DEVICE_HELP, check_device

MAX_SEQUENCE_LENGTH = 4096  # tokens per sequence at most: attention over T tokens keeps T x T scores per head


def _corpus_names() -> tuple[str, ...]:
    from bertkit.data.corpus import CORPORA

    return ("zh", *CORPORA)


def _dataset_names() -> tuple[str, ...]:
    from bertkit.data.embedding_data import TRAINING_DATASETS
    from bertkit.data.task_kinds import datasets

    return (*datasets(), *TRAINING_DATASETS)


# What the name-or-path options take besides paths, and which the command reads where a value is both (a folder
# `tiny` beside `--config tiny`): the readers decide, and a saved run records the one they read.
PRESET_NAMES = Names("preset", lambda: ENCODER_PRESETS, first=True)              # pipelines.pretrain.model_config
CORPUS_NAMES = Names("corpus", _corpus_names, first=False)               # data.corpus_stream.corpus_inputs, lm
MODEL_NAMES = Names("model", model_names, first=False, directory=True)   # data.sources.resolve_model
DATASET_NAMES = Names("dataset", _dataset_names, first=True)             # data.task_kinds.TaskKind.read
TRANSLATION_DATA_NAMES = Names("dataset", lambda: TRANSLATION_LANGUAGES, first=True)  # pipelines.translation
IMAGE_DATA_NAMES = Names("dataset", lambda: ("mnist",), first=True)      # pipelines.vision.load_image_data
SUMMARY_DATA_NAMES = Names("dataset", lambda: ("inews",), first=True)    # pipelines.summarization.load_splits


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
        self.threads = stored_threads(self.threads)

    def require_budget(self) -> None:
        """The one check behind every "give --max-steps or --minutes": a run must know when to stop."""
        if self.max_steps is None and self.minutes is None:
            raise InputError("give max_steps or minutes, or both (--max-steps, --minutes)")

    def start(self, options_name: str | None = None) -> Any:
        """Ready the machine for the run, before any work: the torch device it computes on (a GPU the machine lacks
        is refused at once), torch's threads as --threads says (the threads a --minutes probe times and the run
        trains on), and, given `options_name`, OUT made with these options saved in it. Returns the device."""
        from bertkit.utils.cpu_load import apply_threads
        from bertkit.utils.devices import resolve_device

        device = resolve_device(self.device)
        apply_threads(self.threads)
        if options_name is not None:
            Path(self.out).mkdir(parents=True, exist_ok=True)
            self.save(Path(self.out) / options_name)
        return device

    def training_arguments(self, max_steps: int, spent: float = 0.0, **settings: Any):
        """The trainer's arguments for a run of `max_steps` steps: the one mapping from a command's options to
        `TrainingArguments`. The options a command has (learning rate, warmup, batch size, ...) carry over by name,
        `--minutes` becomes the clock and its schedule (less the seconds the run `spent` before training), and the
        defaults of the run's bookkeeping are the same for every command: a metrics record about 20 times over the
        run (at most every 50 steps), an evaluation a tenth of the run. `settings` are the pipeline's own (its
        metric, a batch size it had to lower, ...)."""
        from bertkit.training.arguments import TrainingArguments
        from bertkit.training.budget import wall_clock_budget

        carried = {field.name: getattr(self, field.name) for field in dataclasses.fields(TrainingArguments)
                   if field.name not in _DERIVED and getattr(self, field.name, None) is not None}
        defaults = {"log_every": getattr(self, "log_every", None) or max(1, min(50, max_steps // 20)),
                    "eval_every": getattr(self, "eval_every", None) or max(1, max_steps // 10)}
        clock = wall_clock_budget(self.minutes, spent)
        return TrainingArguments(output_dir=str(self.out), max_steps=max_steps, **clock,
                                 **{**carried, **defaults, **settings})


# An option named as a TrainingArguments field means what that field means and is carried over as it is, but for
# these, which the run derives: the planned steps, and the bookkeeping's defaults when a command gives none.
_DERIVED = frozenset({"max_steps", "log_every", "eval_every"})


def stored_threads(value: str | int | None) -> str | None:
    """--threads as the options keep it: None, "fit" or a count, as text (a saved run's options are JSON)."""
    from bertkit.utils.cpu_load import parse_threads

    parsed = parse_threads(value)
    return None if parsed is None else str(parsed)


def native_bf16(device: str = "auto") -> bool:
    """Whether the `device` a run computes on does bfloat16 natively (a CPU with AVX512-BF16 / AMX, a GPU from compute
    capability 8.0); elsewhere bf16 is emulated and slower, or not there at all."""
    from bertkit.inference.machine import native_bfloat16
    from bertkit.utils.devices import resolve_device

    return native_bfloat16(resolve_device(device))


def check_epochs(options: TrainingOptions) -> None:
    """Warn that --epochs is not used where --max-steps sets the run's length (it wins, more steps or fewer)."""
    if options.max_steps is not None and options.differs("epochs"):
        warn_unused(f"--epochs {options.epochs:g}", f"--max-steps {options.max_steps} sets the run's length")
