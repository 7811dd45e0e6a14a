"""`--task pairs`: two texts -> a label (paraphrase, entailment, a query and a passage), read as one input
"[CLS] text [SEP] pair [SEP]". It is the classify task with a text pair in every row: the same head, reading,
training and scores. A model fine-tuned on pairs says so in its config.json (`finetuning_task: "pairs"`), and
`bertkit serve` then also ranks texts against a query with it (/rerank: a cross-encoder).
"""

from __future__ import annotations

from bertkit.data.task_kinds import register
from bertkit.tasks.classify import Classify

PAIRS = register(Classify("pairs", "classification", "accuracy", needs_pairs=True, served="classifier"))
