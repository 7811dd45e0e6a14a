"""Hugging Face model directories: reading, writing, and the ONE place where key-name quirks live.

A checkpoint is `config.json` + `model.safetensors` (or the older `pytorch_model.bin`). bertkit's
parameter names equal Hugging Face's, so loading is "same keys, check count and shapes", after these
quirks are ironed out:

- task checkpoints put the bare model under its prefix (`bert.encoder.layer.0...`, `transformer.h.0...`)
  and add head weights; a bare model's checkpoint has neither;
- old TensorFlow-converted checkpoints name LayerNorm parameters `gamma` / `beta`;
- some checkpoints carry buffers that are not parameters: BERT's `position_ids` / `token_type_ids`,
  GPT-2's causal masks `attn.bias` / `attn.masked_bias`;
- tied parameters (an MLM decoder or LM head that is the word embedding) may be stored once or not at all;
  the model names its ties (`tied_weights()`);
- bertkit's earlier GPT (model_type "bertkit-gpt") used BART-style names and torch's Linear layout; it is
  renamed and reshaped into GPT-2's.

Nothing here imports torch at module level: the NumPy reference reads checkpoints without it.
"""

from __future__ import annotations

import math
import os
import pickle
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import DataError
from bertkit.utils.atomic import atomic_write

SAFETENSORS_NAME = "model.safetensors"
PYTORCH_NAME = "pytorch_model.bin"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Buffers some checkpoints store; they are recomputed, never loaded.
_IGNORED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids", ".attn.bias", ".attn.masked_bias")


class CheckpointError(DataError):
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
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower():
            raise CheckpointError(f"cannot read weights file {path}: it is truncated or corrupt "
                                  f"({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None
        asked = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f"would call {asked[1]}" if asked else "would run code or build objects other than tensors"
        raise CheckpointError(f"refused to load {path} as unsafe: its pickle {what} when loaded; bertkit loads "
                              "tensors only (convert a file you trust to safetensors)") from None
    except Exception as err:  # safetensors' SafetensorError, torch's zip errors, EOFError...
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


def adapt_prefix(state: Mapping[str, Any], expected: Iterable[str], prefix: str) -> tuple[dict, list]:
    """Move the checkpoint's keys to the model's side of the base-model prefix (`bert`, `transformer`).

    Returns (state, dropped): a task checkpoint loaded into a bare model keeps the prefixed weights and
    drops its head (listed in `dropped`); a bare model's checkpoint loaded into a task model gets the prefix.
    """
    if not prefix:
        return dict(state), []
    prefix = prefix.rstrip(".") + "."
    expected = set(expected)
    model_prefixed = any(k.startswith(prefix) for k in expected)
    ckpt_prefixed = any(k.startswith(prefix) for k in state)
    if model_prefixed and not ckpt_prefixed:
        return {(k if k in expected else prefix + k): v for k, v in state.items()}, []
    if ckpt_prefixed and not model_prefixed:
        kept = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        return kept, sorted(k for k in state if not k.startswith(prefix))
    return dict(state), []


def fill_tied(state: dict[str, Any], tied: Mapping[str, str]) -> dict[str, Any]:
    """Keep one name per tied tensor, the model's source name: {tied: source} as the model's `tied_weights()`.

    A checkpoint may store a tied tensor under both names, under the source's only, or (older files) under the
    tied name only; the tied name is not loaded, since the model's tied parameter *is* its source.
    """
    for name, source in tied.items():
        tensor = state.pop(name, None)
        if tensor is not None and source not in state:
            state[source] = tensor
    return state


def legacy_gpt_names(state: Mapping[str, Any]) -> dict[str, Any]:
    """bertkit's earlier GPT checkpoint -> GPT-2's names and layout (transformers' Conv1D: weights (in, out)).

    `embed_tokens`/`embed_positions` -> `transformer.wte`/`wpe`, `layers.N` -> `transformer.h.N` with
    `self_attn.{q,k,v}_proj` stacked into `attn.c_attn` (C, 3C), `self_attn.out_proj` -> `attn.c_proj`,
    `fc1`/`fc2` -> `mlp.c_fc`/`mlp.c_proj`, `self_attn_layer_norm`/`final_layer_norm` -> `ln_1`/`ln_2` (the
    same places in pre-LN and post-LN blocks), `layer_norm` -> `transformer.ln_f`.
    """
    renamed = {"embed_tokens": "transformer.wte", "embed_positions": "transformer.wpe",
               "layer_norm": "transformer.ln_f", "self_attn.out_proj": "attn.c_proj", "fc1": "mlp.c_fc",
               "fc2": "mlp.c_proj", "self_attn_layer_norm": "ln_1", "final_layer_norm": "ln_2"}
    projections = ("attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # torch Linear (out, in) -> Conv1D (in, out)
    out: dict[str, Any] = {}
    qkv: dict[str, dict[str, Any]] = {}
    for name, tensor in state.items():
        module, _, kind = name.rpartition(".")
        layer = re.fullmatch(r"layers\.(\d+)\.(.+)", module)
        prefix, module = (f"transformer.h.{layer[1]}.", layer[2]) if layer else ("", module)
        if module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            qkv.setdefault(f"{prefix}attn.c_attn.{kind}", {})[module[-6]] = tensor
            continue
        module = renamed.get(module, module)
        out[f"{prefix}{module}.{kind}"] = tensor.T if module in projections and kind == "weight" else tensor
    for name, parts in qkv.items():
        if len(parts) == 3:  # else a tensor is missing, and the strict check names the others as unexpected
            q, k, v = parts["q"], parts["k"], parts["v"]
            out[name] = _concat([q.T, k.T, v.T], axis=1) if name.endswith("weight") else _concat([q, k, v], axis=0)
    return out


def _concat(tensors: list[Any], axis: int) -> Any:
    if isinstance(tensors[0], np.ndarray):
        return np.concatenate(tensors, axis=axis)
    import torch

    return torch.cat(tensors, dim=axis)


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


def prepare_state_dict(state: Mapping[str, Any], expected_shapes: Mapping[str, tuple], *, prefix: str = "",
                       tied: Mapping[str, str] | None = None, new_head_prefixes: Iterable[str] = (),
                       other_head_prefixes: Iterable[str] = (),
                       source: str = "checkpoint") -> tuple[dict[str, Any], list[str], list[str]]:
    """All the quirks in order: normalise, rename legacy names, adapt the prefix, fill ties, check.

    `expected_shapes` are the model's own names (tied ones left out), `prefix` its base-model prefix, `tied`
    its `tied_weights()`. Returns (state to load, expected names left fresh, checkpoint names not used).
    """
    state = normalize_keys(state)
    if "embed_tokens.weight" in state and "embed_tokens.weight" not in expected_shapes:
        state = legacy_gpt_names(state)
    state, dropped = adapt_prefix(state, expected_shapes, prefix)
    state = fill_tied(state, tied or {})
    fresh = match_state_dict(expected_shapes, state, new_head_prefixes, source, other_head_prefixes)
    dropped += sorted(k for k in state if k not in expected_shapes)
    state = {k: v for k, v in state.items() if k in expected_shapes}
    check_finite(state, source)
    return state, fresh, dropped


def _count_non_finite(tensor: Any) -> tuple[int, int]:
    """(NaN count, infinity count) of a float tensor or array; (0, 0) for integer ones."""
    if isinstance(tensor, np.ndarray):
        if not np.issubdtype(tensor.dtype, np.floating):
            return 0, 0
        return int(np.isnan(tensor).sum()), int(np.isinf(tensor).sum())
    if not tensor.is_floating_point():
        return 0, 0
    return int(tensor.isnan().sum()), int(tensor.isinf().sum())


def check_finite(state: Mapping[str, Any], source: str = "checkpoint") -> None:
    """A CheckpointError naming every tensor that holds NaN or infinite values: such weights give outputs
    that look like predictions and mean nothing."""
    bad = {}
    for name, tensor in state.items():
        nans, infs = _count_non_finite(tensor)
        if nans or infs:
            bad[name] = ", ".join(f"{n:,} {what}" for n, what in ((nans, "NaN"), (infs, "infinite")) if n)
    if bad:
        shown = "; ".join(f"{name} ({what})" for name, what in list(bad.items())[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(f"{source}: {len(bad)} {'tensors hold' if len(bad) > 1 else 'tensor holds'} NaN or "
                              f"infinite values: {shown}{more}; these weights are damaged (a diverged run?) and would "
                              "give meaningless outputs")


# ---- writing -------------------------------------------------------------------------------------

def save_weights(state: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write {name: torch.Tensor} as safetensors, atomically; a tensor under two names is stored under the first.

    Models leave their tied names out (`PreTrainedModel.save_pretrained`); this keeps any other shared
    tensor, which safetensors cannot store twice, once.
    """
    from safetensors.torch import save_file

    seen: set[tuple] = set()
    out = {}
    for name, tensor in state.items():
        tensor = tensor.detach()
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if ident not in seen:
            seen.add(ident)
            out[name] = tensor.contiguous().cpu()
    return atomic_write(path, lambda p: save_file(out, str(p), metadata={"format": "pt"}))


def describe_checkpoint(directory: str | os.PathLike, prefix: str = "") -> dict[str, Any]:
    """What `bertkit info` shows of a model directory's weights: file and format, tensor and parameter counts, and,
    for a task checkpoint (its weights under `prefix`, e.g. "bert"), the heads beside the bare model. Reads only the
    safetensors header (a .bin file is loaded, tensors only)."""
    directory = Path(directory)
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
    prefixed = bool(prefix) and any(k.startswith(prefix + ".") for k in shapes)
    heads = sorted({k.split(".")[0] for k in shapes if prefixed and not k.startswith(prefix + ".")})
    return {
        "path": str(directory), "weights_file": weights.name,
        "format": "safetensors" if weights.suffix == ".safetensors" else "pytorch (.bin)",
        "file_bytes": weights.stat().st_size, "num_tensors": len(shapes),
        "num_parameters": sum(math.prod(shape) for shape in shapes.values()),
        "prefix": f"{prefix}." if prefixed else "", "heads": heads,
        "tokenizer_files": [n for n in TOKENIZER_FILES if (directory / n).exists()],
    }
