"""The encoder–decoder translation models' configuration: the Transformer (Vaswani et al.) or an RNN with or
without attention. Names follow Hugging Face's Marian/BART configs where they have one."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.models.configuration import ACTIVATIONS, ConfigError, PretrainedConfig

SEQ2SEQ_ARCHITECTURES = ("transformer", "rnn")
RNN_CELLS = ("rnn", "lstm", "gru")
GRU_VARIANTS = ("torch", "tutorial")      # rnn.gru_step: the reset gate after W_hn h (torch's) or before (tutorials')
ATTENTION_SCORES = ("additive", "dot")    # rnn.BahdanauAttention, rnn.DotProductAttention


@dataclass
class Seq2SeqConfig(PretrainedConfig):
    """An encoder–decoder translation model: the Transformer (Vaswani et al.) or an RNN with/without attention."""

    model_type = "bertkit-seq2seq"
    family = "translation"

    architecture: str = "transformer"           # "transformer" | "rnn"
    vocab_size: int = 8000                      # source vocabulary
    decoder_vocab_size: int | None = None       # target vocabulary; None = the source's
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    attention_heads: int = 8
    ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0             # inside the feed-forward; the paper has none there
    max_position_embeddings: int = 512
    normalize_before: bool = False              # pre-LN blocks; the paper's post-LN when False
    scale_embedding: bool = True                # embeddings × √d_model before adding positions (paper 3.4)
    share_encoder_decoder_embeddings: bool = False
    tie_word_embeddings: bool = True            # output projection = decoder input embeddings
    label_smoothing: float = 0.1
    layer_norm_eps: float = 1e-5
    # the RNN baselines: cell type, attention on/off and its score, where a GRU's reset gate acts
    rnn_cell: str = "gru"
    rnn_attention: bool = True
    attention_score: str = "additive"           # "additive" (Bahdanau) | "dot" (scaled dot product, Luong)
    gru_variant: str = "torch"                  # "torch" (torch.nn.GRU's) | "tutorial" (reset gate before W_hn)
    pad_token_id: int = 0
    bos_token_id: int = 2                       # also the decoder's start token
    eos_token_id: int = 3

    @property
    def target_vocab_size(self) -> int:
        return self.decoder_vocab_size or self.vocab_size

    def validate(self) -> None:
        """Raise ConfigError naming the first value no model can be built from."""
        self.check_choice("architecture", SEQ2SEQ_ARCHITECTURES)
        self.check_positive(("vocab_size", "target_vocab_size", "d_model", "encoder_layers", "decoder_layers",
                               "attention_heads", "ffn_dim", "max_position_embeddings"))
        self.check_divisible("d_model", "attention_heads")
        self.check_choice("activation_function", ACTIVATIONS)
        self.check_choice("rnn_cell", RNN_CELLS)
        self.check_choice("attention_score", ATTENTION_SCORES)
        self.check_choice("gru_variant", GRU_VARIANTS)
        self.check_probabilities(("dropout", "attention_dropout", "activation_dropout", "label_smoothing"))
        if self.share_encoder_decoder_embeddings and self.target_vocab_size != self.vocab_size:
            raise ConfigError(f"shared source/target embeddings need one vocabulary, got sizes {self.vocab_size} "
                              f"and {self.target_vocab_size}")
        self.check_token_ids(("pad_token_id",), min(self.vocab_size, self.target_vocab_size))
        self.check_token_ids(("bos_token_id", "eos_token_id"), self.target_vocab_size)



    def summary(self) -> list[tuple[str, str]]:
        if self.architecture == "rnn":
            cell = self.rnn_cell.upper() + (" (the tutorials' reset gate)" if self.rnn_cell == "gru" and
                                            self.gru_variant == "tutorial" else "")
            score = {"additive": "", "dot": " (dot-product)"}[self.attention_score]
            kind = f"{cell} {f'with attention{score}' if self.rnn_attention else 'without attention'}"
            rows = [("model", f"{kind}: {self.encoder_layers} encoder + {self.decoder_layers} decoder layers, "
                              f"hidden {self.d_model}")]
        else:
            rows = [("model", f"Transformer: {self.encoder_layers} encoder + {self.decoder_layers} decoder layers, "
                              f"d_model {self.d_model}, {self.attention_heads} heads, ffn {self.ffn_dim}, "
                              f"{'pre-LN' if self.normalize_before else 'post-LN'}")]
        return rows + [("vocab", f"source {self.vocab_size}  target {self.target_vocab_size}  positions "
                                 f"{self.max_position_embeddings}"),
                       ("special ids", f"pad {self.pad_token_id}  bos {self.bos_token_id}  eos {self.eos_token_id}")]
