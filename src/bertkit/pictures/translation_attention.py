"""The attention of a translation model over one sentence and its translation.

The Transformer (Vaswani et al. 2017, figure 1) has three kinds: the encoder's self-attention (source × source),
the decoder's masked self-attention (target × target, nothing above the diagonal) and the cross-attention from the
decoder to the encoder (target × source). Their rows are the decoder's inputs: the start token [CLS], then the
translation; row t is the step that predicts target token t + 1. An RNN with attention has one: the alignment
α (Bahdanau et al. 2015, figure 3), whose row t is the source weights that made the context of target token t, so
its rows are the translation's tokens themselves, the end token [SEP] last.

The translation is the model's own greedy one, or a given target, teacher-forced. Either way the weights come from
one teacher-forced pass over it, which is what greedy decoding computed step by step.

Dimension letters: L layers, H heads, S source tokens, T target tokens.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.pictures.attention_view import AttentionMap, stack_layers
from bertkit.utils.visible import is_blank


@dataclass
class TranslationAttention:
    """A source sentence, its translation (greedy or given) and the model's attentions over the pair."""

    source: str
    translation: str
    forced: bool                     # True: the translation was given and teacher-forced; False: greedy
    maps: list[AttentionMap]         # Transformer: encoder, decoder, cross; RNN: alignment

    @property
    def text(self) -> str:
        return self.source

    @property
    def text_pair(self) -> str:
        return self.translation

    def map(self, kind: str) -> AttentionMap:
        return next(one for one in self.maps if one.kind == kind)


def check_has_attention(config) -> None:
    """Refuse an RNN encoder–decoder without attention: it has no weights to show (reads config.json only)."""
    if config.architecture == "rnn" and not config.rnn_attention:
        raise InputError(f"this {config.rnn_cell.upper()} encoder–decoder has no attention: its decoder reads one "
                         "fixed summary of the source, so there are no attention weights to show; train one with "
                         "--model gru-attention or lstm-attention")


def translation_attentions(model, tokenizer, source: str, target: str | None = None,
                           max_length: int | None = None) -> TranslationAttention:
    """Translate `source` greedily (or teacher-force `target`) and collect the model's attentions.

    `tokenizer` is the run's TranslationTokenizer (source and target sides); sources longer than `max_length`
    tokens (or the model's positions) are cut, as `bertkit translate` cuts them.
    """
    import torch

    config = model.config
    check_has_attention(config)
    if is_blank(source):
        raise InputError("text is empty (it has no visible character): there is nothing to translate")
    if target is not None and is_blank(target):
        raise InputError("the target is empty (it has no visible character): give the translation to force, or "
                         "none for the model's own")
    transformer = config.architecture == "transformer"
    positions = config.max_position_embeddings if transformer else None
    limit = min(filter(None, (max_length, positions)), default=None)
    source_ids = tokenizer.encode_source([source])[0]
    if limit is not None and len(source_ids) > limit:
        warnings.warn(f"the source has {len(source_ids)} tokens, more than max_length {limit}: it is cut to "
                      f"{limit} tokens, and the attention shown is that of the cut source", stacklevel=2)
        source_ids = tokenizer.encode_source([source], max_length=limit)[0]
    device = next(model.parameters()).device
    input_ids = torch.tensor([source_ids], device=device)
    model.eval()
    with torch.no_grad():
        if target is None:  # the model's own translation: greedy, up to its eos
            generated = model.generate(input_ids, num_beams=1)[0].tolist()[1:]
            target_ids = generated[: generated.index(config.eos_token_id) + 1] if config.eos_token_id in generated \
                else generated
            translation = tokenizer.decode(target_ids)
        else:
            target_ids, translation = tokenizer.encode_target([target])[0], target
            if positions is not None and len(target_ids) > positions:
                raise InputError(f"--target has {len(target_ids)} tokens with its end token; the model has "
                                 f"{positions} positions")
        decoder_ids = [config.bos_token_id] + target_ids[:-1]          # teacher forcing: the targets shifted right
        out = model(input_ids, decoder_input_ids=torch.tensor([decoder_ids], device=device), output_attentions=True)
    source_tokens = tokenizer.source.convert_ids_to_tokens(source_ids)
    if transformer:
        rows = tokenizer.target.convert_ids_to_tokens(decoder_ids)
        maps = [AttentionMap("encoder", source_tokens, source_tokens, stack_layers(out.encoder_attentions)),
                AttentionMap("decoder", rows, rows, stack_layers(out.decoder_attentions)),
                AttentionMap("cross", rows, source_tokens, stack_layers(out.cross_attentions))]
    else:
        rows = tokenizer.target.convert_ids_to_tokens(target_ids)
        maps = [AttentionMap("alignment", rows, source_tokens, stack_layers(out.cross_attentions))]
    return TranslationAttention(source, translation, target is not None, maps)
