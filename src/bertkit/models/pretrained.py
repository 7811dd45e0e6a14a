"""The one base of every model family: its config, initialisation, tied weights, loading, saving, input checks.

A family subclasses `PreTrainedModel` and declares:

- `config_class`: its config dataclass (config.py), read from and written to config.json;
- `base_model_prefix`: the attribute under which its task models hold the bare model ("bert", "transformer"),
  which is also the weight-name prefix a checkpoint may have or lack; "" when the family has no bare model;
- `head_prefixes`: weight-name prefixes of this class's own head: a checkpoint without them still loads and
  the head starts fresh (with a warning); `other_head_prefixes`: other classes' heads, skipped when present;
- `tied_weights()`: {parameter name: name of the parameter it is}, e.g. an output projection that is the
  input embedding; the base ties them, saves each tensor once and fills them in when loading;
- `_init_weights(module)`: one module's initialisation (default: Hugging Face's N(0, initializer_range));
- `saved_architecture`, when transformers should load the saved weights as another class than this one's
  name (a prompt classifier is a BertForMaskedLM there);
- in `__init__`: call `super().__init__(config)`, build the modules, then `self.init_weights()`.

Loading goes through checkpoint.py, the one place where weight-name quirks live; it is strict (every
missing, unexpected or mis-shaped tensor is named in one error). Input checks that read tensor values back
(ids inside the vocabulary, labels inside the head) are free on CPU but stall a GPU and break a compiled
graph, so they run only where they cost nothing and `model.validate_inputs` is on; shape checks always run.

Dimension letters: B batch, S key positions.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.models import checkpoint
from bertkit.models.functional import padding_mask_bias
from bertkit.utils.constants import IGNORE_INDEX


class PreTrainedModel(nn.Module):
    """Base of bertkit's models: Hugging Face-format `from_pretrained` / `save_pretrained` and the shared chores."""

    config_class: type = type(None)
    base_model_prefix: str = ""
    head_prefixes: tuple[str, ...] = ()
    other_head_prefixes: tuple[str, ...] = ()
    saved_architecture: str | None = None  # the class name config.json gives, when not this class's own
    _validate_inputs = True

    def __init__(self, config: Any) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        self.loaded_but_unused: list[str] = []  # checkpoint tensors another head needs, e.g. NSP in an encoder

    # ---- weights -----------------------------------------------------------------------------------

    def init_weights(self) -> None:
        """Initialise every module (`_init_weights`), then tie the tied parameters."""
        self.apply(self._init_weights)
        self.tie_weights()

    def _init_weights(self, module: nn.Module) -> None:
        """Hugging Face's default: N(0, initializer_range) weights, zero biases, LayerNorm 1 and 0, padding rows 0."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            zero_padding_row(module)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def tied_weights(self) -> dict[str, str]:
        """{name of a parameter that is another one: that one's name}; saved once, under the second name."""
        return {}

    def tie_weights(self) -> None:
        """Make each tied parameter the very tensor it is tied to (after building, initialising or loading)."""
        for tied, source in self.tied_weights().items():
            module, _, name = tied.rpartition(".")
            setattr(self.get_submodule(module), name, self.get_parameter(source))

    def num_parameters(self) -> int:
        """Distinct parameters (a tied tensor counts once)."""
        return sum(p.numel() for p in self.parameters())

    # ---- input checks ------------------------------------------------------------------------------

    @property
    def validate_inputs(self) -> bool:
        """The switch for input checks that read tensor values back (on by default; shape checks always run)."""
        return self._validate_inputs

    @validate_inputs.setter
    def validate_inputs(self, on: bool) -> None:
        for module in self.modules():  # a task model's bare model follows its switch
            if isinstance(module, PreTrainedModel):
                module._validate_inputs = bool(on)

    def checks_values(self, tensor: Tensor) -> bool:
        """Whether to read `tensor`'s values back for an input check: on, on CPU, and not while compiling."""
        return self._validate_inputs and tensor.device.type == "cpu" and not torch.compiler.is_compiling()

    def padding_bias(self, attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """The (B, 1, 1, S) additive bias of a 1/0 padding mask; None when nothing is padded.

        Without a mask the fused attention kernel takes its fastest path. Finding out that nothing is padded
        reads the mask back, which is free on CPU only; elsewhere the bias is built unseen.
        """
        if attention_mask is None:
            return None
        if (attention_mask.device.type == "cpu" and not torch.compiler.is_compiling()
                and bool(attention_mask.all())):
            return None
        return padding_mask_bias(attention_mask, dtype)

    # ---- loading and saving ------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, config: Any = None, **config_changes: Any):
        """Load a model directory (config.json + model.safetensors | pytorch_model.bin), strictly; eval mode.

        `config_changes` override config.json's values (e.g. `id2label=` for a new classification head). A
        checkpoint without this class's head loads with the head initialised fresh, and a warning.
        """
        path = Path(path)
        config = config or cls.config_class.from_pretrained(path)
        if config_changes:
            config = config.replace(**config_changes)
        model = cls(config)
        fresh = model.load_weights(path)
        if fresh:
            warnings.warn(f"{cls.__name__}: {path} has no weights for {', '.join(sorted(fresh))}; "
                          "initialised fresh (train this head before use)", stacklevel=2)
        return model.eval()

    def load_weights(self, path: str | os.PathLike, allow_fresh_head: bool = True) -> list[str]:
        """Copy a model directory's weights into this model, in place, through checkpoint.py's checks.

        Returns the names left as they were because the checkpoint has no head for them (only when
        `allow_fresh_head`); sets `loaded_but_unused` to the checkpoint's tensors this class does not use.
        """
        weights_file = checkpoint.find_weights_file(path)
        tied = self.tied_weights()
        expected = {k: tuple(v.shape) for k, v in self.state_dict().items() if k not in tied}
        state, fresh, self.loaded_but_unused = checkpoint.prepare_state_dict(
            checkpoint.read_weights(weights_file), expected, source=str(weights_file), tied=tied,
            prefix=self.base_model_prefix, new_head_prefixes=self.head_prefixes if allow_fresh_head else (),
            other_head_prefixes=self.other_head_prefixes)
        missing, unexpected = self.load_state_dict(state, strict=False)
        assert not unexpected and set(missing) <= set(tied) | set(fresh), (missing, unexpected)
        self.tie_weights()
        return fresh

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write config.json + model.safetensors (atomically), each tied tensor once; loadable by transformers.

        config.json also names the class (`architectures`), so a loader knows which head the weights are for.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(path, architectures=[self.saved_architecture or type(self).__name__])
        tied = self.tied_weights()
        state = {k: v for k, v in self.state_dict().items() if k not in tied}
        checkpoint.save_weights(state, path / checkpoint.SAFETENSORS_NAME)
        return path


def zero_padding_row(embedding: nn.Embedding) -> None:
    """The padding token's vector starts at zero (it is masked out of attention, but still summed in)."""
    if embedding.padding_idx is not None:
        with torch.no_grad():
            embedding.weight[embedding.padding_idx].zero_()


def check_ids(name: str, ids: Tensor, vocab_size: int, max_length: int | None = None, values: bool = True) -> None:
    """Clear errors for ids that would otherwise fail deep inside an embedding lookup.

    Shapes are always checked; the values (inside the vocabulary) only when `values` (see `checks_values`).
    """
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        raise InputError(f"{name} must be a (batch, seq) tensor of token ids, got "
                         f"{tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__}")
    if ids.dtype not in (torch.long, torch.int32):
        raise InputError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    if ids.numel() == 0:
        raise InputError(f"empty batch: {name} has shape {tuple(ids.shape)}")
    if max_length is not None and ids.size(1) > max_length:
        raise InputError(f"{name} has length {ids.size(1)}, longer than the model's {max_length} positions; "
                         "truncate the input to the model's positions")
    if values and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise InputError(f"{name} must be in [0, {vocab_size}), got values in [{int(ids.min())}, {int(ids.max())}]; "
                         "does the tokenizer match the model?")


def classification_loss(logits: Tensor, labels: Tensor, num_labels: int, check: bool = True) -> Tensor:
    """A sequence classifier's loss: labels (B,) class ids (cross-entropy; with `check`, ids outside the head are a
    clear error), or target values when num_labels == 1 (mean squared error: a regression)."""
    if num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    if check:
        check_labels(labels, num_labels)
    return F.cross_entropy(logits.float(), labels.view(-1))


def token_classification_loss(logits: Tensor, labels: Tensor, num_labels: int, check: bool = True) -> Tensor:
    """A token classifier's loss (NER): logits (B, T, num_labels), labels (B, T) tag ids with IGNORE_INDEX on the
    positions not scored (sub-tokens after a word's first, [CLS], [SEP], padding); cross-entropy over the rest."""
    if check:
        check_labels(labels[labels != IGNORE_INDEX], num_labels)
    return F.cross_entropy(logits.float().view(-1, num_labels), labels.view(-1), ignore_index=IGNORE_INDEX)


def span_loss(start_logits: Tensor, end_logits: Tensor, start_positions: Tensor, end_positions: Tensor) -> Tensor:
    """An extractive reader's loss: the mean of the start and end cross-entropies, as transformers computes it:
    positions are clamped to [0, T], and a position of T or more (an answer cut off beyond the input) is left out of
    its term."""
    T = start_logits.size(1)
    start_positions = start_positions.view(-1).clamp(0, T)
    end_positions = end_positions.view(-1).clamp(0, T)
    start = F.cross_entropy(start_logits.float(), start_positions, ignore_index=T)
    end = F.cross_entropy(end_logits.float(), end_positions, ignore_index=T)
    return (start + end) / 2


def check_labels(labels: Tensor, num_labels: int) -> None:
    """A label id outside the head is a data error; say so instead of failing inside cross_entropy."""
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_labels):
        raise InputError(f"label ids must be in [0, {num_labels}) for this model's {num_labels} labels, got "
                         f"values in [{int(labels.min())}, {int(labels.max())}]")
