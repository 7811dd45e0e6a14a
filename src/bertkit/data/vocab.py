"""Building a BERT vocabulary from a corpus: characters for Chinese, WordPiece for mixed text.

    build_vocab(texts, "my_vocab", vocab_size=8000)     # picks characters or WordPiece from the text
    BertTokenizer.from_pretrained("my_vocab")            # vocab.txt + tokenizer_config.json, also for transformers

Words are counted after BERT's own normalisation and split (`tokenizer.basic.BasicTokenizer`, with the
same lowercasing the saved tokenizer will use), so every token is one the tokenizer can produce.

- Characters (`char_vocab`): every character seen at least `min_count` times, most frequent first. A
  Chinese ideograph is always a word of its own; other characters also appear inside words (the "b"
  of "abc"), and those get a "##" piece as well, so such words split into characters, not [UNK].
- WordPiece (`wordpiece_vocab`): start from all characters (word-initial and "##" forms) and merge the
  most frequent adjacent pair of pieces until the vocabulary has `vocab_size` tokens. This is what the
  WordPiece trainer of Hugging Face `tokenizers` does (it is BPE with a "##" continuation prefix); that
  trainer is used when installed, the readable one below otherwise.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from bertkit.data.quality import DataQualityError, DataReport
from bertkit.errors import InputError
from bertkit.tokenizer import unicode_tables as uni
from bertkit.tokenizer.basic import BasicTokenizer
from bertkit.utils.visible import is_blank

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PREFIX = "##"


def count_words(texts: Iterable[str], lowercase: bool = True) -> Counter[str]:
    """How often each word occurs, after BERT's normalisation and split."""
    basic = BasicTokenizer(lowercase=lowercase)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(basic.split(text))
    return counts


def char_vocab(texts: Iterable[str], *, min_count: int = 1, vocab_size: int | None = None,
               lowercase: bool = True) -> list[str]:
    """Special tokens, then characters (and "##" pieces of characters seen inside words), most frequent first."""
    if min_count < 1:
        raise InputError(f"min_count must be at least 1, not {min_count}")
    counts: Counter[str] = Counter()  # "c" at the start of a word, "##c" inside one
    totals: Counter[str] = Counter()  # the character wherever it appears
    for word, n in count_words(texts, lowercase).items():
        counts[word[0]] += n
        for char in word[1:]:
            counts[PREFIX + char] += n
        for char in word:
            totals[char] += n
    kept = [t for t in counts if totals[t[-1]] >= min_count]
    kept.sort(key=lambda t: (-counts[t], t))
    if vocab_size is not None:
        kept = kept[:max(0, vocab_size - len(SPECIAL_TOKENS))]
    return SPECIAL_TOKENS + [t for t in kept if t not in SPECIAL_TOKENS]


def _merge(pieces: list[str], first: str, second: str) -> list[str]:
    """`pieces` with every adjacent (first, second) joined, left to right."""
    merged, i = [], 0
    while i < len(pieces):
        if i + 1 < len(pieces) and pieces[i] == first and pieces[i + 1] == second:
            merged.append(first + second[len(PREFIX):])
            i += 2
        else:
            merged.append(pieces[i])
            i += 1
    return merged


def train_wordpiece(word_counts: Counter[str], vocab_size: int, min_frequency: int = 2) -> list[str]:
    """WordPiece tokens learnt by merging the most frequent adjacent pieces (ties: the smaller pair)."""
    pieces = {word: [word[0]] + [PREFIX + c for c in word[1:]] for word in word_counts}
    alphabet: Counter[str] = Counter()
    for word, n in word_counts.items():
        for piece in pieces[word]:
            alphabet[piece] += n
    vocab = SPECIAL_TOKENS + sorted((p for p in alphabet if p not in SPECIAL_TOKENS), key=lambda p: (-alphabet[p], p))
    known = set(vocab)
    # pair -> how often it occurs, and which words contain it (updated incrementally after each merge)
    pair_counts: Counter[tuple[str, str]] = Counter()
    pair_words: dict[tuple[str, str], set[str]] = defaultdict(set)
    for word, n in word_counts.items():
        for pair in zip(pieces[word], pieces[word][1:]):
            pair_counts[pair] += n
            pair_words[pair].add(word)
    heap = [(-n, pair) for pair, n in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if -negative != pair_counts.get(pair, 0):  # stale entry: the count changed since it was pushed
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], pair))
            continue
        if -negative < min_frequency:
            break
        first, second = pair
        token = first + second[len(PREFIX):]
        if token not in known:
            vocab.append(token)
            known.add(token)
        for word in pair_words.pop(pair, ()):
            n, old = word_counts[word], pieces[word]
            new = _merge(old, first, second)
            if new == old:
                continue
            for old_pair in zip(old, old[1:]):
                pair_counts[old_pair] -= n
            for new_pair in zip(new, new[1:]):
                pair_counts[new_pair] += n
                pair_words[new_pair].add(word)
                heapq.heappush(heap, (-pair_counts[new_pair], new_pair))
            pieces[word] = new
        pair_counts.pop(pair, None)
    return vocab


def _tokenizers_wordpiece(texts: Iterable[str], vocab_size: int, min_frequency: int, lowercase: bool) -> list[str]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=SPECIAL_TOKENS, continuing_subword_prefix=PREFIX,
                                        show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


def wordpiece_vocab(texts: Iterable[str], *, vocab_size: int, min_frequency: int = 2, lowercase: bool = True,
                    trainer: str = "auto") -> list[str]:
    """A WordPiece vocabulary of about `vocab_size` tokens (more if the characters alone need more)."""
    from bertkit.tokenizer.fast import available

    if trainer not in ("auto", "tokenizers", "python"):
        raise InputError(f"trainer must be 'auto', 'tokenizers' or 'python', not {trainer!r}")
    if trainer == "tokenizers" or (trainer == "auto" and available()):
        return _tokenizers_wordpiece(texts, vocab_size, min_frequency, lowercase)
    return train_wordpiece(count_words(texts, lowercase), vocab_size, min_frequency)


CJK_SHARE = 0.5  # kind "auto": a character vocabulary when at least this share of the characters are CJK
AUTO_SAMPLE = 20_000  # kind "auto" decides on the first this many texts


def cjk_share(texts: list[str]) -> float:
    """The share of CJK ideographs among the non-space characters (0 for no characters)."""
    chars = [c for text in texts for c in text if not c.isspace()]
    return sum(uni.contains(uni.CJK, c) for c in chars) / len(chars) if chars else 0.0


def build_vocab(texts: Iterable[str], out: str | Path, *, vocab_size: int | None = None, kind: str = "auto",
                min_count: int = 1, lowercase: bool = True, trainer: str = "auto",
                warn_if_smaller: bool = False) -> Path:
    """Build a vocabulary and save it as a tokenizer directory; `kind` is "chars", "wordpiece" or "auto".

    `vocab_size` is a cap; with `warn_if_smaller` (`bertkit vocab --size`: the size asked for) a vocabulary that
    comes out smaller or larger is reported in a warning with its count. A vocabulary of nothing but the special
    tokens (every character rarer than `min_count`) is a DataQualityError: it would read every text as [UNK]."""
    from bertkit.tokenizer import BertTokenizer

    texts = [text for text in texts if not is_blank(text)]
    if not texts:
        raise InputError("no text to build a vocabulary from")
    chosen = ""  # why kind "auto" chose WordPiece, for the error that asks for its size
    if kind == "auto":
        share = cjk_share(texts[:AUTO_SAMPLE])
        kind = "chars" if share >= CJK_SHARE else "wordpiece"
        sample = f" (in its first {AUTO_SAMPLE:,} sentences)" if len(texts) > AUTO_SAMPLE else ""
        chosen = (f"{share:.1%} of the text's characters{sample} are CJK ideographs, less than the {CJK_SHARE:.0%} "
                  "from which kind 'auto' builds a vocabulary of characters, so it chose WordPiece, which ")
    if kind == "chars":
        tokens = char_vocab(texts, min_count=min_count, vocab_size=vocab_size, lowercase=lowercase)
    elif kind == "wordpiece":
        if vocab_size is None:
            raise InputError((chosen or "a WordPiece vocabulary ") + "needs a size: give --size N (vocab_size in "
                             "Python), e.g. 8000" + (", or --kind chars for a vocabulary of characters" if chosen else
                                                     ""))
        tokens = wordpiece_vocab(texts, vocab_size=vocab_size, min_frequency=max(min_count, 2),
                                 lowercase=lowercase, trainer=trainer)
    else:
        raise InputError(f"kind must be 'auto', 'chars' or 'wordpiece', not {kind!r}")
    if len(tokens) <= len(SPECIAL_TOKENS):
        raise DataQualityError(f"no character of the text occurs at least {min_count:,} times (the minimum count): the "
                               f"vocabulary would hold only the {len(SPECIAL_TOKENS)} special tokens, and read every "
                               "text as [UNK]; lower the minimum count (--min-count)")
    if warn_if_smaller:
        seen = f" seen at least {min_count} times" if min_count > 1 else ""
        alphabet = sum(1 for token in tokens if len(token.removeprefix(PREFIX)) == 1)
        DataReport("the text").size(
            vocab_size, len(tokens), "tokens", "the vocabulary",
            why_more=f"WordPiece starts from every character of the text (and its ## form), {alphabet:,} tokens before "
                     "any merge, so that no character becomes [UNK]",
            why_less=(f"the text has no more distinct characters{seen}" if kind == "chars" else
                      f"no more pieces occur at least {max(min_count, 2)} times to merge")).check(stacklevel=2)
    tokenizer = BertTokenizer({token: i for i, token in enumerate(tokens)}, do_lower_case=lowercase,
                              backend="python")
    tokenizer.save_pretrained(out)
    return Path(out)


def build_char_vocab(texts: Iterable[str], out: str | Path, *, min_count: int = 1, vocab_size: int | None = None,
                     lowercase: bool = True) -> Path:
    """A character vocabulary (for Chinese) saved as a tokenizer directory."""
    return build_vocab(texts, out, vocab_size=vocab_size, kind="chars", min_count=min_count, lowercase=lowercase)
