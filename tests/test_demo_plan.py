"""The main job's plan: sized from timings alone, it fits the budget on a fast machine and on a slow one, keeps the
tiny BERT's rows whole and at least three seeds at 50 and 200 labels, and says so."""

import pytest

from bertkit.pipelines.demo_plan import (
    M3E_MIN_SCALE,
    PRETRAIN_MIN_STEPS,
    PRETRAIN_STEPS,
    ROWS,
    TAPT_STEPS,
    ZERO_SHOT_STAGE,
    WorkTimes,
    finetune_steps,
    make_plan,
    whole_split_steps,
)

BUDGETS = [50, 200, 1000, 0]


# Timings as the job measured them on an AMD EPYC: bf16 on two threads, and fp32 on one thread (an emulated Intel
# Cascade Lake); seconds a step and seconds around a fine-tuning run
FAST = WorkTimes(pretrain_step=0.02, pretrain_overhead=2.0, tapt_step=0.2, tapt_held_step=0.08, tapt_overhead=12.0,
                 finetune_step={"tiny": 0.022, "prompt": 0.027, "m3e-small": 0.11},
                 finetune_overhead={"tiny": 1.5, "prompt": 1.7, "m3e-small": 4.0})
SLOW = WorkTimes(pretrain_step=0.05, pretrain_overhead=2.0, tapt_step=0.7, tapt_held_step=0.3, tapt_overhead=32.0,
                 finetune_step={"tiny": 0.024, "prompt": 0.03, "m3e-small": 0.33},
                 finetune_overhead={"tiny": 2.5, "prompt": 2.7, "m3e-small": 8.0})


def test_step_rules():
    assert finetune_steps(50, 16) == 80           # at least 80 steps
    assert finetune_steps(200, 16) == 250         # 20 epochs
    assert finetune_steps(1000, 16) == 300        # at most 300
    assert finetune_steps(200, 16, 0.01) == 2     # never fewer than two
    from bertkit.pipelines.demo_plan import ROW_SETTINGS

    assert whole_split_steps(8000, ROW_SETTINGS["random-init"]) == 1000      # two epochs of 500 steps
    assert whole_split_steps(8000, ROW_SETTINGS["m3e-small"]) == 500         # m3e-small's one


def test_a_fast_machine_runs_the_full_job_and_pretrains_with_the_rest():
    plan = make_plan(FAST, 30 * 60, 40.0, BUDGETS, 3, 8000, "a fast CPU")
    assert plan.m3e_scale == 1.0 and plan.tapt_steps == TAPT_STEPS and plan.tapt_held_steps == TAPT_STEPS // 3
    for row in ROWS:
        assert [plan.seeds(row, n) for n in BUDGETS] == [3, 3, 3, 1]
    assert plan.steps("m3e-small", 200) == 250 and plan.steps("random-init", 0) == 1000
    assert plan.steps("m3e-small", 0) == 500
    assert plan.expected_seconds == pytest.approx(30 * 60)  # every second left goes to the pretraining
    assert plan.pretrain_steps > PRETRAIN_STEPS
    assert plan.pretrain_steps == int(0.9 * plan.pretrain_seconds / FAST.pretrain_step)


def test_a_slower_machine_shrinks_m3e_small_and_keeps_the_tiny_rows_and_the_pretraining_steps():
    roomy = make_plan(FAST, 30 * 60, 40.0, BUDGETS, 3, 8000, "fast")
    plan = make_plan(FAST, 15 * 60, 60.0, BUDGETS, 3, 8000, "fast, a shorter budget")
    assert M3E_MIN_SCALE < plan.m3e_scale < 1
    assert plan.expected_seconds == pytest.approx(15 * 60)
    assert PRETRAIN_STEPS <= plan.pretrain_steps < 1.01 * PRETRAIN_STEPS  # what m3e-small leaves, to a step
    for row in ("bertkit-pretrained", "random-init", "prompt"):  # the headline's rows: whole, as with more time
        assert [(plan.steps(row, n), plan.seeds(row, n)) for n in BUDGETS] == [
            (roomy.steps(row, n), roomy.seeds(row, n)) for n in BUDGETS]
    for row in ("m3e-small", "m3e-small-tapt"):  # three seeds where the margin is read, one above
        assert [plan.seeds(row, n) for n in BUDGETS] == [3, 3, 1, 1]
        assert plan.steps(row, 200) == round(250 * plan.m3e_scale)
    assert plan.tapt_steps == round(TAPT_STEPS * plan.m3e_scale)
    assert any("m3e-small's steps at" in line for line in plan.lines())
    slow = make_plan(SLOW, 17 * 60, 60.0, BUDGETS, 3, 8000, "slow")
    assert slow.m3e_scale == M3E_MIN_SCALE  # as small as it goes: the pretraining gives way, down to its least
    assert PRETRAIN_MIN_STEPS <= slow.pretrain_steps < PRETRAIN_STEPS
    assert [slow.steps("random-init", n) for n in BUDGETS] == [roomy.steps("random-init", n) for n in BUDGETS]


def test_the_plan_says_the_machine_and_every_stage():
    plan = make_plan(SLOW, 17 * 60, 60.0, BUDGETS, 3, 8000, "Intel Xeon, 1 thread, no native bf16")
    lines = plan.lines()
    assert lines[0] == "machine: Intel Xeon, 1 thread, no native bf16"
    assert lines[1].startswith("plan for a 17.0-minute job (expected 17.0)")
    text = "\n".join(lines)
    for stage in plan.stage_seconds():
        assert stage in text or stage == "report"
    assert plan.stage_seconds()[ZERO_SHOT_STAGE] == SLOW.finetune_overhead["prompt"]  # a prompt run less its steps
    assert f"{plan.pretrain_steps:,} steps" in text and "50: 80 steps x 3" in text
    record = plan.to_json()
    assert record["expected_seconds"] == pytest.approx(17 * 60) and len(record["runs"]) == len(plan.runs)
    assert sum(record["stages"].values()) == pytest.approx(record["expected_seconds"])


def test_a_budget_too_small_for_the_job_shrinks_every_run_to_its_floor():
    plan = make_plan(SLOW, 60.0, 30.0, [20, 0], 2, 8000, "slow")
    assert all(run.steps >= 2 for run in plan.runs) and plan.pretrain_steps >= 1
    assert {run.steps for run in plan.runs if run.labels == 20} == {2}
    assert [plan.seeds("m3e-small", n) for n in (20, 0)] == [2, 1]
