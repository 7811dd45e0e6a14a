"""Tokenizer files in Hugging Face's layout: read vocab.txt / tokenizer.json + configs, write them back.

Reading follows what transformers' AutoTokenizer ends up using: the vocabulary from vocab.txt, or the
WordPiece model inside tokenizer.json; the settings from tokenizer_config.json, or, without one, from
tokenizer.json's BertNormalizer; special tokens from either config and special_tokens_map.json.
Writing produces vocab.txt, tokenizer_config.json and special_tokens_map.json, which both
`BertTokenizer.from_pretrained` and transformers' `AutoTokenizer.from_pretrained` load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

if TYPE_CHECKING:
    from bertkit.tokenizer import BertTokenizer

SPECIAL_TOKEN_NAMES = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# tokenizer_config.json keys passed on to BertTokenizer unchanged
_CONFIG_KEYS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "model_max_length",
                "padding_side", "truncation_side", "clean_up_tokenization_spaces")


def load_vocab(path: str | Path) -> dict[str, int]:
    """vocab.txt -> {token: id}, one token per line (split on newlines only, as transformers does).

    A token listed twice is an error naming it and its lines: transformers would keep the second id, leave the
    first unused, and a model sized to the vocabulary would meet an id past its end."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f.readlines()]
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text ({err.reason}): a vocab.txt lists one token per line "
                        "in UTF-8") from None
    vocab: dict[str, int] = {}
    repeated: dict[str, list[int]] = {}
    for index, token in enumerate(lines):
        if token in vocab:
            repeated.setdefault(token, [vocab[token] + 1]).append(index + 1)
        else:
            vocab[token] = index
    if repeated:
        shown = "; ".join(f"{token!r} on lines {', '.join(map(str, numbers))}"
                          for token, numbers in list(repeated.items())[:5])
        more = f" ({len(repeated) - 5} more tokens)" if len(repeated) > 5 else ""
        raise DataError(f"{path}: {len(repeated)} token{'s' if len(repeated) > 1 else ''} listed more than once: "
                        f"{shown}{more}; a vocabulary lists each token once (its line is its id)")
    return vocab


def check_vocab_ids(vocab: dict[str, int]) -> None:
    """A vocabulary's ids are 0..n-1, each once: a model is sized to n, and an id past it would fail mid-training."""
    if not vocab:
        raise InputError("the vocabulary is empty")
    by_id: dict[int, list[str]] = {}
    for token, index in vocab.items():
        by_id.setdefault(index, []).append(token)
    shared = [f"{index}: {', '.join(map(repr, tokens))}" for index, tokens in sorted(by_id.items()) if len(tokens) > 1]
    if shared:
        raise InputError(f"the vocabulary gives one id to several tokens ({'; '.join(shared[:5])}); each token needs "
                         "its own id")
    if min(by_id) < 0 or max(by_id) != len(by_id) - 1:
        gap = next((i for i in range(len(by_id)) if i not in by_id), max(by_id))
        raise InputError(f"the vocabulary's ids are not 0..{len(by_id) - 1}: they run from {min(by_id)} to "
                         f"{max(by_id)} (id {gap} is missing); a model's embedding has one row per id")


def _content(token: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a string or an AddedToken dict."""
    return token.get("content") if isinstance(token, dict) else token


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return jsonfiles.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None


def _from_tokenizer_json(data: dict[str, Any], path: Path) -> tuple[dict[str, int], dict[str, Any]]:
    """The WordPiece vocabulary and BertNormalizer settings inside a tokenizer.json."""
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise DataError(f"{path}: the model is {model.get('type')!r}, not a WordPiece model with a vocab")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise DataError(f"{path}: continuing_subword_prefix {model['continuing_subword_prefix']!r} is not '##'")
    settings: dict[str, Any] = {"unk_token": model.get("unk_token", "[UNK]"),
                                "max_input_chars_per_word": model.get("max_input_chars_per_word", 100)}
    normalizer = data.get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        settings.update(do_lower_case=normalizer.get("lowercase", True),
                        strip_accents=normalizer.get("strip_accents"),
                        tokenize_chinese_chars=normalizer.get("handle_chinese_chars", True),
                        clean_text=normalizer.get("clean_text", True))
    elif normalizer:
        raise DataError(f"{path}: normalizer {normalizer.get('type')!r} is not BERT's (BertNormalizer)")
    extra = [token["content"] for token in data.get("added_tokens", []) if token.get("special")]
    settings["additional_special_tokens"] = extra
    return {str(token): int(index) for token, index in model["vocab"].items()}, settings


def read_tokenizer_files(path: str | Path) -> tuple[dict[str, int], dict[str, Any]]:
    """(vocabulary, BertTokenizer keyword arguments) from a directory, a vocab.txt or a tokenizer.json."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such tokenizer directory or file (bertkit loads local files only)")
    if path.is_file() and path.suffix not in (".txt", ".json"):
        raise InputError(f"{path} is a file, not a tokenizer: give a tokenizer directory (one with vocab.txt or "
                         "tokenizer.json), or one of those files")
    directory = path.parent if path.is_file() else path
    vocab_file = path if path.is_file() and path.suffix == ".txt" else directory / "vocab.txt"
    json_file = path if path.is_file() and path.suffix == ".json" else directory / "tokenizer.json"
    vocab: dict[str, int] | None = None
    settings: dict[str, Any] = {}
    if json_file.is_file():
        vocab, settings = _from_tokenizer_json(_read_json(json_file), json_file)
    if vocab_file.is_file() and not (path.is_file() and path.suffix == ".json"):
        vocab = load_vocab(vocab_file)
    if vocab is None:
        raise FileNotFoundError(f"{directory}: no vocab.txt or tokenizer.json to read a vocabulary from")
    config_file = directory / "tokenizer_config.json"
    if config_file.is_file():
        config = _read_json(config_file)
        # a config's settings win over tokenizer.json's normaliser, as in transformers' BertTokenizer
        for key in ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "clean_text"):
            settings.pop(key, None)
        settings.update({key: config[key] for key in _CONFIG_KEYS if config.get(key) is not None})
        settings.update({name: _content(config[name]) for name in SPECIAL_TOKEN_NAMES if config.get(name)})
        for key in ("additional_special_tokens", "extra_special_tokens"):
            if isinstance(config.get(key), list):
                settings["additional_special_tokens"] = [
                    *settings.get("additional_special_tokens", []), *map(_content, config[key])]
        for token in (config.get("added_tokens_decoder") or {}).values():
            if isinstance(token, dict) and token.get("special"):
                settings.setdefault("additional_special_tokens", []).append(token["content"])
    map_file = directory / "special_tokens_map.json"
    if map_file.is_file():
        special_map = _read_json(map_file)
        settings.update({name: _content(special_map[name]) for name in SPECIAL_TOKEN_NAMES
                         if special_map.get(name)})
    standard = {settings.get(name, default) for name, default in
                zip(SPECIAL_TOKEN_NAMES, ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"))}
    extra = [t for t in dict.fromkeys(settings.get("additional_special_tokens", [])) if t not in standard]
    settings["additional_special_tokens"] = extra
    return vocab, settings


def write_tokenizer_files(tokenizer: BertTokenizer, path: str | Path) -> list[Path]:
    """vocab.txt + tokenizer_config.json + special_tokens_map.json in `path` (created if needed)."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    by_id = sorted(tokenizer.vocab.items(), key=lambda item: item[1])
    if [index for _, index in by_id] != list(range(len(by_id))):
        raise InputError("cannot write vocab.txt: the vocabulary ids are not 0..n-1 without gaps")
    if any("\n" in token or "\r" in token for token, _ in by_id):
        raise InputError("cannot write vocab.txt: a token contains a line break")
    specials = special_tokens_map(tokenizer)
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": tokenizer.do_lower_case,
        "strip_accents": tokenizer.strip_accents,
        "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars,
        "clean_up_tokenization_spaces": tokenizer.clean_up_tokenization_spaces,
        "model_max_length": tokenizer.model_max_length,
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        **specials,
    }
    return write_directory(directory, {"vocab.txt": "".join(token + "\n" for token, _ in by_id)}, config, specials)


def special_tokens_map(tokenizer: Any) -> dict[str, Any]:
    """special_tokens_map.json's content: the special tokens a tokenizer names, and its additional ones."""
    specials = {name: getattr(tokenizer, name) for name in SPECIAL_TOKEN_NAMES if getattr(tokenizer, name)}
    if tokenizer.additional_special_tokens:
        specials["additional_special_tokens"] = tokenizer.additional_special_tokens
    return specials


def write_directory(directory: Path, vocabulary: dict[str, str], config: dict[str, Any],
                    specials: dict[str, Any]) -> list[Path]:
    """A tokenizer directory: its vocabulary file(s) (name -> text), tokenizer_config.json and
    special_tokens_map.json, each written atomically; the paths written."""
    files = {**vocabulary, "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
             "special_tokens_map.json": json.dumps(specials, indent=2, ensure_ascii=False) + "\n"}
    for name, text in files.items():
        atomic_write_text(directory / name, text)
    return [directory / name for name in files]
