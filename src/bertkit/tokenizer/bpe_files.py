"""A byte-level BPE tokenizer's files in Hugging Face's layout: tokenizer.json (+ tokenizer_config.json,
special_tokens_map.json) read into `BPETokenizer`'s arguments, and written back.

tokenizer.json describes a whole pipeline, and bertkit reads only the one it implements, ModernBERT's (and OLMo's,
GPT-2's, RoBERTa's where they have it):

    normalizer       none, or NFC
    pre_tokenizer    ByteLevel (GPT-2's split; add_prefix_space either way)
    model            BPE without dropout, byte fallback or word prefixes/suffixes
    decoder          ByteLevel
    post_processor   TemplateProcessing "[CLS] $A [SEP]" and "[CLS] $A [SEP] $B:1 [SEP]:1"

Anything else (a Unigram or WordPiece model, a Metaspace pre-tokenizer, a lowercasing normaliser, ...) is refused
with the file and the step named: a pipeline read in part would give other ids than transformers without a word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import DataError, InputError
from bertkit.tokenizer.added_tokens import AddedToken
from bertkit.tokenizer.files import (
    SPECIAL_TOKEN_NAMES,
    _content,
    _read_json,
    check_vocab_ids,
    special_tokens_map,
    write_directory,
)

if TYPE_CHECKING:
    from bertkit.tokenizer.bpe import BPETokenizer

# tokenizer_config.json keys passed on to BPETokenizer unchanged
_CONFIG_KEYS = ("model_max_length", "padding_side", "truncation_side")
_FLAGS = ("special", "lstrip", "rstrip", "single_word", "normalized")


def is_bpe(path: str | Path) -> bool:
    """Whether `path` (a directory or a tokenizer.json) holds a tokenizer.json whose model is BPE."""
    path = Path(path)
    json_file = path if path.is_file() else path / "tokenizer.json"
    if json_file.suffix != ".json" or not json_file.is_file():
        return False
    return (_read_json(json_file).get("model") or {}).get("type") == "BPE"


def read_bpe_files(path: str | Path) -> dict[str, Any]:
    """`BPETokenizer`'s arguments from a directory holding tokenizer.json, or from a tokenizer.json."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such tokenizer directory or file (bertkit loads local files only)")
    json_file = path if path.is_file() else path / "tokenizer.json"
    if not json_file.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json to read a BPE tokenizer from")
    settings = _from_tokenizer_json(_read_json(json_file), json_file)
    _read_configs(json_file.parent, settings, json_file)
    return settings


def _from_tokenizer_json(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The BPE model, the added tokens and the pipeline's settings, each step checked to be the one implemented."""
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise DataError(f"{path}: the model is {model.get('type')!r}; bertkit reads byte-level BPE here (and WordPiece "
                        "through BertTokenizer), not this kind")
    if model.get("dropout") not in (None, 0, 0.0):
        raise DataError(f"{path}: BPE dropout {model['dropout']!r} is not implemented (it makes ids random)")
    if model.get("byte_fallback"):
        raise DataError(f"{path}: byte_fallback (SentencePiece-style <0xNN> tokens) is not implemented")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise DataError(f"{path}: the BPE model's {key} {model[key]!r} is not implemented (byte-level BPE "
                            "has none)")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise DataError(f"{path}: the BPE model has no vocab object of token -> id")
    settings: dict[str, Any] = {
        "vocab": {str(token): int(index) for token, index in vocab.items()},
        "merges": [_merge(merge, path) for merge in model.get("merges") or []],
        "bpe_unk_token": model.get("unk_token"), "fuse_unk": bool(model.get("fuse_unk", False)),
        "ignore_merges": bool(model.get("ignore_merges", False)),
        "nfc": _normalizer(data.get("normalizer"), path),
        "add_prefix_space": _pre_tokenizer(data.get("pre_tokenizer"), path),
    }
    decoder = data.get("decoder") or {}
    if decoder.get("type") != "ByteLevel":
        raise DataError(f"{path}: the decoder is {decoder.get('type')!r}, not ByteLevel; bertkit decodes byte-level "
                        "BPE only")
    settings["added_tokens"] = [_added_token(token, path) for token in data.get("added_tokens") or []]
    merged = {**settings["vocab"], **{token.content: token.id for token in settings["added_tokens"]}}
    try:
        check_vocab_ids(merged)
    except InputError as err:
        raise DataError(f"{path}: {err} (the BPE vocab with the added tokens)") from None
    settings["cls_token"], settings["sep_token"] = _template(data.get("post_processor"), merged, path)
    # tokenizer.json's own padding and truncation: transformers takes the sides from them (the call does the rest)
    if isinstance(data.get("padding"), dict) and data["padding"].get("direction") in ("Left", "Right"):
        settings["padding_side"] = data["padding"]["direction"].lower()
    if isinstance(data.get("truncation"), dict) and data["truncation"].get("direction") in ("Left", "Right"):
        settings["truncation_side"] = data["truncation"]["direction"].lower()
    return settings


def _merge(merge: Any, path: Path) -> tuple[str, str]:
    """A merge as tokenizer.json writes it: "a b" (older files) or ["a", "b"]."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise DataError(f"{path}: the merge {merge!r} is not two tokens")
    return parts[0], parts[1]


def _normalizer(normalizer: dict | None, path: Path) -> bool:
    """Whether the text is put in NFC first: none and NFC are the normalisers implemented."""
    if normalizer is None:
        return False
    kind = normalizer.get("type")
    if kind == "Sequence" and not normalizer.get("normalizers"):
        return False
    if kind != "NFC":
        raise DataError(f"{path}: the normalizer {kind!r} is not implemented (bertkit reads none, or NFC)")
    return True


def _pre_tokenizer(pre_tokenizer: dict | None, path: Path) -> bool:
    """add_prefix_space of the one pre-tokenizer implemented: ByteLevel with GPT-2's regular expression."""
    pre_tokenizer = pre_tokenizer or {}
    if pre_tokenizer.get("type") != "ByteLevel":
        raise DataError(f"{path}: the pre_tokenizer {pre_tokenizer.get('type')!r} is not implemented (bertkit reads "
                        "byte-level BPE: ByteLevel)")
    if not pre_tokenizer.get("use_regex", True):
        raise DataError(f"{path}: a ByteLevel pre_tokenizer without its regular expression (use_regex false) is not "
                        "implemented")
    return bool(pre_tokenizer.get("add_prefix_space", False))


def _added_token(token: dict, path: Path) -> AddedToken:
    if not isinstance(token, dict) or not isinstance(token.get("content"), str) or not isinstance(token.get("id"), int):
        raise DataError(f"{path}: the added token {token!r} has no content and id")
    if token.get("single_word"):
        raise DataError(f"{path}: the added token {token['content']!r} has single_word, which is not implemented")
    return AddedToken(id=token["id"], content=token["content"],
                      **{flag: bool(token.get(flag, flag == "normalized")) for flag in _FLAGS})


def _template(processor: dict | None, ids: dict[str, int], path: Path) -> tuple[str, str]:
    """(cls, sep) of a post-processor that builds BERT's rows, the only kind `encoding` builds, with the ids the
    tokens have (`ids`: the vocabulary with the added tokens)."""
    def piece(cls_or_sep: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": cls_or_sep, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    processor = processor or {}
    single, pair = processor.get("single") or [], processor.get("pair") or []
    if processor.get("type") == "TemplateProcessing" and len(single) == 3 and len(pair) == 5:
        cls, sep = (single[i].get("SpecialToken", {}).get("id") for i in (0, 2))
        if (single == [piece(cls, 0), sequence("A", 0), piece(sep, 0)]
                and pair == [piece(cls, 0), sequence("A", 0), piece(sep, 0), sequence("B", 1), piece(sep, 1)]):
            for token in (cls, sep):  # the template inserts the ids it lists, whatever the vocabulary says
                listed = (processor.get("special_tokens") or {}).get(token, {}).get("ids")
                if listed != [ids.get(token)]:
                    raise DataError(f"{path}: the post_processor inserts {listed} for {token!r}, whose id is "
                                    f"{ids.get(token)}")
            return cls, sep
    raise DataError(f"{path}: the post_processor is not implemented: bertkit builds [CLS] A [SEP] and "
                    "[CLS] A [SEP] B [SEP] (token types 0, then 1 from B on), a TemplateProcessing of that shape")


def _read_configs(directory: Path, settings: dict[str, Any], json_file: Path) -> None:
    """tokenizer_config.json and special_tokens_map.json where present: the special tokens' names and the settings.
    A name that disagrees with the post-processor, or a token listed there that tokenizer.json lacks or flags
    otherwise, is refused: transformers would add or change tokens, and bertkit does not guess how."""
    names: dict[str, Any] = {}
    config_file, map_file = directory / "tokenizer_config.json", directory / "special_tokens_map.json"
    if config_file.is_file():
        config = _read_json(config_file)
        settings.update({key: config[key] for key in _CONFIG_KEYS if config.get(key) is not None})
        names.update({name: _content(config[name]) for name in SPECIAL_TOKEN_NAMES if config.get(name)})
        extra = [_content(token) for key in ("additional_special_tokens", "extra_special_tokens")
                 if isinstance(config.get(key), list) for token in config[key]]
        if extra:
            settings["additional_special_tokens"] = list(dict.fromkeys(extra))
        added = {token.id: token for token in settings["added_tokens"]}
        for index, token in (config.get("added_tokens_decoder") or {}).items():
            _check_listed(index, token, added, config_file, json_file)
    if map_file.is_file():
        special_map = _read_json(map_file)
        names.update({name: _content(special_map[name]) for name in SPECIAL_TOKEN_NAMES if special_map.get(name)})
    for name in ("cls_token", "sep_token"):
        if names.get(name, settings[name]) != settings[name]:
            raise DataError(f"{directory}: {name} is {names[name]!r} in the configuration but {settings[name]!r} in "
                            f"{json_file.name}'s post_processor")
    # unnamed, the usual names count where the vocabulary holds them
    known = {*settings["vocab"], *(token.content for token in settings["added_tokens"])}
    for name, usual in (("unk_token", "[UNK]"), ("pad_token", "[PAD]"), ("mask_token", "[MASK]")):
        settings[name] = names.get(name, usual if usual in known else None)


def _check_listed(index: Any, token: Any, added: dict[int, AddedToken], config_file: Path, json_file: Path) -> None:
    """One entry of tokenizer_config.json's added_tokens_decoder against tokenizer.json's added token of that id."""
    content = _content(token)
    ours = added.get(int(index))
    if ours is None or ours.content != content:
        raise DataError(f"{config_file}: added_tokens_decoder lists {content!r} as id {index}, which {json_file.name} "
                        f"does not ({'no added token' if ours is None else repr(ours.content)} there)")
    if isinstance(token, dict):
        for flag in _FLAGS:
            if flag in token and bool(token[flag]) != getattr(ours, flag):
                raise DataError(f"{config_file}: the added token {content!r} has {flag} {token[flag]} there but "
                                f"{getattr(ours, flag)} in {json_file.name}")


def tokenizer_json(tokenizer: BPETokenizer) -> dict[str, Any]:
    """tokenizer.json for `tokenizer`, as `tokenizers` writes it, which transformers and `tokenizers` load."""
    def special(token: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    cls, sep = tokenizer.cls_token, tokenizer.sep_token
    # "a b" is the form every version of `tokenizers` reads; a token with a space in it needs the pair form
    spaced = any(" " in part for merge in tokenizer.merges for part in merge)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [token.as_json() for token in sorted(tokenizer.added_tokens, key=lambda t: t.id)],
        "normalizer": {"type": "NFC"} if tokenizer.nfc else None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": tokenizer.add_prefix_space, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls, 0), sequence("A", 0), special(sep, 0)],
            "pair": [special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1), special(sep, 1)],
            "special_tokens": {token: {"id": token, "ids": [tokenizer.convert_tokens_to_ids(token)],
                                       "tokens": [token]} for token in (cls, sep)},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": tokenizer.bpe_unk_token, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": tokenizer.fuse_unk, "byte_fallback": False,
            "ignore_merges": tokenizer.ignore_merges,
            "vocab": tokenizer.vocab,
            "merges": [list(merge) if spaced else " ".join(merge) for merge in tokenizer.merges],
        },
    }


def write_bpe_files(tokenizer: BPETokenizer, path: str | Path) -> list[Path]:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json in `path` (created if needed)."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    specials = special_tokens_map(tokenizer)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_max_length": tokenizer.model_max_length,
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        **specials,
    }
    return write_directory(directory, {"tokenizer.json": json.dumps(tokenizer_json(tokenizer), ensure_ascii=False)
                                       + "\n"}, config, specials)
