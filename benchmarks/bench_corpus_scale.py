"""Your own corpus at any size: prepare throughput, memory, and time to the first pretraining step, by corpus size.

For each size (MB of UTF-8 text: the built-in Chinese documents, `zh`, repeated as often as needed, each pass in
another seeded order; one sentence per line, a blank line between documents) it measures, each phase in a process
of its own:

- `bertkit prepare`: MB/s (input bytes over wall-clock seconds) and its peak RSS (the largest process: the reader or
  a tokenizing worker);
- `bertkit pretrain --recipe crammed --config tiny` on the prepared store, 50 steps: its peak RSS, and the seconds
  from its start to its first step done (the first metrics.jsonl record), once building the instance plan (the
  first run on a store) and once reading it back (a second run);
- at the comparison size: Hugging Face `datasets` with `BertTokenizerFast`, what a user would pick to tokenize a
  corpus in parallel (`load_dataset("text")`, then `map(batched=True, num_proc=<cores>)`), on the same file and
  vocabulary: MB/s and peak RSS, and bertkit's throughput as a ratio of it.

Peak RSS is `ru_maxrss` of the phase's process tree (wait4 of the child: the largest resident set of it and of its
waited-for descendants, a tokenizing worker or the planning process). Beside it, "all processes" is the largest sum
of the tree's proportional set sizes (/proc/PID/smaps_rollup, sampled every 0.1 s): what the phase takes from the
machine when it runs workers. A child's ru_maxrss starts at its parent's resident set (fork, then exec), so this
process imports nothing heavy: the vocabulary and the corpora are made by a child of their own.

The goals are printed beside the figures: pretraining's peak RSS at 2 GB <= 1.5 GB and within 300 MB of its value
at 30 MB; the first step <= 10 s after the process starts, at any size; prepare >= 1.0x the throughput of
`datasets`, with <= 2 GB of memory. Corpora, stores and runs go to a temporary directory (--out to keep them; the
2 GB run needs about 8 GB of disk there). Run it on a quiet machine; every phase is run once:

    .venv/bin/python benchmarks/bench_corpus_scale.py --sizes 30 300 --large --json corpus_scale.json
    .venv/bin/python benchmarks/bench_corpus_scale.py --sizes 3 --compare-size 3 --steps 5   # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 50
GOALS = {"pretrain_rss_mb": 1500, "pretrain_growth_mb": 300, "first_step_seconds": 10, "ratio": 1.0,
         "prepare_memory_mb": 2000}
HF_SCRIPT = """
import sys, time
from datasets import disable_progress_bars, load_dataset
from transformers import BertTokenizerFast

corpus, vocab, cache, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
disable_progress_bars()
tokenizer = BertTokenizerFast(vocab_file=vocab)
dataset = load_dataset("text", data_files=corpus, split="train", cache_dir=cache)
dataset = dataset.map(lambda batch: tokenizer(batch["text"]), batched=True, num_proc=workers, remove_columns=["text"])
print(sum(len(ids) for ids in dataset.select(range(min(1000, len(dataset))))["input_ids"]), file=sys.stderr)
"""


def make_data(out: Path, sizes: list[float]) -> None:
    """The demo's character vocabulary, and per size the built-in Chinese documents (zh: news, People's Daily,
    reviews) repeated, whole, until the corpus holds that many MB (run in a child: see the module's docstring)."""
    from bertkit.data.corpus import load_documents
    from bertkit.pipelines.demo import build_demo_vocab

    build_demo_vocab(out / "vocab")
    documents = [("\n".join(doc) + "\n\n").encode("utf-8") for doc in load_documents("zh")]
    for size in sizes:
        path = out / f"corpus-{size:g}MB.txt"
        if path.exists() and path.stat().st_size >= size * 1e6:
            continue
        written, rng = 0, random.Random(0)
        with open(path.with_suffix(".tmp"), "wb") as f:
            while written < size * 1e6:
                rng.shuffle(documents)  # each pass in another order: NSP partners and batches see new neighbours
                for document in documents:
                    f.write(document)
                    written += len(document)
                    if written >= size * 1e6:
                        break
        os.replace(path.with_suffix(".tmp"), path)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """The machine, for the table's caption."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu_name()}, {default_workers()} cores, {memory:.0f} GiB, {platform.system()} {platform.release()}"


def tree_memory_mb(pid: int) -> float:
    """The summed proportional set size of process `pid` and its descendants (Linux; 0 elsewhere), in MB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # ended meanwhile
            continue
    return total / 1e6


def default_workers() -> int:
    """The cores this process may use (bertkit prepare's default number of workers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measured(command: list[str], first_record: Path | None = None) -> dict:
    """Run `command`: its wall-clock seconds, peak RSS (MB) and, when `first_record` is given, the seconds until that
    file first holds a line (the first metrics.jsonl record: the first step done).

    The child is reaped with wait4, whose ru_maxrss is the largest resident set of the child and of every descendant
    it waited for (a tokenizing worker, a data loader's worker)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = bytearray()
    os.set_blocking(process.stderr.fileno(), False)
    first, tree, polls = None, 0.0, 0
    while True:
        stderr += process.stderr.read() or b""  # drained as it comes, so a chatty child never blocks on the pipe
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if first_record is not None and first is None and first_record.exists() and first_record.stat().st_size:
            first = time.perf_counter() - started
        if polls % 5 == 0:
            tree = max(tree, tree_memory_mb(process.pid))
        polls += 1
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace")[-3000:]
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{said}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss * 1024 / 1e6, "all_processes_mb": tree,
            "first_step_seconds": first}


def bertkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertkit", *map(str, args)]


def prepare(corpus: Path, vocab: Path, store: Path) -> dict:
    result = measured(bertkit("prepare", "--corpus", corpus, "--vocab", vocab, "--out", store, "--overwrite",
                              "--no-progress"))
    meta = json.loads((store / "store.json").read_text())
    result.update(mb_per_second=corpus.stat().st_size / 1e6 / result["seconds"], tokens=meta["tokens"],
                  documents=meta["documents"], store_mb=sum(p.stat().st_size for p in store.glob("store.*")
                                                           if p.is_file()) / 1e6)
    return result


def pretrain(store: Path, vocab: Path, out: Path, steps: int) -> dict:
    """The demo's pretraining recipe (crammed, tiny) for `steps` steps on the store."""
    shutil.rmtree(out, ignore_errors=True)
    return measured(bertkit("pretrain", "--recipe", "crammed", "--config", "tiny", "--corpus", store, "--vocab", vocab,
                            "--max-steps", steps, "--log-every", 1, "--eval-every", steps, "--out", out,
                            "--no-progress"), first_record=out / "metrics.jsonl")


def datasets_prepare(corpus: Path, vocab: Path, cache: Path) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    result = measured([sys.executable, "-c", HF_SCRIPT, str(corpus), str(vocab / "vocab.txt"), str(cache),
                       str(default_workers())])
    shutil.rmtree(cache, ignore_errors=True)
    result["mb_per_second"] = corpus.stat().st_size / 1e6 / result["seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[30, 300], help="corpus sizes in MB")
    parser.add_argument("--large", action="store_true", help="add the 2 GB corpus")
    parser.add_argument("--compare-size", type=float, default=300, help="the size prepared by datasets too (MB)")
    parser.add_argument("--steps", type=int, default=STEPS, help="pretraining steps measured")
    parser.add_argument("--out", help="keep corpora, stores and runs here (default: a temporary directory)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--make-data", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sorted(set(args.sizes) | ({2000.0} if args.large else set()))
    if args.make_data:
        make_data(Path(args.out), sizes)
        return
    with tempfile.TemporaryDirectory(prefix="bertkit-corpus-scale-") as temporary:
        out = Path(args.out or temporary)
        out.mkdir(parents=True, exist_ok=True)
        results = measure_all(out, sizes, args.compare_size, args.steps)
    report(results, args.steps)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "cores": default_workers(), "steps": args.steps,
                                               "goals": GOALS, "results": results}, indent=2))


def measure_all(out: Path, sizes: list[float], compare_size: float, steps: int) -> dict:
    """Every phase at every size, in order, printing each row as it is measured."""
    print(f"{machine()}\nmaking the vocabulary and the corpora in {out}", flush=True)
    subprocess.run([sys.executable, __file__, "--make-data", "--out", str(out), "--sizes", *map(str, sizes)],
                   check=True)
    vocab = out / "vocab"
    os.environ["BERTKIT_STORES"] = str(out / "stores")
    results = {}
    for size in sizes:
        name = f"{size:g}MB"
        corpus, store = out / f"corpus-{name}.txt", out / f"store-{name}"
        print(f"{name}: preparing", flush=True)
        row = {"prepare": prepare(corpus, vocab, store)}
        shutil.rmtree(store / "store.plans", ignore_errors=True)
        print(f"{name}: pretraining {steps} steps (first run on the store: the plan is built)", flush=True)
        row["pretrain"] = pretrain(store, vocab, out / f"run-{name}", steps)
        print(f"{name}: pretraining again (the plan is read back)", flush=True)
        row["pretrain_again"] = pretrain(store, vocab, out / f"run-{name}", steps)
        if size == compare_size:
            print(f"{name}: datasets.map(batched=True, num_proc={default_workers()}) with BertTokenizerFast",
                  flush=True)
            row["datasets"] = datasets_prepare(corpus, vocab, out / "hf-cache")
            row["ratio"] = row["prepare"]["mb_per_second"] / row["datasets"]["mb_per_second"]
        results[name] = row
        print(json.dumps(row), flush=True)
        corpus.unlink()  # the disk the next size needs
        shutil.rmtree(out / f"run-{name}", ignore_errors=True)
    return results


def report(results: dict, steps: int) -> None:
    """The table, then each goal beside its figures."""
    print(f"\n{machine()}\n")
    print(f"| corpus | prepare MB/s | prepare peak RSS (all processes) | pretrain peak RSS, {steps} steps (all "
          "processes) | first step: plan built / read back | tokens | store |")
    print("|---|---|---|---|---|---|---|")
    for name, row in results.items():
        p, t, again = row["prepare"], row["pretrain"], row["pretrain_again"]
        print(f"| {name} | {p['mb_per_second']:.2f} | {p['peak_rss_mb']:,.0f} MB ({p['all_processes_mb']:,.0f} MB) | "
              f"{t['peak_rss_mb']:,.0f} MB ({t['all_processes_mb']:,.0f} MB) | {seconds(t)} / {seconds(again)} | "
              f"{p['tokens']:,} | {p['store_mb']:,.0f} MB |")
    for name, row in results.items():
        if "datasets" in row:
            d = row["datasets"]
            print(f"\n{name} with datasets.map(batched=True, num_proc={default_workers()}) and BertTokenizerFast: "
                  f"{d['mb_per_second']:.2f} MB/s, peak RSS {d['peak_rss_mb']:,.0f} MB (all processes "
                  f"{d['all_processes_mb']:,.0f} MB); bertkit prepare {row['prepare']['mb_per_second']:.2f} MB/s: "
                  f"{row['ratio']:.2f}x")
    print("\ngoals:")
    for line in goals(results):
        print(f"  {line}")


def seconds(run: dict) -> str:
    return "-" if run["first_step_seconds"] is None else f"{run['first_step_seconds']:.1f} s"


def goals(results: dict) -> list[str]:
    """Each goal of the acceptance with the figures it is judged on, and whether they meet it."""
    def verdict(met: bool) -> str:
        return "met" if met else "NOT MET"

    lines = []
    large, small = results.get("2000MB"), results.get("30MB")
    if large:
        rss = large["pretrain"]["peak_rss_mb"]
        met = rss <= GOALS["pretrain_rss_mb"]
        lines.append(f"pretrain peak RSS at 2 GB <= {GOALS['pretrain_rss_mb']:,} MB: {rss:,.0f} MB, {verdict(met)}")
        if small:
            growth = rss - small["pretrain"]["peak_rss_mb"]
            lines.append(f"pretrain peak RSS at 2 GB within {GOALS['pretrain_growth_mb']} MB of 30 MB's: "
                         f"{growth:+,.0f} MB, {verdict(growth <= GOALS['pretrain_growth_mb'])}")
    else:
        lines.append("pretrain peak RSS at 2 GB: not measured (--large)")
    for name, row in results.items():
        times = [row[k]["first_step_seconds"] for k in ("pretrain", "pretrain_again")]
        worst = max((t for t in times if t is not None), default=None)
        lines.append(f"first step <= {GOALS['first_step_seconds']} s at {name}: {seconds(row['pretrain'])} / "
                     f"{seconds(row['pretrain_again'])}, "
                     f"{verdict(worst is not None and worst <= GOALS['first_step_seconds'])}")
    compared = [(name, row) for name, row in results.items() if "datasets" in row]
    for name, row in compared:
        memory = max(row["prepare"]["peak_rss_mb"], row["prepare"]["all_processes_mb"])
        met = row["ratio"] >= GOALS["ratio"] and memory <= GOALS["prepare_memory_mb"]
        lines.append(f"prepare >= {GOALS['ratio']:.1f}x datasets with <= {GOALS['prepare_memory_mb']:,} MB at {name}: "
                     f"{row['ratio']:.2f}x, {memory:,.0f} MB, {verdict(met)}")
    if not compared:
        lines.append("prepare against datasets: not measured (no --sizes value equals --compare-size)")
    return lines


if __name__ == "__main__":
    main()
