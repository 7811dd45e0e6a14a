"""BERT's WordPiece tokenizer, identical in output to Hugging Face's; `BertTokenizer` is the entry point.

- bert.py            BertTokenizer: files, vocabulary, decode
- base.py            what tokenizers share: the transformers-style call, padding/truncation rules, look-ups
- basic.py           the pure-Python backend: clean, split (CJK, punctuation, accents), WordPiece
- fast.py            the backend on Hugging Face `tokenizers`, used by backend="auto" when installed
- encoding.py        special tokens, truncation strategies, overflow windows, padding
- detokenize.py      decoded WordPiece text back to running text (for people and for BLEU)
- files.py           vocab.txt / tokenizer.json / tokenizer_config.json reading and writing
- unicode_tables.py  character classes as `tokenizers` sees them (its Unicode version, not Python's)
"""

from bertkit.tokenizer.bert import BatchEncoding, BertTokenizer, clean_up_tokenization
from bertkit.tokenizer.detokenize import detokenize

__all__ = ["BatchEncoding", "BertTokenizer", "clean_up_tokenization", "detokenize"]
