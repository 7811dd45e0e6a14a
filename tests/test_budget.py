"""Sizing a run to a time budget: one rule turns seconds into steps; the probe times steps on a copy, so the model
itself is untouched."""

import math

import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.training import budget
from bertkit.training.arguments import TrainingArguments
from bertkit.training.budget import (
    RESERVE,
    forward_seconds,
    length_probes,
    plan_for_budget,
    planned_steps,
    probe_batches,
    seconds_per_step,
    steps_for_budget,
    wall_clock_budget,
)


def test_steps_for_budget_takes_the_overhead_then_the_reserve_then_divides():
    # (1 - 0.1) * (600 - 30) / 0.5 = 1026
    assert steps_for_budget(0.5, minutes=10, overhead=30, reserve=0.1) == 1026
    assert steps_for_budget(0.5, seconds=600, overhead=30, reserve=0.1) == 1026   # minutes or seconds alike
    assert steps_for_budget(0.5, minutes=10, reserve=0.0) == 1200                 # nothing kept back
    assert RESERVE == 0.1 and steps_for_budget(0.5, minutes=10) == 1080           # the default reserve
    assert steps_for_budget(0.5, minutes=10, overhead=30, reserve=0.1) < steps_for_budget(0.5, minutes=10)
    assert steps_for_budget(0.7, minutes=2, overhead=12) == 138                   # 0.9 * 108 / 0.7 = 138.86
    # a budget of exactly N steps plans N, though the division lands a hair below N in floating point
    assert (1 - 0.1) * 72 / 0.1 < 648 and steps_for_budget(0.1, seconds=72) == 648


def test_steps_for_budget_plans_one_step_when_the_overhead_fills_the_budget():
    assert steps_for_budget(0.5, seconds=30, overhead=30) == 1      # nothing left after the overhead
    assert steps_for_budget(0.5, seconds=10, overhead=30) == 1      # less than nothing
    assert steps_for_budget(0.5, seconds=0.4) == 1                   # less than one step
    assert steps_for_budget(0.5, seconds=-5.0) == 1                  # a planner's overdrawn remainder
    assert steps_for_budget(2.0, seconds=1e-9, reserve=0.0) == 1


@pytest.mark.parametrize("kwargs, error", [
    (dict(seconds_per_step=0.5), TypeError),                              # no budget
    (dict(seconds_per_step=0.5, minutes=1, seconds=60), TypeError),       # two budgets
    (dict(seconds_per_step=0.0, minutes=1), ValueError),
    (dict(seconds_per_step=math.nan, minutes=1), ValueError),
    (dict(seconds_per_step=0.5, minutes=math.inf), ValueError),
    (dict(seconds_per_step=0.5, minutes=1, overhead=-1.0), ValueError),
    (dict(seconds_per_step=0.5, minutes=1, reserve=1.0), ValueError),
    (dict(seconds_per_step=0.5, minutes=1, reserve=-0.1), ValueError),
])
def test_steps_for_budget_refuses_what_is_not_a_budget(kwargs, error):
    with pytest.raises(error):
        steps_for_budget(**kwargs)


def test_forward_seconds_is_a_third_of_a_step_per_batch():
    assert forward_seconds(300, 30, 0.6) == pytest.approx(2.0)   # 10 batches at 0.2 s
    assert forward_seconds(0, 30, 0.6) == 0.0


def test_planned_steps_pays_its_evaluations_on_each_step(monkeypatch):
    monkeypatch.setattr(budget, "seconds_per_step", lambda *args, **kwargs: 0.3)
    features = [{"input_ids": [1] * (i % 7 + 1)} for i in range(30)]
    plan = lambda **kw: planned_steps(torch.nn.Linear(1, 1), features, lambda batch: {}, 3, **kw)
    assert plan(max_steps=10**6, minutes=1) == 180                          # 0.9 * 60 / 0.3
    # 90 examples evaluated every 10 steps: 30 batches at 0.1 s = 3 s, 0.3 s a step more -> 0.9 * 60 / 0.6
    assert plan(max_steps=10**6, minutes=1, eval_examples=90, eval_every=10) == 90
    assert plan(max_steps=50, minutes=1) == 50                              # the epochs' steps, when fewer
    assert plan(max_steps=50, minutes=None) == 50                           # no budget: no timing


def test_plan_for_budget_pays_evaluations_and_the_time_already_spent():
    cpu = torch.device("cpu")
    assert plan_for_budget(0.5, minutes=10, device=cpu) == steps_for_budget(0.5, minutes=10) == 1080
    # one evaluation of 3 s a tenth of the run: ten of them, 30 s first; or one every 6 steps: 0.5 s more a step
    assert plan_for_budget(0.5, minutes=10, device=cpu, evaluation=3.0) == 1026
    assert plan_for_budget(0.5, minutes=10, device=cpu, evaluation=3.0, eval_every=6) == 540
    assert plan_for_budget(0.5, minutes=10, device=cpu, spent=60) == 972      # 0.9 * 540 / 0.5
    assert plan_for_budget(0.5, minutes=1, device=cpu, spent=600) == 1        # at least a second is left: one step
    assert wall_clock_budget(10, spent=60)["max_seconds"] == 540 and wall_clock_budget(10)["max_seconds"] == 600


def test_probe_batches_are_like_lengths_short_to_long_or_the_first_batches():
    lengths = [(i * 37) % 101 for i in range(101)]
    chosen = probe_batches(101, 4, lengths)
    assert len(chosen) == len(budget.PROBE_QUANTILES) == 7 and all(len(batch) == 4 for batch in chosen)
    longest = [max(lengths[i] for i in batch) for batch in chosen]
    assert longest == sorted(longest) and longest[0] < 15 and longest[-1] > 90
    assert probe_batches(10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]       # one shape: the first batches
    assert probe_batches(3, 8) == [[0, 1, 2]]                                 # a batch larger than the data


def test_seconds_per_step_times_a_copy():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [{"input_ids": torch.randint(0, 50, (4, 8)), "labels": torch.tensor([0, 1, 0, 1])} for _ in range(3)]
    assert 0 < seconds_per_step(model, batches, min_seconds=0.0) < 10
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_seconds_per_step_warms_every_batch_up_then_times_every_batch():
    calls = []

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            calls.append(int(x))
            return type("Out", (), {"loss": self.w * 0 + 1.0})()

    batches = [{"x": torch.tensor(i)} for i in range(3)]
    assert seconds_per_step(Counting(), batches, min_seconds=0.0) > 0
    assert calls == [0, 1, 2, 0, 1, 2]  # each batch once untimed (its shape's first step), then each timed once
    calls.clear()
    assert seconds_per_step(Counting(), batches[:1], min_seconds=0.0) > 0
    assert calls == [0, 0, 0]  # one batch: two untimed steps (the allocator's, the caches'), then one timed
    with pytest.raises(ValueError, match="at least one batch"):
        seconds_per_step(Counting(), [])


def test_seconds_per_step_is_the_mean_cost_of_the_batches(monkeypatch):
    """A run of mixed lengths costs the mean of its batches' costs: one dear batch in three counts a third,
    and a one-off spike on a single step (a busy machine) does not count, since each batch takes its median."""
    costs = {0: [0.1] * 9, 1: [0.1] * 9, 2: [0.4] * 9}
    costs[0][3] = 50.0                                       # one spike on batch 0
    calls = {0: 0, 1: 0, 2: 0}

    def fake_step(model, optimizer, batch, bf16, forward=None):
        i = int(batch["x"])
        calls[i] += 1
        return costs[i][calls[i] - 1]

    monkeypatch.setattr(budget, "timed_step", fake_step)
    model = torch.nn.Linear(1, 1)
    batches = [{"x": torch.tensor(i)} for i in range(3)]
    # each batch once untimed, then 3 rounds of 3 batches: medians 0.1, 0.1, 0.4 -> 0.2 s a step
    step = budget.seconds_per_step(model, batches, min_seconds=0.0, max_timed=9)
    assert step == pytest.approx(0.2)
    assert steps_for_budget(step, seconds=100.0, reserve=0.0) == 500


def test_a_shapes_first_step_is_not_timed(monkeypatch):
    """Seven batches of new shapes, each's first step 30x dearer (kernels chosen for the shape; compiled, on a CPU
    with AMX): the probe times the steps a run makes, not their warm-up."""
    seen = set()

    def fake_step(model, optimizer, batch, bf16, forward=None):
        i = int(batch["x"])
        first = i not in seen
        seen.add(i)
        return 3.0 if first else 0.1

    monkeypatch.setattr(budget, "timed_step", fake_step)
    batches = [{"x": torch.tensor(i)} for i in range(7)]
    assert budget.seconds_per_step(torch.nn.Linear(1, 1), batches, min_seconds=0.0) == pytest.approx(0.1)


def test_wall_clock_budget_turns_minutes_into_a_clock_the_schedule_follows(tmp_path):
    assert wall_clock_budget(2.5) == {"max_seconds": 150.0, "time_aware_schedule": True}
    assert wall_clock_budget(None) == {"max_seconds": None, "time_aware_schedule": False}
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=5, **wall_clock_budget(None))  # valid either way
    assert (args.max_seconds, args.time_aware_schedule) == (None, False)


def test_length_probes_take_like_lengths_from_short_to_long():
    lengths = [5, 90, 12, 40, 7, 128, 60, 33, 18, 128, 3, 75]
    probes = length_probes(lengths, 3, (0.0, 0.5, 0.95))
    assert [sorted(lengths[i] for i in batch) for batch in probes] == [[3, 5, 7], [40, 60, 75], [90, 128, 128]]
    assert length_probes(lengths[:2], 8, (0.5,)) == [[0, 1]]  # a batch larger than the data takes all of it
