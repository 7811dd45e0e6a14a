"""Zero-shot cloze prompts: a pretrained masked-LM head read as a classifier through a template, with no training.

    model, tokenizer = load_zero_shot_model("runs/pre", "[MASK][MASK]新闻：{text}",
                                            {"sports": "体育", "finance": "财经", "stocks": "股票"})
    predict(model, tokenizer, ["恒生AH溢指收平"])   # {"label": "stocks", "score": ..., "probabilities": {...}}

Pretraining taught the head to fill blanks, so it can be asked "which word goes in [MASK][MASK]新闻" as it is.
Each text is put in the template, the head gives a distribution over the vocabulary at each [MASK], and label c
with label word w_c = (w_c1, ..., w_cK) scores

    s_c = Σ_j log p(w_cj | [MASK]_j)        one [MASK] per token of the word (体育: two [MASK]s, 体 at the first)
    p(c | x) = softmax_c(s_c)               over the labels only

exactly what a prompt fine-tuned with `bertkit finetune --prompt` computes (BertForPromptClassification: PET's
multi-token verbaliser, Schick & Schütze 2021), so a zero-shot score and a fine-tuned one are the same quantity
before and after training. The sum, not the mean, over a word's tokens: every label word fills the same K
[MASK]s, so the two rank the labels alike, and the sum is the log-probability of the whole word.

The model is the directory's own weights in a BertForPromptClassification: `predict`, `predict_stream` and
`bertkit.pipelines.predict.evaluate` run it as they run a fine-tuned prompt. A directory without a masked-LM
head (a bare encoder such as m3e-small, a fine-tuned classifier) is refused: a fresh head would score at random.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bertkit.data.prompts import PromptError, PromptTemplate
from bertkit.data.quality import check_tokenizer_fits
from bertkit.errors import InputError
from bertkit.inference.loading import model_family, on_device


def load_zero_shot_model(spec: str | os.PathLike, template: str, label_words: Mapping[str, str],
                         command: str = "predict", device: Any = None) -> tuple[Any, Any]:
    """(a BertForPromptClassification on the directory's masked-LM head, in eval mode, on `device` (None: the CPU);
    its BertTokenizer): the labels are `label_words`' keys in their order, each read as its word at the template's
    [MASK]s."""
    from bertkit.tokenizer import BertTokenizer

    path, family = model_family(spec, command)
    if family.inputs != "text" or "prompt" not in family.heads:
        raise InputError(f"{path} holds a {family.name} model; a zero-shot prompt reads a BERT's masked-LM head")
    if len(label_words) < 2:
        raise PromptError(f"a zero-shot prompt chooses between labels: give two or more label words, got "
                          f"{len(label_words)}")
    config = family.load_config(path)
    tokenizer = BertTokenizer.from_pretrained(path)
    check_tokenizer_fits(len(tokenizer), config.vocab_size, str(path))
    prompt = PromptTemplate(template).config(tokenizer, list(label_words.values()))
    model = family.head("prompt")(config.replace(prompt=prompt, id2label=dict(enumerate(label_words)),
                                                 text_pairs=None))
    fresh = model.load_weights(path)  # the encoder and cls.predictions; a pretraining run's NSP head is left out
    if fresh:
        saved = f" (saved as {', '.join(config.architectures)})" if config.architectures else ""
        raise InputError(f"{path} has no masked-LM head{saved}: its weights lack {fresh[0]}"
                         f"{f' and {len(fresh) - 1} more' if len(fresh) > 1 else ''}; a zero-shot prompt reads the "
                         "label words off a pretrained masked-LM head: give a pretraining run (bertkit pretrain) or "
                         "a BERT saved with its cls.predictions weights (BertForMaskedLM, BertForPreTraining)")
    return on_device(model, device).eval(), tokenizer
