"""`bertkit vision-train`: a Vision Transformer's options, and the check of an image's patches."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.pipelines.option_fields import option
from bertkit.pipelines.options.common import IMAGE_DATA_NAMES, MAX_SEQUENCE_LENGTH, TrainingOptions, check_epochs

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
