"""BERT's WordPiece tokenizer and byte-level BPE (ModernBERT's), identical in output to Hugging Face's;
`load_tokenizer(path)` gives whichever a directory holds, `BertTokenizer` and `BPETokenizer` are the two.

- auto.py            load_tokenizer: the tokenizer class a directory's files call for
- base.py            what both share: the transformers-style call, padding/truncation rules, look-ups
- bert.py            BertTokenizer: WordPiece files, vocabulary, decode
- basic.py           its pure-Python backend: clean, split (CJK, punctuation, accents), WordPiece
- bpe.py             BPETokenizer: byte-level BPE's vocabulary, special tokens, decode
- bytelevel.py       its pure-Python backend: NFC, GPT-2's split, the byte-to-character table, merges by rank, offsets
- added_tokens.py    tokens found in the text before anything else ([MASK], ...), with lstrip / rstrip
- bpe_files.py       tokenizer.json (BPE) / tokenizer_config.json reading, refusal of what is not implemented, writing
- fast.py            the backends on Hugging Face `tokenizers`, used by backend="auto" when installed
- encoding.py        special tokens, truncation strategies, overflow windows, padding
- detokenize.py      decoded WordPiece text back to running text (for people and for BLEU)
- files.py           vocab.txt / tokenizer.json (WordPiece) / tokenizer_config.json reading and writing
- unicode_tables.py  character classes as `tokenizers` sees them (its Unicode version, not Python's), NFC, its alignment
"""

from bertkit.tokenizer.auto import load_tokenizer
from bertkit.tokenizer.bert import BatchEncoding, BertTokenizer, clean_up_tokenization
from bertkit.tokenizer.bpe import BPETokenizer
from bertkit.tokenizer.detokenize import detokenize

__all__ = ["BPETokenizer", "BatchEncoding", "BertTokenizer", "clean_up_tokenization", "detokenize", "load_tokenizer"]
