"""Cloze prompts: a task's text inside a template whose [MASK]s the masked-LM head fills with a label word.

    template = PromptTemplate("[MASK][MASK]新闻：{text}")     # a headline becomes "[MASK][MASK]新闻：<headline>"
    ids, _ = template.encode(tokenizer, ["恒生AH溢指收平"], max_length=64)
    words = template.label_word_ids(tokenizer, ["体育", "财经"])  # [[体, 育], [财, 经]] as token ids
    parse_label_words(["sports=体育", "finance=财经"])            # {"sports": "体育", "finance": "财经"}

A pretrained BERT has learned to fill blanks; asking it "which word goes in [MASK][MASK]新闻" turns
classification into the task it was pretrained on (PET, Schick & Schütze 2021; LM-BFF, Gao et al. 2021),
so it needs fewer labelled examples than a new classifier on the [CLS] vector.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bertkit.errors import InputError

TEXT_SLOT = "{text}"


class PromptError(InputError):
    """A template or label words that cannot make a cloze for this tokenizer."""


def parse_label_words(items: Sequence[str] | None, defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """{label: word} from LABEL=WORD items, over `defaults` (a named dataset's own words, in their order; an item
    replaces its label's word in place, a new label comes after them). A label given twice is an error: which of
    its words would be meant?"""
    words = dict(defaults or {})
    given: set[str] = set()
    for item in items or []:
        label, sep, word = item.partition("=")
        if not sep or not label or not word:
            raise PromptError(f"--label-words takes LABEL=WORD items, got {item!r}")
        if label in given:
            raise PromptError(f"label {label!r} is given twice in --label-words; give each label one word")
        given.add(label)
        words[label] = word
    return words


@dataclass(frozen=True)
class PromptTemplate:
    """A template with one `{text}` slot and one or more [MASK] tokens, e.g. "[MASK][MASK]新闻：{text}"."""

    template: str

    def __post_init__(self) -> None:
        if self.template.count(TEXT_SLOT) != 1:
            raise PromptError(f"a prompt template needs exactly one {TEXT_SLOT} slot, got {self.template!r}")
        if "[MASK]" not in self.template:
            raise PromptError(f"a prompt template needs at least one [MASK] for the label word, got {self.template!r}")

    def _parts(self, tokenizer) -> tuple[list[int], list[int]]:
        prefix, suffix = self.template.split(TEXT_SLOT)
        ids = tokenizer([prefix, suffix], add_special_tokens=False, return_token_type_ids=False,
                        return_attention_mask=False, verbose=False)["input_ids"]
        return ids[0], ids[1]

    def num_masks(self, tokenizer) -> int:
        prefix, suffix = self._parts(tokenizer)
        return (prefix + suffix).count(tokenizer.mask_token_id)

    def encode(self, tokenizer, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], list[int]]:
        """[CLS] prefix text suffix [SEP] per text, and the indices of the texts that were cut to fit `max_length`:
        a long text is cut, never the template (its [MASK]s stay)."""
        prefix, suffix = self._parts(tokenizer)
        room = max_length - len(prefix) - len(suffix) - 2
        if room < 1:
            raise PromptError(f"max_length {max_length} leaves no room for text in the template {self.template!r} "
                              f"({len(prefix) + len(suffix)} tokens)")
        bodies = tokenizer(list(texts), add_special_tokens=False, return_token_type_ids=False,
                           return_attention_mask=False, verbose=False)["input_ids"] if texts else []
        if any(tokenizer.mask_token_id in body for body in bodies):
            raise PromptError("a text contains the [MASK] token itself; the prompt's [MASK]s would be ambiguous")
        rows = [[tokenizer.cls_token_id] + prefix + body[:room] + suffix + [tokenizer.sep_token_id] for body in bodies]
        return rows, [i for i, body in enumerate(bodies) if len(body) > room]

    def label_word_ids(self, tokenizer, label_words: Sequence[str]) -> list[list[int]]:
        """Each label word as token ids, one per [MASK] of the template; clear errors where that cannot be."""
        masks = self.num_masks(tokenizer)
        rows = tokenizer(list(label_words), add_special_tokens=False, return_token_type_ids=False,
                         return_attention_mask=False, verbose=False)["input_ids"]
        special = set(tokenizer.all_special_ids)
        for word, ids in zip(label_words, rows):
            if tokenizer.unk_token_id in ids:
                raise PromptError(f"label word {word!r} has a character the vocabulary lacks ({ids})")
            if special & set(ids):  # [MASK] would score the mask against itself, [SEP] the end of the text
                names = ", ".join(dict.fromkeys(tokenizer.convert_ids_to_tokens([i for i in ids if i in special])))
                raise PromptError(f"label word {word!r} is, or holds, a special token ({names}): a label word must be "
                                  "a word of the vocabulary, which the masked-LM head predicts")
            if len(ids) != masks:
                raise PromptError(f"label word {word!r} is {len(ids)} tokens, but the template has {masks} [MASK]s; "
                                  "every label word must fill them exactly")
        if len({tuple(ids) for ids in rows}) != len(rows):
            raise PromptError(f"two labels share a label word: {list(label_words)}")
        return [list(ids) for ids in rows]

    def config(self, tokenizer, label_words: Sequence[str]) -> dict:
        """The `prompt` entry of a BertConfig: what BertForPromptClassification and inference read."""
        return {"template": self.template, "label_words": list(label_words),
                "label_word_ids": self.label_word_ids(tokenizer, label_words),
                "mask_token_id": tokenizer.mask_token_id}
