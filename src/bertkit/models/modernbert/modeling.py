"""ModernBERT (Warner et al., 2024): BERT's encoder as it is built in 2024. Five changes, each a small piece here:

- **Rotary positions** (Su et al., RoFormer) instead of a position table: each layer turns its queries and keys by
  angles proportional to their positions (`functional.rotate`), so a query–key score depends on their offset
  alone; global layers turn slowly (base 160,000), local ones faster (10,000).
- **A gated feed-forward** (GeGLU, Shazeer 2020): Wi makes two halves, act(a) · g, then Wo.
- **Pre-norm without biases**: x + Attn(LN(x)), x + MLP(LN(x)), one LayerNorm after the last layer, no bias in
  any LayerNorm or Linear (`norm_bias`, `attention_bias`, `mlp_bias`). Layer 0 reads the embeddings, already
  normalised, without a LayerNorm of its own.
- **Local and global attention**: in a "sliding_attention" layer a token sees the `local_attention` / 2 tokens
  on each side (`functional.window_mask`); in a "full_attention" layer, every token. ModernBERT alternates two
  local layers and one global.
- **bertkit's switches** (`position_embedding_type`, `gated_mlp`, `normalize_before`, `norm_type`) turn each change
  back to BERT's: a learned position table, the plain feed-forward, post-LN; or the LayerNorm into an RMSNorm.
  They exist to measure what each change buys (docs/modern-encoder.md); transformers' ModernBERT has none of them.
- **No segment embeddings, no pooler**: a pair of texts is one sequence with [SEP] between; heads pool the [CLS]
  vector or the mean (`classifier_pooling`) through a dense + activation + LayerNorm head.

Module and weight names are those of transformers' ModernBERT checkpoints (`embeddings.tok_embeddings`,
`embeddings.norm`, `layers.N.attn_norm`, `layers.N.attn.Wqkv`, `layers.N.attn.Wo`, `layers.N.mlp_norm`,
`layers.N.mlp.Wi`, `layers.N.mlp.Wo`, `final_norm`; `model.`, `head.dense`, `head.norm`, `decoder`, `classifier`
in the task models), so a directory written by either library loads in the other.

Dimension letters: B batch, T tokens, C hidden, H heads, D a head's dims, I the feed-forward's width, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.models.configuration import ConfigError
from bertkit.models.dropout import Dropout
from bertkit.models.functional import (
    ACT2FN,
    PACK_MIN_PADDING,
    PackedSequences,
    mask_value,
    multi_head_attention,
    pack_padded,
    packed_attention,
    rotary_tables,
    rotate,
    window_mask,
)
from bertkit.models.layer_norm import LayerNorm
from bertkit.models.modernbert.configuration import RMS_NORM, SLIDING, ModernBertConfig
from bertkit.models.outputs import BertModelOutput, ClassifierOutput, MaskedLMOutput, QuestionAnsweringOutput
from bertkit.models.pretrained import (
    PreTrainedModel,
    check_ids,
    classification_loss,
    span_loss,
    token_classification_loss,
)
from bertkit.models.sentence_files import CLS
from bertkit.utils.constants import IGNORE_INDEX, MLM


class RMSNorm(nn.RMSNorm):
    """x / √(mean(x²) + eps) · w: no centring, no bias (NeoBERT's, LLaMA's). The weight is cast to the input's
    dtype, so that a bfloat16 input under autocast runs torch's fused kernel (with a float32 weight it falls back
    to the unfused one)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight.to(x.dtype), self.eps)


def norm_layer(config: ModernBertConfig) -> nn.Module:
    """The model's normalisation: LayerNorm, (x - mean) / std · w (+ b where `norm_bias`), or bertkit's switch to
    RMSNorm."""
    if config.norm_type == RMS_NORM:
        return RMSNorm(config.hidden_size, eps=config.norm_eps)
    return LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, normalised (no positions: the layers rotate them in; no segments). With bertkit's
    `position_embedding_type="absolute"`, BERT's learned position table is added before the norm instead."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        if not config.rotary:
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.norm = norm_layer(config)
        self.drop = Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor) -> Tensor:
        x = self.tok_embeddings(input_ids)                                               # (B, T, C)
        if hasattr(self, "position_embeddings"):
            x = x + self.position_embeddings.weight[:input_ids.shape[1]]
        return self.drop(self.norm(x))


class ModernBertMLP(nn.Module):
    """The gated feed-forward: Wi(x) = [a; g] (each I wide), then Wo(act(a) · g) (GeGLU with GELU, SwiGLU with
    SiLU). With bertkit's `gated_mlp=False`, BERT's: Wo(act(Wi(x))), Wi I wide."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.gated = config.gated_mlp
        self.Wi = nn.Linear(config.hidden_size, (1 + self.gated) * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_activation]
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        if not self.gated:
            return self.Wo(self.drop(self.act(self.Wi(x))))
        a, gate = self.Wi(x).chunk(2, dim=-1)                                            # (B, T, I) each
        return self.Wo(self.drop(self.act(a) * gate))


class ModernBertAttention(nn.Module):
    """Self-attention with one fused query/key/value projection; queries and keys turned by their positions."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.heads, self.head_dim, self.dropout = config.num_attention_heads, config.head_dim, config.attention_dropout
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = Dropout(config.attention_dropout)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | PackedSequences | None,
                output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C) with cos/sin (T, D), or packed: x (N, C), the batch's real tokens, with each token's own
        cos/sin (N, 1, D) and `mask` the PackedSequences (attention alone runs padded). cos and sin are None where
        the positions are a learned table (added to the embeddings) instead."""
        if isinstance(mask, PackedSequences):
            N, C = x.shape
            q, k, v = self.Wqkv(x).view(N, 3, self.heads, self.head_dim).unbind(1)               # (N, H, D) each
            if cos is not None:
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            out = packed_attention(q, k, v, mask, self.dropout, self.training)
            return self.out_drop(self.Wo(out.reshape(N, C))), None
        B, T, C = x.shape
        q, k, v = self.Wqkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, D) each
        if cos is not None:
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out, probs = multi_head_attention(q, k, v, mask, dropout=self.dropout, training=self.training,
                                          need_weights=output_attentions)
        return self.out_drop(self.Wo(out.transpose(1, 2).reshape(B, T, C))), probs


class ModernBertEncoderLayer(nn.Module):
    """x + Attn(LN(x)), then x + MLP(LN(x)); layer 0 has no LayerNorm before its attention (its input, the
    embeddings, is normalised already). With bertkit's `normalize_before=False`, BERT's post-LN order instead:
    LN(x + Attn(x)), then LN(x + MLP(x))."""

    def __init__(self, config: ModernBertConfig, index: int) -> None:
        super().__init__()
        self.normalize_before = config.normalize_before
        self.attn_norm = nn.Identity() if index == 0 and self.normalize_before else norm_layer(config)
        self.attn = ModernBertAttention(config)
        self.mlp_norm = norm_layer(config)
        self.mlp = ModernBertMLP(config)
        self.attention_type = config.layer_types[index]

    def forward(self, x: Tensor, cos: Tensor | None, sin: Tensor | None, mask: Tensor | PackedSequences | None,
                output_attentions: bool = False) -> tuple[Tensor, Tensor | None]:
        if not self.normalize_before:
            attended, probs = self.attn(x, cos, sin, mask, output_attentions)
            x = self.attn_norm(x + attended)
            return self.mlp_norm(x + self.mlp(x)), probs
        attended, probs = self.attn(self.attn_norm(x), cos, sin, mask, output_attentions)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), probs


class ModernBertPreTrainedModel(PreTrainedModel):
    """The ModernBERT family: ModernBertConfig, its initialisation, task models hold the encoder as `model`."""

    config_class = ModernBertConfig
    base_model_prefix = "model"

    def _init_weights(self, module: nn.Module) -> None:
        """ModernBERT's: truncated normals (cut at two deviations), N(0, initializer_range) into the residual
        stream, the projections out of it smaller by √(2 · layers), the classifier N(0, 1/√C); LayerNorm 1."""
        cfg = self.config
        std_in, std_out = cfg.initializer_range, cfg.initializer_range / math.sqrt(2.0 * cfg.num_hidden_layers)

        def normal(linear: nn.Module, std: float) -> None:
            nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)
            if getattr(linear, "bias", None) is not None:
                nn.init.zeros_(linear.bias)

        if isinstance(module, ModernBertEmbeddings):
            normal(module.tok_embeddings, std_in)
            if hasattr(module, "position_embeddings"):
                normal(module.position_embeddings, std_in)
        elif isinstance(module, ModernBertMLP):
            normal(module.Wi, std_in)
            normal(module.Wo, std_out)
        elif isinstance(module, ModernBertAttention):
            normal(module.Wqkv, std_in)
            normal(module.Wo, std_out)
        elif isinstance(module, ModernBertPredictionHead):
            normal(module.dense, std_out)
        elif isinstance(module, ModernBertForMaskedLM):
            normal(module.decoder, std_out)
        elif isinstance(module, _ModernBertWithClassifier):
            normal(module.classifier, cfg.hidden_size ** -0.5)
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


class ModernBertModel(ModernBertPreTrainedModel):
    """The ModernBERT encoder: token ids (B, T) -> token vectors (B, T, C)."""

    other_head_prefixes = ("head.", "decoder.", "classifier.")  # transformers' task heads

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        # post-LN layers end normalised already: no final norm
        self.final_norm = norm_layer(config) if config.normalize_before else nn.Identity()
        # Padded batches run unpadded (their real tokens packed, `pack_padded`): every step but attention spends
        # nothing on padding, and the outputs at padded positions are zeros. None: on a GPU (a CPU's batches come
        # sorted by length, with little padding); True: everywhere; False: never.
        self.unpad: bool | None = None
        self.init_weights()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> BertModelOutput:
        """input_ids (B, T); attention_mask (B, T) 1 for tokens, 0 for padding. token_type_ids is taken and unused,
        as callers of a BERT pass it: ModernBERT has no segments. hidden_states are the embeddings and each
        layer's output (before the final LayerNorm), attentions each layer's (B, H, T, T)."""
        cfg = self.config
        check_ids("input_ids", input_ids, cfg.vocab_size, cfg.max_position_embeddings, self.checks_values(input_ids))
        B, T = input_ids.shape
        x = self.embeddings(input_ids)
        masks = self._masks(attention_mask, B, T, x.dtype, x.device)
        tables = {kind: rotary_tables(T, cfg.head_dim, cfg.rope_theta(kind), x.device) if cfg.rotary
                  else (None, None) for kind in set(cfg.layer_types)}
        if self._unpads(attention_mask, output_attentions or output_hidden_states):
            packed = pack_padded(attention_mask, x.dtype)
            if packed.padding >= PACK_MIN_PADDING:
                return BertModelOutput(self._unpadded(x, packed, masks, tables))
        hidden_states, attentions = [x] if output_hidden_states else None, [] if output_attentions else None
        for layer in self.layers:
            x, probs = layer(x, *tables[layer.attention_type], masks[layer.attention_type], output_attentions)
            if output_hidden_states:
                hidden_states.append(x)
            if output_attentions:
                attentions.append(probs)
        return BertModelOutput(self.final_norm(x), None, tuple(hidden_states) if hidden_states else None,
                               tuple(attentions) if attentions else None)

    def _unpads(self, attention_mask: Tensor | None, per_layer_outputs: bool) -> bool:
        unpad = self.unpad if self.unpad is not None else (attention_mask is not None
                                                             and attention_mask.device.type == "cuda")
        return bool(unpad) and attention_mask is not None and not per_layer_outputs and \
            not torch.compiler.is_compiling()

    def _unpadded(self, x: Tensor, packed: PackedSequences, masks: dict[str, Tensor | None],
                  tables: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
        """The layers over the batch's real tokens alone, (N, C); back in (B, T, C), zeros at padding. Each token
        takes its own position's rotation; each layer type's attention its own mask, padded."""
        B, T, C = x.shape
        positions = packed.indices % T                                                   # (N,)
        turned = {kind: (cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))     # (N, 1, D) each
                  if cos is not None else (None, None) for kind, (cos, sin) in tables.items()}
        # a local layer's tokens see a window of their sequence, which its mask holds: it attends padded
        kinds = {kind: dataclasses.replace(packed, bias=mask, starts=packed.starts if kind != SLIDING else None)
                 for kind, mask in masks.items()}
        h = x.flatten(0, 1).index_select(0, packed.indices)                              # (N, C)
        for layer in self.layers:
            h, _ = layer(h, *turned[layer.attention_type], kinds[layer.attention_type])
        h = self.final_norm(h)
        return h.new_zeros(B * T, C).index_copy(0, packed.indices, h).view(B, T, C)

    def _masks(self, attention_mask: Tensor | None, B: int, T: int, dtype: torch.dtype,
               device: torch.device) -> dict[str, Tensor | None]:
        """Each layer type's additive bias (B, 1, T, T) or None: padding keys hidden, and in a local layer the keys
        beyond its window. One value stands for "not allowed" however many reasons there are, so a row that sees
        no key (a pad far from any text) is uniform, never NaN."""
        allowed = None if attention_mask is None else attention_mask[:, None, None, :].to(torch.bool)  # (B,1,1,T)
        local = window_mask(T, self.config.sliding_window, device) if SLIDING in self.config.layer_types else None
        out = {}
        for kind in set(self.config.layer_types):
            keep = allowed if kind != SLIDING else (local if allowed is None else allowed & local)
            out[kind] = None if keep is None else torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill(
                ~keep, mask_value(dtype))
        return out


class ModernBertPredictionHead(nn.Module):
    """LayerNorm(act(dense(x))): what the masked-LM decoder and the classifiers read."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACT2FN[config.classifier_activation]
        self.norm = norm_layer(config)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """ModernBERT with its masked-LM head; the decoder is the token embedding matrix (tied), with a bias. ModernBERT
    pretrains with this objective alone (no next-sentence prediction)."""

    head_prefixes = ("head.", "decoder.")
    other_head_prefixes = ("classifier.",)

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.init_weights()

    def tied_weights(self) -> dict[str, str]:
        return {"decoder.weight": "model.embeddings.tok_embeddings.weight"}

    @staticmethod
    def count_loss_items(batch: dict[str, Tensor]) -> dict[str, int]:
        """The masked positions of `batch`, which the loss averages over (the trainer's exact averaging)."""
        return {MLM: int((batch["labels"] != IGNORE_INDEX).sum())} if "labels" in batch else {}

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> MaskedLMOutput:
        """labels (B, T): the token to predict at each masked position, IGNORE_INDEX elsewhere. With labels, only
        the N masked positions go through the head and decoder (the rest would be thrown away): logits (N, V),
        in the order the positions come; without, logits (B, T, V)."""
        out = self.model(input_ids, attention_mask, None, output_attentions, output_hidden_states)
        hidden = out.last_hidden_state
        if labels is None:
            return MaskedLMOutput(None, self.decoder(self.head(hidden)), out.hidden_states, out.attentions)
        predicted = labels != IGNORE_INDEX                                                 # (B, T)
        logits = self.decoder(self.head(hidden[predicted]))                                # (N, V)
        total = F.cross_entropy(logits.float(), labels[predicted], reduction="sum")
        loss = total / predicted.sum().clamp(min=1)
        return MaskedLMOutput(loss, logits, out.hidden_states, out.attentions, {MLM: total})


class _ModernBertWithClassifier(ModernBertPreTrainedModel):
    """The encoder, then the prediction head, dropout and a Linear `classifier` of `outputs` outputs (one per label
    unless given): what the sequence classifier, the tagger and the reader each put on ModernBERT (transformers'
    names, all three)."""

    head_prefixes = ("head.", "classifier.")
    other_head_prefixes = ("decoder.",)

    def __init__(self, config: ModernBertConfig, outputs: int | None = None) -> None:
        super().__init__(config)
        outputs = config.num_labels if outputs is None else outputs
        self.num_labels = outputs
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, outputs)
        self.init_weights()

    def classify(self, hidden: Tensor) -> Tensor:
        """(..., C) vectors -> (..., outputs) scores."""
        return self.classifier(self.drop(self.head(hidden)))


class ModernBertForSequenceClassification(_ModernBertWithClassifier):
    """ModernBERT with a classifier over the [CLS] vector or the mean of the real tokens' (`classifier_pooling`),
    read through the prediction head: logits over `config.id2label`'s labels."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> ClassifierOutput:
        """labels (B,): class ids (cross-entropy), or target values when num_labels == 1 (mean squared error)."""
        out = self.model(input_ids, attention_mask, None, output_attentions, output_hidden_states)
        hidden = out.last_hidden_state
        if self.config.classifier_pooling == CLS:
            pooled = hidden[:, 0]
        else:  # the mean over the real tokens
            weights = (torch.ones(hidden.shape[:2], device=hidden.device) if attention_mask is None
                       else attention_mask).unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1)
        logits = self.classify(pooled)                                                      # (B, num_labels)
        loss = None
        if labels is not None:
            loss = classification_loss(logits, labels, self.num_labels, self.checks_values(labels))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class ModernBertForTokenClassification(_ModernBertWithClassifier):
    """ModernBERT with a classifier on every token's vector, read through the prediction head (NER): logits
    (B, T, num_labels) over `config.id2label`'s tags."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> ClassifierOutput:
        """labels (B, T): tag ids, IGNORE_INDEX on the positions not scored."""
        out = self.model(input_ids, attention_mask, None, output_attentions, output_hidden_states)
        logits = self.classify(out.last_hidden_state)                                       # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = token_classification_loss(logits, labels, self.num_labels, self.checks_values(labels))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class ModernBertForQuestionAnswering(_ModernBertWithClassifier):
    """Extractive QA: every token's vector, read through the prediction head, scored by `classifier`, a Linear
    (hidden -> 2), as the answer's start and its end. transformers names this Linear `classifier` in ModernBERT
    (`qa_outputs` in BERT), and so does bertkit, so that directories load both ways."""

    def __init__(self, config: ModernBertConfig) -> None:
        if config.num_labels != 2:
            raise ConfigError(f"a question-answering head has 2 outputs (answer start and end), but the config has "
                              f"{config.num_labels} labels")
        super().__init__(config, 2)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                start_positions: Tensor | None = None, end_positions: Tensor | None = None,
                output_attentions: bool = False, output_hidden_states: bool = False) -> QuestionAnsweringOutput:
        """start_positions, end_positions (B,): the answer's first and last token; 0 ([CLS]) for no answer here."""
        out = self.model(input_ids, attention_mask, None, output_attentions, output_hidden_states)
        logits = self.classify(out.last_hidden_state)                                       # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)                                         # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


MODEL_CLASSES = {cls.__name__: cls for cls in (ModernBertModel, ModernBertForMaskedLM,
                                                ModernBertForSequenceClassification, ModernBertForTokenClassification,
                                                ModernBertForQuestionAnswering)}


def modernbert_class_for(config: ModernBertConfig) -> type[ModernBertPreTrainedModel]:
    """The class a ModernBERT directory was saved from (config.json's `architectures`), ModernBertModel when
    unknown."""
    return next((MODEL_CLASSES[name] for name in config.architectures if name in MODEL_CLASSES), ModernBertModel)
