"""`bertkit vision-train`, and `predict` / `attention` on an image model: a tiny ViT on a folder of made-up images,
attention rollout checked by hand, and (slow) a short run on real MNIST."""

import json

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.pictures.image_attention import attention_rollout, class_token_maps, rollout_map
from test_figures import assert_real_picture
from tolerance import assert_close

pytestmark = pytest.mark.xdist_group("vision")  # one tiny training run, shared by the module's tests

TINY = ["--patch-size", "4", "--hidden-size", "16", "--layers", "2", "--heads", "2", "--batch-size", "16",
        "--no-progress"]


def _make_folder(root, per_class: int = 30, seed: int = 0):
    """16 × 16 grey images: a bright 5 × 5 square in the left half (class 'left') or the right half ('right')."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, columns in (("left", (0, 3)), ("right", (8, 11))):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            image = rng.integers(0, 40, (16, 16), dtype=np.uint8)
            top, left = rng.integers(0, 11), rng.integers(*columns)
            image[top:top + 5, left:left + 5] = 250
            Image.fromarray(image, "L").save(root / label / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny ViT trained for 60 steps on the made-up folder; (run directory, image folder, printed output)."""
    root = tmp_path_factory.mktemp("vision")
    images = _make_folder(root / "images")
    out = root / "run"
    code = main(["vision-train", "--data", str(images), "--out", str(out), "--max-steps", "60", "--eval-every", "20",
                 "--learning-rate", "3e-3", *TINY])
    assert code == 0
    return out, images


def test_vision_train_writes_a_run(trained):
    out, _ = trained
    report = json.loads((out / "report.json").read_text())
    assert report["steps"] == 60 and report["test_images"] == 6 and report["validation_accuracy"] is not None
    assert report["test_accuracy"] >= 5 / 6          # the two classes differ plainly; chance is 1/2
    assert report["config"]["image_size"] == 16 and report["config"]["num_channels"] == 1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 60 and "eval_accuracy" in records[-1]
    assert records[-1]["loss"] < records[0]["loss"]
    assert_real_picture(out / "loss_curve.png")
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        assert (out / "best" / name).is_file()


def test_the_trained_model_loads_in_transformers(trained):
    transformers = pytest.importorskip("transformers")
    from bertkit.inference.images import load_image_model

    out, images = trained
    ours, processor = load_image_model(out / "best")
    theirs = transformers.ViTForImageClassification.from_pretrained(out / "best").eval()
    pixels = processor(sorted((images / "left").glob("*.png"))[:4])
    with torch.no_grad():
        assert_close(ours(pixels).logits, theirs(pixels).logits)
    assert theirs.config.id2label == {0: "left", 1: "right"}


def test_predict_recognises_an_image_model(trained, capsys):
    out, images = trained
    left, right = images / "left" / "0.png", images / "right" / "0.png"
    assert main(["predict", "--model", str(out / "best"), str(left), str(right)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("left ") and lines[0].endswith(str(left))
    assert lines[1].startswith("right ") and "(right " in lines[1]
    assert main(["predict", "--model", str(out / "best"), "--json", str(left)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["image"] == str(left) and record["label"] == "left"
    assert sum(record["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    assert record["score"] == max(record["probabilities"].values())


@pytest.mark.parametrize("argv, message", [
    (["a sentence"], "image file a sentence does not exist"),
    (["x.png", "--pair", "y"], "--pair is for text pairs"),
    ([], "give one or more image files"),
])
def test_predict_on_an_image_model_names_bad_input(trained, capsys, argv, message):
    out, _ = trained
    assert main(["predict", "--model", str(out / "best"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_attention_on_an_image(trained, tmp_path, capsys):
    out, images = trained
    image = images / "right" / "3.png"
    assert main(["attention", "--model", str(out / "best"), str(image), "--out", str(tmp_path / "attn.png"),
                 "--picture", str(tmp_path / "layer0.svg"), "--layer", "0"]) == 0
    printed = capsys.readouterr().out
    assert "4 × 4 patches of 4 × 4 pixels + the class token, 2 layers × 2 heads; predicted right" in printed
    assert "rollout: the class token draws most on patches (row" in printed
    assert_real_picture(tmp_path / "attn.png", min_side=300)
    assert (tmp_path / "layer0.svg").read_text().startswith("<?xml")
    assert main(["attention", "--model", str(out / "best"), str(image), "--out", str(tmp_path / "a.html")]) == 0
    page = (tmp_path / "a.html").read_text()
    assert "r3c3" in page and "[CLS]" in page
    assert main(["attention", "--model", str(out / "best"), str(image), "--layer", "2"]) == 2
    assert "--layer 2: the model has 2 layers" in capsys.readouterr().err


def test_vision_train_names_bad_input(tmp_path, capsys):
    assert main(["vision-train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), *TINY]) == 2
    assert "neither mnist nor a folder of images per class" in capsys.readouterr().err
    images = _make_folder(tmp_path / "images", per_class=12)
    assert main(["vision-train", "--data", str(images), "--out", str(tmp_path / "o"), *TINY,
                 "--patch-size", "5"]) == 2
    assert "cannot be cut into 5 × 5 patches" in capsys.readouterr().err
    assert main(["vision-train", "--data", "mnist", "--image-size", "32", "--out", str(tmp_path / "o")]) == 2
    assert "MNIST digits are 28 × 28 pixels" in capsys.readouterr().err


# ---- attention rollout ---------------------------------------------------------------------------

def test_rollout_by_hand():
    T = 3
    identity = np.broadcast_to(np.eye(T), (2, 2, T, T))
    assert np.allclose(attention_rollout(identity), np.eye(T))             # attending to oneself moves nothing
    uniform = np.full((1, 4, T, T), 1 / T)
    assert np.allclose(attention_rollout(uniform), 0.5 * np.eye(T) + 0.5 / T)
    a = np.random.default_rng(0).random((3, 2, T, T))
    a /= a.sum(-1, keepdims=True)
    mixed = [0.5 * layer.mean(0) + 0.5 * np.eye(T) for layer in a]
    assert np.allclose(attention_rollout(a), mixed[2] @ mixed[1] @ mixed[0])
    assert np.allclose(attention_rollout(a).sum(-1), 1.0)


def test_class_token_maps_follow_the_patch_grid():
    L, H, rows, columns = 2, 3, 2, 3
    a = np.random.default_rng(1).random((L, H, 7, 7))
    maps = class_token_maps(a, (rows, columns))
    assert maps.shape == (L, H, rows, columns)
    assert maps[1, 2, 1, 0] == a[1, 2, 0, 1 + 1 * columns + 0]             # token 1 + r·columns + c
    assert rollout_map(a, (rows, columns)).shape == (rows, columns)


# ---- real MNIST ----------------------------------------------------------------------------------

@pytest.mark.network
@pytest.mark.slow
def test_a_short_run_on_mnist_learns_digits(tmp_path):
    from conftest import fetch_or_skip

    fetch_or_skip("mnist")
    out = tmp_path / "mnist"
    assert main(["vision-train", "--data", "mnist", "--out", str(out), "--max-steps", "600", "--patch-size", "7",
                 "--hidden-size", "32", "--layers", "2", "--batch-size", "64", "--learning-rate", "5e-3",
                 "--shift", "0", "--eval-every", "300", "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["test_images"] == 10_000 and report["test_accuracy"] > 0.7     # 0.84 here; chance is 0.1


def test_fixed_sinusoidal_positions_train_and_predict(tmp_path, capsys):
    images = _make_folder(tmp_path / "images", per_class=10)
    out = tmp_path / "run"
    assert main(["vision-train", "--data", str(images), "--out", str(out), "--max-steps", "4", "--positions",
                 "sinusoidal", *TINY]) == 0
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["model_type"] == "bertkit-vit" and config["position_embedding_type"] == "sinusoidal"
    assert main(["predict", "--model", str(out / "best"), str(images / "left" / "0.png")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("left/0.png")


def test_info_describes_an_image_model(trained, capsys):
    out, _ = trained
    assert main(["info", str(out / "best")]) == 0
    printed = capsys.readouterr()
    assert "(ViT: ViTForImageClassification)" in printed.out and "warning" not in printed.err
    assert "1 channel(s), 16 × 16 pixels in 4 × 4 patches of 4 × 4 + the class token; positions learned" in printed.out
    assert "labels            left, right" in printed.out


@pytest.mark.parametrize("argv", [["encode", "hello"], ["evaluate", "--data", "inews"]])
def test_text_commands_refuse_an_image_model(trained, capsys, argv):
    out, _ = trained
    assert main([argv[0], "--model", str(out / "best"), *argv[1:]]) == 2
    assert capsys.readouterr().err == (f"bertkit {argv[0]}: error: {out / 'best'} holds a ViT model (model_type "
                                       f"'vit'); {argv[0]} takes "
                                       "BERT and ModernBERT models\n")  # encode and evaluate both read a ModernBERT
