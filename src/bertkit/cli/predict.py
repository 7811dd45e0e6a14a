"""`bertkit predict`, `bertkit evaluate`, `bertkit encode`: using a fine-tuned or pretrained model."""

from __future__ import annotations

import argparse
import collections
import sys

from bertkit.cli.common import (
    MODEL_HELP,
    add_command,
    add_device_option,
    add_long_input_options,
    check_long_input_options,
    command_device,
    integer,
)
from bertkit.cli.texts import (
    add_encoding_option,
    add_text_inputs,
    command_line_texts,
    kept_chunks,
    single_texts,
    text_inputs,
    with_pairs,
)
from bertkit.data.embedding_data import EVALUATION_DATASETS, EVALUATION_FILES, EVALUATION_TASKS
from bertkit.data.task_kinds import FILE_FORMATS, datasets
from bertkit.errors import InputError
from bertkit.models.sentence_files import POOLINGS
from bertkit.utils import jsonfiles
from bertkit.utils.constants import GPU_BATCH_TOKENS
from bertkit.utils.dtypes import DTYPE_CHOICES, FP32
from bertkit.utils.visible import shorten

# ---- predict, evaluate, encode -------------------------------------------------------------------

def _add_inference_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR|NAME",
                   help=MODEL_HELP + "; e.g. OUT/best of `bertkit finetune`")
    p.add_argument("--batch-size", type=integer(1), default=32, help="texts per batch; batches are sorted by length "
                                                                   "(default: 32)")
    p.add_argument("--max-length", type=integer(2), help="tokens per text at most; question answering: per window "
                                                        "(default: the model's positions; as fine-tuned for QA)")
    p.add_argument("--no-truncation", action="store_true", help="refuse a text that is too long (default: cut "
                                                                          "it, with a warning)")
    p.add_argument("--dtype", default=FP32, choices=DTYPE_CHOICES,
                   help="number format: bf16 where the CPU or GPU computes it natively (else fp32, with a warning), "
                        "int8 Linear layers (dynamic quantization; CPU only) (default: fp32)")
    add_device_option(p)
    add_encoding_option(p)


def _batch_tokens(value: str) -> int | str | None:
    """--batch-tokens: auto, off, or a number of padded tokens."""
    if value in ("auto", "off"):
        return None if value == "off" else value
    return integer(1)(value)


def _add_batch_tokens_option(p: argparse.ArgumentParser, scope: str = "") -> None:
    p.add_argument("--batch-tokens", type=_batch_tokens, default="auto", metavar="N|auto|off",
                   help="a batch of short texts grows past --batch-size while its padded tokens (texts x the longest) "
                        f"stay within N; auto: {GPU_BATCH_TOKENS:,} on a GPU, where a small batch leaves it waiting "
                        f"for the host, off on the CPU{scope} (default: auto)")


def _add_zero_shot_options(p: argparse.ArgumentParser, dataset_words: bool = False) -> None:
    p.add_argument("--zero-shot", action="store_true",
                   help="classify with the model's pretrained masked-LM head through --prompt and --label-words, no "
                        "fine-tuning: each label scores the sum of its word's token log-probabilities at the [MASK]s "
                        "(default: the model's fine-tuned head)")
    p.add_argument("--prompt", metavar="TEMPLATE",
                   help="with --zero-shot: a cloze template with one {text} slot and one [MASK] per token of every "
                        "label word, e.g. '[MASK][MASK]新闻：{text}' (default: none)")
    p.add_argument("--label-words", nargs="+", metavar="LABEL=WORD",
                   help="with --zero-shot: each label and the word its [MASK]s should read, e.g. sports=体育 "
                        "finance=财经 (default: " + ("a named dataset's own (thucnews)" if dataset_words else "none")
                        + ")")


def _zero_shot(args: argparse.Namespace, dataset: str | None = None) -> tuple[str, dict[str, str]] | None:
    """(template, {label: word}) when --zero-shot is given, else None; the flags' clear errors either way.
    `dataset`: a named dataset whose own label words stand where --label-words gives none."""
    from bertkit.data.prompts import parse_label_words
    from bertkit.data.tasks import DATASET_LABEL_WORDS

    if not args.zero_shot:
        given = [flag for flag, value in (("--prompt", args.prompt), ("--label-words", args.label_words))
                 if value is not None]
        if given:
            raise InputError(f"{' and '.join(given)} {'goes' if len(given) == 1 else 'go'} with --zero-shot (the "
                            "model's masked-LM head scoring a template, no fine-tuning); add --zero-shot")
        return None
    if args.prompt is None:
        raise InputError("--zero-shot needs --prompt TEMPLATE, e.g. '[MASK][MASK]新闻：{text}'")
    template = command_line_texts([args.prompt], args.encoding, "--prompt")[0]
    items = command_line_texts(args.label_words, args.encoding, "--label-words") if args.label_words else None
    stray = next((item for item in items or [] if "=" not in item), None)
    if stray is not None:  # --label-words takes every word after it: a text typed next is taken for one
        raise InputError(f"--label-words takes LABEL=WORD items, got {stray!r}; give texts before --label-words or "
                        "after another option (--zero-shot TEXT ...)")
    words = parse_label_words(items, DATASET_LABEL_WORDS.get(dataset) if dataset else None)
    if not words:
        raise InputError("--zero-shot needs --label-words LABEL=WORD ..., the word each label's [MASK]s should read")
    return template, words


def _add_predict(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "predict", _cmd_predict)
    add_text_inputs(p)
    p.add_argument("--pair", action="append", metavar="TEXT",
                   help="the second text of a pair: once for every text, or once per text (default: single texts)")
    p.add_argument("--json", action="store_true", help="machine output: one JSON object per input, JSON Lines "
                                                         "(default: lines for people)")
    p.add_argument("--question", action="append", metavar="TEXT",
                   help="question answering: a question (repeat for more); with a QA model, --input is a JSON Lines "
                        "file of {\"question\", \"context\"} objects (default: none)")
    p.add_argument("--context", action="append", metavar="TEXT",
                   help="question answering: the text holding the answer: once for every question, or once per "
                        "question (default: none)")
    p.add_argument("--picture", metavar="FILE.png",
                   help="question answering: draw p(start) and p(end) over the context's tokens for one question "
                        "(PNG/SVG) (default: no picture)")
    p.add_argument("--overwrite", action="store_true", help="replace the --picture file if it exists (default: "
                                                            "refuse)")
    _add_zero_shot_options(p)
    _add_inference_options(p)
    _add_batch_tokens_option(p, "; for texts, not question answering or images")


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "evaluate", _cmd_evaluate, epilog="files:\n" + FILE_FORMATS,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, metavar="FILE|NAME",
                   help=f"a named dataset ({', '.join(datasets())}), or a TSV/CSV/JSONL (classification), CoNLL "
                        "(NER) or SQuAD-format JSON (question answering) file; with --task: "
                        + "; ".join(f"{task}: {', '.join((*EVALUATION_DATASETS[task], ''))}{EVALUATION_FILES[task]}"
                                    for task in EVALUATION_TASKS))
    p.add_argument("--task", choices=EVALUATION_TASKS,
                   help="score sentence vectors instead: retrieval (MRR@10, nDCG@10, recall@k), bitext mining "
                        "(accuracy, F1), clustering (k-means, V-measure) or sts (Spearman) (default: the task of the "
                        "model's fine-tuned head)")
    p.add_argument("--split", default="test", help="the named dataset's split (default: test)")
    p.add_argument("--max-examples", type=integer(1), metavar="N",
                   help="with --task: the first N queries, sentence pairs or texts only (default: all)")
    p.add_argument("--kmeans-seed", type=integer(0, 2**32 - 1), metavar="N",
                   help="with --task clustering: the seed of k-means' starts; V-measure moves by about 0.01 between "
                        "seeds, so compare models over several (default: 0)")
    _add_sentence_options(p)
    p.add_argument("--json", action="store_true", help="machine output: the scores as one JSON object "
                                                         "(default: a table for people)")
    _add_zero_shot_options(p, dataset_words=True)
    _add_inference_options(p)


def _add_sentence_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pooling", choices=POOLINGS,
                   help="the [CLS] token's vector or the mean of the real tokens' vectors (default: what the model "
                        "directory declares, as sentence-transformers' 1_Pooling; else cls)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction,
                   help="scale each vector to unit length, or not (default: as the directory declares, with "
                        "sentence-transformers' 2_Normalize; else not)")


def _add_encode(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "encode", _cmd_encode)
    add_text_inputs(p)
    p.add_argument("--out", metavar="FILE.npy", help="save the vectors (N, hidden) float32 with numpy.save "
                                                              "(default: print them)")
    p.add_argument("--overwrite", action="store_true", help="replace the --out file if it exists (default: refuse)")
    _add_sentence_options(p)
    add_long_input_options(p, "truncate", "cut it to the model's positions (refuse it with --no-truncation)")
    _add_inference_options(p)
    _add_batch_tokens_option(p)


def _cmd_predict(args: argparse.Namespace) -> int:
    """labels and probabilities, NER spans or answers from a fine-tuned model; labels zero-shot through a prompt

    Classify texts (or text pairs), tag their entities, or answer questions with a fine-tuned model. NER spans
    and answers are character offsets [start, end) into each text (context). With an image classifier (bertkit
    vision-train), give image files instead of texts. A file (--input) of texts is read and answered as a
    stream, a chunk of lines at a time. With --zero-shot, a pretrained model's masked-LM head classifies through
    a cloze template (--prompt, --label-words) as it is, with no fine-tuning.
    """

    from bertkit.inference import predict_stream
    from bertkit.inference.loading import model_family, task_of_model

    device = command_device(args, args.dtype)
    path, family = model_family(args.model, "predict")
    zero_shot = _zero_shot(args)
    answers = zero_shot is None and family.inputs != "images" and family.holds_head(path, "qa")
    if args.batch_tokens != "auto" and zero_shot is None and (family.inputs == "images" or answers):
        raise InputError(f"--batch-tokens sizes batches of texts for classifiers and taggers; "
                         f"{'an image model' if family.inputs == 'images' else 'a question-answering model'} runs "
                         "--batch-size inputs a batch: leave --batch-tokens out")
    if family.inputs == "images" and zero_shot is None:
        from bertkit.cli.vision import predict_images

        return predict_images(args, path, device)
    if answers:
        return _predict_answers(args, path, device)
    for flag, value in (("--question", args.question), ("--context", args.context), ("--picture", args.picture)):
        if value:
            raise InputError(f"{flag} is for question-answering models; {args.model} is not one (fine-tune one with "
                            "bertkit finetune --task qa)")
    given = command_line_texts(args.pair, args.encoding, "--pair") if args.pair else None
    chunks, total = text_inputs(args, count=bool(given and len(given) > 1))
    model, tokenizer = _load_classifier(path, "predict", zero_shot, device)
    kept: collections.deque = collections.deque()
    results = predict_stream(model, tokenizer, kept_chunks(with_pairs(chunks, total, given), kept), total=total,
                             batch_size=args.batch_size, max_length=args.max_length,
                             truncation=not args.no_truncation, progress=None, dtype=args.dtype,
                             batch_tokens=args.batch_tokens)
    task = task_of_model(model, "predict")  # its record (bertkit.tasks) says how a result reads
    for found in results:
        texts, pairs = kept.popleft()
        for n, (text, result) in enumerate(zip(texts, found)):
            pair = pairs[n] if pairs else None
            if args.json:
                record = {"text": text, **({"text_pair": pair} if pair is not None else {})}
                print(jsonfiles.dumps({**record, **task.prediction_record(result)}, ensure_ascii=False))
            else:
                print("\n".join(task.prediction_lines(text, pair, result)))
    return 0


def _load_classifier(path, command: str, zero_shot: tuple[str, dict[str, str]] | None, device):
    """The model and tokenizer a command runs, on `device`: the directory's fine-tuned head, or with --zero-shot its
    masked-LM head through the template."""
    from bertkit.inference.loading import load_text_model
    from bertkit.inference.zero_shot import load_zero_shot_model

    if zero_shot is None:
        return load_text_model(path, command, device=device)
    return load_zero_shot_model(path, *zero_shot, command=command, device=device)


def _question_inputs(args: argparse.Namespace) -> tuple[list[str] | None, list[str], list[str]]:
    """(ids or None, questions, contexts) from --question/--context or a JSON Lines --input."""
    from bertkit.pipelines.predict import read_questions

    if args.texts or args.pair:
        raise InputError("a question-answering model reads --question and --context (or --input FILE.jsonl), not "
                        "TEXT arguments or --pair")
    if args.input:
        if args.question or args.context:
            raise InputError("give questions with --question/--context or in --input FILE.jsonl, not both")
        return read_questions(args.input, encoding=args.encoding)
    if not args.question or not args.context:
        raise InputError("give --question TEXT and --context TEXT (or --input FILE.jsonl with one {\"question\", "
                        "\"context\"} object per line)")
    questions = command_line_texts(args.question, args.encoding, "question")
    contexts = command_line_texts(args.context, args.encoding, "context")
    if len(contexts) not in (1, len(questions)):
        raise InputError(f"{len(contexts)} --context for {len(questions)} --question: give one context for all, or "
                        "one per question")
    return None, questions, contexts * len(questions) if len(contexts) == 1 else contexts


def _predict_answers(args: argparse.Namespace, path, device) -> int:
    """`predict` with an extractive QA model: the answer, its score and its character offsets per question."""

    from bertkit.inference.loading import load_text_model
    from bertkit.inference.qa import answer_questions, explain_answer

    if args.picture:  # before any work: a refused output costs nothing
        from bertkit.pipelines.run_directory import check_output_file

        check_output_file(args.picture, args.overwrite, flag="--picture", suffixes=(".png", ".svg"),
                          inputs=[("--input", args.input)] if args.input else ())
    ids, questions, contexts = _question_inputs(args)
    if args.picture and len(questions) != 1:
        raise InputError(f"--picture draws one question's answer; {len(questions)} questions were given")
    model, tokenizer = load_text_model(path, "predict", device=device)
    results = answer_questions(model, tokenizer, questions, contexts, batch_size=args.batch_size,
                               max_length=args.max_length, progress=None, dtype=args.dtype, flags=True)
    for n, (question, result) in enumerate(zip(questions, results)):
        if args.json:
            record = {**({"id": ids[n]} if ids else {}), "question": question, **result}
            print(jsonfiles.dumps(record, ensure_ascii=False))
        elif result["start"] is None:
            print(f"(no answer)  {result['score']:.3f}  {shorten(question, 50)}")
        else:
            print(f"{result['answer']}  {result['score']:.3f}  {result['start']}:{result['end']}  "
                  f"{shorten(question, 50)}")
    if args.picture:
        from bertkit.pictures import figures

        shown = explain_answer(model, tokenizer, questions[0], contexts[0], max_length=args.max_length, flags=True)
        title = shorten(questions[0], 60) + f"  →  {shown['answer'] or '(no answer)'}"
        fig = figures.answer_probabilities(shown["pieces"], shown["start_probabilities"], shown["end_probabilities"],
                                           shown["first"], shown["last"], title=title)
        print(f"wrote {figures.save_figure(fig, args.picture)}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    """score a fine-tuned model on labelled data, or a model's sentence vectors (--task)

    Score a classifier (accuracy, macro-F1), an NER tagger (entity precision, recall, F1) or a reader
    (extractive QA: exact match and F1 as SQuAD's evaluation script computes them for English, CMRC 2018's
    for Chinese) on a named dataset's split or on your file. With --task, score any model's sentence vectors:
    retrieval (inews: each test title searches all test bodies), bitext mining (bible: English and Chinese
    verses; hsk), clustering (thucnews headlines into their 10 classes) or sts (your scored pairs). With
    --zero-shot, score a pretrained model's masked-LM head through a cloze template (--prompt; --label-words, or a
    named dataset's own) as it is, with no fine-tuning, beside chance.
    """

    from bertkit.inference.loading import task_of_model
    from bertkit.pipelines.predict import evaluate

    device = command_device(args, args.dtype)
    if args.task:
        if args.zero_shot:
            raise InputError("--zero-shot classifies through a prompt; --task scores sentence vectors: give one")
        return _evaluate_vectors(args, device)
    for flag, given in (("--max-examples", args.max_examples), ("--pooling", args.pooling),
                        ("--normalize", args.normalize), ("--kmeans-seed", args.kmeans_seed)):
        if given is not None:
            raise InputError(f"{flag} goes with --task (retrieval, bitext, clustering, sts): sentence vectors")
    named = args.data in datasets()
    if args.split != "test" and not named:
        raise InputError(f"--split is for the named datasets ({', '.join(datasets())}); {args.data} is a file")
    zero_shot = _zero_shot(args, args.data if named else None)
    model, tokenizer = _load_classifier(args.model, "evaluate", zero_shot, device)
    scores = evaluate(model, tokenizer, args.data, split=args.split, batch_size=args.batch_size,
                      max_length=args.max_length, truncation=not args.no_truncation, progress=None,
                      dtype=args.dtype, encoding=args.encoding, flags=True)
    if named:
        scores["split"] = args.split
    if zero_shot is not None:  # what was scored, and what guessing would score
        scores.update(prompt=zero_shot[0], label_words=zero_shot[1], chance=1 / len(zero_shot[1]))
        absent = sorted(set(zero_shot[1]) - set(scores.get("data_labels", zero_shot[1])))
        if absent:  # a word the prompt can answer with and be wrong every time: guessing among the words scores less
            print(f"bertkit evaluate: warning: --label-words names {', '.join(absent)}, a label the data does not "
                  f"have: the prompt can answer it and is then wrong; chance is 1 / {len(zero_shot[1])} labels, over "
                  f"the words given (the data has {len(scores['data_labels'])} of them)", file=sys.stderr)
    if args.json:
        print(jsonfiles.dumps(scores, ensure_ascii=False))
        return 0
    where = f"{args.data} ({scores['split']})" if named else args.data
    print("\n".join(task_of_model(model, "evaluate").evaluation_lines(scores, where)))
    return 0


LABELS = {"mrr@10": "MRR@10", "ndcg@10": "nDCG@10", "v_measure": "V-measure", "spearman": "Spearman"}


def _evaluate_vectors(args: argparse.Namespace, device) -> int:
    """`evaluate --task ...`: the model's sentence vectors scored on retrieval, bitext mining, clustering or STS."""

    from bertkit.data.sources import resolve_model
    from bertkit.inference.encode import declared_settings
    from bertkit.inference.loading import load_text_model
    from bertkit.pipelines.embedding import COUNTS, evaluate_embedding

    if args.split != "test" and args.data not in EVALUATION_DATASETS[args.task]:
        raise InputError(f"--split is for the named datasets; {args.data} is a file")
    if args.kmeans_seed is not None and args.task != "clustering":
        raise InputError(f"--kmeans-seed seeds the clustering's k-means; --task {args.task} has none")
    if getattr(args, "no_truncation", False):
        raise InputError("--no-truncation refuses long texts when evaluating a classifier; sentence vectors are made "
                        "of each text's first --max-length tokens (the model's declared length by default), as they "
                        "were trained: leave it out, or give --max-length")
    model, tokenizer = load_text_model(args.model, "evaluate", device=device)
    settings = declared_settings(resolve_model(args.model), args.pooling, args.normalize, args.max_length)
    scores = evaluate_embedding(model, tokenizer, args.task, args.data, split=args.split, settings=settings,
                                limit=args.max_examples, batch_size=args.batch_size, dtype=args.dtype, progress=None,
                                encoding=args.encoding, seed=args.kmeans_seed or 0)
    if args.json:
        print(jsonfiles.dumps(scores, ensure_ascii=False))
        return 0
    counts = ", ".join(f"{int(scores[k]):,} {k}" for k in COUNTS if k in scores)
    length = f", at most {scores['max_length']} tokens" if scores["max_length"] else ""
    print(f"{scores['data']}: {counts} ({args.task}; {scores['pooling']} pooling"
          f"{', normalized' if scores['normalize'] else ''}{length})")
    for key, value in scores.items():
        if isinstance(value, float) and key not in COUNTS and key != "clusters":
            print(f"{LABELS.get(key, key):<22}{value:.4f}")
    return 0


def _cmd_encode(args: argparse.Namespace) -> int:
    """sentence vectors ([CLS] or mean pooling), printed or saved as .npy

    Encode texts into sentence vectors; with --out, row i of the .npy file is the vector of text i (of the
    i-th non-blank line of --input). A file is read, encoded and written as a stream, a chunk of lines at a
    time, so its length does not change the memory it takes. The pooling, normalisation and longest text are
    what the model directory declares in sentence-transformers' files (modules.json, 1_Pooling, 2_Normalize,
    sentence_bert_config.json), as `bertkit finetune --task embedding` writes them, unless given. A text longer than
    the model's positions is cut, or with --long-inputs chunk read whole in overlapping windows whose vectors are
    pooled into one.
    """
    from pathlib import Path

    import numpy as np

    from bertkit.data.sources import resolve_model
    from bertkit.inference import encode_stream
    from bertkit.inference.encode import declared_settings
    from bertkit.inference.loading import load_text_model
    from bertkit.pipelines.run_directory import check_output_file
    from bertkit.utils.atomic import atomic_write

    device = command_device(args, args.dtype)
    chunked = check_long_input_options(args)
    if chunked and args.no_truncation:
        raise InputError("--no-truncation refuses long texts, --long-inputs chunk reads them whole; give one")
    if args.out:  # before any work: refused outputs cost nothing
        check_output_file(args.out, args.overwrite, suffixes=(".npy",),
                          inputs=[("--input", args.input)] if args.input else ())
    chunks, total = text_inputs(args, count=bool(args.out))
    model, tokenizer = load_text_model(args.model, "encode", device=device)
    settings = declared_settings(resolve_model(args.model), args.pooling, args.normalize, args.max_length)
    if chunked and args.chunk_stride is not None:  # named as the flag, before any text is read
        from bertkit.inference.batching import input_limit
        from bertkit.inference.long_inputs import check_overlap

        check_overlap(args.chunk_stride, input_limit(model, settings.max_seq_length)[0], "--chunk-stride")
    kept: collections.deque = collections.deque()
    if not args.out:  # the printer shows each chunk's texts beside its vectors; a file of vectors keeps none
        chunks = kept_chunks(chunks, kept)
    vectors = encode_stream(model, tokenizer, single_texts(chunks, args.input), total=total,
                            batch_size=args.batch_size, pooling=settings.pooling, max_length=settings.max_seq_length,
                            normalize=settings.normalize, truncation=not args.no_truncation, progress=None,
                            dtype=args.dtype, long_inputs=args.long_inputs, chunk_stride=args.chunk_stride,
                            chunk_pooling=args.chunk_pooling, batch_tokens=args.batch_tokens)
    if args.out:
        out = Path(args.out)
        width = model.config.hidden_size

        def save(path: Path) -> None:  # the .npy header first, then each chunk's rows as they come
            with open(path, "wb") as f:
                np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                                                         "fortran_order": False, "shape": (total, width)})
                for block in vectors:
                    f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())

        atomic_write(out, save)
        print(f"wrote {out}: {total} vectors of {width} ({settings.pooling} pooling"
              f"{', normalized' if settings.normalize else ''}, float32)")
        return 0
    for block in vectors:
        texts, _ = kept.popleft()
        for text, vector in zip(texts, block):
            head = " ".join(f"{x:+.4f}" for x in vector[:6])
            print(f"[{head} ...] ({vector.shape[0]} dims, norm {np.linalg.norm(vector):.3f})  {shorten(text, 40)}")
    return 0
