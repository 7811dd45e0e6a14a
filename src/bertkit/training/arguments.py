"""What a training run is configured with (`TrainingArguments`) and where it stands (`TrainState`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import InputError
from bertkit.utils.ranges import check_number

_HISTORY_TAIL = 100  # log records kept in trainer_state.json
# The learning-rate schedules after the warmup (bertkit.training.schedule implements each). Here, not there, so that
# bertkit.pipelines.options can offer them without importing torch.
SCHEDULES = ("linear", "cosine", "constant")


_RANGES = {name: dict(minimum=1) for name in ("batch_size", "gradient_accumulation_steps", "log_every", "max_steps",
                                              "eval_every", "save_every", "save_total_limit",
                                              "early_stopping_patience")}
_RANGES.update(num_epochs=dict(above=0), learning_rate=dict(minimum=0), seed=dict(minimum=0),
               dataloader_workers=dict(minimum=0),
               warmup_steps=dict(minimum=0), freeze_steps=dict(minimum=0), warmup_ratio=dict(minimum=0, below=1),
               max_seconds=dict(minimum=0),
               max_grad_norm=dict(minimum=0))


@dataclass
class TrainingArguments:
    """Hyper-parameters and bookkeeping of a training run (Hugging Face names where they exist)."""

    output_dir: str
    max_steps: int | None = None          # optimizer steps; wins over num_epochs
    num_epochs: float = 1.0
    max_seconds: float | None = None      # wall-clock budget over all resumed runs; None = off
    time_aware_schedule: bool = False     # with max_seconds: warmup and decay follow the clock when it runs ahead
    batch_size: int = 32                  # the GLOBAL batch: all processes × all accumulation steps
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0                 # wins over warmup_ratio when > 0
    warmup_ratio: float = 0.0
    lr_schedule: str = "linear"           # "linear" | "cosine" | "constant" after the warmup
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0     # None or 0 = no clipping
    freeze: tuple[str, ...] = ()          # parameter-name prefixes held fixed for the first freeze_steps steps ...
    freeze_steps: int = 0                 # ... while the rest (e.g. fresh heads) learns
    bf16: bool = False                    # bfloat16 autocast for forward passes
    compile: bool = False                 # torch.compile the model
    log_every: int = 10
    eval_every: int | None = None
    save_every: int | None = None
    save_total_limit: int | None = None
    seed: int = 42
    group_by_length: bool = False         # batches of examples of similar length (less padding), in random order
    dataloader_workers: int = 0           # processes that collate batches while the model computes (0: this one)
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping
    metric_for_best: str | None = None    # e.g. "eval_accuracy"; "eval_" is prefixed if missing
    greater_is_better: bool | None = None  # None: False for names ending in "loss"/"perplexity"
    progress: bool = True
    device: str | None = None             # None: cuda (LOCAL_RANK's) if available, else cpu
    threads: int | str | None = None      # CPU threads: a count, "fit" (utils.cpu_load), None: as they are
    ddp_find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        for name, bounds in _RANGES.items():
            value = getattr(self, name)
            if value is not None:
                check_number(name, value, **bounds)
        self.freeze = tuple(self.freeze)  # a list after a JSON round trip
        from bertkit.utils.cpu_load import parse_threads

        self.threads = parse_threads(self.threads)
        if self.freeze_steps and not self.freeze:
            raise InputError("freeze_steps holds the parameters named by freeze; give their prefixes (e.g. 'bert.')")
        if self.lr_schedule not in SCHEDULES:
            raise InputError(f"unknown lr_schedule {self.lr_schedule!r}; expected one of {SCHEDULES}")
        if self.time_aware_schedule and self.max_seconds is None:
            raise InputError("time_aware_schedule follows the share of max_seconds spent; give max_seconds")
        if self.early_stopping_patience and not self.metric_for_best:
            raise InputError("early_stopping_patience needs metric_for_best (e.g. 'eval_accuracy')")
        if self.metric_for_best:
            if not self.metric_for_best.startswith("eval_"):
                self.metric_for_best = "eval_" + self.metric_for_best
            if self.greater_is_better is None:
                self.greater_is_better = not self.metric_for_best.endswith(("loss", "perplexity"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainingArguments:
        """Arguments from `to_dict()` output (e.g. training_args.json); unknown keys are an error."""
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise InputError(f"unknown training arguments: {', '.join(sorted(unknown))}")
        return cls(**values)


@dataclass
class TrainState:
    """Where training stands; saved (minus `losses`) as trainer_state.json in every checkpoint."""

    step: int = 0                  # optimizer steps done
    epoch: int = 0                 # current epoch ...
    position: int = 0              # ... and global batches of it already consumed
    seconds: float = 0.0           # wall-clock of training, summed over resumed runs
    examples: int = 0
    tokens: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    evals_without_improvement: int = 0
    stop_reason: str | None = None  # "max_steps" | "max_seconds" | "early_stopping"
    start_step: int = 0            # the step this train() call started from (0, or the resumed step)
    losses: list[float] = field(default_factory=list)  # per-step losses of steps start_step+1 .. step
    log_history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["losses"], out["start_step"]
        out["log_history"] = out["log_history"][-_HISTORY_TAIL:]
        return out
