"""`bertkit attention` and `bertkit explain`: pictures, the attention viewer, the experiments."""

from __future__ import annotations

import argparse

from bertkit.cli.common import MODEL_HELP, add_command, add_device_option, command_device, integer
from bertkit.cli.texts import add_encoding_option, command_line_texts
from bertkit.errors import InputError

# ---- attention -----------------------------------------------------------------------------------

def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "attention", _cmd_attention)
    p.add_argument("text", help="the sentence to look at (with a translation model: the source; with an image model: "
                                "the image file)")
    p.add_argument("--pair", help="a second sentence, segment B, for a BERT or ModernBERT model (default: none)")
    p.add_argument("--target", help="with a translation model or a UniLM writer: the translation or target to "
                                    "teacher-force (default: the model's own greedy one)")
    p.add_argument("--model", metavar="DIR|NAME", help=MODEL_HELP + "; a `bertkit lm-train`, `bertkit "
                                                       "translate-train` or UniLM `bertkit summarize-train` run too "
                                                       "(default: m3e-small)")
    p.add_argument("--out", default="attention.html", help="the HTML file to write; with an image model also a "
                                                           "PNG/SVG picture (default: attention.html)")
    p.add_argument("--picture", help="also draw one layer's heads as a PNG/SVG heatmap grid to this file; a "
                                     "translation Transformer draws three, FILE-encoder, FILE-decoder and FILE-cross "
                                     "(e.g. out-cross.png); an RNN with attention its alignment matrix "
                                     "(default: no picture)")
    p.add_argument("--layer", type=int, default=-1, help="the layer --picture draws, in each stack of a translation "
                                                         "Transformer (default: the last)")
    p.add_argument("--max-length", type=integer(2), default=128, help="truncate the input to this many tokens "
                                                                "(default: 128)")
    p.add_argument("--overwrite", action="store_true", help="replace --out and --picture files that exist "
                                                            "(default: refuse)")
    add_device_option(p)
    add_encoding_option(p, "text")


# the pictures of a translation Transformer: one per kind of attention, FILE-KIND.png
TRANSFORMER_KINDS = ("encoder", "decoder", "cross")


def _picture_files(picture: str | None, config) -> dict[str, str]:
    """kind -> the file its picture goes to: one --picture, or for a translation Transformer one per kind."""
    from pathlib import Path

    if picture is None:
        return {}
    if getattr(config, "architecture", None) != "transformer":
        return {"": picture}
    path = Path(picture)
    return {kind: str(path.with_name(f"{path.stem}-{kind}{path.suffix}")) for kind in TRANSFORMER_KINDS}


def _cmd_attention(args: argparse.Namespace) -> int:
    """write an HTML attention viewer (layer/head pickers, head view, matrix)

    Run a sentence (or pair) through a BERT or a ModernBERT and write ONE self-contained HTML page: pick a layer
    and head, hover a token to see its attention lines (a ModernBERT's local layers attend within a band around
    the diagonal, their window). A GPT (`bertkit lm-train`) shows its masked (causal)
    self-attention the same way. A translation run (`bertkit translate-train`) takes the source sentence and
    translates it greedily (or teacher-forces --target): a Transformer's page holds its three kinds of attention
    (encoder self-attention, decoder masked self-attention, cross-attention; pick the kind too), and --picture
    draws each; an RNN with attention has one, the alignment between source and translation, drawn as in
    Bahdanau et al. (2015). With an image model (a ViT) give an image file: the picture (--out or --picture a
    .png) shows where the class token looks on the patch grid, per head of --layer and rolled out over all layers
    (Abnar & Zuidema 2020); --out .html writes the viewer with one token per patch.
    """

    from bertkit.models.registry import FAMILIES, require
    from bertkit.pictures.explain.real_model import resolve_model_dir
    from bertkit.pipelines.run_directory import check_output_file

    device = command_device(args)
    model_dir = resolve_model_dir(args.model)
    family = require(model_dir, "attention")
    image = family.inputs == "images"
    config = family.load_config(model_dir) if family.name == "translation" else None
    writer = family.name == "BERT" and family.holds_head(model_dir, "seq2seq")  # UniLM (`summarize-train`)
    if args.target is not None and config is None and not writer:
        raise InputError(f"--target is for translation models and UniLM writers; {model_dir} holds a {family.name} "
                         "model")
    if args.pair is not None and "pairs" not in family.heads and not image:  # the families whose heads read pairs
        readers = " or ".join(f"a {one.name}'s" for one in FAMILIES if "pairs" in one.heads)
        raise InputError(f"--pair is for {readers} sentence pairs; {model_dir} holds a {family.name} model, which "
                        "reads one text" + (" (give the translation with --target)" if config is not None else ""))
    if config is not None:
        from bertkit.pictures.translation_attention import check_has_attention

        check_has_attention(config)
    pages, pictures = (".html", ".htm"), (".png", ".svg")
    picture_files = _picture_files(args.picture, config)
    outputs = [("--out", args.out, pages + pictures if image else pages)]
    outputs += [("--picture", path, pictures) for path in picture_files.values()]
    for flag, path, suffixes in outputs:
        if path:  # before any work: refused outputs cost nothing
            check_output_file(path, args.overwrite, flag=flag, suffixes=suffixes,
                              inputs=[("the image", args.text)] if image else ())
    if image:
        from bertkit.cli.vision import image_attention

        return image_attention(args, model_dir, device)
    text = command_line_texts([args.text], args.encoding)[0]
    if config is not None:
        return _translation_attention(args, model_dir, text, picture_files, device)
    from bertkit.pictures.attention_view import (
        causal_attentions,
        load_gpt_and_tokenizer,
        load_model_and_tokenizer,
        sentence_attentions,
        write_attention_html,
    )

    if writer:
        return _unilm_attention(args, model_dir, text, device)
    gpt = family.name == "GPT-2"
    model, tokenizer = (load_gpt_and_tokenizer if gpt else load_model_and_tokenizer)(model_dir)
    model.to(device)
    num_layers = model.config.n_layer if gpt else model.config.num_hidden_layers
    _check_layer(args.layer, num_layers)
    if gpt:
        sentence = causal_attentions(model, tokenizer, text, max_length=args.max_length)
    else:
        pair = command_line_texts([args.pair], args.encoding, "--pair")[0] if args.pair is not None else None
        sentence = sentence_attentions(model, tokenizer, text, pair, max_length=args.max_length)
    title = (f"{'Masked self-attention' if gpt else 'Attention'} of {model_dir.name}: {sentence.num_layers} layers "
             f"× {sentence.num_heads} heads")
    path = write_attention_html(args.out, sentence, title=title)
    print(f"{len(sentence.tokens)} tokens: {' '.join(sentence.tokens)}")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB); open it in a browser")
    if args.picture:
        from bertkit.pictures import figures

        layer = args.layer % num_layers
        fig = figures.attention_grid(sentence.attentions, sentence.tokens, layers=[layer],
                                     title=f"{model_dir.name}, layer {layer}{' (masked)' if gpt else ''}: {text}")
        print(f"wrote {figures.save_figure(fig, args.picture)}")
    return 0


def _unilm_attention(args: argparse.Namespace, model_dir, text: str, device) -> int:
    """A UniLM writer's page: the title it writes for `text` (or --target), and every layer's attention under
    UniLM's mask; --picture draws the mask beside each head of --layer."""
    import numpy as np

    from bertkit.models.functional import unilm_mask
    from bertkit.pictures.attention_view import unilm_attentions, write_attention_html
    from bertkit.pipelines.summarization import load_summarizer, summarize

    model, tokenizer = load_summarizer(model_dir)
    model.to(device)
    _check_layer(args.layer, model.config.num_hidden_layers)
    if args.target is not None:
        target = command_line_texts([args.target], args.encoding, "--target")[0]
    else:  # the model's own title, written greedily
        target = summarize(model, tokenizer, [text], num_beams=1, max_source_length=args.max_length,
                           no_repeat_ngram_size=2)[0]
    sentence = unilm_attentions(model, tokenizer, text, target, max_length=args.max_length)
    path = write_attention_html(args.out, sentence, title=f"UniLM attention of {model_dir.name}: "
                                f"{sentence.num_layers} layers × {sentence.num_heads} heads")
    print(f"target: {sentence.text_pair}")
    print(f"{len(sentence.tokens)} tokens: {' '.join(sentence.tokens)}")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB); open it in a browser")
    if args.picture:
        import torch

        from bertkit.pictures import figures

        layer = args.layer % sentence.num_layers
        mask = unilm_mask(torch.tensor([sentence.token_type_ids]))[0].float().numpy()
        panels = np.concatenate([mask[None], sentence.attentions[layer]])[None]      # (1, 1 + H, T, T)
        titles = ["UniLM mask (dark: may attend)"] + [f"layer {layer} · head {h}" for h in range(sentence.num_heads)]
        fig = figures.attention_grid(panels, sentence.tokens, titles=titles,
                                     title=f"{model_dir.name}, layer {layer}: source rows see the source, target "
                                           "rows the source and their past")
        print(f"wrote {figures.save_figure(fig, args.picture)}")
    return 0


def _check_layer(layer: int, num_layers: int) -> None:
    if not -num_layers <= layer < num_layers:
        raise InputError(f"--layer {layer}: the model has {num_layers} layers")


def _translation_attention(args: argparse.Namespace, model_dir, text: str, picture_files: dict[str, str],
                           device) -> int:
    """`bertkit attention` with a translation run: the Transformer's three kinds, or an RNN's alignment."""
    from bertkit.pictures import figures
    from bertkit.pictures.attention_view import write_attention_html
    from bertkit.pictures.translation_attention import translation_attentions
    from bertkit.pipelines.translation import load_translator

    model, tokenizer = load_translator(model_dir)
    model.to(device)
    config = model.config
    transformer = config.architecture == "transformer"
    depth = min(config.encoder_layers, config.decoder_layers)
    if transformer and not -depth <= args.layer < depth:  # counted in each stack: -1 is either stack's last
        raise InputError(f"--layer {args.layer}: the model has {config.encoder_layers} encoder and "
                        f"{config.decoder_layers} decoder layers")
    if not transformer and args.layer not in (0, -1):
        raise InputError(f"--layer {args.layer}: an RNN's alignment is one matrix (layer 0); leave --layer out")
    target = command_line_texts([args.target], args.encoding, "--target")[0] if args.target is not None else None
    seen = translation_attentions(model, tokenizer, text, target, max_length=args.max_length)
    first = seen.maps[0]
    print(f"source, {len(first.key_tokens)} tokens: {' '.join(first.key_tokens)}")
    print(f"{'given (teacher-forced)' if seen.forced else 'greedy'} translation: {seen.translation}")
    if transformer:
        title = (f"Attention of {model_dir.name}: {config.encoder_layers} encoder + {config.decoder_layers} decoder "
                 f"layers × {config.attention_heads} heads")
    else:
        title = f"Alignment of {model_dir.name}: {config.rnn_cell.upper()} with attention (Bahdanau et al. 2015)"
    path = write_attention_html(args.out, seen, title=title)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB); open it in a browser")
    for kind, file in picture_files.items():
        if not transformer:
            alignment = seen.map("alignment")
            fig = figures.alignment_matrix(alignment.attentions[0, 0], alignment.key_tokens, alignment.query_tokens,
                                           title=f"{model_dir.name}: {text} → {seen.translation}")
        else:
            one = seen.map(kind)
            layer = args.layer % one.num_layers
            fig = figures.attention_grid(one.attentions, one.query_tokens, layers=[layer], key_tokens=one.key_tokens,
                                         title=f"{model_dir.name}, {one.label}, layer {layer}: {text} → "
                                               f"{seen.translation}")
        print(f"wrote {figures.save_figure(fig, file)}")
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
    add_device_option(p, "; for the topics that run a real model (attention, multihead, contextual, it-animal): the "
                         "others are small experiments on the CPU")
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
        raise InputError(f"--out {args.out} is a file; give a folder for the pictures")
    topics = list(TOPICS) if args.topic == "all" else [args.topic]
    if any(topic in REAL_MODEL_TOPICS for topic in topics):
        command_device(args)  # before any work: a GPU this machine lacks is refused at once
    for n, topic in enumerate(topics):
        options = {}
        if topic == "attention" and args.text is not None:  # given empty, refused: not the default sentence
            options["text"] = command_line_texts([args.text], args.encoding, "--text")[0]
        if topic in REAL_MODEL_TOPICS:
            options["model_dir"] = resolve_model_dir(args.model or REAL_MODEL_TOPICS[topic])
            options["device"] = args.device
        with new_files_in(args.out, overwrite=args.overwrite) as staging:  # a picture there is replaced only if told
            result = explain(topic, out=staging, fmt=args.format, **options)
        result.pictures = [Path(args.out) / path.name for path in result.pictures]
        print(("\n" if n else "") + result.report(), end="")
    return 0
