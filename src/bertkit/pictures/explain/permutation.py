"""Self-attention without positions is permutation-equivariant; position embeddings break the symmetry.

A tiny random BERT reads "the cat sat on the mat" and the same words with "cat" moved to the end. With its
position embeddings zeroed, every word's output just moves with the word (and the two "the"s are identical);
with them, the outputs change.
"""

from __future__ import annotations

import os

import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "without position information the same token gets the same output wherever it stands"
WORDS = ("the", "cat", "sat", "on", "the", "mat")
MOVE_FROM, MOVE_TO = 1, 5  # "cat" to the end


def _tiny_bert(seed: int) -> tuple[BertModel, dict[str, int]]:
    vocab = {w: i + 1 for i, w in enumerate(sorted(set(WORDS)))}             # 0 stays the padding id
    config = BertConfig(vocab_size=len(vocab) + 1, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, initializer_range=0.5)  # wide weights: peaked attention
    torch.manual_seed(seed)
    return BertModel(config).eval(), vocab


def explain(out: str | os.PathLike | None = None, fmt: str = "png", seed: int = 0) -> Explanation:
    """Move one word and compare every word's output before and after, with and without position embeddings."""
    model, vocab = _tiny_bert(seed)
    order = list(range(len(WORDS)))
    order.insert(MOVE_TO, order.pop(MOVE_FROM))           # order[new position] = old position
    ids = torch.tensor([[vocab[w] for w in WORDS]])
    moved_ids = ids[:, order]
    first, second = [i for i, w in enumerate(WORDS) if w == "the"]

    results, per_word = {}, {}
    for label in ("without positions", "with positions"):
        if label == "without positions":
            saved = model.embeddings.position_embeddings.weight.detach().clone()
            model.embeddings.position_embeddings.weight.data.zero_()
        with torch.no_grad():
            before = model(ids).last_hidden_state[0]                           # (T, C)
            after = model(moved_ids).last_hidden_state[0]
        if label == "without positions":
            model.embeddings.position_embeddings.weight.data.copy_(saved)
        # each word's output after the move against its own output before it
        change = (after - before[order]).norm(dim=-1) / before[order].norm(dim=-1)   # (T,), by new position
        moved_new = order.index(MOVE_FROM)
        per_word[label] = {WORDS[old]: float(change[new]) for new, old in enumerate(order) if WORDS[old] != "the"}
        results[label] = {
            "moved_word_change": float(change[moved_new]),
            "other_words_change": float(torch.cat([change[:moved_new], change[moved_new + 1:]]).max()),
            "same_word_two_places": float((before[first] - before[second]).norm() / before[first].norm()),
        }

    numbers = {"without_positions": results["without positions"], "with_positions": results["with positions"],
               "order": order}
    rows = [(label, r["moved_word_change"], r["other_words_change"], r["same_word_two_places"])
            for label, r in results.items()]
    text = "\n".join([
        f"sentence: {' '.join(WORDS)}   ->   {' '.join(WORDS[i] for i in order)}",
        "relative change |out_after(word) - out_before(word)| / |out_before(word)|, a tiny random BERT (2 layers):",
        table(["", "moved word 'cat'", "max over other words", "'the' at 0 vs 'the' at 4"], rows, 3),
        "",
        "Without positions each output follows its word and the two 'the's are the same vector: attention is a",
        "weighted sum over a set. With position embeddings every output changes when the order does.",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        labels = [w for w in WORDS if w != "the"]
        pictures.save("permutation", lambda: figures.bar_plot(
            labels, {k: [v[w] for w in labels] for k, v in per_word.items()},
            ylabel="relative change of the word's output", logy=True,
            title="Moving 'cat' to the end: how much each word's output changes"))
    return Explanation("permutation", CLAIM, numbers, text, pictures.paths)
