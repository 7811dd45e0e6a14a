"""The main job's plan: sized from timings alone, it fits the budget on a fast machine and on a slow one, keeps the
tiny BERT's rows whole and at least three seeds at 50 and 200 labels, and says so."""

import pytest

from bertkit.pipelines.demo_plan import (
    M3E_MIN_SCALE,
    PRETRAIN_FLOOR,
    PRETRAIN_MIN_STEPS,
    PRETRAIN_STEPS,
    ROWS,
    TAPT_FLOOR,
    TAPT_STEPS,
    ZERO_SHOT_ROW,
    ZERO_SHOT_STAGE,
    Progress,
    WorkTimes,
    blocked_by_floors,
    finetune_steps,
    floor_steps,
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


def test_a_budget_too_small_for_the_job_gives_up_m3e_small_then_shrinks_to_floors_then_drops_budgets():
    plan = make_plan(SLOW, 10 * 60, 30.0, BUDGETS, 3, 8000, "slow")
    assert plan.m3e_scale == 0 and plan.tapt_steps == 0  # m3e-small's rows give way first, its pretraining with them
    assert {(n.row, n.labels) for n in plan.not_run} == {(row, n) for row in ("m3e-small", "m3e-small-tapt")
                                                         for n in BUDGETS}
    assert all(run.steps >= floor_steps(run.row, run.labels, 8000) for run in plan.runs)  # never below a floor
    assert plan.pretrain_steps >= PRETRAIN_MIN_STEPS and {r.labels for r in plan.runs} == set(BUDGETS)
    tight = make_plan(SLOW, 6 * 60, 30.0, BUDGETS, 3, 8000, "slow")
    assert 0 not in {r.labels for r in tight.runs} and 50 in {r.labels for r in tight.runs}  # the largest go first
    assert ("random-init", 0) in {(n.row, n.labels) for n in tight.not_run}
    assert all(run.steps >= floor_steps(run.row, run.labels, 8000) for run in tight.runs)
    assert any("their floors did not fit the minutes left" in line for line in tight.lines())
    hopeless = make_plan(SLOW, 60.0, 30.0, [20, 0], 2, 8000, "slow")
    assert hopeless.runs == [] and hopeless.pretrain_steps >= 1  # nothing fits its floor: nothing is run


def test_floors():
    assert floor_steps("random-init", 200, 8000) == 125            # half of its 250: at a fifth it scores chance
    assert floor_steps("bertkit-pretrained", 0, 8000) == 500       # half of two epochs
    assert floor_steps("m3e-small", 200, 8000) == 50                # a fifth of 250, its learning rate raised
    assert TAPT_FLOOR == round(M3E_MIN_SCALE * TAPT_STEPS)
    starved = blocked_by_floors(Progress(pretrain_steps=1229))
    assert {n.row for n in starved} == {"bertkit-pretrained", "prompt", ZERO_SHOT_ROW}
    assert starved[0].describe() == (f"not run: the machine gave the tiny BERT's pretraining 1,229 of the "
                                     f"{PRETRAIN_FLOOR:,} steps it needs")
    assert blocked_by_floors(Progress(pretrain_steps=PRETRAIN_FLOOR, tapt_steps=TAPT_FLOOR)) == []
    assert [n.row for n in blocked_by_floors(Progress(pretrain_steps=9000, tapt_steps=3))] == ["m3e-small-tapt"]


def test_a_row_below_its_floor_is_not_planned_and_the_rest_is_planned_again():
    """The tiny BERT's pretraining stopped at 1,229 steps (a busy machine): its rows are not run, the zero-shot
    neither, and the time they would have taken goes to the rows that can still run."""
    first = make_plan(FAST, 17 * 60, 30.0, BUDGETS, 3, 8000, "fast")
    after = make_plan(FAST, 17 * 60, 6 * 60, BUDGETS, 3, 8000, "fast", done=Progress(pretrain_steps=1229))
    assert {r.row for r in after.runs} == {"random-init", "m3e-small", "m3e-small-tapt"}
    assert not after.zero_shot and ZERO_SHOT_STAGE in after.stage_seconds()
    assert "pretraining the tiny BERT" not in after.stage_seconds()  # done: its seconds are in the time so far
    assert after.expected_seconds <= 17 * 60 and after.m3e_scale >= first.m3e_scale
    assert after.lines()[0].startswith("plan for the rest of the 17.0-minute job")
    assert any("bertkit-pretrained: not run: the machine gave the tiny BERT's pretraining 1,229" in line
               for line in after.lines())


class _Said(list):
    def __call__(self, line):
        self.append(line)


def _replanner(times, minutes=16.5):
    from bertkit.pipelines.demo import Replanner
    from bertkit.pipelines.options import DemoOptions

    said = _Said()
    replanner = Replanner(times, DemoOptions(minutes=minutes), 8000, "test CPU", said)
    return replanner, said


def test_a_probe_on_a_busy_machine_and_the_re_plan_when_the_machine_frees_up():
    """The timing met a busy minute (every step 4x slower than the machine's own): the first plan gives m3e-small's
    rows up; the pretraining, once the other process has ended, runs at the machine's speed (a quarter of the
    timed seconds) and the plan for the rest brings them back."""
    busy = FAST.at_speed(4.0)
    replanner, said = _replanner(busy)
    plan = replanner.first(20.0, {"threads": 1, "pretrain_probes": [0.08, 0.08], "load_average": 2.0,
                                  "load": {"others": 1.0, "cores": 2, "own": 1.0, "steal": 0.0, "seconds": 9.0}})
    assert plan.m3e_scale == 0 and plan.tapt_steps == 0
    assert said[-1].startswith("While it timed, the machine was busy: other processes used 1.0 of the 2 cores")
    elapsed = 20.0 + plan.stage_seconds()["pretraining the tiny BERT"]
    again = replanner.after_stage(plan, Progress(pretrain_steps=plan.pretrain_steps), elapsed, 0.25)
    assert again is not plan and again.m3e_scale > 0.5 and again.tapt_steps > TAPT_FLOOR
    assert again.speed == 0.25 and again.times.tapt_step == pytest.approx(FAST.tapt_step)
    assert again.expected_seconds <= 16.5 * 60
    assert any(line.startswith("re-plan after pretraining the tiny BERT: it ran at 0.25x the timed seconds")
               for line in said)
    assert replanner.replans[0]["after"] == "pretraining the tiny BERT" and len(replanner.plans) == 2


def test_a_re_plan_after_a_slow_stage_shrinks_what_is_left_and_one_on_time_changes_nothing():
    replanner, said = _replanner(FAST)
    plan = replanner.first(20.0, {"threads": 2, "pretrain_probes": [0.02, 0.02], "load": None,
                                  "load_average": None})
    elapsed = 20.0 + plan.stage_seconds()["pretraining the tiny BERT"]
    done = Progress(pretrain_steps=plan.pretrain_steps)
    on_time = replanner.after_stage(plan, done, elapsed, 1.05)  # within the tolerance: the plan stands
    assert on_time.runs == plan.runs and replanner.replans == []
    slow = replanner.after_stage(plan, done, elapsed, 2.0)  # the machine turned twice as slow
    assert slow.m3e_scale < plan.m3e_scale and slow.expected_seconds <= 16.5 * 60 + 1e-6
    for row in ("bertkit-pretrained", "random-init"):  # the headline's rows keep their steps while m3e-small gives
        assert [slow.steps(row, n) for n in BUDGETS] == [plan.steps(row, n) for n in BUDGETS]
    done = Progress(pretrain_steps=plan.pretrain_steps, tapt_steps=slow.tapt_steps, budgets_done=(50,))
    later = replanner.after_stage(slow, done, elapsed + 200, 2.0)
    assert 50 not in {r.labels for r in later.runs}  # a budget done is not planned again
