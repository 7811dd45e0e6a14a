"""Image classification with the Vision Transformer, end to end: images -> ViT -> Trainer -> best model -> test.

`vision_train` trains ViTForImageClassification on MNIST or a folder of images per class, keeps the best
checkpoint on the validation split (OUT/best), scores it on test and writes OUT/report.json and the loss curve.
What `bertkit predict` and `attention` do with an image model's directory is in bertkit.inference.images.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bertkit.data.images import ImageCollator, ImageProcessor, ImageSet, load_mnist, read_image_folder
from bertkit.errors import InputError
from bertkit.models.vit.configuration import ViTConfig
from bertkit.models.vit.modeling import ViTForImageClassification
from bertkit.pipelines.options import VisionTrainOptions, check_image_size
from bertkit.pipelines.run_directory import holds_out
from bertkit.training.budget import forward_seconds, plan_for_budget, probe_batches, seconds_per_step
from bertkit.training.checkpointing import BEST_DIR, METRICS_NAME
from bertkit.training.trainer import Trainer
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.devices import to_device

REPORT_NAME = "report.json"
CURVE_NAME = "loss_curve.png"


# ---- data ----------------------------------------------------------------------------------------

def load_image_data(data: str, image_size: int | None = None, seed: int = 0) -> dict[str, ImageSet]:
    """"mnist" (train / validation / test as shipped), or a folder per class of images (bertkit.data.images)."""
    if data == "mnist":
        if image_size not in (None, 28):
            raise InputError(f"MNIST digits are 28 × 28 pixels; --image-size {image_size} is for folders of images")
        return load_mnist()
    if not Path(data).is_dir():
        raise FileNotFoundError(f"--data {data!r} is neither mnist nor a folder of images per class")
    splits = read_image_folder(data, image_size, seed=seed)
    for name in ("validation", "test"):
        if not len(splits[name]):
            raise InputError(f"{data}: no {name} images (each class needs at least 10 images to split off a tenth "
                             f"for validation and test, or give {data}/{name}/CLASS/ folders)")
    return splits


def accuracy(model: ViTForImageClassification, processor: ImageProcessor, data: ImageSet,
             batch_size: int = 500) -> dict[str, float]:
    """Accuracy and mean cross-entropy of `model` on `data` (eval mode, no gradients), on the device the model is on."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct, loss = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            labels = to_device(torch.tensor(data.labels[start:start + batch_size]), device)
            pixels = to_device(processor.normalize(data.images[start:start + batch_size]), device)
            logits = model(pixels).logits.float()
            correct += int((logits.argmax(-1) == labels).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
    model.train(was_training)
    return {"accuracy": correct / len(data), "loss": loss / len(data)}


def vit_config(options: VisionTrainOptions, train: ImageSet) -> ViTConfig:
    """The model the options describe, for `train`'s image size, channels and classes."""
    K, h, w = train.images.shape[1:]
    check_image_size("the images are", h, w, options.patch_size)
    if h % options.patch_size or w % options.patch_size:
        raise InputError(f"images of {h} × {w} pixels cannot be cut into {options.patch_size} × {options.patch_size} "
                         "patches: choose a --patch-size that divides both sides (or --image-size for folders)")
    return ViTConfig(image_size=h if h == w else [h, w], patch_size=options.patch_size, num_channels=K,
                     hidden_size=options.hidden_size, num_hidden_layers=options.num_hidden_layers,
                     num_attention_heads=options.num_attention_heads,
                     intermediate_size=options.intermediate_size or 2 * options.hidden_size,
                     hidden_dropout_prob=options.dropout, attention_probs_dropout_prob=options.dropout,
                     position_embedding_type="sinusoidal" if options.positions == "sinusoidal" else "absolute",
                     id2label=dict(enumerate(train.label_names)))


# ---- the run -------------------------------------------------------------------------------------

@holds_out("bertkit vision-train", distributed=False)
def vision_train(options: VisionTrainOptions, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Train, keep the best validation checkpoint, score it on test; returns (and writes) the report. The run
    holds options.out (`bertkit.pipelines.run_directory`: an earlier run or model there is refused unless overwrite)."""
    started = time.perf_counter()
    device = options.start()  # before any work: the device (a GPU the machine lacks is refused) and the threads
    splits = load_image_data(options.data, options.image_size, options.seed)
    train, validation, test = splits["train"], splits["validation"], splits["test"]
    say(f"{options.data}: {len(train):,} train / {len(validation):,} validation / {len(test):,} test images of "
        f"{train.images.shape[2]} × {train.images.shape[3]} pixels, {train.images.shape[1]} channel(s), "
        f"{len(train.label_names)} classes")
    processor = ImageProcessor.fit(train)
    torch.manual_seed(options.seed)
    config = vit_config(options, train)
    model = ViTForImageClassification(config)
    say(f"ViT: {config.grid[0]} × {config.grid[1]} patches of {options.patch_size} pixels + the class token, "
        f"{config.num_hidden_layers} layers × {config.hidden_size} wide, {config.num_attention_heads} heads, "
        f"{model.num_parameters():,} parameters")

    batch_size = min(options.batch_size, len(train))
    collator = ImageCollator(processor, options.shift)
    steps_per_epoch = max(1, len(train) // batch_size)
    max_steps = options.max_steps or max(1, round(options.epochs * steps_per_epoch))
    if options.minutes and not options.max_steps:  # size the schedule to the clock, so it decays fully
        # images of one size: the first few batches (probe_batches); the validation passes paid first
        probes = [collator([train[i] for i in batch], [0] * len(batch))
                  for batch in probe_batches(len(train), batch_size)]
        step = seconds_per_step(model, probes, options.bf16, device=device)
        validation_pass = forward_seconds(len(validation), batch_size, step)
        max_steps = min(max_steps, plan_for_budget(step, minutes=options.minutes, device=device,
                                                   evaluation=validation_pass, eval_every=options.eval_every))
    args = options.training_arguments(max_steps, batch_size=batch_size, lr_schedule="cosine",
                                      metric_for_best="accuracy", save_total_limit=1)
    say(f"training {max_steps:,} steps of {batch_size} images ({max_steps / steps_per_epoch:.1f} epochs), "
        f"validation every {args.eval_every} steps")
    trainer = Trainer(model, args, train, collator, eval_fn=lambda m: accuracy(m, processor, validation),
                      tokenizer=processor)
    state = trainer.train()

    out = Path(options.out)
    best_dir = out / BEST_DIR
    best = ViTForImageClassification.from_pretrained(best_dir).to(next(model.parameters()).device)  # as trained
    scores = accuracy(best, processor, test)
    report = {"data": options.data, "parameters": model.num_parameters(), "config": config.to_dict(),
              "steps": state.step, "planned_steps": max_steps, "epochs": state.step / steps_per_epoch,
              "stop_reason": state.stop_reason, "train_seconds": state.seconds,
              "best_step": state.best_step, "validation_accuracy": state.best_metric,
              "test_accuracy": scores["accuracy"], "test_loss": scores["loss"], "test_images": len(test),
              "best_model": str(best_dir), "options": dataclasses.asdict(options),
              "total_seconds": time.perf_counter() - started}
    atomic_write_text(out / REPORT_NAME, jsonfiles.dumps(report, indent=2, ensure_ascii=False) + "\n")
    from bertkit.pictures import figures

    figures.save_figure(figures.training_curves(out / METRICS_NAME, title=f"ViT on {Path(options.data).name}"),
                    out / CURVE_NAME)
    return report
