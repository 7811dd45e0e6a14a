"""`bertkit attention` and `bertkit explain`: pictures, the attention viewer, the experiments."""

from __future__ import annotations

import argparse

from bertkit.cli.common import MODEL_HELP, UserError, add_command, integer
from bertkit.cli.texts import add_encoding_option, command_line_texts

# ---- attention -----------------------------------------------------------------------------------

def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "attention", _cmd_attention)
    p.add_argument("text", help="the sentence to look at (with an image model: the image file)")
    p.add_argument("--pair", help="a second sentence, segment B (default: none)")
    p.add_argument("--model", metavar="DIR|NAME", help=MODEL_HELP + " (default: m3e-small)")
    p.add_argument("--out", default="attention.html", help="the HTML file to write; with an image model also a "
                                                           "PNG/SVG picture (default: attention.html)")
    p.add_argument("--picture", help="also draw one layer's heads as a PNG/SVG heatmap grid to "
                                          "this file (default: no picture)")
    p.add_argument("--layer", type=int, default=-1, help="the layer --picture draws (default: the last)")
    p.add_argument("--max-length", type=integer(2), default=128, help="truncate the input to this many tokens "
                                                                "(default: 128)")
    p.add_argument("--overwrite", action="store_true", help="replace --out and --picture files that exist "
                                                            "(default: refuse)")
    add_encoding_option(p, "text")


def _cmd_attention(args: argparse.Namespace) -> int:
    """write an HTML attention viewer (layer/head pickers, head view, matrix)

    Run a sentence (or pair) through a BERT model and write ONE self-contained HTML page: pick a layer and
    head, hover a token to see its attention lines. With an image model (a ViT) give an image file: the picture
    (--out or --picture a .png) shows where the class token looks on the patch grid, per head of --layer and
    rolled out over all layers (Abnar & Zuidema 2020); --out .html writes the viewer with one token per patch.
    """

    from bertkit.models.registry import require
    from bertkit.pictures.attention_view import load_model_and_tokenizer, sentence_attentions, write_attention_html
    from bertkit.pictures.explain.real_model import resolve_model_dir
    from bertkit.pipelines.run_directory import check_output_file

    model_dir = resolve_model_dir(args.model)
    image = require(model_dir, "attention").inputs == "images"
    pages, pictures = (".html", ".htm"), (".png", ".svg")
    for flag, path, suffixes in (("--out", args.out, pages + pictures if image else pages),
                                 ("--picture", args.picture, pictures)):
        if path:  # before any work: refused outputs cost nothing
            check_output_file(path, args.overwrite, flag=flag, suffixes=suffixes,
                              inputs=[("the image", args.text)] if image else ())
    if image:
        from bertkit.cli.vision import image_attention

        return image_attention(args, model_dir)
    model, tokenizer = load_model_and_tokenizer(model_dir)
    num_layers = model.config.num_hidden_layers
    if not -num_layers <= args.layer < num_layers:
        raise UserError(f"--layer {args.layer}: the model has {num_layers} layers")
    text = command_line_texts([args.text], args.encoding)[0]
    pair = command_line_texts([args.pair], args.encoding, "--pair")[0] if args.pair is not None else None
    sentence = sentence_attentions(model, tokenizer, text, pair, max_length=args.max_length)
    title = f"Attention of {model_dir.name}: {sentence.num_layers} layers × {sentence.num_heads} heads"
    path = write_attention_html(args.out, sentence, title=title)
    print(f"{len(sentence.tokens)} tokens: {' '.join(sentence.tokens)}")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB); open it in a browser")
    if args.picture:
        from bertkit.pictures import figures

        layer = args.layer % num_layers
        fig = figures.attention_grid(sentence.attentions, sentence.tokens, layers=[layer],
                                 title=f"{model_dir.name}, layer {layer}: {text}")
        print(f"wrote {figures.save_figure(fig, args.picture)}")
    return 0


# ---- explain -------------------------------------------------------------------------------------

def _add_explain(sub: argparse._SubParsersAction) -> None:
    from bertkit.pictures.explain import DEFAULT_OUT, TOPICS

    topics = "\n".join(f"  {name:<20} {about}" for name, (_, about) in TOPICS.items())
    p = add_command(sub, "explain", _cmd_explain, epilog=f"topics:\n{topics}\n  {'all':<20} every topic in turn",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic", choices=[*TOPICS, "all"], metavar="TOPIC", help="one of the topics below, or 'all'")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"folder for the pictures (default: {DEFAULT_OUT})")
    p.add_argument("--format", default="png", choices=("png", "svg"), help="picture format (default: png)")
    p.add_argument("--model", metavar="DIR|NAME", help=f"for 'attention', 'multihead', 'contextual' and 'it-animal': "
                                                        f"{MODEL_HELP} (default: m3e-small; all-MiniLM-L6-v2 for "
                                                        "'it-animal')")
    p.add_argument("--text", help="the sentence 'attention' looks at (default: a sentence about Beijing)")
    p.add_argument("--overwrite", action="store_true", help="replace pictures already in --out (default: refuse)")
    add_encoding_option(p, "--text")


def _cmd_explain(args: argparse.Namespace) -> int:
    """small experiments behind the Transformer/BERT tutorials' claims: numbers and pictures

    Run a small experiment, print its numbers, write its pictures.
    """
    from pathlib import Path

    from bertkit.pictures.explain import REAL_MODEL_TOPICS, TOPICS, explain
    from bertkit.pictures.explain.real_model import resolve_model_dir
    from bertkit.pipelines.run_directory import new_files_in

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UserError(f"--out {args.out} is a file; give a folder for the pictures")
    topics = list(TOPICS) if args.topic == "all" else [args.topic]
    for n, topic in enumerate(topics):
        options = {}
        if topic in REAL_MODEL_TOPICS:
            options["model_dir"] = resolve_model_dir(args.model or REAL_MODEL_TOPICS[topic])
        if topic == "attention" and args.text:
            options["text"] = command_line_texts([args.text], args.encoding, "--text")[0]
        with new_files_in(args.out, overwrite=args.overwrite) as staging:  # a picture there is replaced only if told
            result = explain(topic, out=staging, fmt=args.format, **options)
        result.pictures = [Path(args.out) / path.name for path in result.pictures]
        print(("\n" if n else "") + result.report(), end="")
    return 0
