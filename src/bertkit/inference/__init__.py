"""Fast inference: sentence vectors (`encode`) and task predictions (`predict`), no compute spent on padding.

Every call tokenizes its texts once, sorts them by length and cuts the sorted list into batches, each
padded only to its own longest row (batching.py); results go back in input order. encode.py makes sentence
vectors, predict.py labels and entity spans, images.py an image model's labels; loading.py loads a model
directory for a command through the registry of families; precision.py makes bf16 and int8 copies and
export.py writes ONNX.

    vectors = encode(model, tokenizer, ["今天天气很好", "明天会下雨"], pooling="mean", normalize=True)
    predict(classifier, tokenizer, ["这家店很好"])
    # [{"label": "positive", "score": 0.97, "probabilities": {"negative": 0.03, "positive": 0.97}}]
    predict(tagger, tokenizer, ["张三在北京工作"])
    # [[{"entity": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.99}, {"entity": "LOC", ...}]]

Entity spans are character offsets into the original text. A word takes the tag of its first sub-token.

`dtype="bfloat16"` or `"int8"` runs a converted copy of the model (bertkit.inference.precision); the outputs are float32
either way. Convert once with `precision.for_inference(model, dtype)` to skip the conversion on every call.
A library call draws no progress bar unless asked (`progress=True`); the command line asks for one on long
inputs drawn to a terminal (`progress=None`).
"""

from bertkit.inference.batching import (
    CHUNK_TEXTS,
    PROGRESS_MIN_TEXTS,
    EmptyTextWarning,
    EncodedText,
    InputTooLongError,
    NonFiniteOutputError,
    TruncationWarning,
    check_texts,
    collate,
    in_chunks,
    run_sorted,
    show_progress,
    sorted_batches,
    tokenize,
)
from bertkit.inference.encode import encode, encode_stream
from bertkit.inference.predict import entity_spans, label_names, predict, predict_stream, prompt_rows, tag_words
from bertkit.models.sentence_files import POOLINGS

__all__ = ["CHUNK_TEXTS", "POOLINGS", "PROGRESS_MIN_TEXTS", "EmptyTextWarning", "EncodedText", "InputTooLongError",
           "NonFiniteOutputError", "TruncationWarning", "check_texts", "collate", "encode", "encode_stream",
           "entity_spans", "in_chunks", "label_names", "predict", "predict_stream", "prompt_rows",
           "run_sorted", "show_progress", "sorted_batches", "tag_words", "tokenize"]
