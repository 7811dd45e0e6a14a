"""`bertkit explain TOPIC`: the Transformer/BERT tutorials' claims as small experiments that return numbers and
draw pictures.

Each topic is a module with `explain(out=None, fmt="png", ...) -> Explanation`; with `out=None` it computes the
numbers only. The `attention`, `multihead` and `contextual` topics read a real model (m3e-small unless told
otherwise), `it-animal` an English one (all-MiniLM-L6-v2); `patches` draws a real MNIST digit.
"""

from __future__ import annotations

import importlib
import os

from bertkit.errors import InputError
from bertkit.pictures.explain.base import DEFAULT_OUT, Explanation

# topic -> (module, what it shows)
TOPICS: dict[str, tuple[str, str]] = {
    "positional-encoding": ("positional_encoding", "sinusoidal PE: the d=4 table, PE(pos+k) = M_k PE(pos), heatmaps"),
    "permutation": ("permutation", "without positions attention ignores word order; with them it does not"),
    "layernorm": ("layernorm", "LayerNorm vs BatchNorm on a padded batch"),
    "scaling": ("scaling", "attention-row entropy with and without 1/sqrt(d_k) as d_k grows"),
    "residual": ("residual", "gradient reaching the first layer of a deep stack, with and without residuals"),
    "rnn-gradients": ("rnn_gradients", "gradient reaching earlier steps: vanilla RNN, LSTMs, a causal Transformer"),
    "attention": ("attention", "attention maps of a real sentence in m3e-small, every layer and head"),
    "multihead": ("multihead", "what each head of m3e-small attends to: distance profiles and habits"),
    "patches": ("patches", "an image as patch tokens: a linear layer on patches = a strided convolution"),
    "contextual": ("contextual", "one character in several sentences: static input vector, contextual output"),
    "it-animal": ("it_animal", "where 'it' looks in 'The animal didn't cross the street because it was too tired'"),
    "toy-task": ("toy_task", "abc -> xyz: a tiny Transformer learns it with positional encodings, not without"),
    "positions": ("positions", "learned, sinusoidal and rotary positions, at trained lengths and longer ones"),
    "receptive-field": ("receptive_field", "convolution layers needed to connect two tokens vs one attention layer"),
    "unilm": ("unilm", "one BERT, three masks: fill blanks, write left to right, or read a source and write"),
}
# the topics that read a real model, and the model each reads unless told otherwise
REAL_MODEL_TOPICS = {"attention": "m3e-small", "multihead": "m3e-small", "contextual": "m3e-small",
                     "it-animal": "all-MiniLM-L6-v2"}


def explain(topic: str, out: str | os.PathLike | None = DEFAULT_OUT, fmt: str = "png", **options) -> Explanation:
    """Run one topic; pictures go to `out` (None: numbers only). Options are the topic's own (e.g. model_dir)."""
    if topic not in TOPICS:
        raise InputError(f"unknown topic {topic!r}; topics: {', '.join(TOPICS)}")
    module = importlib.import_module(f"bertkit.pictures.explain.{TOPICS[topic][0]}")
    return module.explain(out=out, fmt=fmt, **options)


__all__ = ["DEFAULT_OUT", "REAL_MODEL_TOPICS", "TOPICS", "Explanation", "explain"]
