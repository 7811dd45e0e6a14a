"""Sentence vectors, trained and scored: `bertkit finetune --task embedding` and `bertkit evaluate --task retrieval |
bitext | clustering | sts`.

Training fills the fine-tuning run every task shares (`fine_tuning.fine_tune`): its rows (pairs, scored pairs or
plain text: `bertkit.data.embedding_data`) are tokenized text by text, the loss is chosen by the rows' shape
(`--loss` overrides it), the model is `training.embedding_model.SentenceEmbeddingModel` and dev picks the best
checkpoint by MRR@10 (pairs: each dev anchor searches all dev positives) or Spearman (scored pairs). Plain text has
no dev score: the last model is kept. The best model is a BERT directory with sentence-transformers' files
(modules.json, 1_Pooling, 2_Normalize, sentence_bert_config.json), so sentence-transformers, `bertkit encode` and
`bertkit serve` load it and give the same vectors.

    results = finetune_embedding(FinetuneOptions(task="embedding", model="m3e-small", train="inews-pairs",
                                                 out="runs/emb", minutes=20))
    scores = evaluate_embedding("runs/emb/best", "retrieval", "inews")   # {"mrr@10": ..., "ndcg@10": ..., ...}
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.embedding_data import (
    EVALUATION_DATASETS,
    EVALUATION_FILES,
    EVALUATION_TASKS,
    LOSS_FOR_SHAPE,
    TRAINING_DATASETS,
    EmbeddingExample,
    bitext_set,
    clustering_set,
    inews_pairs,
    read_embedding_data,
    read_embedding_file,
    retrieval_set,
    shape_of,
    sts_set,
)
from bertkit.data.quality import DataReport
from bertkit.errors import InputError
from bertkit.inference import encode
from bertkit.inference.batching import TruncationWarning
from bertkit.models.bert.modeling import BertModel
from bertkit.models.sentence_files import DEFAULT_POOLING, TRAINING_POOLING, SentenceConfig, read_sentence_config
from bertkit.pipelines.fine_tuning import Scorer, TaskParts, fine_tune, sample_examples, start_run, write_results
from bertkit.pipelines.options import FinetuneOptions
from bertkit.pipelines.run_directory import holds_out
from bertkit.training.embedding_metrics import (
    bitext_scores,
    clustering_scores,
    retrieval_scores,
    sts_scores,
    top_k,
)
from bertkit.training.embedding_model import (
    EmbeddingCollator,
    EmbeddingSettings,
    SentenceEmbeddingModel,
    count_items,
)

RANKED = 100  # documents ranked per query: recall@100 is the deepest figure
COUNTS = ("queries", "documents", "pairs", "texts")  # what a score counted, beside its figures


# ---- scoring vectors -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Embedder:
    """What turns texts into vectors for a score: the encoder, its tokenizer and the settings `encode` runs."""

    model: Any
    tokenizer: Any
    settings: SentenceConfig
    batch_size: int = 64
    dtype: str | None = None
    progress: bool | None = False

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        s = self.settings
        return encode(self.model, self.tokenizer, list(texts), batch_size=self.batch_size, pooling=s.pooling,
                      normalize=s.normalize, max_length=s.max_seq_length, progress=self.progress, dtype=self.dtype)


# Evaluation data too small or too degenerate to score: the one place that decides (`check_scorable`). Data on which
# the figure cannot depend on the model (one document to retrieve, one class to cluster, every text its own class,
# one gold score) is refused; data of fewer than SMALL_SUPPORT items is scored, with its support and a warning (one
# item moves the figure by a twentieth or more), as the held-out masked-LM figures are.
SMALL_SUPPORT = 20


class SmallSampleWarning(UserWarning):
    """An evaluation figure that rests on few items: printed, with its support, and this warning."""


def check_scorable(task: str, items: int, *, documents: int = 0, classes: int = 0, gold: Sequence[float] = ()) -> None:
    """Refuse evaluation data whose figure cannot depend on the model, and warn for data too small to trust."""
    unit = {"retrieval": "queries", "bitext": "sentence pairs", "clustering": "texts", "sts": "scored pairs"}[task]
    if task == "retrieval" and documents < 2:
        raise InputError(f"retrieval among {documents} document{'s' if documents != 1 else ''} ranks it first "
                         "whatever the model (MRR@10 1.0): give pairs with at least 2 different documents")
    if task == "bitext" and items < 2:
        raise InputError(f"bitext mining among {items} sentence pair{'s' if items != 1 else ''} finds it whatever "
                         "the model: give at least 2 pairs whose sentences differ")
    if task == "clustering" and classes < 2:
        raise InputError(f"clustering {items} texts of {classes} class{'es' if classes != 1 else ''}: the V-measure "
                         "of one class is 1.0 whatever the model; give texts of at least 2 classes")
    if task == "clustering" and classes == items:
        raise InputError(f"each of the {items} texts has a class of its own: clustering them scores the same "
                         "whatever the model; give several texts a class (a file of text and label; a file of "
                         "pairs is not one)")
    if task == "sts" and (items < 3 or len(set(gold)) < 2):
        raise InputError(f"Spearman's correlation over {items} scored pair{'s' if items != 1 else ''}"
                         + (" whose gold scores are all equal" if items >= 3 else "")
                         + " says nothing about the model: give at least 3 pairs with different scores")
    if items < SMALL_SUPPORT:
        warnings.warn(f"the {task} figures rest on {items} {unit}: one of them moves a figure by "
                      f"{1 / items:.0%} or more; read them as a rough guide", SmallSampleWarning, stacklevel=3)


def score_retrieval(embed: Embedder, examples: Sequence[EmbeddingExample]) -> dict[str, float]:
    """Pairs as a search (`retrieval_set`): MRR@10, nDCG@10, recall@k of every query over all documents."""
    search = retrieval_set(examples)
    check_scorable("retrieval", len(search.queries), documents=len(search.corpus))
    ranked = top_k(embed(search.queries), embed(search.corpus), RANKED)
    return {"queries": float(len(search.queries)), "documents": float(len(search.corpus)),
            **retrieval_scores(ranked, search.relevant)}


def score_sts(embed: Embedder, first: Sequence[str], second: Sequence[str], gold: Sequence[float]
              ) -> dict[str, float]:
    check_scorable("sts", len(gold), gold=gold)
    return {"pairs": float(len(gold)), **sts_scores(embed(first), embed(second), gold)}


def score_bitext(embed: Embedder, source: Sequence[str], target: Sequence[str], languages: tuple[str, str]
                 ) -> dict[str, float]:
    """Bitext mining both ways: each source sentence's translation among all targets, and back; accuracy and F1
    of each way, and their means."""
    check_scorable("bitext", len(source))
    a, b = embed(source), embed(target)
    there, back = bitext_scores(a, b), bitext_scores(b, a)
    forward, backward = f"{languages[0]}->{languages[1]}", f"{languages[1]}->{languages[0]}"
    return {"pairs": float(len(source)), "accuracy": (there["accuracy"] + back["accuracy"]) / 2,
            "f1": (there["f1"] + back["f1"]) / 2,
            **{f"{forward} {k}": v for k, v in there.items()}, **{f"{backward} {k}": v for k, v in back.items()}}


def score_clustering(embed: Embedder, texts: Sequence[str], labels: Sequence[str], seed: int = 0
                     ) -> dict[str, float]:
    check_scorable("clustering", len(texts), classes=len(set(labels)))
    return {"texts": float(len(texts)), **clustering_scores(embed(texts), labels, seed=seed)}


# the figure each evaluation leads with
MAIN_METRIC = {"retrieval": "mrr@10", "bitext": "f1", "clustering": "v_measure", "sts": "spearman"}


def evaluate_embedding(model: Any, tokenizer: Any, task: str, data: str, *, split: str = "test",
                       settings: SentenceConfig | None = None, limit: int | None = None, batch_size: int = 64,
                       dtype: str | None = None, progress: bool | None = False, encoding: str = "utf-8",
                       seed: int = 0) -> dict[str, Any]:
    """Score a model's sentence vectors on `task` (retrieval, bitext, clustering, sts) over `data`: a named set
    (EVALUATION_DATASETS: inews, bible, hsk, thucnews) or a file. `settings`: pooling, normalisation and length
    (`encode.declared_settings` of the model's directory); `limit`: the first N examples only (queries, pairs,
    texts; for retrieval the documents are then those N examples' own)."""
    if task not in EVALUATION_TASKS:
        raise InputError(f"task must be one of {', '.join(EVALUATION_TASKS)}, not {task!r}")
    named = EVALUATION_DATASETS[task]
    if data in named:
        where = f"{data} ({split})"
    elif Path(data).exists():
        where = data
    else:
        raise InputError(f"--data {data} is neither a {task} dataset ({', '.join(named) or 'none'}) nor a file "
                         f"({EVALUATION_FILES[task]})")
    embed = Embedder(model, tokenizer, settings or SentenceConfig(DEFAULT_POOLING), batch_size, dtype, progress)
    cut = slice(None, limit)
    if task == "retrieval":
        examples = inews_pairs(split) if data == "inews" else read_embedding_file(data, "to evaluate on", encoding)
        scores = score_retrieval(embed, examples[cut])
    elif task == "bitext":
        found = bitext_set(data, split, encoding)
        scores = score_bitext(embed, found.source[cut], found.target[cut], found.languages)
    elif task == "clustering":
        found = clustering_set(data, split, encoding)
        scores = score_clustering(embed, found.texts[cut], found.labels[cut], seed)
    else:
        found = sts_set(data, encoding)
        scores = score_sts(embed, found.first[cut], found.second[cut], found.scores[cut])
    s = embed.settings
    return {"task": task, "data": where, "metric": MAIN_METRIC[task], **scores, "pooling": s.pooling,
            "normalize": s.normalize, "max_length": s.max_seq_length}


# ---- training ------------------------------------------------------------------------------------

SIMCSE_DROPOUT = 0.1  # SimCSE's views are dropout's: a model trained without dropout gets BERT's own


@dataclass(frozen=True)
class EmbeddingModelMaker:
    """The model `fine_tune` builds, as a task's model class: from a directory, or fresh from a config;
    `config_changes` (dropout for SimCSE) go into the encoder's config either way."""

    settings: EmbeddingSettings
    config_changes: tuple[tuple[str, Any], ...] = ()

    def __call__(self, config: Any) -> SentenceEmbeddingModel:
        return SentenceEmbeddingModel(BertModel(config.replace(**dict(self.config_changes))), self.settings)

    def from_pretrained(self, path: str | Path, **head: Any) -> SentenceEmbeddingModel:
        return SentenceEmbeddingModel(BertModel.from_pretrained(path, **dict(self.config_changes)), self.settings)


def simcse_dropout(model_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The config changes SimCSE needs: dropout where the model has none (the crammed recipe pretrains without),
    else none. Without dropout its two views of a sentence would be the same vector."""
    from bertkit.models.bert.configuration import BertConfig

    config = BertConfig.from_pretrained(model_dir)
    if config.hidden_dropout_prob > 0 or config.attention_probs_dropout_prob > 0:
        return ()
    return (("hidden_dropout_prob", SIMCSE_DROPOUT), ("attention_probs_dropout_prob", SIMCSE_DROPOUT))


def choose_loss(options: FinetuneOptions, shape: str) -> str:
    """The loss of the data's shape (`LOSS_FOR_SHAPE`), or `--loss` where it fits the data."""
    loss = options.loss or LOSS_FOR_SHAPE[shape]
    if loss == "cosent" and shape != "scored":
        raise InputError(f"--loss cosent needs scored pairs (text, text, score); {options.train} holds "
                         f"{'pairs without scores' if shape == 'pairs' else 'plain text'}")
    if loss == "infonce" and shape != "pairs":
        raise InputError(f"--loss infonce needs pairs (anchor, positive[, negatives]); {options.train} holds "
                         + ("scored pairs: train them with --loss cosent" if shape == "scored" else
                            "plain text: SimCSE (--loss simcse) makes its pairs from dropout"))
    if options.crop and loss != "simcse":
        raise InputError(f"--crop makes SimCSE's two views of a text; {options.train} holds "
                         f"{'pairs' if shape == 'pairs' else 'scored pairs'}, which train with {loss}: give --loss "
                         f"simcse to train on their first texts alone")
    return loss


def check_learnable(train: Sequence[EmbeddingExample], loss: str, options: FinetuneOptions) -> None:
    """Refuse training data and settings under which `loss` has nothing to learn (every gradient zero, or every
    negative a copy of its positive): such a run would train to the end and save a model as if all were well."""
    where = options.train
    if loss == "cosent":
        scores = sorted({e.score for e in train})
        if len(scores) == 1:
            raise InputError(f"every one of the {len(train):,} scores in {where} is {scores[0]:g}: CoSENT learns which "
                             "pair scores above which, and here none does (its loss and gradient would be 0 at every "
                             "step); give scored pairs whose scores differ")
        return
    firsts = {e.texts[0] for e in train}
    rows = {e.texts for e in train}
    hard = loss == "infonce" and len(train[0].texts) > 2
    batch = min(options.batch_size, len(train))
    if batch < 2 and not hard:
        raise InputError(f"{'--batch-size 1' if options.batch_size == 1 else f'{len(train)} usable row'}: "
                         f"{'InfoNCE' if loss == 'infonce' else 'SimCSE'} takes each row's negatives from the other "
                         "rows of its batch, and a batch of one has none (the loss would be 0 at every step); "
                         f"give --batch-size 2 or more{' and more rows' if len(train) < 2 else ''}")
    if len(train) > 1 and ((loss == "simcse" and len(firsts) == 1) or (loss == "infonce" and len(rows) == 1)):
        raise InputError(f"all {len(train):,} rows of {where} are the same {'text' if loss == 'simcse' else 'pair'}: "
                         "each row's negatives are copies of its positive, so there is nothing to tell apart; give "
                         "rows that differ")


def load_splits(options: FinetuneOptions) -> dict[str, list[EmbeddingExample]]:
    """train (and dev, test): a named set's splits, or files; --dev / --test override a named set's."""
    splits = {"train": read_embedding_data(options.train, "train", "to train on", options.encoding)}
    for name, spec in (("dev", options.dev), ("test", options.test)):
        if spec is not None:
            splits[name] = read_embedding_data(spec, name, "to evaluate on", options.encoding)
        elif options.train in TRAINING_DATASETS:
            try:
                splits[name] = read_embedding_data(options.train, name)
            except InputError:  # the named set has no such split (thucnews-headlines has no dev)
                pass
    return splits


def dev_scorer(examples: Sequence[EmbeddingExample], tokenizer: Any, settings: EmbeddingSettings,
               max_length: int) -> tuple[str, Scorer]:
    """(the metric, a Scorer) of dev rows: pairs by MRR@10, scored pairs by Spearman."""
    shape = shape_of(examples)
    if shape == "text":
        raise InputError("plain text gives no dev score to pick a checkpoint by; give --dev pairs or scored pairs, "
                         "or --keep-last")
    config = SentenceConfig(settings.pooling, False, max_length)

    def score(model: SentenceEmbeddingModel) -> dict[str, float]:
        embed = Embedder(model.encoder, tokenizer, config)
        with warnings.catch_warnings():  # long documents are cut at --max-length, as in training (data_report.json)
            warnings.simplefilter("ignore", TruncationWarning)
            if shape == "pairs":
                return score_retrieval(embed, examples)
            return score_sts(embed, [e.texts[0] for e in examples], [e.texts[1] for e in examples],
                             [e.score for e in examples])

    texts = sum(len(e.texts) for e in examples)
    return ("mrr@10" if shape == "pairs" else "spearman"), Scorer(texts, score)


@holds_out("bertkit finetune")
def finetune_embedding(options: FinetuneOptions) -> dict[str, Any]:
    """Train sentence vectors on options.train, keep the best dev checkpoint (or the last), score it on test;
    returns (and writes) the results. The run holds options.out, as `bertkit finetune` does."""
    started, model_dir, tokenizer = start_run(options, "embedding", "finetune_embedding")
    splits = load_splits(options)
    train = sample_examples(splits["train"], options)
    shape = shape_of(train)
    loss = choose_loss(options, shape)
    check_learnable(train, loss, options)
    # the pooling and normalisation the model declares (sentence-transformers' files, m3e's config), or as told;
    # a model that declares none trains mean vectors, as sentence-transformers builds a new sentence model
    declared = read_sentence_config(model_dir)
    pooling = options.pooling or declared.pooling or TRAINING_POOLING
    normalize = declared.normalize if options.normalize is None else options.normalize
    # simcse reads each row's first text: dropout makes its two views in the model, or the collator crops two
    text_columns = 1 if loss == "simcse" else len(train[0].texts)
    settings = EmbeddingSettings(loss, pooling, normalize, options.temperature, options.symmetric,
                                 columns=2 if options.crop else text_columns,
                                 cached_batch=options.cached_batch, max_seq_length=declared.max_seq_length)
    select = options.select_best and bool(splits.get("dev"))
    metric, dev = "loss", None
    if select:
        metric, dev = dev_scorer(splits["dev"], tokenizer, settings, options.max_length)

    report = DataReport("the training data")
    report.measured.update({"rows": len(train), "shape": shape, "loss": loss})

    def featurize(examples: Sequence[EmbeddingExample]) -> list[dict[str, Any]]:
        columns = text_columns
        flat = [text for e in examples for text in e.texts[:columns]]
        ids = tokenizer(flat, truncation=True, max_length=options.max_length, return_token_type_ids=False,
                        return_attention_mask=False)["input_ids"]
        if examples is train:  # how many training texts --max-length cut (or fill exactly), for the data report
            report.measured["texts_at_max_length"] = sum(len(row) == options.max_length for row in ids)
        return [{"input_ids": ids[i * columns], "texts": ids[i * columns:(i + 1) * columns], "score": e.score}
                for i, e in enumerate(examples)]

    # cropped views differ without dropout: the model keeps its own (none for the crammed recipe's)
    changes = simcse_dropout(model_dir) if loss == "simcse" and not options.crop else ()
    parts = TaskParts(model_class=EmbeddingModelMaker(settings, changes), head={}, train=train,
                      dev=splits.get("dev") or [], featurize=featurize,
                      collator=EmbeddingCollator(tokenizer.pad_token_id, options.crop), scorer=lambda examples: dev,
                      metric=metric, report=report, unit="rows", count_items=count_items)
    run = fine_tune(replace(options, select_best=select), parts, model_dir, tokenizer, started)

    results: dict[str, Any] = {"task": "embedding", "model": options.model, "random_init": options.random_init,
                               "shape": shape, "loss": loss, "pooling": settings.pooling,
                               "normalize": settings.normalize, "temperature": settings.temperature,
                               "symmetric": settings.symmetric, "cached_batch": settings.cached_batch,
                               "crop": options.crop,
                               "dropout": run.model.config.hidden_dropout_prob,
                               "train_examples": len(train), "steps": run.state.step,
                               "stop_reason": run.state.stop_reason, "train_seconds": run.train_seconds,
                               "best_step": run.state.best_step, "best_model": str(run.best_dir)}
    if select:
        results[f"dev_{metric}"] = run.state.best_metric
    if splits.get("test") and shape_of(splits["test"]) != "text":
        _, test = dev_scorer(splits["test"], tokenizer, settings, options.max_length)
        results.update({f"test_{k}": v for k, v in test.score(run.model).items() if k not in COUNTS})
    write_results(options, results)
    return results
