"""The main job's pretraining speed: `bertkit demo`'s pretraining step (the `crammed` recipe, the `tiny` BERT, masked
LM on the THUCNews training headlines, the demo's character vocabulary) as a
`bertkit pretrain` process, by this checkout and, with --before REV, by the code of commit REV.

For each it prints the steps trained, the training seconds the run counted (evaluations included, as the demo's
time budget counts them), steps/s, the seconds from the process's start to its first step, the whole process's
seconds and its peak RSS; with --before, the ratio of steps/s (the goal: >= 1.0, within noise). --minutes runs each
as the demo does (a time budget, the steps planned by timing, an evaluation every tenth of the run); --max-steps N
trains N steps with one evaluation, at the end, which compares the same work (use a few thousand: the evaluation
and the first steps weigh on fewer). The runs alternate (--rounds), so a machine that slows down weighs on both;
the median is reported. The commit's source is unpacked with `git archive` into a temporary directory and run with
this checkout's .venv.

    .venv/bin/python benchmarks/bench_demo_pretraining.py --before b3e7fb5 --max-steps 2000 --rounds 2
    # b3e7fb5: the last commit before the corpus store (the same recipe, instances held in memory)
    .venv/bin/python benchmarks/bench_demo_pretraining.py --max-steps 20 --rounds 1   # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_CORPUS = ["thucnews-train"]  # bertkit.pipelines.demo.pretraining_corpus("thucnews")
DEMO_FLAGS = ["--objective", "mlm"]  # bertkit.pipelines.demo.PRETRAIN


def unpack(revision: str, into: Path) -> Path:
    """The src/ tree of `revision`, unpacked under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True)
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def make_vocab(out: Path) -> Path:
    """The demo's character vocabulary, made by this checkout in a child (this process stays small)."""
    code = "import sys; from pathlib import Path; from bertkit.pipelines.demo import build_demo_vocab; " \
           "build_demo_vocab(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(out)], check=True)
    return out


def run_pretraining(src: Path, vocab: Path, out: Path, budget: list[str]) -> dict:
    """One `bertkit pretrain` process on the code in `src`: its steps, seconds, steps/s, first step and peak RSS."""
    command = [sys.executable, "-m", "bertkit", "pretrain", "--recipe", "crammed", "--config", "tiny", "--corpus",
               *DEMO_CORPUS, *DEMO_FLAGS, "--vocab", str(vocab), "--out", str(out), "--seed", "42", "--log-every", "1",
               "--no-progress", *budget]
    env = {**os.environ, "PYTHONPATH": str(src)}
    metrics = out / "metrics.jsonl"
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = bytearray()
    os.set_blocking(process.stderr.fileno(), False)
    first = None
    while True:
        stderr += process.stderr.read() or b""
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if first is None and metrics.exists() and metrics.stat().st_size:
            first = time.perf_counter() - started
        time.sleep(0.05)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr.decode('utf-8', 'replace')[-3000:]}")
    result = json.loads((out / "train_results.json").read_text())
    return {"steps": result["step"], "seconds": result["seconds"], "steps_per_second": result["step"] /
            result["seconds"], "first_step_seconds": first, "wall_seconds": wall,
            "peak_rss_mb": usage.ru_maxrss * 1024 / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=7.5, help="a time budget, as the demo's (default 7.5)")
    budget.add_argument("--max-steps", type=int, help="train this many steps instead")
    parser.add_argument("--before", metavar="REV", help="also run the code of this commit or branch, e.g. main")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each, alternating")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    # N steps: one evaluation, at the end (the demo's ten in thousands of steps would be most of a short run)
    limit = ["--max-steps", str(args.max_steps), "--eval-every", str(args.max_steps)] if args.max_steps else \
        ["--minutes", str(args.minutes)]
    with tempfile.TemporaryDirectory(prefix="bertkit-demo-pretraining-") as temporary:
        work = Path(temporary)
        os.environ.setdefault("BERTKIT_STORES", str(work / "stores"))  # a store made for these runs (timed apart)
        sources = {"now": ROOT / "src"}
        if args.before:
            sources[f"before ({args.before})"] = unpack(args.before, work / "before")
        vocab = make_vocab(work / "vocab")
        runs: dict[str, list[dict]] = {name: [] for name in sources}
        for round_number in range(args.rounds):
            for name, src in sources.items():
                out = work / f"run-{len(runs[name])}-{name.split()[0]}"
                print(f"round {round_number + 1}: {name}", flush=True)
                runs[name].append(run_pretraining(src, vocab, out, limit))
                print(f"  {json.dumps(runs[name][-1])}", flush=True)
    print(f"\n{'code':<22} {'steps':>7} {'seconds':>8} {'steps/s':>8} {'first step':>11} {'wall':>7} {'peak RSS':>9}")
    medians = {}
    for name, results in runs.items():
        medians[name] = {key: statistics.median(r[key] for r in results if r[key] is not None)
                         for key in results[0] if any(r[key] is not None for r in results)}
        m = medians[name]
        print(f"{name:<22} {m['steps']:>7,.0f} {m['seconds']:>8.1f} {m['steps_per_second']:>8.2f} "
              f"{m.get('first_step_seconds', float('nan')):>10.1f}s {m['wall_seconds']:>6.0f}s "
              f"{m['peak_rss_mb']:>6,.0f} MB")
    if args.before:
        before = medians[f"before ({args.before})"]["steps_per_second"]
        ratio = medians["now"]["steps_per_second"] / before
        print(f"\nsteps/s now / before: {ratio:.3f} (goal: >= 1.0, within noise)")
    if args.json:
        Path(args.json).write_text(json.dumps({"budget": limit, "runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
