"""How a model directory declares its sentence vectors, in the files sentence-transformers keeps beside the weights.

    modules.json               the modules in order: the Transformer (path ""), Pooling, Normalize when normalised
    1_Pooling/config.json      which pooling: pooling_mode_cls_token / pooling_mode_mean_tokens (and the width)
    2_Normalize/               present (and empty) when the vectors are scaled to unit length
    sentence_bert_config.json  max_seq_length: the tokens a text is cut to

`read_sentence_config` reads them (and m3e's `uniem_embedding_strategy` in config.json, where a directory has no
1_Pooling), so `bertkit encode`, `bertkit serve` and `evaluate --task ...` give a directory's vectors as
sentence-transformers does; `write_sentence_config` writes them for a model `finetune --task embedding` trained,
so sentence-transformers loads that directory too.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

# The sentence vectors bertkit computes (functional.pool_tokens): [CLS]'s, or the mean of the real tokens'. The names
# are written here alone; everything else reads them from here.
CLS, MEAN = "cls", "mean"
POOLINGS = (CLS, MEAN)
DEFAULT_POOLING = CLS        # a directory that declares none is read by [CLS], as BERT's pooler reads it
TRAINING_POOLING = MEAN      # a model that declares none trains mean vectors, as sentence-transformers builds one
# How a long text's windows' vectors combine (`--long-inputs chunk`, bertkit.inference.long_inputs): their mean,
# weighted by the text's tokens each holds, or the first window's
FIRST = "first"
CHUNK_POOLINGS = (MEAN, FIRST)


def check_sentence_pooling(pooling: str) -> str:
    """`pooling` if bertkit computes it, else one InputError naming the ones it does."""
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    return pooling

MODULES_NAME = "modules.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
# What a directory holds for sentence vectors (run directories list them among what bertkit writes)
SENTENCE_FILES = (MODULES_NAME, POOLING_DIR, NORMALIZE_DIR, SENTENCE_BERT_CONFIG)

_ST = "sentence_transformers.models."
# 1_Pooling/config.json's switches as sentence-transformers names them, and the pooling bertkit computes for each
_POOLING_KEYS = {"pooling_mode_cls_token": CLS, "pooling_mode_mean_tokens": MEAN}
_OTHER_POOLING_KEYS = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                       "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
# uniem (m3e's trainer) writes its pooling into config.json
_UNIEM_POOLING = {"last_mean": MEAN, "first_last_mean": None, "cls": CLS, "last_cls": CLS}


class SentenceModuleWarning(UserWarning):
    """A directory's modules.json lists a module bertkit does not run (a Dense layer, ...): its vectors differ."""


@dataclass(frozen=True)
class SentenceConfig:
    """A model directory's sentence vectors: pooling, normalisation and the longest text in tokens."""

    pooling: str | None = None         # "cls" | "mean"; None where the directory declares none bertkit computes
    normalize: bool = False            # vectors scaled to unit length (a Normalize module)
    max_seq_length: int | None = None  # texts are cut to this many tokens (sentence_bert_config.json)

    def __post_init__(self) -> None:
        if self.pooling is not None:
            check_sentence_pooling(self.pooling)


def _json(path: Path) -> object:
    try:
        return jsonfiles.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pooling_of(config: object) -> str | None:
    """The pooling a 1_Pooling/config.json names (legacy switches or sentence-transformers 5's `pooling_mode`)."""
    if not isinstance(config, dict):
        return None
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return mode if mode in POOLINGS else None
    chosen = [name for key, name in _POOLING_KEYS.items() if config.get(key)]
    others = [key for key in _OTHER_POOLING_KEYS if config.get(key)]
    return chosen[0] if len(chosen) == 1 and not others else None


def read_sentence_config(path: str | os.PathLike) -> SentenceConfig:
    """What the directory declares: modules.json and the modules it lists, else a bare 1_Pooling/ and 2_Normalize/,
    else m3e's config.json key; missing or unreadable files declare nothing (SentenceConfig())."""
    path = Path(path)
    modules = _json(path / MODULES_NAME)
    pooling_dir, normalize = path / POOLING_DIR, (path / NORMALIZE_DIR).is_dir()
    if isinstance(modules, list):
        kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: str(m.get("path", "")) for m in modules
                 if isinstance(m, dict)}
        normalize = "Normalize" in kinds
        if "Pooling" in kinds:
            pooling_dir = path / kinds["Pooling"]
        others = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
        if others:
            warnings.warn(f"{path}: modules.json lists {', '.join(others)}, which bertkit does not run; its vectors "
                          "will differ from sentence-transformers'", SentenceModuleWarning, stacklevel=2)
    pooling_file = pooling_dir / "config.json"
    if pooling_file.is_file():
        pooling = _pooling_of(_json(pooling_file))
    else:
        config = _json(path / "config.json")
        strategy = config.get("uniem_embedding_strategy") if isinstance(config, dict) else None
        pooling = _UNIEM_POOLING.get(strategy) if isinstance(strategy, str) else None
    st_config = _json(path / SENTENCE_BERT_CONFIG)
    length = st_config.get("max_seq_length") if isinstance(st_config, dict) else None
    length = length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None
    return SentenceConfig(pooling, normalize, length)


def write_sentence_config(path: str | os.PathLike, config: SentenceConfig, hidden_size: int) -> None:
    """Write `config` as sentence-transformers' files into the model directory `path` (a 2_Normalize/ only when
    normalised; an old one is removed otherwise). Each file is written atomically."""
    if config.pooling is None:
        raise InputError("a sentence model needs a pooling to write (cls or mean)")
    path = Path(path)
    modules = [{"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"},
               {"idx": 1, "name": "1", "path": POOLING_DIR, "type": _ST + "Pooling"}]
    if config.normalize:
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR, "type": _ST + "Normalize"})
    atomic_write_text(path / MODULES_NAME, json.dumps(modules, indent=2) + "\n")
    (path / POOLING_DIR).mkdir(parents=True, exist_ok=True)
    pooling = {"word_embedding_dimension": hidden_size,
               **{key: name == config.pooling for key, name in _POOLING_KEYS.items()},
               **{key: False for key in _OTHER_POOLING_KEYS}}
    atomic_write_text(path / POOLING_DIR / "config.json", json.dumps(pooling, indent=2) + "\n")
    normalize_dir = path / NORMALIZE_DIR
    if config.normalize:
        normalize_dir.mkdir(exist_ok=True)
    elif normalize_dir.is_dir():
        for child in normalize_dir.iterdir():
            child.unlink()
        normalize_dir.rmdir()
    # do_lower_case is sentence-transformers' own lower-casing before the tokenizer's: the tokenizer already does it
    settings = {"max_seq_length": config.max_seq_length or 512, "do_lower_case": False}
    atomic_write_text(path / SENTENCE_BERT_CONFIG, json.dumps(settings, indent=2) + "\n")
