"""The held-out evaluation of a pretraining run: masked-LM accuracy, loss and perplexity, and NSP / SOP accuracy."""

from __future__ import annotations

import math

import torch

from bertkit.data.pretraining.instances import Instance, PretrainingCollator
from bertkit.data.pretraining.run_data import MIN_PAIRS
from bertkit.models.bert.heads import BertForPreTraining
from bertkit.utils.constants import IGNORE_INDEX, MLM
from bertkit.utils.devices import to_device


def pretraining_eval(instances: list[Instance], collator: PretrainingCollator, pairs: list[Instance] | None = None,
                     batch_size: int = 64):
    """An eval_fn: masked-LM accuracy, loss and perplexity on held-out `instances`, and NSP/SOP accuracy on
    held-out `pairs` (instances with a sentence label; a BertForPreTraining has the head that predicts it), each with
    its support (`mlm_predictions`, `nsp_pairs`); NSP / SOP accuracy only from MIN_PAIRS pairs on. Both are masked
    already: `collator` must be static."""
    def batches(items: list) -> list[dict]:
        return [collator(items[i:i + batch_size], list(range(i, i + batch_size)))
                for i in range(0, len(items), batch_size)]

    mlm_batches, pair_batches = batches(instances), batches(pairs or [])

    @torch.no_grad()
    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        with_pairs = isinstance(model, BertForPreTraining)
        correct = total = nsp_correct = nsp_total = 0
        loss_sum = 0.0
        for batch in mlm_batches:
            batch = to_device({k: v for k, v in batch.items() if k != "next_sentence_label"}, device)
            out = model(**batch)
            logits = out.prediction_logits if with_pairs else out.logits
            targets = batch["labels"][batch["labels"] != IGNORE_INDEX]
            correct += int((logits.argmax(-1) == targets).sum())
            total += targets.numel()
            loss_sum += float(out.loss_sums[MLM])
        for batch in pair_batches if with_pairs else []:
            batch = to_device({k: v for k, v in batch.items() if k != "labels"}, device)
            out = model(**batch)
            nsp_correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            nsp_total += batch["next_sentence_label"].numel()
        mlm_loss = loss_sum / max(total, 1)
        metrics = {"mlm_accuracy": correct / max(total, 1), "mlm_loss": mlm_loss,
                   "mlm_perplexity": math.exp(min(mlm_loss, 50.0)), "mlm_predictions": total}
        if nsp_total:  # the pairs' count always; their accuracy from MIN_PAIRS on
            metrics["nsp_pairs"] = nsp_total
            if nsp_total >= MIN_PAIRS:
                metrics["nsp_accuracy"] = nsp_correct / nsp_total
        return metrics

    return evaluate
