"""`bertkit vision-train`, and what `predict` and `attention` do when --model is an image model (a ViT)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.cli.common import add_command
from bertkit.cli.options import add_options, options_from_args
from bertkit.errors import InputError
from bertkit.pipelines.options import VisionTrainOptions
from bertkit.utils import jsonfiles

# ---- vision-train --------------------------------------------------------------------------------

def _add_vision_train(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "vision-train", _cmd_vision_train)
    add_options(p, VisionTrainOptions)


def _cmd_vision_train(args: argparse.Namespace) -> int:
    """train a Vision Transformer on MNIST or your folders of images

    Cut each image into patches, train a ViT classifier (transformers' ViT names), keep the best checkpoint on
    the validation split in OUT/best and score it on test; writes OUT/report.json, metrics.jsonl and
    loss_curve.png. A folder of images has one subfolder per class (or train/, validation/, test/ holding them).
    """
    from bertkit.pipelines.vision import vision_train

    options = options_from_args(VisionTrainOptions, args)
    report = vision_train(options, say=lambda line: print(line, flush=True))
    print(f"trained {report['steps']:,} steps in {report['train_seconds']:.0f} s ({report['epochs']:.1f} epochs, "
          f"{report['stop_reason']}); best validation accuracy {report['validation_accuracy']:.4f} at step "
          f"{report['best_step']}")
    print(f"test accuracy {report['test_accuracy']:.4f} on {report['test_images']:,} images")
    print(f"best model in {report['best_model']}; report.json, metrics.jsonl, loss_curve.png in {options.out}")
    return 0


# ---- predict and attention on an image model -----------------------------------------------------

def _image_paths(args: argparse.Namespace) -> list[str]:
    if getattr(args, "pair", None):
        raise InputError("--pair is for text pairs; an image model takes image files")
    if args.input and args.texts:
        raise InputError("give image files on the command line or --input FILE, not both")
    if args.input:
        path = Path(args.input)
        if not path.is_file():
            raise FileNotFoundError(f"input file {path} does not exist")
        try:
            paths = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as err:
            raise InputError(f"input file {path} is not UTF-8 text ({err.reason} at byte {err.start:,}): give one "
                            "image path per line") from None
    else:
        paths = list(args.texts)
    if not paths:
        raise InputError("give one or more image files, or --input FILE with one path per line")
    return paths


def predict_images(args: argparse.Namespace, model_dir: Path, device=None) -> int:
    """`bertkit predict` with an image classifier: a label and the probabilities per image file (on `device`)."""

    from bertkit.inference.images import classify_images, load_image_model

    paths = _image_paths(args)
    model, processor = load_image_model(model_dir, device)
    batch = max(1, args.batch_size)
    for start in range(0, len(paths), batch):
        chunk = paths[start:start + batch]
        for path, result in zip(chunk, classify_images(model, processor, chunk)):
            if args.json:
                print(jsonfiles.dumps({"image": path, **result}, ensure_ascii=False))
                continue
            others = ", ".join(f"{label} {p:.3f}" for label, p in
                               sorted(result["probabilities"].items(), key=lambda item: -item[1])[:5])
            print(f"{result['label']}  {result['score']:.3f}  ({others})  {path}")
    return 0


def image_attention(args: argparse.Namespace, model_dir: Path, device=None) -> int:
    """`bertkit attention` with an image model: where the class token looks, per head and rolled out, as a
    picture (--out/--picture .png or .svg) or the HTML viewer (--out .html)."""
    from bertkit.inference.images import load_image_model
    from bertkit.pictures import figures
    from bertkit.pictures.attention_view import write_attention_html
    from bertkit.pictures.image_attention import image_attention_figure, image_attentions, rollout_map

    if args.pair:
        raise InputError("--pair is for text pairs; an image model looks at one image")
    model, processor = load_image_model(model_dir, device)
    num_layers = model.config.num_hidden_layers
    if not -num_layers <= args.layer < num_layers:
        raise InputError(f"--layer {args.layer}: the model has {num_layers} layers")
    seen = image_attentions(model, processor, args.text)
    rows, columns = seen.grid
    guess = f"; predicted {seen.label} ({seen.score:.3f})" if seen.label is not None else ""
    print(f"{args.text}: {rows} × {columns} patches of {seen.patch[0]} × {seen.patch[1]} pixels + the class token, "
          f"{num_layers} layers × {seen.attentions.shape[1]} heads{guess}")
    rollout = rollout_map(seen.attentions, seen.grid)
    top = sorted(((float(rollout[r, c]), r, c) for r in range(rows) for c in range(columns)), reverse=True)[:3]
    print("rollout: the class token draws most on patches " + ", ".join(f"(row {r}, column {c}) {share:.3f}"
                                                                            for share, r, c in top))
    for out in [args.out, args.picture]:
        if out is None:
            continue
        if Path(out).suffix.lower() == ".html":
            path = write_attention_html(out, seen.as_sentence(), title=f"Attention of {model_dir.name} on "
                                                                       f"{seen.name}: one token per patch")
        else:
            path = figures.save_figure(image_attention_figure(seen, args.layer), out)
        print(f"wrote {path}")
    return 0
