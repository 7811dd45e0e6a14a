"""Every `--minutes` command plans its steps with the one rule (`budget.plan_for_budget`, through
`budget.steps_for_budget`), passing its evaluations as overhead: a fixed one for ten evaluations, a share of each
step for an evaluation every so many steps. The step's timing is fixed here (half a second), so each plan is known
exactly; each run then trains a few steps."""

import json

import pytest

from bertkit.cli import main
from bertkit.pipelines import pretrain, translation, vision
from bertkit.training import budget
from bertkit.utils.devices import resolve_device
from test_finetune import letters_model  # noqa: F401  (module fixtures: each command's tiny data)
from test_pretrain_cli import pretrain_args, workspace  # noqa: F401
from test_qa_cli import ws  # noqa: F401
from test_translation import numerals_tsv, tiny_corpus  # noqa: F401
from test_vision_cli import TINY, _make_folder

STEP = 0.5        # seconds a step, as if timed
MINUTES = 0.05    # 3 seconds: 0.9 * 3 / 0.5 = 5.4 steps before any evaluation (on the CPU)
KEEP = 1 - budget.reserve_for(resolve_device("auto"))   # the share of a budget a run plans to fill: 0.9 on the CPU


@pytest.fixture
def plans(monkeypatch):
    """The calls to `steps_for_budget`, as (seconds a step, overhead, steps), with every probe answering STEP."""
    calls = []
    rule = budget.steps_for_budget

    def recorded(seconds_per_step, **kwargs):
        # the budget as given; the reserve of the run's device (`reserve_for`): --device auto's
        assert set(kwargs) <= {"minutes", "seconds", "overhead", "reserve"}
        assert kwargs.get("reserve", budget.RESERVE) == budget.reserve_for(resolve_device("auto"))
        steps = rule(seconds_per_step, **kwargs)
        calls.append((seconds_per_step, kwargs.get("overhead", 0.0), steps))
        return steps

    monkeypatch.setattr(budget, "steps_for_budget", recorded)  # every command plans through budget.plan_for_budget
    for module in (budget, translation, vision):
        monkeypatch.setattr(module, "seconds_per_step", lambda *args, **kwargs: STEP)
    monkeypatch.setattr(pretrain, "step_seconds", lambda run, hold=(): STEP)
    return calls


def test_lm_and_translation_evaluate_after_the_clock_so_pay_no_overhead(plans, tiny_corpus, numerals_tsv, tmp_path):  # noqa: F811
    assert main(["lm-train", "--corpus", str(tiny_corpus), "--size", "tiny", "--block-size", "32", "--batch-size",
                 "8", "--minutes", str(MINUTES), "--no-progress", "--out", str(tmp_path / "lm")]) == 0
    assert main(["translate-train", "--data", str(numerals_tsv), "--size", "tiny", "--batch-size", "32",
                 "--num-beams", "1", "--minutes", str(MINUTES), "--no-progress", "--out", str(tmp_path / "mt")]) == 0
    assert plans == [(STEP, 0.0, 5), (STEP, 0.0, 5)]


def test_pretrain_pays_ten_held_out_evaluations(plans, workspace, tmp_path):  # noqa: F811
    assert main(pretrain_args(workspace, tmp_path / "run", "--minutes", "0.2")) == 0   # 12 seconds
    [(step, overhead, steps)] = plans
    instances = overhead / 10 / (STEP / 3) * 8       # each evaluation: its held-out instances in batches of 8
    assert step == STEP and instances > 0 and instances == pytest.approx(round(instances))
    assert steps == int(KEEP * (12 - overhead) / STEP) > 1


def test_vision_pays_its_validation_passes(plans, tmp_path):
    images = _make_folder(tmp_path / "images")
    assert main(["vision-train", "--data", str(images), "--out", str(tmp_path / "a"), "--minutes", str(MINUTES),
                 *TINY]) == 0
    assert main(["vision-train", "--data", str(images), "--out", str(tmp_path / "b"), "--minutes", str(MINUTES),
                 "--eval-every", "4", *TINY]) == 0
    (_, ten_passes, _), (step, overhead, _) = plans
    validation_pass = ten_passes / 10                         # ten passes, a tenth of the run apart
    assert validation_pass > 0 and overhead == 0.0
    assert step == pytest.approx(STEP + validation_pass / 4)  # or one every 4 steps: a quarter of a pass a step
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["planned_steps"] == plans[0][2] == int(KEEP * (3 - ten_passes) / STEP)


def test_finetune_and_qa_pay_a_share_of_dev_on_each_step(plans, letters_model, ws, tmp_path):  # noqa: F811
    assert main(["finetune", "--task", "classify", "--model", str(letters_model / "model"), "--random-init",
                 "--train", str(letters_model / "train.tsv"), "--dev", str(letters_model / "dev.tsv"),
                 "--test", str(letters_model / "test.tsv"), "--max-length", "16", "--batch-size", "64",
                 "--minutes", str(MINUTES), "--no-progress", "--out", str(tmp_path / "classify")]) == 0
    assert main([str(a) for a in ("finetune", "--task", "qa", "--model", ws / "encoder", "--train", ws / "train.json",
                                  "--dev", ws / "dev.json", "--test", ws / "test.json", "--max-length", 24,
                                  "--doc-stride", 6, "--max-answer-length", 4, "--batch-size", 8,
                                  "--minutes", MINUTES, "--no-progress", "--out", tmp_path / "qa")]) == 0
    # 300 dev rows in batches of 64 at STEP / 3, every 4000 // 64 // 2 = 31 steps;
    # 12 dev questions in 36 windows in batches of 8, every 48 * 3 // 8 // 2 = 9 steps
    classify, qa = STEP + 300 / 64 * STEP / 3 / 31, STEP + 36 / 8 * STEP / 3 / 9
    assert plans == [(pytest.approx(classify), 0.0, int(KEEP * 3 / classify)),
                     (pytest.approx(qa), 0.0, int(KEEP * 3 / qa))]
