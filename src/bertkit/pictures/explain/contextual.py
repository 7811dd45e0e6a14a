"""Static vectors against contextual ones: the same character in several sentences, through a real BERT.

A static embedding (word2vec, or BERT's own input embedding table) gives a character one vector wherever it
stands. BERT's output for it is computed from the whole sentence, so 行 in 银行 (bank, háng) and 行 in 行走
(walk, xíng) come out as different vectors, alike within a meaning and apart across meanings; so do 长 in 长大
(grow, zhǎng) and 长 in 长度 (length, cháng). Here the cosine similarity of the character's vectors between every
two sentences, at the input embedding and at the last layer of m3e-small.
"""

from __future__ import annotations

import os

import numpy as np

from bertkit.errors import InputError
from bertkit.pictures.explain import real_model
from bertkit.pictures.explain.base import Explanation, PictureWriter, table

CLAIM = "a static vector is one per character; BERT's output for a character changes with its context"
# name -> (character, [(sentence, sense)]): each sentence holds the character once
CHARACTERS = {
    "hang_xing": ("行", [("我明天去银行存钱。", "银行 bank"), ("这家银行的利息很高。", "银行 bank"),
                        ("他们在山路上慢慢行走。", "行走 walk"), ("老人行走不太方便。", "行走 walk")]),
    "zhang_chang": ("长", [("孩子们很快就长大了。", "长大 grow"), ("他长大以后当了医生。", "长大 grow"),
                          ("这条河的长度是多少？", "长度 length"), ("桥的长度有两公里。", "长度 length")]),
}


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    """(n, d) -> (n, n) cosine similarities."""
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    return unit @ unit.T


def character_vectors(model, tokenizer, character: str, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The character's input-embedding row and its last-layer vector in each sentence: two (n, hidden) arrays."""
    import torch

    static, contextual = [], []
    device = next(model.parameters()).device
    for sentence in sentences:
        encoding = {key: value.to(device) for key, value in tokenizer(sentence, return_tensors="pt").items()}
        tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"][0].tolist())
        if tokens.count(character) != 1:
            raise InputError(f"{sentence!r} must hold {character!r} exactly once as a token, got tokens {tokens}")
        index = tokens.index(character)
        with torch.no_grad():
            out = model(encoding["input_ids"], attention_mask=encoding["attention_mask"],
                        token_type_ids=encoding.get("token_type_ids"))
            row = model.embeddings.word_embeddings.weight[encoding["input_ids"][0, index]].detach()
        static.append(row.float().cpu().numpy())
        contextual.append(out.last_hidden_state[0, index].float().cpu().numpy())
    return np.stack(static), np.stack(contextual)


def explain(out: str | os.PathLike | None = None, fmt: str = "png", model_dir: str | os.PathLike | None = None,
            characters: dict[str, tuple[str, list[tuple[str, str]]]] = CHARACTERS,
            device: str | None = None) -> Explanation:
    """For each character: cosine similarities between its sentences, static (input embedding) and last layer."""
    model, tokenizer = real_model.load(model_dir, device)
    numbers, lines = {}, []
    for name, (character, examples) in characters.items():
        sentences, senses = [s for s, _ in examples], [sense for _, sense in examples]
        static, contextual = character_vectors(model, tokenizer, character, sentences)
        same = np.array([[a == b for b in senses] for a in senses])
        off_diagonal = ~np.eye(len(senses), dtype=bool)
        static_cos, contextual_cos = cosine_matrix(static), cosine_matrix(contextual)
        numbers[name] = {
            "character": character, "sentences": sentences, "senses": senses,
            "static_cosine": static_cos.tolist(), "contextual_cosine": contextual_cos.tolist(),
            "static_max_difference": float(np.abs(static - static[0]).max()),
            "same_sense_mean": float(contextual_cos[same & off_diagonal].mean()),
            "other_sense_mean": float(contextual_cos[~same].mean()),
        }
        n = numbers[name]
        lines += [f"{character}: cosine similarity of its last-layer vectors between sentences "
                  f"(input embeddings: every entry 1.000, the vectors differ by {n['static_max_difference']:.1e})",
                  table(["", *[str(i + 1) for i in range(len(sentences))], "sense"],
                        [(i + 1, *row, sense) for i, (row, sense) in enumerate(zip(contextual_cos.tolist(), senses))],
                        3, sci=False),
                  *[f"  {i + 1} {sentence}" for i, sentence in enumerate(sentences)],
                  f"  same sense {n['same_sense_mean']:.3f} on average, other sense {n['other_sense_mean']:.3f}", ""]
    lines += ["A static embedding is a lookup table: the character has one vector in every sentence (cosine 1), as",
              "in word2vec. The last layer's vector is computed from the whole sentence: the same character comes",
              "out closer to itself in the same sense of the word than in the other sense."]

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        for name, n in numbers.items():
            labels = [f"{i + 1} {s}" for i, s in enumerate(n["sentences"])]
            pictures.save(f"contextual_{name}", lambda n=n, labels=labels: figures.matrix_plot(
                np.array(n["contextual_cosine"]), labels, [str(i + 1) for i in range(len(labels))],
                xlabel="sentence", ylabel="", cmap="viridis",
                title=f"{n['character']}: cosine of last-layer vectors (input embeddings: all 1.000)"))
    return Explanation("contextual", CLAIM, numbers, "\n".join(lines), pictures.paths)
