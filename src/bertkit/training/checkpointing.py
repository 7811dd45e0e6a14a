"""Training checkpoints on disk: writing them whole, RNG states, finding the newest, rotating old ones, and
telling a finished run (train_results.json) from an interrupted one.

A checkpoint is `OUT/checkpoint-STEP/`: the model in Hugging Face format (config.json,
model.safetensors, tokenizer files) plus optimizer.pt, scheduler.pt, rng_state.pt and
trainer_state.json. It is assembled in a hidden temp directory beside it, fsynced, then renamed
(`bertkit.utils.atomic.atomic_directory`), so a kill at any moment leaves either the whole checkpoint or none of it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.errors import BertkitError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_directory, atomic_write_text, fsync_directory, remove_leftovers

CHECKPOINT_PREFIX = "checkpoint-"
STATE_NAME = "trainer_state.json"  # written last: its presence marks a complete checkpoint
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
RNG_NAME = "rng_state.pt"
RESULTS_NAME = "train_results.json"  # written in the output directory when a run ends, and only then
METRICS_NAME = "metrics.jsonl"       # a record every log_every steps, and each evaluation's scores
ARGS_NAME = "training_args.json"     # the run's TrainingArguments
BEST_DIR = "best"                    # the model with the best dev score so far (metric_for_best)
_CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")


class TrainingCheckpointError(BertkitError, FileNotFoundError):
    """A checkpoint that is missing, incomplete or unreadable."""


class RunFinishedError(InputError):
    """Asked to resume a run that already ended (its steps done, its clock run out, or stopped early)."""


_STOPPED_BY = {"max_steps": "its last planned step", "max_seconds": "its time budget",
               "early_stopping": "early stopping"}


def finished_run(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The final state of the run in `output_dir` if it ended (train_results.json is written at the end only),
    else None."""
    path = Path(output_dir) / RESULTS_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None


def check_not_finished(output_dir: str | os.PathLike) -> None:
    """Raise RunFinishedError if the run in `output_dir` already ended: --resume has nothing left to do there."""
    ended = finished_run(output_dir)
    if ended is not None:
        reason = _STOPPED_BY.get(ended.get("stop_reason"), "its end")
        raise RunFinishedError(f"{output_dir} holds a finished run: {ended.get('step')} steps, stopped by {reason}; "
                               "--resume continues an interrupted run. To train longer, start a new run (a new --out, "
                               "or --overwrite) with more --max-steps or --minutes")


# ---- writing ----------------------------------------------------------------------------------------

def remove_stale_temp_dirs(output_dir: str | os.PathLike) -> None:
    """Delete temp directories left behind by a process killed in the middle of a save."""
    remove_leftovers(output_dir)
    shutil.rmtree(Path(output_dir) / ".final", ignore_errors=True)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, jsonfiles.dumps(obj, indent=2, sort_keys=True) + "\n")


def save_model_dir(directory: Path, model: torch.nn.Module, tokenizer: Any = None) -> None:
    """Write the model (and tokenizer) in Hugging Face format into `directory`."""
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def publish_model(output_dir: str | os.PathLike, model: torch.nn.Module, tokenizer: Any = None) -> None:
    """Write the model into `output_dir` itself, file by file with atomic replaces (the directory holds checkpoints)."""
    output_dir = Path(output_dir)
    staging = output_dir / ".final"
    with atomic_directory(staging) as tmp:
        save_model_dir(tmp, model, tokenizer)
    for path in sorted(staging.iterdir()):
        target = output_dir / path.name
        if path.is_dir() and target.is_dir():  # a directory of the model's (1_Pooling/) replaces the one there
            shutil.rmtree(target)
        os.replace(path, target)
    fsync_directory(output_dir)
    shutil.rmtree(staging, ignore_errors=True)


# ---- RNG states (stored without pickled objects, so torch.load(weights_only=True) reads them) -----

def get_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) generator states of this process."""
    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state = {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                  "pos": int(numpy_state["state"]["pos"]),
                  "has_gauss": int(numpy_state["has_gauss"]), "gauss": float(numpy_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `get_rng_state` captured."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss"]))
    np_state = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": np_state["key"].numpy().astype(np.uint32), "pos": np_state["pos"]},
                         "has_gauss": np_state["has_gauss"], "gauss": np_state["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- checkpoint directories ----------------------------------------------------------------------

def checkpoint_path(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / f"{CHECKPOINT_PREFIX}{step}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints in `output_dir` as (step, path), oldest first. A checkpoint's name must say the step its
    state records: the newest is found, and the oldest deleted, by name, so a renamed one (checkpoint-10 as
    checkpoint-999999) would resume a run from the wrong step and drop the metrics after it: a clear error instead."""
    found = []
    root = Path(output_dir)
    if root.is_dir():
        for path in root.iterdir():
            match = _CHECKPOINT_RE.match(path.name)
            if match and (path / STATE_NAME).is_file():
                step = int(match.group(1))
                _check_named_step(path, step)
                found.append((step, path))
    return sorted(found)


def _check_named_step(path: Path, step: int) -> None:
    try:
        recorded = jsonfiles.loads((path / STATE_NAME).read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return  # unreadable: loading it says so, with its own message
    if isinstance(recorded, int) and recorded != step:
        raise TrainingCheckpointError(f"{path} holds the state of step {recorded}, not {step}: a checkpoint's name "
                                      f"must say its step; name it {CHECKPOINT_PREFIX}{recorded} again, or move it "
                                      "out of the run")


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint directory itself, or the newest complete checkpoint inside an output directory."""
    path = Path(path)
    if (path / STATE_NAME).is_file():
        return path
    found = list_checkpoints(path)
    if not found:
        raise TrainingCheckpointError(f"no complete checkpoint ({CHECKPOINT_PREFIX}STEP/{STATE_NAME}) in {path}")
    return found[-1][1]


def rotate_checkpoints(output_dir: str | os.PathLike, limit: int | None, keep_step: int | None = None) -> None:
    """Delete the oldest checkpoints beyond the newest `limit`, never the one at `keep_step` (the best)."""
    if not limit:
        return
    found = list_checkpoints(output_dir)
    doomed = [path for step, path in found[:-limit] if step != keep_step]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)


def save_checkpoint(directory: Path, model: torch.nn.Module, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    scheduler: Any, rng_states: list[dict[str, Any]], trainer_state: dict[str, Any]) -> None:
    """Write a complete checkpoint atomically to `directory` (trainer_state.json last)."""
    with atomic_directory(directory) as tmp:
        save_model_dir(tmp, model, tokenizer)
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_NAME)
        torch.save(scheduler.state_dict(), tmp / SCHEDULER_NAME)
        torch.save(rng_states, tmp / RNG_NAME)
        write_json(tmp / STATE_NAME, trainer_state)


def load_checkpoint(directory: Path, map_location: torch.device) -> dict[str, Any]:
    """Read optimizer, scheduler, RNG and trainer state of a checkpoint (weights_only: no code is unpickled)."""
    missing = [name for name in (OPTIMIZER_NAME, SCHEDULER_NAME, RNG_NAME, STATE_NAME)
               if not (directory / name).is_file()]
    if missing:
        raise TrainingCheckpointError(f"checkpoint {directory} is incomplete: missing {', '.join(missing)}")
    try:
        return {
            "optimizer": torch.load(directory / OPTIMIZER_NAME, map_location=map_location, weights_only=True),
            "scheduler": torch.load(directory / SCHEDULER_NAME, weights_only=True),
            "rng": torch.load(directory / RNG_NAME, weights_only=True),
            "state": json.loads((directory / STATE_NAME).read_text(encoding="utf-8")),
        }
    except (RuntimeError, OSError, ValueError, EOFError) as err:
        raise TrainingCheckpointError(f"checkpoint {directory} is unreadable: {err}") from err


def start_output(output_dir: Path, resumed_at: int | None, arguments: dict[str, Any]) -> None:
    """Ready `output_dir` for a run: its metrics.jsonl begun afresh, or, for a run resumed at step `resumed_at`, cut
    back to the records of the steps the checkpoint holds (the killed run may have logged steps after it); the
    run's arguments written beside it; temporary directories of a killed save removed."""
    output_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_dirs(output_dir)
    metrics = output_dir / METRICS_NAME
    kept = []
    if resumed_at is not None and metrics.exists():
        kept = [line for line in metrics.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["step"] <= resumed_at]
    metrics.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    write_json(output_dir / ARGS_NAME, arguments)


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global generators from one seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_weights_into(model: torch.nn.Module, directory: Path) -> None:
    """Copy a checkpoint's weights into `model` in place: no second model is built. bertkit's models check names
    and shapes on the way in (`load_weights`, strict: a resumed run has no fresh head); any other model gets a strict
    `load_state_dict` of the weights file it saved."""
    load_weights = getattr(model, "load_weights", None)
    if load_weights is not None:
        load_weights(directory, allow_fresh_head=False)
    else:
        from bertkit.models import checkpoint

        model.load_state_dict(checkpoint.read_weights(checkpoint.find_weights_file(directory)))
