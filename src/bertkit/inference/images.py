"""An image model's predictions: the ViT of a directory with its image processor, and labels per image file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.data.images import ImageProcessor
from bertkit.errors import DataError, InputError
from bertkit.inference.loading import on_device
from bertkit.models.vit.configuration import ViTConfig
from bertkit.models.vit.modeling import ViTForImageClassification, vit_class_for


def load_image_model(path: str | os.PathLike, device: Any = None) -> tuple[Any, ImageProcessor]:
    """(model in eval mode, its ImageProcessor) from a ViT directory; the class its config.json's architectures name;
    on `device` (`loading.on_device`: None leaves it on the CPU)."""
    path = Path(path)
    config = ViTConfig.from_pretrained(path)
    model = vit_class_for(config).from_pretrained(path, config=config)
    processor = ImageProcessor.from_pretrained(path)
    if processor.num_channels != model.config.num_channels or processor.size != model.config.image_hw:
        raise DataError(f"{path}: preprocessor_config.json makes {processor.num_channels}-channel "
                        f"{processor.size[0]} × {processor.size[1]} images, the model reads "
                        f"{model.config.num_channels}-channel {model.config.image_hw[0]} × {model.config.image_hw[1]}")
    return on_device(model, device), processor


def classify_images(model: ViTForImageClassification, processor: ImageProcessor,
                    images: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """{"label", "score", "probabilities": {label: p}} per image file."""
    if not isinstance(model, ViTForImageClassification):
        raise InputError("this image model has no classification head (it is a bare ViTModel): nothing to predict")
    pixels = processor(images).to(next(model.parameters()).device)
    with torch.no_grad():
        probabilities = model(pixels).logits.float().softmax(-1).cpu().numpy()
    names = [model.config.id2label[i] for i in range(model.num_labels)] if model.config.id2label else \
        [f"LABEL_{i}" for i in range(model.num_labels)]
    return [{"label": names[int(row.argmax())], "score": float(row.max()),
             "probabilities": {name: float(p) for name, p in zip(names, row)}} for row in probabilities]
