"""Export an encoder or classifier (a BERT's, a ModernBERT's) to ONNX, for onnxruntime and the other runtimes that
read it.

    export_onnx(model, tokenizer, "out/onnx")      # out/onnx/model.onnx + config.json + the tokenizer's files

The graph takes `input_ids`, `attention_mask` and, for a family with segment embeddings (BERT), `token_type_ids`,
each int64 (batch, sequence), with both axes dynamic (the sequence up to the model's positions). A ModernBERT has
no segments: its graph takes the first two alone, as transformers' ONNX exports of it do, rather than an input
that nothing reads. The outputs are float32, named as in bertkit:

- an encoder (BertModel, ModernBertModel; the encoder of a pretraining model): `last_hidden_state` (B, T, C) and,
  with a pooler, `pooler_output` (B, C);
- a sequence classifier: `logits` (B, L); a token classifier (NER): `logits` (B, T, L).

Which classes are which is the registry's: each family's "encoder", "classify" and "ner" heads.

torch 2.13 has two exporters. The TorchScript one traces a single run, so every Python decision becomes a
constant: the model's "is anything padded?" check would then drop the padding mask for every later input.
The dynamo exporter (`torch.onnx.export(..., dynamo=True)`, which needs the `onnx` and `onnxscript`
packages) captures the graph with symbolic shapes, where those data-dependent checks are skipped, so the
mask stays in the graph. `pip install 'bertkit[onnx]'` installs them and onnxruntime.

`int8=True` also writes `model_int8.onnx`, quantized by onnxruntime's own dynamic quantization (int8 weights
of the MatMuls, activations quantized per call), the int8 counterpart of `precision.quantize_int8`.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.inference.batching import encoder_of
from bertkit.inference.precision import model_dtype
from bertkit.utils.atomic import atomic_directory, fsync_directory
from bertkit.utils.dtypes import FLOAT32

ONNX_NAME = "model.onnx"
ONNX_INT8_NAME = "model_int8.onnx"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
PROTOBUF_LIMIT = 2 * 1024 ** 3  # one ONNX file holds at most 2 GB; larger weights go beside it as external data


class ExportError(InputError):
    """The model cannot be exported, or the packages the exporter needs are missing."""


class _Graph(nn.Module):
    """The exported function: the id tensors in (token_type_ids only where the model has segments), the model's
    outputs as a plain tuple out."""

    def __init__(self, model: nn.Module, kind: str) -> None:
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, ...]:
        out = self.model(input_ids, attention_mask, token_type_ids)
        if self.kind == "classifier":
            return (out.logits.float(),)
        if out.pooler_output is None:
            return (out.last_hidden_state.float(),)
        return out.last_hidden_state.float(), out.pooler_output.float()


def exported_part(model: nn.Module) -> tuple[nn.Module, str, tuple[str, ...]]:
    """(the module to export, "encoder" or "classifier", its output names): the model itself when it is its family's
    sequence or token classifier, else its family's encoder (the model, or the one inside a pretraining model or a
    reader); a clear error for a cloze classifier and for the families export does not take."""
    from bertkit.models.registry import FAMILIES, family_for

    family = family_for(getattr(model.config, "model_type", ""))
    heads = {name: family.head(name) for name in ("classify", "ner", "encoder", "prompt") if name in family.heads}
    if "export" not in family.serves or "encoder" not in heads:
        raise ExportError(f"ONNX export takes an encoder or a sequence/token classifier of "
                          f"{' or '.join(f.name for f in FAMILIES if 'export' in f.serves)}, not a {family.name} model")
    if isinstance(model, tuple(heads[name] for name in ("classify", "ner") if name in heads)):
        return model, "classifier", ("logits",)
    encoder = model if isinstance(model, heads["encoder"]) else encoder_of(model)
    if isinstance(encoder, heads["encoder"]) and not isinstance(model, heads.get("prompt", ())):
        has_pooler = getattr(encoder, "pooler", None) is not None
        return encoder, "encoder", ("last_hidden_state", "pooler_output") if has_pooler else ("last_hidden_state",)
    raise ExportError(f"ONNX export takes an encoder or a sequence/token classifier, not {type(model).__name__}")


def input_names(config: Any) -> tuple[str, ...]:
    """The graph's inputs: token_type_ids only for a model with segment embeddings (a BERT's type_vocab_size); a
    family without segments (ModernBERT) takes input_ids and attention_mask alone."""
    return INPUT_NAMES if getattr(config, "type_vocab_size", 0) else INPUT_NAMES[:2]


def _check_exporter() -> None:
    missing = [name for name in ("onnx", "onnxscript") if not _importable(name)]
    if missing:
        raise ExportError(f"ONNX export needs the {' and '.join(missing)} package{'s' if len(missing) > 1 else ''}: "
                          "pip install 'bertkit[onnx]'")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def export_onnx(model: nn.Module, tokenizer: Any, directory: str | os.PathLike, *, int8: bool = False,
                opset: int | None = None) -> dict[str, Any]:
    """Write model.onnx, config.json and the tokenizer's files into `directory` (assembled beside it, then each
    file renamed into place, so none is ever half-written; other files there stay); returns
    {"path", "kind", "inputs", "outputs", "files"}."""
    _check_exporter()
    part, kind, output_names = exported_part(model)
    if int8 and not _importable("onnxruntime"):
        raise ExportError("int8 ONNX quantization needs the onnxruntime package: pip install 'bertkit[onnx]'")
    if model_dtype(part) != FLOAT32:
        raise ExportError(f"export the float32 model, not a {model_dtype(part)} one (the int8 option adds "
                          "onnxruntime's own int8 graph)")
    part = part.cpu()
    config = part.config
    graph = _Graph(part, kind).eval()
    example = torch.full((2, 8), config.pad_token_id + 1 if config.pad_token_id is not None else 1)
    example = example.clamp(max=config.vocab_size - 1)
    mask = torch.ones_like(example)
    mask[1, 6:] = 0  # one padded row: the graph must keep the mask
    names = input_names(config)
    batch = torch.export.Dim("batch", min=1)
    sequence = torch.export.Dim("sequence", min=1, max=config.max_position_embeddings)
    dynamic = {name: {0: batch, 1: sequence} for name in names}
    weight_bytes = sum(p.numel() * p.element_size() for p in part.parameters())
    directory = Path(directory)
    staging = directory / ".export"
    with _quiet_exporter(), atomic_directory(staging) as tmp:
        program = torch.onnx.export(graph, (example, mask, torch.zeros_like(example))[:len(names)], dynamo=True,
                                    verbose=False, input_names=list(names), output_names=list(output_names),
                                    dynamic_shapes=dynamic, opset_version=opset)
        program.save(str(tmp / ONNX_NAME), external_data=weight_bytes > PROTOBUF_LIMIT * 0.9)
        if int8:
            quantize_onnx(tmp / ONNX_NAME, tmp / ONNX_INT8_NAME)
        save = model if kind == "classifier" else part
        save.config.save_pretrained(tmp, architectures=[type(save).__name__])
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        files = sorted(path.name for path in tmp.iterdir())
    for name in files:
        os.replace(staging / name, directory / name)
    fsync_directory(directory)
    shutil.rmtree(staging, ignore_errors=True)
    return {"path": directory, "kind": kind, "inputs": list(names), "outputs": list(output_names),
            "files": files}


def quantize_onnx(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """onnxruntime's dynamic int8 quantization of an exported graph: int8 MatMul weights, per-call activations."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_exporter():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    return Path(target)


class _quiet_exporter:
    """The exporter's progress lines and notes on torch internals (torchvision ops not installed, ...) stay quiet."""

    def __enter__(self) -> None:
        self._loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "onnxscript", "root")]
        self._levels = [logger.level for logger in self._loggers]
        for logger in self._loggers:
            logger.setLevel(logging.ERROR)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        # torch's own notes on its internals (a deprecated pytree check, axis names shared by the three inputs)
        warnings.filterwarnings("ignore", category=FutureWarning, message=r".*LeafSpec")
        warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")

    def __exit__(self, *exc: object) -> None:
        self._warnings.__exit__(*exc)
        for logger, level in zip(self._loggers, self._levels):
            logger.setLevel(level)
