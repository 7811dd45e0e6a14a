"""The pretraining recipe, one lever at a time: each kept only if it helps at equal wall clock.

Every lever is measured against the candidate recipe (`bertkit pretrain --recipe crammed`, the `tiny` size,
masked LM + NSP with fresh masks each pass, lr 1e-3, dropout off, bf16) by changing that one lever and nothing
else: a lever the candidate has is turned back to BERT's setting (one run each: does it pay its way?), a lever it
lacks is turned on (does it help on top?). BERT's standard recipe as bertkit runs it (`mini`, 15% static masks,
lr 1e-4, dropout 0.1, fp32) is the reference row. A lever is kept when the candidate with it reaches a better
held-out masked-LM accuracy after M minutes than without it (by more than 0.002), unless it costs the downstream
probe more than 1.5 points (dropping the sentence objective buys masked-LM steps and loses what classification
needs). The runs are independent of each other, so two run side by side.

Equal wall clock, measured so that a busy machine cannot tilt it: each run's training step is timed first
(`pipelines.pretrain.plan_steps`, as `bertkit pretrain --minutes` plans a run, on the whole machine), which gives
the steps it can take in M minutes; it then trains exactly those steps (two runs side by side on one thread each:
the steps and so the result do not depend on the speed). Time the steps on a quiet machine.
Every run is scored by the same code on the same held-out probe as bench_time_to_quality.py (single segments of
128 tokens, BERT's 15% masking), and fine-tuned on 200 labelled THUCNews headlines (three seeds) as its probe.

    python benchmarks/ablate_pretraining.py --minutes 3 --jobs 2 --out runs/ablation
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_time_to_quality import EVAL_FRACTION, PROBE_SIZE, SEED, SEQ, bert_data, probe_finetune, score  # noqa: E402
from bertkit.pipelines.demo import build_demo_vocab, pretraining_corpus  # noqa: E402
from bertkit.pipelines.options import PretrainOptions, recipe_values  # noqa: E402
from bertkit.pipelines.pretrain import plan_steps, prepare, pretrain  # noqa: E402

# BERT's recipe as transformers' side of bench_time_to_quality.py runs it: the reference row
BERT = dict(config="mini", objective="mlm+nsp", masking="static", dupe_factor=1, max_seq_length=SEQ, batch_size=32,
            learning_rate=1e-4, warmup_ratio=0.06, dropout=0.1, bf16=False)
# the candidate: bertkit pretrain --recipe crammed
CANDIDATE = {**BERT, **{k: v for k, v in recipe_values("crammed").items() if k != "dupe_factor"}}

# (lever, the one-change alternatives to the candidate): BERT's setting back, or a lever the candidate lacks
LEVERS: list[tuple[str, list[dict]]] = [
    ("bf16 autocast", [dict(bf16=False)]),
    ("peak learning rate", [dict(learning_rate=1e-4), dict(learning_rate=2e-3)]),
    ("model shape", [dict(config="mini")]),  # 2 layers x 128 -> 4 x 256 ("small", 4 x 512, is slower still)
    ("dropout off", [dict(dropout=0.1)]),
    ("dynamic masking", [dict(masking="static")]),
    ("sentence objective", [dict(objective="mlm"), dict(objective="mlm+sop")]),
    ("masking rate", [dict(mlm_probability=0.15)]),
    ("pre-LN", [dict(normalize_before=True)]),
    ("biases off", [dict(use_bias=False)]),
    ("schedule", [dict(lr_schedule="cosine")]),
    ("batch size", [dict(batch_size=64)]),
]
TIE = 0.002
PROBE_DROP = 0.015  # three seeds of 200 labels move by about a point


def options_for(recipe: dict, out: Path, vocab: Path, minutes: float) -> PretrainOptions:
    return PretrainOptions(**recipe, corpus=pretraining_corpus(), vocab=str(vocab), out=str(out), minutes=minutes,
                           eval_fraction=EVAL_FRACTION, seed=SEED, max_eval_instances=PROBE_SIZE, progress=False)


def name_of(recipe: dict) -> str:
    if recipe == BERT:
        return "bert"
    changed = {k: v for k, v in recipe.items() if CANDIDATE.get(k) != v}
    return "-".join(f"{k}={v}" for k, v in sorted(changed.items())) or "candidate"


def train_one(spec: dict) -> dict:
    """Train one recipe for its planned steps and score it (run in a subprocess by `main`)."""
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.heads import model_class_for

    out, vocab = Path(spec["out"]), Path(spec["vocab"])
    options = dataclasses.replace(options_for(spec["recipe"], out, vocab, spec["minutes"]),
                                  max_steps=spec["steps"], minutes=None)
    started = time.perf_counter()
    state = pretrain(options)
    probe = bert_data(vocab, out.parent / ".probe")  # the stores and the plan are cached: nothing is tokenized again
    model = model_class_for(BertConfig.from_pretrained(out)).from_pretrained(out)
    result = {"name": spec["name"], "recipe": spec["recipe"], "steps": state.step,
              "train_seconds": time.perf_counter() - started,
              **score(model, probe.data.eval_singles, probe.data.eval_pairs, probe.tokenizer.pad_token_id)}
    result.update(probe_finetune(out, out.parent / f"{out.name}-probe", 200, 3))
    return result


def run_group(specs: list[dict], jobs: int, on_result=lambda result: None, script: str = __file__) -> list[dict]:
    """Train the specs, `jobs` at a time, each in its own process (`script --train-one SPEC`, one thread each when
    side by side); `on_result` sees each result as it comes (the log, so an interrupted ablation resumes where it
    was)."""
    env = dict(os.environ, **({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if jobs > 1 else {}))
    results, pending = [], list(specs)
    running: list[tuple[subprocess.Popen, Path]] = []
    while pending or running:
        while pending and len(running) < jobs:
            spec = pending.pop(0)
            result_file = Path(spec["out"] + ".result.json")  # not with_suffix: "lr=0.002" has one
            command = [sys.executable, script, "--train-one", json.dumps(spec), "--result", str(result_file)]
            running.append((subprocess.Popen(command, env=env), result_file))
        process, result_file = running.pop(0)
        if process.wait() != 0:
            raise SystemExit(f"a run failed: {result_file}")
        results.append(json.loads(result_file.read_text()))
        on_result(results[-1])
    return results


def start_ablation(description: str, minutes: float, out: str, train_one, more_arguments=lambda parser: None):
    """The command line every ablation shares: its options, a spec trained in this process (`--train-one`, as
    run_group starts it; None is returned), or the run's start: (args, its output directory, the main job's
    vocabulary, the log of finished rows and those rows by name, so an interrupted ablation resumes)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--minutes", type=float, default=minutes, help="each row's pretraining wall clock")
    parser.add_argument("--out", default=out)
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side (one thread each when > 1)")
    more_arguments(parser)
    parser.add_argument("--train-one", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train_one:
        Path(args.result).write_text(json.dumps(train_one(json.loads(args.train_one)), indent=2))
        return None
    directory = Path(args.out)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_demo_vocab(directory / "vocab")
    log = directory / "ablation.jsonl"
    done = {json.loads(line)["name"]: json.loads(line) for line in log.read_text().splitlines()} if log.exists() else {}
    return args, directory, vocab, log, done


def main() -> None:
    def levers(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--levers", type=int, default=len(LEVERS), help="walk only the first N levers")

    started = start_ablation(__doc__.splitlines()[0], 10.0, "runs/ablation", train_one, levers)
    if started is None:
        return
    args, out, vocab, log, done = started

    def plan(recipe: dict) -> dict:
        name = name_of(recipe)
        options = options_for(recipe, out / name, vocab, args.minutes)
        steps = plan_steps(prepare(options), options)
        print(f"  planned {name}: {steps} steps in {args.minutes:g} minutes", flush=True)
        return {"name": name, "recipe": recipe, "steps": steps, "out": str(out / name), "vocab": str(vocab),
                "minutes": args.minutes}

    def run(recipes: list[dict]) -> list[dict]:
        todo = [plan(r) for r in recipes if name_of(r) not in done]
        def record(result: dict) -> None:
            done[result["name"]] = result
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(result) + "\n")

        run_group(todo, args.jobs, record)
        return [done[name_of(r)] for r in recipes]

    alternatives = [(lever, {**CANDIDATE, **change}) for lever, changes in LEVERS[:args.levers] for change in changes]
    results = run([CANDIDATE, BERT] + [recipe for _, recipe in alternatives])
    candidate, bert = results[0], results[1]
    lines = [f"| lever | run (one change to the candidate) | steps in {args.minutes:g} min | held-out MLM accuracy | "
             "NSP / SOP accuracy | probe (200 labels) | the lever |", "|---|---|---|---|---|---|---|"]

    def row(lever: str, label: str, r: dict, verdict: str) -> str:
        nsp = f"{r['nsp_accuracy']:.3f}" if "nsp_accuracy" in r else "-"
        return (f"| {lever} | {label} | {r['steps']:,} | {r['mlm_accuracy']:.4f} | {nsp} | "
                f"{r['probe_accuracy']:.3f} ± {r['probe_accuracy_std']:.3f} | {verdict} |")

    lines.append(row("", "the candidate (--recipe crammed)", candidate, ""))
    lines.append(row("", "BERT's recipe (mini, static 15%, lr 1e-4, dropout 0.1, fp32)", bert, "reference"))
    for (lever, recipe), result in zip(alternatives, results[2:]):
        change = ", ".join(f"{k} {v}" for k, v in recipe.items() if CANDIDATE.get(k) != v)
        lines.append(row(lever, change, result, verdict(result, candidate)))
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def verdict(changed: dict, candidate: dict) -> str:
    """What the one change says about its lever, judged as the module docstring says."""
    gain = changed["mlm_accuracy"] - candidate["mlm_accuracy"]
    probe = changed["probe_accuracy"] - candidate["probe_accuracy"]
    if gain > TIE and probe >= -PROBE_DROP:
        return f"the change helps (MLM {gain:+.4f}, probe {probe:+.3f}): take it"
    if gain > TIE:
        return f"MLM {gain:+.4f} but probe {probe:+.3f}: the candidate's setting stays"
    return f"the candidate's setting is better or equal (MLM {gain:+.4f}, probe {probe:+.3f})"

if __name__ == "__main__":
    main()
