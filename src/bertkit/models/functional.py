"""Pure tensor maths of the Transformer: positions, attention, masks, activations, dropout. No parameters here.

Dimension letters: B batch, T query length, S key length, H heads, D head size, C hidden size.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

try:  # flash attention over packed sequences of different lengths (torch >= 2.10)
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None

from bertkit.errors import InputError
from bertkit.models.sentence_files import CLS, check_sentence_pooling
from bertkit.utils.constants import IGNORE_INDEX  # noqa: F401  (re-exported: where it was defined before)


def sinusoidal_positions(max_len: int, dim: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)) (Vaswani et al., 3.5)."""
    if max_len <= 0 or dim <= 0:
        raise InputError(f"max_len and dim must be positive, got {max_len} and {dim}")
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)          # (L, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)                        # (ceil(d/2),)
    angle = position / torch.pow(10000.0, two_i / dim)                          # (L, ceil(d/2))
    pe = torch.zeros(max_len, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])                               # odd d: one fewer cos column
    return pe.float()


DROPOUT_LEVELS = 1 << 16  # CPU dropout reads 16 random bits per element, so p is a multiple of 2^-16


def check_dropout_probability(p: float) -> float:
    """p itself, or a ValueError naming it when it is not a probability."""
    if not 0.0 <= p <= 1.0:
        raise InputError(f"dropout probability must be between 0 and 1, got {p}")
    return p


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the others by 1/(1-p), so the expectation is x
    (Srivastava et al. 2014); x itself when not training or p = 0.

    On CPU, torch's dropout draws one Bernoulli sample per element, and drawing the mask costs more than all
    the rest of a dropout's forward and backward. Here one 64-bit draw from torch's generator serves four
    elements with 16 random bits each: the element is kept when its bits, read as a signed 16-bit integer,
    are at least k - 2^15, with k = round(p·2^16). The drop rate is then k/2^16 (0.1 -> 0.100006) and the
    scale uses that exact rate, so the expectation is still x; p below 2^-17 drops nothing. Forward and
    backward together run 1.6x (fp32) to 1.9x (bf16) faster than torch's on two threads. Other devices use
    torch's kernel, which draws its mask in parallel and fuses it with the scaling; so does a compiled graph
    (torch.compile fuses torch's dropout with its neighbours, and cannot trace the in-place draw below).
    """
    if not training or check_dropout_probability(p) == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    dropped = round(p * DROPOUT_LEVELS)
    if dropped == DROPOUT_LEVELS:
        return x * 0.0
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)  # all 64 bits random
    keep = bits.view(torch.int16)[:n].view(x.shape) >= dropped - DROPOUT_LEVELS // 2
    # x·scale is rounded once per element (unbiased in bf16); a bf16 mask·scale would round the scale itself
    return torch.where(keep, x * (DROPOUT_LEVELS / (DROPOUT_LEVELS - dropped)), 0.0)


_dropout = dropout  # for `attention`, whose argument of that name is the probability


def attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
              dropout: float = 0.0, training: bool = False) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k + mask) V, returning (output, probabilities) (Vaswani et al., eq. 1).

    query (B, H, T, D), key/value (B, H, S, D); mask is an additive bias broadcastable to (B, H, T, S)
    (0 where allowed, a large negative where not), e.g. from `padding_mask_bias` or `causal_mask_bias`.
    """
    scores = query @ key.transpose(-2, -1) * (1.0 / math.sqrt(query.size(-1)))  # (B, H, T, S)
    if mask is not None:
        scores = scores + mask
    probs = scores.softmax(dim=-1)
    dropped = _dropout(probs, dropout, training)
    return dropped @ value, probs


def efficient_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                        dropout: float = 0.0, training: bool = False) -> Tensor:
    """softmax(Q Kᵀ / √d_k + mask) V by the faster of two equal computations, without the probabilities.

    torch's fused kernel (`scaled_dot_product_attention`) keeps no (B, H, T, S) tensor and is the fast path
    in float32. On CPU in bfloat16 its flash kernel is slower than the explicit maths above, by 1.7-4x for
    forward + backward at lengths up to 512 (benchmarks/bench_attention.py), so there `attention` runs.
    """
    if query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16):
        return attention(query, key, value, mask, dropout=dropout, training=training)[0]
    if query.device.type == "cpu" and not training:  # inference: a text's vector must not depend on its batch
        key, value, mask = keys_in_whole_blocks(key, value, mask)
    with sdpa_kernel(GPU_ATTENTION_KERNELS) if query.device.type == "cuda" else nullcontext():
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout if training else 0.0)


# The kernels `efficient_attention` lets torch choose from on a GPU: flash attention (no mask), the memory-efficient
# kernel (a mask), the explicit maths (anything else). Not cuDNN's attention, which torch prefers on Hopper GPUs: it
# builds an execution plan on the host for every new shape, and batches padded to their longest text change shape
# from step to step. On an H200, training steps whose batch had a length not seen before took 100-200 ms more than
# the others (10 ms for the tiny BERT, 60 ms for BERT-base), about one step in five.
GPU_ATTENTION_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


KEY_BLOCK = 16  # float32 lanes of an AVX-512 register; a multiple of AVX2's 8


def keys_in_whole_blocks(key: Tensor, value: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """key and value (B, H, S, D) padded with masked keys to a multiple of KEY_BLOCK, and the mask to match.

    torch's CPU attention kernel computes the exponentials and sums of a row's last S mod 16 keys by another path
    than the rest (a vector tail), which rounds differently. A text alone (S = its length) and the same text padded
    in a batch (S = the batch's longest, its pad keys masked) then get vectors that differ in the last bits (about
    1e-6 after four layers). With S always a multiple of 16, every real key takes the same path whatever the
    padding, masked keys add exact zeros, and a text's vector no longer depends on the batch it ran in.
    """
    extra = -key.size(-2) % KEY_BLOCK
    if extra == 0:
        return key, value, mask
    S = key.size(-2)
    key = F.pad(key, (0, 0, 0, extra))
    value = F.pad(value, (0, 0, 0, extra))
    if mask is None:
        mask = torch.zeros(1, 1, 1, S, dtype=key.dtype, device=key.device)
    elif mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=key.dtype, device=key.device).masked_fill(~mask, mask_value(key.dtype))
    mask = F.pad(mask.expand(*mask.shape[:-1], S), (0, extra), value=mask_value(mask.dtype))
    return key, value, mask


def multi_head_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, dropout: float = 0.0,
                         training: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
    """The attention every model here runs: (output, probabilities) of `attention` when the probabilities are asked
    for (a picture, a test), else (output, None) by `efficient_attention`'s faster path for these tensors."""
    if need_weights:
        return attention(query, key, value, mask, dropout=dropout, training=training)
    return efficient_attention(query, key, value, mask, dropout=dropout, training=training), None


@dataclass(frozen=True)
class PackedSequences:
    """Where a padded (B, T) batch's real tokens lie once packed into (N, C), padding left out: row i of the packed
    tensor is position indices[i] of the flattened (B·T) batch. `bias` is the padded batch's additive attention
    mask, (B, 1, 1, T), for attention run padded. `starts` (B + 1,) int32: the packed row where each sequence
    begins, then N (flash attention's cumulative lengths), and `longest` at least the longest sequence's length, for
    attention run packed; `starts` is None where a sequence's attention needs more than its own tokens (a local
    window, which `bias` holds)."""

    indices: Tensor   # (N,) int64, on the tensor's device
    batch: int
    length: int
    bias: Tensor
    starts: Tensor | None = None
    longest: int = 0

    @property
    def padding(self) -> float:
        """The share of the padded batch that is padding."""
        return 1 - self.indices.numel() / (self.batch * self.length)


# A padded batch runs packed only when at least this share of it is padding: where attention runs padded, packing
# costs four copies of the batch's activations a layer, which the FLOPs it saves must outweigh.
PACK_MIN_PADDING = 0.1
# Where attention runs packed as well (`flash_attention_packs`), packing costs two copies a forward (in, then out),
# and reading the count of real tokens back: in BERT-base a copy of a token's activations moves about 1% of the
# bytes, and far fewer of the FLOPs, of one layer's work on it, so packing pays from about 1% padding.
PACKED_ATTENTION_MIN_PADDING = 0.01


def attention_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention computes x's queries in: autocast's where autocast is on for x's device, else x's own."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def min_padding_to_pack(x: Tensor, head_dim: int, dropout: float, training: bool) -> float:
    """The share of padding from which a batch of hidden states x (dropout: attention's) runs packed: where its
    attention can run packed too (`flash_attention_packs`), PACKED_ATTENTION_MIN_PADDING, else PACK_MIN_PADDING."""
    packs = flash_attention_packs(x.device, attention_dtype(x), head_dim, dropout, training)
    return PACKED_ATTENTION_MIN_PADDING if packs else PACK_MIN_PADDING


def pack_padded(attention_mask: Tensor, dtype: torch.dtype) -> PackedSequences:
    """The PackedSequences of a (B, T) 1/0 mask's real tokens; reads their number back from the device.

    x.flatten(0, 1)[indices] packs a padded (B, T, C) batch into (N, C), row after row, and the layers that see one
    token at a time (the projections, the feed-forward, LayerNorm, dropout) spend no FLOP on padding.
    """
    keep = attention_mask.to(torch.bool)
    indices = keep.reshape(-1).nonzero().squeeze(1)                               # (N,)
    starts = F.pad(keep.sum(1, dtype=torch.int32).cumsum(0, dtype=torch.int32), (1, 0))  # (B + 1,): 0, l0, ..., N
    B, T = attention_mask.shape
    # `longest` only bounds the work flash attention lays out: the padded length T (a batch's padding usually
    # reaches its longest text) spares reading the lengths back from the device
    return PackedSequences(indices, B, T, padding_mask_bias(attention_mask, dtype), starts, T)


def flash_attention_packs(device: torch.device, dtype: torch.dtype, head_dim: int, dropout: float,
                          training: bool) -> bool:
    """Whether flash attention can attend over packed sequences (`varlen_attn`) here: a GPU of compute capability
    8.0 on, bf16 or fp16, a head size flash attention takes, no attention dropout (the packed kernel draws none)."""
    return (varlen_attn is not None and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)
            and not (training and dropout > 0.0) and head_dim % 8 == 0 and head_dim <= 256
            and torch.cuda.get_device_capability(device) >= (8, 0))


def attends_packed(query: Tensor, packed: PackedSequences, dropout: float, training: bool) -> bool:
    """Whether `packed_attention` runs flash attention on the packed sequences themselves: `flash_attention_packs`
    for the query, and sequences that see their own tokens alone (`starts`)."""
    return packed.starts is not None and flash_attention_packs(query.device, query.dtype, query.size(-1), dropout,
                                                               training)


def packed_attention(query: Tensor, key: Tensor, value: Tensor, packed: PackedSequences, dropout: float = 0.0,
                     training: bool = False) -> Tensor:
    """`efficient_attention` of packed sequences: query, key, value (N, H, D) -> (N, H, D).

    On a GPU where it can (`attends_packed`), flash attention reads the packed rows as they are, each sequence
    attending over its own; nothing is computed or copied for padding. Otherwise attention is the one step that
    runs padded: the rows go back to their padded places for it (zeros at padding, which the mask hides) and the
    output comes back packed. The projections around it, most of a layer's FLOPs, ran on the real tokens alone."""
    if attends_packed(query, packed, dropout, training):
        # the GPU's kernel choice, first in priority: torch versions that may take cuDNN here (it plans every new
        # shape on the host, and packed batches change shape every step) take flash attention instead
        with sdpa_kernel(GPU_ATTENTION_KERNELS, set_priority=True):
            return varlen_attn(query, key, value, packed.starts, packed.starts, packed.longest, packed.longest)
    N, H, D = query.shape
    B, T = packed.batch, packed.length

    def padded(x: Tensor) -> Tensor:                                                # (N, H, D) -> (B, H, T, D)
        return x.new_zeros(B * T, H, D).index_copy(0, packed.indices, x).view(B, T, H, D).transpose(1, 2)

    bias = packed.bias.to(query.dtype) if packed.bias.is_floating_point() else packed.bias
    out = efficient_attention(padded(query), padded(key), padded(value), bias, dropout, training)    # (B, H, T, D)
    return out.transpose(1, 2).reshape(B * T, H, D).index_select(0, packed.indices)


def mask_value(dtype: torch.dtype) -> float:
    """The large negative that stands for "not allowed": the dtype's minimum, so it never overflows to -inf + inf."""
    return torch.finfo(dtype).min


def padding_mask_bias(attention_mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """A 1/0 mask -> its additive bias, 0 where attention is allowed and dtype-min where not: (B, S), the keys that
    are real tokens -> (B, 1, 1, S); (B, T, S), the keys each query may see (`unilm_mask`) -> (B, 1, T, S)."""
    if attention_mask.dim() not in (2, 3):
        raise InputError(f"attention_mask must be (batch, seq) or (batch, queries, keys), got shape "
                         f"{tuple(attention_mask.shape)}")
    keep = (attention_mask[:, None, None, :] if attention_mask.dim() == 2 else attention_mask[:, None]).to(torch.bool)
    return torch.zeros(keep.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        ~keep, mask_value(dtype))


def unilm_mask(token_type_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """UniLM's sequence-to-sequence mask (Dong et al., 2019) for `[CLS] source [SEP] target [SEP]` with segment 0 on
    the source and 1 on the target: (B, T) -> (B, T, T) bool, True where query i may see key j.

    A source token sees the whole source (BERT reading it); a target token sees the whole source and the target up
    to itself (a language model writing it). With n_i = the number of target tokens up to and including i
    (the cumulative sum of the segment ids), that is one comparison: i may see j when n_j <= n_i, for n_j = 0 on
    every source key and n_j = k on the k-th target key. Padding keys (attention_mask 0) are seen by no one.
    """
    written = token_type_ids.cumsum(dim=1)                                      # (B, T): n_i
    allowed = written[:, None, :] <= written[:, :, None]                        # (B, T, T): n_j <= n_i
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, :].to(torch.bool)
    return allowed


def causal_mask_bias(length: int, dtype: torch.dtype = torch.float32, device=None,
                     key_length: int | None = None) -> Tensor:
    """(T, S) bias letting query t see keys ≤ t (offset for a cache of S - T earlier keys); dtype-min above."""
    key_length = length if key_length is None else key_length
    offset = key_length - length
    allowed = torch.ones(length, key_length, dtype=torch.bool, device=device).tril(diagonal=offset)
    return torch.zeros(length, key_length, dtype=dtype, device=device).masked_fill(~allowed, mask_value(dtype))


def rotary_tables(length: int, dim: int, base: float, device: torch.device | None = None,
                  dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (T, dim), of rotary positions (Su et al., RoFormer): position t turns the pair of dimensions
    (i, i + dim/2) by the angle t·θ_i, θ_i = base^(-2i/dim). Fast-turning pairs tell near positions apart, slow ones
    far positions; a larger base slows every pair (ModernBERT: 160,000 for global layers). float32, as the models
    compute them; float64 for an exact demonstration."""
    inverse = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=dtype, device=device) / dim))  # (dim/2,)
    angles = torch.arange(length, dtype=dtype, device=device)[:, None] * inverse           # (T, dim/2)
    angles = torch.cat([angles, angles], dim=-1)                                                    # (T, dim)
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., T, dim) with each pair (x_i, x_{i+dim/2}) at position t turned by t·θ_i: x·cos + (-x₂, x₁)·sin, in
    float32 at least (bf16 is turned in float32, as the angle tables are), returned in x's dtype. Turning a query at
    t and a key at s makes their dot product depend on t - s only: attention sees relative positions, exactly."""
    turned = x if x.dtype == torch.float64 else x.float()
    first, second = turned.chunk(2, dim=-1)
    return (turned * cos + torch.cat([-second, first], dim=-1) * sin).to(x.dtype)


def window_mask(length: int, half_width: int, device: torch.device | None = None) -> Tensor:
    """(T, T) bool: query i may see key j when |i - j| <= half_width (a local, sliding-window attention layer)."""
    offsets = torch.arange(length, device=device)
    return (offsets[:, None] - offsets[None, :]).abs() <= half_width


def gelu(x: Tensor) -> Tensor:
    """Exact GELU: x·Φ(x) (Hendrycks & Gimpel), BERT's `gelu`."""
    return F.gelu(x)


def gelu_new(x: Tensor) -> Tensor:
    """Tanh approximation of GELU, 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))): GPT-2's and HF's `gelu_new`."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_pytorch_tanh(x: Tensor) -> Tensor:
    """The same tanh approximation, computed by torch's fused kernel."""
    return F.gelu(x, approximate="tanh")


def silu(x: Tensor) -> Tensor:
    """x·σ(x) (Swish, Ramachandran et al.): the gate of SwiGLU, the gated feed-forward NeoBERT and LLaMA use."""
    return F.silu(x)


ACT2FN = {"gelu": gelu, "gelu_new": gelu_new, "gelu_pytorch_tanh": gelu_pytorch_tanh, "relu": F.relu, "silu": silu}


def pool_tokens(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, T, C) hidden states -> (B, C) sentence vectors: the first token's ([CLS]), or the mean over the real
    tokens (attention_mask 1), so padding never enters a vector. The one pooling that encoding, serving and
    training sentence vectors run (its modes: `sentence_files.POOLINGS`)."""
    if check_sentence_pooling(pooling) == CLS:
        return hidden[:, 0]
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)                        # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


def cloze_scores(vocab_logits: Tensor, label_word_ids: Tensor) -> Tensor:
    """s_c = Σ_j log_softmax(vocab_logits[:, j])[label_word_ids[c, j]]: the log-probability that the K [MASK]s
    of a cloze read label word c. (B, K, V), (L, K) -> (B, L)."""
    log_probs = F.log_softmax(vocab_logits.float(), dim=-1)                       # (B, K, V)
    index = label_word_ids.t().unsqueeze(0).expand(log_probs.size(0), -1, -1)     # (B, K, L)
    return log_probs.gather(-1, index).sum(1)                                     # (B, L)
