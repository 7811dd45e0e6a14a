"""Sizing a run to a time budget: timed on a copy, so the model itself is untouched."""

import torch

from bertkit.config import BertConfig
from bertkit.models.heads import BertForSequenceClassification
from bertkit.training.budget import steps_in_budget


def test_steps_in_budget_times_a_copy_and_scales_with_the_budget():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [{"input_ids": torch.randint(0, 50, (4, 8)), "labels": torch.tensor([0, 1, 0, 1])} for _ in range(3)]
    short, long = steps_in_budget(model, batches, 1.0), steps_in_budget(model, batches, 1000.0)
    assert short >= 1 and long > 100 * short / 2
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert steps_in_budget(model, batches[:1], 1e-9) == 1  # never zero steps
