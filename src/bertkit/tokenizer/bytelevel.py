"""Byte-level BPE in pure Python, as Hugging Face `tokenizers` runs it for GPT-2, RoBERTa, OLMo and ModernBERT; the
"python" backend of `BPETokenizer`.

    added tokens   [CLS], [MASK], ... found in the text first and never split (`added_tokens`)
    NFC            canonical composition, where tokenizer.json asks for it ("é" written as e + U+0301 becomes é)
    split          GPT-2's regular expression: English clitics, runs of letters, of digits, of other symbols (each
                   with the one space before it), and runs of whitespace
    bytes          each piece's UTF-8 bytes, each byte written as one printable character (GPT-2's table), so
                   that any text is spelled in a 256-letter alphabet and nothing is ever unknown
    merges         the adjacent pair of tokens whose merge was learned earliest is merged, again and again,
                   until no learned merge applies; the tokens left are the word's ids

A word is merged once and its ids are cached, so frequent words cost one dict look-up.
Offsets (`PythonBPEBackend.encode_offsets`) follow each token back through these steps to the original text.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from itertools import chain

from bertkit.errors import InputError
from bertkit.tokenizer import unicode_tables as uni
from bertkit.tokenizer.added_tokens import AddedToken, AddedTokens
from bertkit.tokenizer.basic import _Cache


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character table. The 188 bytes that are printable Latin-1 characters stand for themselves;
    the other 68 (control bytes, the space, DEL, the no-break space, the soft hyphen) take the characters from
    U+0100 on, in byte order, so that no token holds a space or an invisible character (the space is "Ġ")."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table, moved = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte], moved = chr(256 + moved), moved + 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {char: byte for byte, char in BYTE_TO_CHAR.items()}
# the bytes of a piece read as Latin-1 (byte b -> U+00bb), then each turned into its table character in one pass
_LATIN1_TO_BYTE_CHAR = str.maketrans({chr(byte): char for byte, char in BYTE_TO_CHAR.items()})

# GPT-2's split, 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, with letters, numbers
# and whitespace as `tokenizers`' regex engine knows them. The last two alternatives leave the final space of a run
# of whitespace to the word after it: "a   b" -> "a", "  ", " b".
_L, _N, _S = (uni.char_class(table) for table in (uni.LETTER, uni.NUMBER, uni.WHITESPACE))
SPLIT = re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{_L}]+| ?[{_N}]+| ?[^{_S}{_L}{_N}]+|[{_S}]+(?![^{_S}])|[{_S}]+")


def pre_tokenize(text: str, add_prefix_space: bool = False) -> list[str]:
    """The words of `text` as byte-level BPE sees them: split, then spelled in byte characters."""
    if add_prefix_space and text and not text.startswith(" "):  # RoBERTa's "hello" and " hello" alike
        text = " " + text
    return [word.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_BYTE_CHAR) for word in SPLIT.findall(text)]


class BytePairEncoding:
    """A vocabulary and its ranked merges: a word in byte characters -> its token ids, with a per-word cache."""

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], unk_token: str | None = None,
                 fuse_unk: bool = False, ignore_merges: bool = False, cache_size: int = 200_000):
        for a, b in merges:
            lacking = next((token for token in (a, b, a + b) if token not in vocab), None)
            if lacking is not None:
                raise InputError(f"the merge {a!r} + {b!r} needs {lacking!r}, which the vocabulary lacks")
        if unk_token is not None and unk_token not in vocab:
            raise InputError(f"the BPE model's unknown token {unk_token!r} is not in its vocabulary")
        self.vocab = vocab
        self.tokens = {index: token for token, index in vocab.items()}
        # (left id, right id) -> (rank, merged id); a pair listed twice keeps its later rank, as in `tokenizers`
        self.merges = {(vocab[a], vocab[b]): (rank, vocab[a + b]) for rank, (a, b) in enumerate(merges)}
        self.unk_id = None if unk_token is None else vocab[unk_token]
        self.fuse_unk, self.ignore_merges = fuse_unk, ignore_merges
        self.ids = _Cache(self._ids, cache_size)

    def _symbols(self, word: str) -> list[int]:
        """The word's characters as ids. A character outside the vocabulary becomes the unknown token (consecutive
        ones fused into one where fuse_unk), or is dropped where there is none, as in `tokenizers`: byte-level
        vocabularies hold all 256 byte characters, so this happens only with a vocabulary that lacks some."""
        symbols: list[int] = []
        unknown = False  # whether the last symbol is an unknown token that the next may fuse with
        for char in word:
            index = self.vocab.get(char)
            if index is not None:
                symbols.append(index)
                unknown = False
            elif self.unk_id is not None and not (unknown and self.fuse_unk):
                symbols.append(self.unk_id)
                unknown = True
        return symbols

    def spans(self, word: str, ids: Sequence[int]) -> list[tuple[int, int]]:
        """The [start, stop) in `word` of each of its tokens `ids` (`self.ids[word]`): each token covers as many
        characters as it is long, an unknown token one character (all of a run, where fuse_unk), and a character
        dropped for want of an unknown token none."""
        spans: list[tuple[int, int]] = []
        at = 0
        for index in ids:
            if self.unk_id is None:
                while word[at] not in self.vocab:  # dropped, so no token's
                    at += 1
            if index == self.unk_id and word[at] not in self.vocab:
                stop = at + 1
                while self.fuse_unk and stop < len(word) and word[stop] not in self.vocab:
                    stop += 1
            else:
                stop = at + len(self.tokens[index])
            spans.append((at, stop))
            at = stop
        return spans

    def _ids(self, word: str) -> tuple[int, ...]:
        """Merge the lowest-ranked adjacent pair first, the leftmost of equal ranks, until none applies.

        The symbols form a linked list (`left`, `right`, merged ones marked dead) and the candidate merges a heap of
        (rank, position, merged id). A merge changes its neighbours' pairs, so the pairs with the neighbours are
        pushed again, and a popped entry whose pair has changed since it was pushed is stale and skipped. This is
        the order `tokenizers` merges in, which decides the result where merges compete for a symbol."""
        if self.ignore_merges and word in self.vocab:  # a word the vocabulary holds whole is one token
            return (self.vocab[word],)
        ids = self._symbols(word)
        n = len(ids)
        left, right, alive = list(range(-1, n - 1)), [*range(1, n), -1], [True] * n
        merges = self.merges
        heap = [(merges[pair][0], i, merges[pair][1]) for i, pair in enumerate(zip(ids, ids[1:])) if pair in merges]
        heapq.heapify(heap)
        while heap:
            _, i, new = heapq.heappop(heap)
            j = right[i]
            if not alive[i] or j == -1 or merges.get((ids[i], ids[j]), (0, None))[1] != new:
                continue  # stale: one of the pair was merged into something else since
            ids[i], alive[j] = new, False
            right[i] = right[j]
            if right[j] != -1:
                left[right[j]] = i
            if left[i] != -1 and (ids[left[i]], new) in merges:
                rank, merged = merges[ids[left[i]], new]
                heapq.heappush(heap, (rank, left[i], merged))
            if right[i] != -1 and (new, ids[right[i]]) in merges:
                rank, merged = merges[new, ids[right[i]]]
                heapq.heappush(heap, (rank, i, merged))
        return tuple(index for index, live in zip(ids, alive) if live)


class PythonBPEBackend:
    """Text -> ids (no special tokens added) in pure Python: added tokens, NFC, split, bytes, merges."""

    name = "python"

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], added_tokens: Sequence[AddedToken],
                 *, nfc: bool, add_prefix_space: bool, unk_token: str | None = None, fuse_unk: bool = False,
                 ignore_merges: bool = False):
        self.added = AddedTokens(added_tokens, uni.nfc if nfc else None, uni.nfc_aligned if nfc else None)
        self.bpe = BytePairEncoding(vocab, merges, unk_token, fuse_unk, ignore_merges)
        self.add_prefix_space = add_prefix_space

    def encode_ids(self, text: str) -> list[int]:
        """The token ids of `text`."""
        ids_of = self.bpe.ids.__getitem__
        ids: list[int] = []
        for piece, added in self.added.split(text):
            if added is None:  # each piece is pre-tokenized on its own, so it may get a prefix space of its own
                ids += chain.from_iterable(map(ids_of, pre_tokenize(piece, self.add_prefix_space)))
            else:
                ids.append(added)
        return ids

    def tokens(self, text: str) -> list[str]:
        """The tokens of `text` as strings: the vocabulary's, and each added token as it stands in the text."""
        spelled, ids_of = self.bpe.tokens, self.bpe.ids
        tokens: list[str] = []
        for piece, added in self.added.split(text):
            if added is None:
                tokens += (spelled[i] for word in pre_tokenize(piece, self.add_prefix_space) for i in ids_of[word])
            else:
                tokens.append(piece)
        return tokens

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The token ids of `text` and each token's (start, end) in it, as `tokenizers` computes them.

        A character stands at the place of the character of the text it is aligned with (NFC may have merged or
        split characters: `uni.nfc_aligned`), and a token spans the characters its bytes come from, so a token
        holding part of a character's bytes spans that whole character, as do the other tokens of that character
        (🦉 in three tokens gives each the emoji's span). A token keeps the space it starts with ("Ġis" spans
        " is"): the ByteLevel pre-tokenizer's trim_offsets does not move offsets in `tokenizers`, only a ByteLevel
        post-processor would, and tokenizer.json files with one are not read. An added token spans what it matched
        with the whitespace it took (lstrip, rstrip)."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for piece, added, origin in self.added.split_aligned(text):
            if added is not None:
                ids.append(added)
                offsets.append((origin[0], origin[-1] + 1))
                continue
            if self.add_prefix_space and not piece.startswith(" "):
                # the space put in front stands where the piece's first character does
                piece, origin = " " + piece, [origin[0], *origin]
            for match in SPLIT.finditer(piece):
                word = match.group()
                data = word.encode("utf-8")
                # the piece's character each byte comes from
                if len(data) == len(word):
                    char_of_byte: Sequence[int] = range(match.start(), match.end())
                else:
                    char_of_byte = [match.start() + i for i, char in enumerate(word)
                                    for _ in range(len(char.encode("utf-8")))]
                spelled = data.decode("latin-1").translate(_LATIN1_TO_BYTE_CHAR)
                word_ids = self.bpe.ids[spelled]
                for token_id, (first, last) in zip(word_ids, self.bpe.spans(spelled, word_ids)):
                    ids.append(token_id)
                    offsets.append((origin[char_of_byte[first]], origin[char_of_byte[last - 1]] + 1))
        return ids, offsets

    def encode(self, texts: list[str], offsets: bool = False) -> list[tuple[list[int], list | None]]:
        """For each text, its ids and (when asked) its offsets."""
        if offsets:
            return [self.encode_offsets(text) for text in texts]
        return [(self.encode_ids(text), None) for text in texts]
