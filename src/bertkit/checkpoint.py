"""Hugging Face model directories: reading, writing, and the ONE place where key-name quirks live.

A checkpoint is `config.json` + `model.safetensors` (or the older `pytorch_model.bin`). bertkit's
parameter names equal Hugging Face's, so loading is "same keys, check count and shapes", after these
quirks are ironed out:

- task checkpoints put the encoder under `bert.` (`bert.encoder.layer.0...`) and add head weights;
- old TensorFlow-converted checkpoints name LayerNorm parameters `gamma` / `beta`;
- some checkpoints carry `position_ids` / `token_type_ids` buffers, which are not parameters;
- the MLM decoder is tied to the word embeddings, so a checkpoint may store it once or not at all.

Nothing here imports torch at module level: the NumPy reference reads checkpoints without it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bertkit.atomic import atomic_write

SAFETENSORS_NAME = "model.safetensors"
PYTORCH_NAME = "pytorch_model.bin"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Parameters that are the same tensor as another one: (tied name, source name).
TIED_WEIGHTS = (
    ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
    ("cls.predictions.decoder.bias", "cls.predictions.bias"),
)
# Buffers some checkpoints store; they are recomputed, never loaded.
_IGNORED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded as asked: missing, corrupt, or not matching the model."""


# ---- reading weights -----------------------------------------------------------------------------

def find_weights_file(directory: str | os.PathLike) -> Path:
    """The weights file of a model directory: model.safetensors, else pytorch_model.bin."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory {directory} does not exist")
    for name in (SAFETENSORS_NAME, PYTORCH_NAME):
        if (directory / name).is_file():
            return directory / name
    if (directory / f"{SAFETENSORS_NAME}.index.json").exists() or (directory / f"{PYTORCH_NAME}.index.json").exists():
        raise CheckpointError(f"{directory} holds a sharded checkpoint; bertkit reads single-file checkpoints only")
    raise FileNotFoundError(f"{directory} has neither {SAFETENSORS_NAME} nor {PYTORCH_NAME}")


def read_weights(path: str | os.PathLike, framework: str = "pt") -> dict[str, Any]:
    """Read a .safetensors or .bin file into {name: tensor} ("pt") or {name: ndarray} ("np")."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} does not exist")
    try:
        if path.suffix == ".safetensors":
            if framework == "np":
                from safetensors.numpy import load_file
            else:
                from safetensors.torch import load_file
            return load_file(str(path))
        import torch  # .bin files are torch's zip-of-pickles: readable only with torch

        # weights_only: plain tensors and containers; never runs code from the file
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (FileNotFoundError, CheckpointError):
        raise
    except ImportError as err:
        raise CheckpointError(f"reading {path} needs torch ({err}); safetensors files need only numpy") from None
    except Exception as err:  # safetensors' SafetensorError, torch's zip/unpickling errors, EOFError...
        raise CheckpointError(f"cannot read weights file {path}: it is truncated or corrupt "
                              f"({type(err).__name__}: {err})") from None
    if not isinstance(state, Mapping) or not all(hasattr(v, "shape") for v in state.values()):
        raise CheckpointError(f"{path} does not hold a mapping of tensor names to tensors")
    state = dict(state)
    return {k: v.numpy() for k, v in state.items()} if framework == "np" else state


# ---- key quirks ----------------------------------------------------------------------------------

def normalize_keys(state: Mapping[str, Any]) -> dict[str, Any]:
    """Rename legacy `gamma`/`beta` to `weight`/`bias` and drop buffers that are not parameters."""
    out = {}
    for name, tensor in state.items():
        if name.endswith(_IGNORED_SUFFIXES):
            continue
        if name.endswith(".gamma"):
            name = name[: -len("gamma")] + "weight"
        elif name.endswith(".beta"):
            name = name[: -len("beta")] + "bias"
        out[name] = tensor
    return out


def adapt_prefix(state: Mapping[str, Any], expected: Iterable[str], prefix: str = "bert.") -> tuple[dict, list]:
    """Move the checkpoint's keys to the model's side of the `bert.` prefix.

    Returns (state, dropped): a task checkpoint loaded into a bare encoder keeps the `bert.` weights and
    drops its head (listed in `dropped`); an encoder checkpoint loaded into a task model gets the prefix.
    """
    expected = set(expected)
    model_prefixed = any(k.startswith(prefix) for k in expected)
    ckpt_prefixed = any(k.startswith(prefix) for k in state)
    if model_prefixed and not ckpt_prefixed:
        return {(k if k in expected else prefix + k): v for k, v in state.items()}, []
    if ckpt_prefixed and not model_prefixed:
        kept = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        return kept, sorted(k for k in state if not k.startswith(prefix))
    return dict(state), []


def fill_tied(state: dict[str, Any], expected: Iterable[str]) -> dict[str, Any]:
    """Supply a tied parameter the checkpoint stored only once (e.g. the decoder = word embeddings)."""
    expected = set(expected)
    for tied, source in TIED_WEIGHTS:
        if tied in expected and tied not in state and source in state:
            state[tied] = state[source]
        if source in expected and source not in state and tied in state:
            state[source] = state[tied]
    return state


def match_state_dict(expected_shapes: Mapping[str, tuple], state: Mapping[str, Any],
                     new_head_prefixes: Iterable[str] = (), source: str = "checkpoint",
                     other_head_prefixes: Iterable[str] = ()) -> list[str]:
    """Check names and shapes; return the expected keys left missing on purpose (new heads).

    Raises one CheckpointError listing every missing, unexpected and mis-shaped tensor. Keys starting with
    one of `new_head_prefixes` may be missing (the caller initialises that head fresh); keys starting with
    one of `other_head_prefixes` belong to another task's head and are not expected here (the caller drops them).
    """
    new_head_prefixes, other_head_prefixes = tuple(new_head_prefixes), tuple(other_head_prefixes)
    missing = [k for k in expected_shapes if k not in state]
    fresh = [k for k in missing if new_head_prefixes and k.startswith(new_head_prefixes)]
    missing = [k for k in missing if k not in fresh]
    unexpected = sorted(k for k in state if k not in expected_shapes
                        and not (other_head_prefixes and k.startswith(other_head_prefixes)))
    mis_shaped = [f"{k}: {source} {tuple(state[k].shape)}, model {tuple(expected_shapes[k])}"
                  for k in expected_shapes if k in state and tuple(state[k].shape) != tuple(expected_shapes[k])]
    if missing or unexpected or mis_shaped:
        lines = [f"{source} does not match the model "
                 f"({len(missing)} missing, {len(unexpected)} unexpected, {len(mis_shaped)} mis-shaped tensors); "
                 "is config.json the one these weights were trained with?"]
        lines += [f"  missing:    {k}" for k in missing]
        lines += [f"  unexpected: {k}" for k in unexpected]
        lines += [f"  mis-shaped: {k}" for k in mis_shaped]
        raise CheckpointError("\n".join(lines))
    return fresh


def prepare_state_dict(state: Mapping[str, Any], expected_shapes: Mapping[str, tuple],
                       new_head_prefixes: Iterable[str] = (), source: str = "checkpoint",
                       other_head_prefixes: Iterable[str] = (),
                       prefix: str = "bert.") -> tuple[dict[str, Any], list[str], list[str]]:
    """All the quirks in order: normalise, adapt prefix, fill ties, check. Returns (state, fresh, dropped)."""
    state = normalize_keys(state)
    state, dropped = adapt_prefix(state, expected_shapes, prefix)
    state = fill_tied(state, expected_shapes)
    fresh = match_state_dict(expected_shapes, state, new_head_prefixes, source, other_head_prefixes)
    dropped += sorted(k for k in state if k not in expected_shapes)
    return {k: v for k, v in state.items() if k in expected_shapes}, fresh, dropped


# ---- writing -------------------------------------------------------------------------------------

def save_weights(state: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write {name: torch.Tensor} as safetensors, atomically, storing each tied tensor once."""
    from safetensors.torch import save_file

    tied_names = {tied for tied, _ in TIED_WEIGHTS}
    seen: dict[tuple, str] = {}
    out = {}
    # Sources first, so of two names for one tensor the source's survives (as Hugging Face saves it).
    for name in sorted(state, key=lambda k: k in tied_names):
        tensor = state[name].detach()
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ident in seen and name in tied_names:
            continue
        seen.setdefault(ident, name)
        out[name] = tensor.contiguous().cpu()
    return atomic_write(path, lambda p: save_file(out, str(p), metadata={"format": "pt"}))


def describe_checkpoint(directory: str | os.PathLike) -> dict[str, Any]:
    """What `bertkit info` shows: config, weights file and format, tensor and parameter counts, heads."""
    from bertkit.config import BertConfig

    directory = Path(directory)
    config = BertConfig.from_pretrained(directory)
    weights = find_weights_file(directory)
    if weights.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(weights), framework="np") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        except Exception as err:
            raise CheckpointError(f"cannot read weights file {weights}: {err}") from None
    else:
        shapes = {k: tuple(v.shape) for k, v in read_weights(weights).items()}
    shapes = normalize_keys(shapes)
    prefixed = any(k.startswith("bert.") for k in shapes)
    heads = sorted({k.split(".")[0] for k in shapes if prefixed and not k.startswith("bert.")})
    count = sum(math.prod(shape) for shape in shapes.values())
    return {
        "path": str(directory), "config": config, "weights_file": weights.name,
        "format": "safetensors" if weights.suffix == ".safetensors" else "pytorch (.bin)",
        "file_bytes": weights.stat().st_size, "num_tensors": len(shapes), "num_parameters": count,
        "prefix": "bert." if prefixed else "", "heads": heads,
        "tokenizer_files": [n for n in TOKENIZER_FILES if (directory / n).exists()],
    }

