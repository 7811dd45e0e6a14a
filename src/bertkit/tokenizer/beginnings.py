"""The first tokens of long texts, from their beginnings: a text cut to its first N tokens needs no more of it.

Encoding a long document cut at 512 tokens tokenized all of it, for 512 tokens kept (an inews article: 1,164
characters on average, about 2.3 times what its first 512 tokens take). Where a tokenizer splits words at a
character whatever surrounds it (BERT's WordPiece: white space, and each CJK ideograph, is a word boundary; see
`BertTokenizer.word_boundary`), the text up to such a character gives exactly the tokens of the whole text up to
there. So a beginning ending before a boundary is tokenized; when it already has more tokens than are kept, the
text is known to be cut and those are its first tokens. A beginning with too few tokens grows (by the characters a
token took in it) until it has enough, or is the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

Encoded = tuple[list[int], Any]  # a backend's ids and offsets (or None) of one text

# The first beginning tried: `keep` characters and a quarter more (a CJK ideograph is a token; digits and Latin words
# take more characters a token), and a few more for short limits.
FIRST_SHARE, FIRST_EXTRA = 1.25, 16


def encode_beginnings(encode: Callable[..., list[Encoded]], texts: Sequence[str], keep: int,
                      boundary: re.Pattern, offsets: bool = False) -> tuple[list[Encoded], list[bool]]:
    """For each text, what `encode` gives for it whole, or for a beginning of it with more than `keep` tokens (the
    whole text's first tokens, offsets and all); and whether each was found longer than `keep` from a beginning
    (its full length is then not known). `boundary` matches a character that always ends a word;
    `encode(texts, offsets=...)` is a backend's batch call."""
    first = int(keep * FIRST_SHARE) + FIRST_EXTRA  # characters to try first
    longer = [False] * len(texts)
    if all(len(text) <= first for text in texts):  # short texts (most calls): tokenized whole, as they are
        return encode(list(texts), offsets=offsets), longer
    results: list[Encoded | None] = [None] * len(texts)
    pending = dict.fromkeys(range(len(texts)), first)
    while pending:
        beginnings: dict[int, int] = {}
        whole: list[int] = []
        for i, chars in pending.items():
            text = texts[i]
            found = boundary.search(text, chars) if len(text) > chars else None  # the first boundary from there
            end = found.start() if found else None
            if end is None or 4 * end > 3 * len(text):  # no boundary, or too little left to be worth a second try
                whole.append(i)
            else:
                beginnings[i] = end
        encoded = encode([texts[i][:end] for i, end in beginnings.items()] + [texts[i] for i in whole],
                         offsets=offsets)
        pending = {}
        for (i, end), result in zip(beginnings.items(), encoded):
            if len(result[0]) > keep:
                results[i], longer[i] = result, True
            else:  # too few tokens: grow by the characters a token took here, and a quarter more
                pending[i] = max(2 * end, int(end * (keep + 1) / max(1, len(result[0])) * FIRST_SHARE) + FIRST_EXTRA)
        for i, result in zip(whole, encoded[len(beginnings):]):
            results[i] = result
    return results, longer  # type: ignore[return-value]
