"""Where "it" looks: "The animal didn't cross the street because it was too tired" (and "... too wide").

The tutorials' example of what self-attention can do: to encode "it" the model should look at "animal" when the
animal is tired and at "street" when the street is wide. This topic reads the weights a real English model
(all-MiniLM-L6-v2) gives from "it" to every token, in every layer and head, for both sentences, and reports what
they show, whichever way that goes.
"""

from __future__ import annotations

import os

import numpy as np

from bertkit.errors import InputError
from bertkit.pictures.attention_view import sentence_attentions
from bertkit.pictures.explain import real_model
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "to encode 'it' some heads look at what 'it' refers to: 'animal' when tired, 'street' when wide"
DEFAULT_MODEL = "all-MiniLM-L6-v2"
SENTENCES = {
    "tired": "The animal didn't cross the street because it was too tired",
    "wide": "The animal didn't cross the street because it was too wide",
}
QUERY, CANDIDATES = "it", ("animal", "street")


def token_index(tokens: list[str], word: str, sentence: str) -> int:
    """Where `word` stands in `tokens`, as one token of its own (the first time it does)."""
    if word not in tokens:
        raise InputError(f"the model's tokenizer does not keep {word!r} as one token in {sentence!r} "
                         f"(tokens: {' '.join(tokens)}); this topic needs an English (uncased) BERT vocabulary")
    return tokens.index(word)


def weights_from(model, tokenizer, sentence: str, query: str = QUERY) -> tuple[list[str], np.ndarray]:
    """The tokens, and the (L, H, T) attention weights from `query` to every token in every layer and head."""
    attention = sentence_attentions(model, tokenizer, sentence)
    return attention.tokens, attention.attentions[:, :, token_index(attention.tokens, query, sentence), :]


def heads_on(weights: np.ndarray, keys: np.ndarray, target: int) -> list[tuple[int, int, float]]:
    """(layer, head, weight) of every head whose largest weight among `keys` (token indices) is on `target`."""
    best = keys[weights[..., keys].argmax(-1)]                                 # (L, H) token index
    return [(int(layer), int(head), float(weights[layer, head, target])) for layer, head in np.argwhere(best == target)]


def _names(heads: list[tuple[int, int, float]]) -> str:
    return ", ".join(f"{layer}.{head} ({w:.2f})" for layer, head, w in heads) or "none"


def explain(out: str | os.PathLike | None = None, fmt: str = "png", model_dir: str | os.PathLike | None = None,
            sentences: dict[str, str] = SENTENCES, device: str | None = None) -> Explanation:
    """Weights from "it" in every head, for each sentence: which heads pick 'animal', which 'street'."""
    model, tokenizer = real_model.load(model_dir or DEFAULT_MODEL, device)
    results = {}
    for label, sentence in sentences.items():
        tokens, weights = weights_from(model, tokenizer, sentence)
        it = tokens.index(QUERY)
        everything = np.arange(len(tokens))
        # the other words: not [CLS]/[SEP] (where many heads park their weight) and not "it" itself
        words = np.array([t for t, tok in enumerate(tokens) if tok not in real_model.SPECIAL_TOKENS and t != it])
        target = {word: token_index(tokens, word, sentence) for word in CANDIDATES}
        best = everything[weights.argmax(-1)]
        results[label] = {
            "tokens": tokens,
            "weights": weights.tolist(),                                        # (L, H, T)
            "row_sum_error": float(np.abs(weights.sum(-1) - 1).max()),
            "largest_on": {tok: int((best == t).sum()) for t, tok in enumerate(tokens) if (best == t).any()},
            **{f"heads_to_{word}": heads_on(weights, everything, t) for word, t in target.items()},
            **{f"word_heads_to_{word}": heads_on(weights, words, t) for word, t in target.items()},
            **{f"layer_mean_to_{word}": weights[..., t].mean(-1).tolist() for word, t in target.items()},
            "heads_animal_over_street": int((weights[..., target["animal"]] > weights[..., target["street"]]).sum()),
            **{f"mean_to_{word}": float(weights[..., t].mean()) for word, t in target.items()},
        }
    L, H, _ = np.shape(results[next(iter(results))]["weights"])
    numbers = {"layers": L, "heads": H, "sentences": dict(sentences), **results}

    lines = []
    for label, r in results.items():
        top = ", ".join(f"{tok} {n}" for tok, n in sorted(r["largest_on"].items(), key=lambda kv: -kv[1]))
        lines += [
            f"\"{sentences[label]}\"  ({len(r['tokens'])} tokens; every row from 'it' sums to 1 within "
            f"{r['row_sum_error']:.1e})",
            f"  the {L * H} heads' largest weight from 'it' lands on: {top}",
            *(f"  largest on '{word}' over all tokens: {_names(r[f'heads_to_{word}'])}" for word in CANDIDATES),
            *(f"  largest on '{word}' among the other words (no [CLS], [SEP], 'it'), "
              f"{len(r[f'word_heads_to_{word}'])} heads: {_names(r[f'word_heads_to_{word}'])}" for word in CANDIDATES),
            f"  heads giving 'animal' more weight than 'street': {r['heads_animal_over_street']} of {L * H}; "
            f"mean weight on 'animal' {r['mean_to_animal']:.3f}, on 'street' {r['mean_to_street']:.3f}",
            "",
        ]
    picked = sorted({(layer, head) for r in results.values() for word in CANDIDATES
                     for layer, head, _ in r[f"heads_to_{word}"]})
    numbers["picking_heads"] = [f"{layer}.{head}" for layer, head in picked]
    lines += ["the heads whose largest weight (over all tokens) is on 'animal' or 'street' in either sentence:",
              table(["layer.head", *(f"{label}: {col}" for label in results for col in (*CANDIDATES, "largest on"))],
                    [(f"{layer}.{head}", *(v for r in results.values() for v in (
                        *(r["weights"][layer][head][r["tokens"].index(word)] for word in CANDIDATES),
                        r["tokens"][int(np.argmax(r["weights"][layer][head]))]))) for layer, head in picked], 2),
              ""]
    rows = [(layer, *(results[label][f"layer_mean_to_{word}"][layer] for label in results for word in CANDIDATES))
            for layer in range(L)]
    lines += ["mean over heads of the weight from 'it', layer by layer:",
              table(["layer", *(f"{label}: {word}" for label in results for word in CANDIDATES)], rows), ""]
    lines += _verdict(results)

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        pictures.save("it_animal_heads", lambda: _heads_figure(results, sentences, L, H))
        pictures.save("it_animal_layers", lambda: figures.bar_plot(
            [str(layer) for layer in range(L)],
            {f"{label}: it → {word}": results[label][f"layer_mean_to_{word}"] for label in results
             for word in CANDIDATES},
            ylabel="weight from 'it' (mean of heads)", title="Where 'it' looks, layer by layer"))
    return Explanation("it-animal", CLAIM, numbers, "\n".join(lines), pictures.paths)


def _verdict(results: dict) -> list[str]:
    """What changed from the first sentence to the second, said from the numbers."""
    if len(results) != 2:
        return []
    (a, first), (b, second) = results.items()
    shift = {word: second[f"mean_to_{word}"] - first[f"mean_to_{word}"] for word in CANDIDATES}
    picks = [{(layer, head) for layer, head, _ in r["heads_to_animal"]} for r in (first, second)]
    kept, lost, gained = picks[0] & picks[1], picks[0] - picks[1], picks[1] - picks[0]
    return [
        f"from '{a}' to '{b}': mean weight on 'animal' {shift['animal']:+.3f}, on 'street' {shift['street']:+.3f}; "
        f"heads favouring 'animal' over 'street' {first['heads_animal_over_street']} -> "
        f"{second['heads_animal_over_street']}",
        f"heads with their largest weight on 'animal': {len(kept)} in both, {len(lost)} only with '{a}', "
        f"{len(gained)} only with '{b}'; with '{b}' {len(second['heads_to_street'])} head(s) pick 'street' "
        f"(with '{a}': {len(first['heads_to_street'])})",
        f"so with '{b}' this model's 'it' still leans to 'animal' (mean {second['mean_to_animal']:.3f} against "
        f"{second['mean_to_street']:.3f} on 'street'): no head flips its pick to the street"
        if second["mean_to_animal"] > second["mean_to_street"] and len(second["heads_to_street"])
        <= len(first["heads_to_street"]) else
        f"so with '{b}' this model's 'it' moves towards 'street'",
    ]


def _heads_figure(results: dict, sentences: dict[str, str], L: int, H: int):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0 * len(results), 0.12 * L * H + 2.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(results)))
    for ax, (label, r) in zip(axes, results.items()):
        weights = np.asarray(r["weights"]).reshape(L * H, -1)                   # one row per layer.head
        image = ax.imshow(weights, aspect="auto", cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(len(r["tokens"])), labels=r["tokens"], rotation=90, fontsize=8)
        ax.set_yticks([layer * H for layer in range(L)], labels=[f"layer {layer}" for layer in range(L)], fontsize=8)
        for layer in range(1, L):
            ax.axhline(layer * H - 0.5, color="grey", linewidth=0.6)
        ax.set_title(f"… because it was too {sentences[label].split()[-1]}", fontsize=9)
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.01, shrink=0.6)
    fig.suptitle("weight from 'it' to each token, every head (rows: layer by layer, heads in order)", fontsize=10)
    return fig
