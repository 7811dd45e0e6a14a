"""The main job's plan: what it runs, and how much of each, so that the whole job fits its budget on this machine.

`bertkit demo` first times one piece of each kind of work it will do (a pretraining step of the tiny BERT, a
continued-pretraining step of m3e-small with its encoder moving and held, a fine-tuning step and the loading and
scoring around a fine-tuning run of each model), then `make_plan` sizes every stage from those timings:

1. the tiny rows (bertkit-pretrained, random-init, prompt) fine-tune their full steps: they are cheap on every CPU,
   and the job's headline, the pretrained row against its random-init twin, is read off them;
2. m3e-small's two rows and its continued pretraining run at full size when everything fits with PRETRAIN_STEPS of
   the tiny BERT's pretraining; otherwise their runs above 200 labels keep one seed, and then their steps shrink
   together (one scale, at least M3E_MIN_SCALE), so that the pretraining keeps its steps;
3. the tiny BERT's pretraining gets every second left: PRETRAIN_STEPS or more, or fewer where even the smallest
   m3e-small runs leave less, down to PRETRAIN_MIN_STEPS; below that (a budget too small for the job) every
   fine-tuning run shrinks.

Where even that does not fit, m3e-small's rows go (its continued pretraining with them), then the tiny rows shrink to
their floor, then the largest label budgets go; a run that does not fit its floor is not run, and the plan says so.

The prompt zero-shot (0 labels, no training) is planned at a prompt run's timed overhead: it is such a run without
its steps.

**Re-plans.** The timing is a few seconds of one moment; a machine's speed moves (another process starts or
ends). After each stage (the pretraining, the continued pretraining with the zero-shot, each label budget's
fine-tuning runs) the job compares what the stage took with what the timings said (`speed`) and projects the rest
of the plan at that speed; where it would end more than REPLAN_TOLERANCE off the budget, or a stage fell below its
floor, `make_plan` plans what is left again from the minutes left, with every timing scaled by that speed
(`Progress` says what is done). The runs of one label budget are never re-planned apart: the rows the table
compares train the same steps.

**Floors.** A row whose run had fewer steps than its floor means nothing (its accuracy says how far a starved run
got, not what the model can do), so it is not published as a result: `NotRun` says what it got and what it needed.
The floors are measured (docs/main-job.md, "Floors"): PRETRAIN_FLOOR steps of the tiny BERT's pretraining (below
it the pretrained BERT fine-tunes no better than a random one), TINY_FLOOR and M3E_MIN_SCALE of a fine-tuning
run's full steps, TAPT_FLOOR steps of m3e-small's continued pretraining.

The plan is a pure function of the timings: tests size it for any machine without running anything.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bertkit.data.pretraining.packing import MLM
from bertkit.training.budget import RESERVE, steps_for_budget

ROWS = ("bertkit-pretrained", "random-init", "m3e-small", "m3e-small-tapt", "prompt")
# ... and one more at 0 labels: the pretrained BERT through the prompt's template and label words, no training (not
# a row of ROWS, each of which fine-tunes at every budget). It costs a prompt run without its steps: loading the
# model, tokenizing and scoring the test split, so the plan gives it a prompt run's overhead, as timed.
ZERO_SHOT_ROW = "prompt, zero-shot"
ZERO_SHOT_STAGE = "scoring the prompt zero-shot"


@dataclass(frozen=True)
class RowSettings:
    """How one row fine-tunes: from which model, at which learning rate and batch size, in which precision."""

    model: str = "here"           # "here": the BERT pretrained in step 3; "m3e-small"; "tapt": m3e-small after step 4
    random_init: bool = False
    prompt: bool = False
    learning_rate: float = 5e-4
    batch_size: int = 16
    bf16: bool = False
    whole_split_epochs: float = 2.0   # epochs of the run on the whole training split (budget 0)

    @property
    def kind(self) -> str:
        """The kind of work a fine-tuning step of this row is, as timed: "tiny", "prompt" or "m3e-small"."""
        return "prompt" if self.prompt else "tiny" if self.model == "here" else "m3e-small"


# The tiny BERT (pretrained or not) learns fastest at 5e-4; m3e-small, 20x its size (24.0M parameters against
# 1.2M) and pretrained for long, at 1e-4. m3e-small's runs are most of the fine-tuning time: on the whole split it
# makes one pass, not two.
M3E_SMALL = RowSettings(model="m3e-small", learning_rate=1e-4, bf16=True, whole_split_epochs=1.0)
ROW_SETTINGS = {
    "bertkit-pretrained": RowSettings(),
    "random-init": RowSettings(random_init=True),
    "m3e-small": M3E_SMALL,
    "m3e-small-tapt": replace(M3E_SMALL, model="tapt"),  # fine-tuned exactly as m3e-small
    "prompt": RowSettings(prompt=True),
}
KINDS = ("tiny", "prompt", "m3e-small")

# Step 4, task-adaptive pretraining of m3e-small: masked LM alone on the task's training text (a headline is a
# one-sentence document), at the length it is fine-tuned at. m3e-small was trained for sentence embeddings and ships
# no masked-LM head: the head starts fresh, and the encoder is held for its first steps so that the fresh head's
# gradients do not reach it (benchmarks/levers_tapt.py measures each setting; docs/pretraining-recipe.md has them).
TAPT_STEPS = 600
TAPT = {"objective": MLM, "batch_size": 32, "learning_rate": 1e-4, "mlm_probability": 0.3}
TAPT_FROZEN_SHARE = 1 / 3     # of the TAPT steps: the encoder held while the fresh head learns
TAPT_EVALS = 5                # held-out evaluations over the TAPT run (each scores 512 headlines through m3e-small)

# The tiny BERT's pretraining steps: the recipe pays well from PRETRAIN_STEPS on and clearly from PRETRAIN_MIN_STEPS
# (docs/pretraining-recipe.md); m3e-small's runs shrink before the pretraining falls below PRETRAIN_STEPS, and the
# pretraining falls to PRETRAIN_MIN_STEPS before the tiny rows' fine-tuning shrinks.
PRETRAIN_STEPS = 6000
PRETRAIN_MIN_STEPS = 3000
M3E_MIN_SCALE = 0.2           # m3e-small's steps shrink no further: below it its rows would not say what it can do
# m3e-small's fine-tuning learning rate grows as its steps shrink (1e-4 / scale), up to this many times 1e-4: at half
# the steps 2e-4 scores as 1e-4 does with all of them at 50 and 200 labels, and at a quarter 2e-4 beats 1e-4 by 7-14
# points there (docs/pretraining-recipe.md); with all the steps 1e-4 is the better at 1,000 labels
M3E_MAX_RATE = 3.0
REPORT_SECONDS = 5.0          # the pictures and the report

# Floors (docs/main-job.md, "Floors"): the fewest steps at which a row means something.
PRETRAIN_FLOOR = 2000         # the tiny BERT's pretraining: at ~1,000 steps it fine-tunes worse than random weights
TINY_FLOOR = 0.5              # of a tiny row's full fine-tuning steps: at a fifth random-init scores chance
TAPT_FLOOR = round(M3E_MIN_SCALE * TAPT_STEPS)   # m3e-small's continued pretraining: its smallest planned run
REPLAN_TOLERANCE = 0.1        # a plan projected to end this share of the budget off it is made again


def finetune_steps(labels: int, batch_size: int, scale: float = 1.0) -> int:
    """Steps for a budget run of `labels` examples: 20 epochs, at least 80 and at most 300 steps, times `scale`."""
    return max(2, round(min(max(20 * labels / batch_size, 80), 300) * scale))


def whole_split_steps(examples: int, settings: RowSettings, scale: float = 1.0) -> int:
    """Steps for a run on the whole training split of `examples`: the row's epochs, times `scale`."""
    return max(2, round(settings.whole_split_epochs * (examples // settings.batch_size) * scale))


@dataclass(frozen=True)
class WorkTimes:
    """Seconds of each kind of work the job does, timed on this machine before the plan is made."""

    pretrain_step: float                  # the tiny BERT's pretraining step (its recipe, its corpus)
    pretrain_overhead: float              # its corpus, plan and held-out probe, and saving its model
    tapt_step: float                      # m3e-small's continued-pretraining step, the encoder moving
    tapt_held_step: float                 # ... the encoder held (its backward skipped)
    tapt_overhead: float                  # loading m3e-small and its data, its evaluations, saving it
    finetune_step: dict[str, float]       # a fine-tuning step, by kind (RowSettings.kind)
    finetune_overhead: dict[str, float]   # a fine-tuning run's loading, tokenizing and test scoring, by kind

    def at_speed(self, speed: float) -> WorkTimes:
        """Every timing times `speed`: the same work on the machine as a stage found it (2.0: twice as slow)."""
        return WorkTimes(**{name: ({k: v * speed for k, v in value.items()} if isinstance(value, dict)
                                   else value * speed) for name, value in asdict(self).items()})


@dataclass(frozen=True)
class FinetuneRun:
    row: str
    labels: int             # 0: the whole training split
    seed: int
    steps: int
    learning_rate: float


@dataclass(frozen=True)
class Progress:
    """What the job has done when a plan is made: the steps its pretraining runs trained (None: not run yet) and the
    label budgets whose fine-tuning runs are done."""

    pretrain_steps: int | None = None
    tapt_steps: int | None = None          # m3e-small's continued pretraining, and with it the zero-shot, done
    budgets_done: tuple[int, ...] = ()

    @property
    def after(self) -> str:
        """The stage the plan follows, for people."""
        if self.budgets_done:
            return f"fine-tuning with {_budget_name(self.budgets_done[-1])} labels"
        if self.tapt_steps is not None:
            return "continued pretraining of m3e-small and the zero-shot"
        return "pretraining the tiny BERT" if self.pretrain_steps is not None else "timing"


@dataclass(frozen=True)
class NotRun:
    """A row at a label budget (labels None: at every budget; row ZERO_SHOT_ROW: the zero-shot) that is not
    published as a result: the run it rests on got `given` of the `needed` steps (its floor), for `reason`."""

    row: str
    labels: int | None
    given: int
    needed: int
    reason: str

    def describe(self) -> str:
        if self.given:
            return f"not run: the machine gave {self.reason} {self.given:,} of the {self.needed:,} steps it needs"
        return f"not run: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "why": self.describe()}


def not_run_lines(not_run: list[NotRun]) -> list[str]:
    """What is not run, a line per cause: the rows a pretraining below its floor closed, then the runs left out for
    time ("m3e-small at 50, 200 labels; ..."), each with its floor."""
    lines = [f"{n.row}: {n.describe()}" for n in not_run if n.labels is None]
    dropped = [n for n in not_run if n.labels is not None]
    if dropped:
        by_row: dict[str, list[str]] = {}
        for n in dropped:
            by_row.setdefault(n.row, []).append(f"{_budget_name(n.labels)} ({n.needed:,} steps)")
        lines.append("not run, their floors did not fit the minutes left: "
                     + "; ".join(f"{row} at {', '.join(where)}" for row, where in by_row.items()))
    return lines


def _budget_name(labels: int) -> str:
    return f"{labels:,}" if labels else "all"


def blocked_by_floors(done: Progress) -> list[NotRun]:
    """The rows a finished pretraining run left below its floor: the tiny BERT's (pretrained, prompt, zero-shot) when
    its pretraining got fewer than PRETRAIN_FLOOR steps, m3e-small-tapt when its continued pretraining got fewer than
    TAPT_FLOOR."""
    blocked = []
    if done.pretrain_steps is not None and done.pretrain_steps < PRETRAIN_FLOOR:
        blocked += [NotRun(row, None, done.pretrain_steps, PRETRAIN_FLOOR, "the tiny BERT's pretraining")
                    for row in ("bertkit-pretrained", "prompt", ZERO_SHOT_ROW)]
    if done.tapt_steps is not None and done.tapt_steps < TAPT_FLOOR:
        blocked.append(NotRun("m3e-small-tapt", None, done.tapt_steps, TAPT_FLOOR,
                              "m3e-small's continued pretraining" if done.tapt_steps else
                              "m3e-small's continued pretraining did not run (its floor did not fit the minutes left)"))
    return blocked


def floor_steps(row: str, labels: int, train_examples: int) -> int:
    """The fewest fine-tuning steps at which a row at `labels` means something: TINY_FLOOR of the tiny rows' full
    steps, M3E_MIN_SCALE of m3e-small's (whose learning rate grows as its steps shrink)."""
    settings = ROW_SETTINGS[row]
    share = M3E_MIN_SCALE if settings.kind == "m3e-small" else TINY_FLOOR
    full = finetune_steps(labels, settings.batch_size) if labels else whole_split_steps(train_examples, settings)
    return math.ceil(share * full)


@dataclass
class DemoPlan:
    """Every stage's size, and the seconds each is expected to take on the machine as it was last measured. A plan
    made after some stages (`done`) sizes what is left: `spent_seconds` is the job's time so far, and the stages
    done are not among `stage_seconds`."""

    machine: str
    budget_seconds: float
    spent_seconds: float                   # before the plan: data, vocabulary, the timing (and the stages done)
    times: WorkTimes
    pretrain_seconds: float
    pretrain_steps: int
    tapt_steps: int                        # 0: not run (m3e-small's rows gave way)
    tapt_held_steps: int
    m3e_scale: float                       # 0: m3e-small's rows not run
    runs: list[FinetuneRun] = field(default_factory=list)
    done: Progress = field(default_factory=Progress)
    speed: float = 1.0                     # the machine's speed this plan assumed, against the timing's (2.0: slower)
    not_run: list[NotRun] = field(default_factory=list)

    def run_seconds(self, run: FinetuneRun) -> float:
        kind = ROW_SETTINGS[run.row].kind
        return self.times.finetune_overhead[kind] + run.steps * self.times.finetune_step[kind]

    @property
    def tapt_seconds(self) -> float:
        t = self.times
        if not self.tapt_steps:
            return 0.0
        return (t.tapt_overhead + self.tapt_held_steps * t.tapt_held_step
                + (self.tapt_steps - self.tapt_held_steps) * t.tapt_step)

    @property
    def zero_shot(self) -> bool:
        return not any(n.row == ZERO_SHOT_ROW for n in self.not_run)

    def stage_seconds(self) -> dict[str, float]:
        """Expected seconds by stage, in the order they run; a plan made after some stages leaves those out (their
        seconds are in the first entry, the job's time so far)."""
        tiny = [r for r in self.runs if ROW_SETTINGS[r.row].kind != "m3e-small"]
        m3e = [r for r in self.runs if ROW_SETTINGS[r.row].kind == "m3e-small"]
        done = self.done
        stages = {"data, vocabulary and timing" if done == Progress() else "done": self.spent_seconds}
        if done.pretrain_steps is None:
            stages["pretraining the tiny BERT"] = self.pretrain_seconds + self.times.pretrain_overhead
        if done.tapt_steps is None:
            stages["continued pretraining of m3e-small"] = self.tapt_seconds
            stages[ZERO_SHOT_STAGE] = self.times.finetune_overhead["prompt"] if self.zero_shot else 0.0
        stages["fine-tuning the tiny BERT's rows"] = sum(map(self.run_seconds, tiny))
        stages["fine-tuning m3e-small's rows"] = sum(map(self.run_seconds, m3e))
        stages["report"] = REPORT_SECONDS
        return stages

    @property
    def expected_seconds(self) -> float:
        return sum(self.stage_seconds().values())

    def steps(self, row: str, labels: int) -> int:
        return next(r.steps for r in self.runs if (r.row, r.labels) == (row, labels))

    def seeds(self, row: str, labels: int) -> int:
        return sum(1 for r in self.runs if (r.row, r.labels) == (row, labels))

    def budget_runs(self, labels: int) -> list[FinetuneRun]:
        return [r for r in self.runs if r.labels == labels]

    def lines(self) -> list[str]:
        """The plan for people: the machine, each stage's size and expected minutes, the total, what is not run."""
        stages = self.stage_seconds()
        budgets = sorted({r.labels for r in self.runs}, key=lambda n: n or float("inf"))
        first = next(iter(stages))
        if self.done == Progress():
            out = [f"machine: {self.machine}",
                   f"plan for a {self.budget_seconds / 60:.1f}-minute job (expected {self.expected_seconds / 60:.1f}):",
                   f"  {first}: {stages[first] / 60:.1f} min (done)"]
        else:
            out = [f"plan for the rest of the {self.budget_seconds / 60:.1f}-minute job (expected "
                   f"{self.expected_seconds / 60:.1f}), {self.spent_seconds / 60:.1f} min done:"]
        if "pretraining the tiny BERT" in stages:
            out.append(f"  pretraining the tiny BERT: {self.pretrain_steps:,} steps, "
                       f"{stages['pretraining the tiny BERT'] / 60:.1f} min ({self.times.pretrain_step * 1000:.0f} ms "
                       "a step)")
        if "continued pretraining of m3e-small" in stages:
            if self.tapt_steps:
                out.append(f"  continued pretraining of m3e-small: {self.tapt_steps:,} steps ({self.tapt_held_steps:,} "
                           f"with the encoder held), {stages['continued pretraining of m3e-small'] / 60:.1f} min")
            if self.zero_shot:
                out.append(f"  {ZERO_SHOT_STAGE}: the pretrained BERT through the prompt on the test split, no "
                           f"training, {stages[ZERO_SHOT_STAGE] / 60:.1f} min")
        for name, kinds in (("fine-tuning the tiny BERT's rows", ("tiny", "prompt")),
                            ("fine-tuning m3e-small's rows", ("m3e-small",))):
            rows = [row for row in ROWS if ROW_SETTINGS[row].kind in kinds and any(r.row == row for r in self.runs)]
            if not rows:
                continue
            sizes = ", ".join(f"{_budget_name(n)}: {self.steps(rows[0], n)} steps x {self.seeds(rows[0], n)}"
                              for n in budgets if self.seeds(rows[0], n))
            out.append(f"  {name}: {len(rows)} rows, {sizes}; {stages[name] / 60:.1f} min")
        if 0 < self.m3e_scale < 1:
            why = ("so that the tiny BERT's pretraining gets its steps on this machine"
                   if self.done.pretrain_steps is None else "what the minutes left hold")
            out.append(f"  (m3e-small's steps at {self.m3e_scale:.0%} of the full job's, {why})")
        out += [f"  {line}" for line in not_run_lines(self.not_run)]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "budget_seconds": self.budget_seconds, "spent_seconds": self.spent_seconds,
                "expected_seconds": self.expected_seconds, "stages": self.stage_seconds(),
                "pretrain_seconds": self.pretrain_seconds, "pretrain_steps": self.pretrain_steps,
                "tapt_steps": self.tapt_steps, "tapt_held_steps": self.tapt_held_steps, "m3e_scale": self.m3e_scale,
                "after": self.done.after, "speed": self.speed, "times": asdict(self.times),
                "runs": [asdict(r) for r in self.runs], "not_run": [n.to_json() for n in self.not_run]}


def plan_runs(budgets: list[int], seeds: int, train_examples: int, m3e_scale: float = 1.0,
              m3e_seeds_above_200: int | None = None, tiny_scale: float = 1.0,
              rows: tuple[str, ...] = ROWS) -> list[FinetuneRun]:
    """Every fine-tuning run of `rows`, by label budget then row then seed: `seeds` at budgets up to 1,000 labels
    (m3e-small's rows `m3e_seeds_above_200` above 200 when given), one on the whole split; steps scaled per kind."""
    runs = []
    for labels in budgets:
        for row in rows:
            settings = ROW_SETTINGS[row]
            m3e = settings.kind == "m3e-small"
            scale = m3e_scale if m3e else tiny_scale
            count = seeds if 0 < labels <= 1000 else 1
            if m3e and labels > 200 and m3e_seeds_above_200 is not None and count > 1:
                count = min(count, m3e_seeds_above_200)
            steps = (finetune_steps(labels, settings.batch_size, scale) if labels
                     else whole_split_steps(train_examples, settings, scale))
            rate = settings.learning_rate * (min(M3E_MAX_RATE, 1 / max(scale, 1e-9)) if m3e and scale < 1 else 1.0)
            runs.extend(FinetuneRun(row, labels, seed, steps, rate) for seed in range(count))
    return runs


def make_plan(times: WorkTimes, budget_seconds: float, spent_seconds: float, budgets: list[int], seeds: int,
              train_examples: int, machine: str, done: Progress = Progress(), speed: float = 1.0) -> DemoPlan:
    """Size every stage still to run so that the job's expected seconds fit `budget_seconds` (see the module's
    docstring); `done`: what has run (its seconds are in `spent_seconds`), `speed`: what `times` were scaled by."""
    blocked = blocked_by_floors(done)
    closed = {(n.row, n.labels) for n in blocked}
    left = [n for n in budgets if n not in done.budgets_done]
    tapt_done = done.tapt_steps is not None

    def plan(m3e_scale: float, m3e_seeds: int | None, tiny_scale: float = 1.0, m3e: bool = True,
             kept: list[int] = left) -> DemoPlan:
        rows = tuple(row for row in ROWS
                     if (row, None) not in closed and (m3e or ROW_SETTINGS[row].kind != "m3e-small"))
        tapt = 0 if tapt_done or not m3e else max(2, round(TAPT_STEPS * m3e_scale))
        return DemoPlan(machine, budget_seconds, spent_seconds, times, 0.0, done.pretrain_steps or 0, tapt,
                        max(1, round(TAPT_FROZEN_SHARE * tapt)) if tapt else 0, m3e_scale if m3e else 0.0,
                        plan_runs(kept, seeds, train_examples, m3e_scale, m3e_seeds, tiny_scale, rows), done, speed,
                        list(blocked))

    def pretrain_steps(seconds: float) -> int:
        """The tiny BERT's pretraining steps in `seconds`, as every run plans them (`steps_for_budget`); its
        overhead (setting up, saving) is a stage's seconds already, and its held-out evaluations, not timed here,
        sit in the reserve."""
        return steps_for_budget(times.pretrain_step, seconds=seconds)

    def fits(candidate: DemoPlan, steps: int) -> bool:  # leaves the pretraining `steps` (once done: fits the budget)
        if done.pretrain_steps is not None:
            return candidate.expected_seconds <= budget_seconds
        return pretrain_steps(budget_seconds - candidate.expected_seconds) >= steps

    target, least = (PRETRAIN_STEPS, PRETRAIN_MIN_STEPS) if done.pretrain_steps is None else (0, 0)
    if fits(chosen := plan(1.0, None), target) or fits(chosen := plan(1.0, 1), target):
        pass
    elif fits(plan(M3E_MIN_SCALE, 1), target):
        chosen = plan(largest(lambda s: fits(plan(s, 1), target), M3E_MIN_SCALE, 1.0), 1)
    elif fits(chosen := plan(M3E_MIN_SCALE, 1), least):
        pass  # m3e-small at its smallest, the tiny rows whole: the pretraining gets what is left
    elif fits(chosen := plan(0.0, 1, m3e=False), least):
        pass  # m3e-small's rows give way to the tiny BERT's
    elif fits(plan(0.0, 1, TINY_FLOOR, m3e=False), least):
        chosen = plan(0.0, 1, largest(lambda g: fits(plan(0.0, 1, g, m3e=False), least), TINY_FLOOR, 1.0), m3e=False)
    else:  # the largest label budgets give way, the rest at their floor; at worst no fine-tuning at all
        kept = list(left)
        while kept and not fits(chosen := plan(0.0, 1, TINY_FLOOR, m3e=False, kept=kept), least):
            kept.remove(max(kept, key=lambda n: n or float("inf")))
        if not kept:
            chosen = plan(0.0, 1, TINY_FLOOR, m3e=False, kept=[])
    chosen.not_run += _dropped(chosen, left, train_examples, closed)
    if done.pretrain_steps is not None:
        return chosen
    # the pretraining's clock: what is left, or at least its one step and the reserve on it
    seconds = max(budget_seconds - chosen.expected_seconds, times.pretrain_step / (1 - RESERVE))
    return replace(chosen, pretrain_seconds=seconds, pretrain_steps=pretrain_steps(seconds))


def _dropped(plan: DemoPlan, budgets: list[int], train_examples: int, closed: set) -> list[NotRun]:
    """The runs the plan left out for time: every row and budget it has no run for, that no floor closed already."""
    planned = {(r.row, r.labels) for r in plan.runs}
    return [NotRun(row, labels, 0, floor_steps(row, labels, train_examples),
                   f"its {floor_steps(row, labels, train_examples):,} steps (its floor) did not fit the minutes left")
            for labels in budgets for row in ROWS
            if (row, labels) not in planned and (row, None) not in closed]


def largest(fits: Any, low: float, high: float, rounds: int = 30) -> float:
    """The largest x in [low, high] with fits(x), for a `fits` true up to some point and false beyond (bisection);
    `low` when none."""
    if fits(high):
        return high
    for _ in range(rounds):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
