"""How busy this machine's CPUs are, and torch threads that fit what other processes leave free.

A training step on two intra-op threads, with a third process running on one of the two cores, does not take twice
as long but three to twenty times: the step's threads wait for each other at every parallel region, and one of them
is always waiting for the core the other process holds (OpenMP oversubscription). One thread on the free core takes
its share and no more. So a run that follows the machine keeps its threads at the cores other processes leave free,
measured from the kernel's own counts (`/proc/stat`: every CPU's busy time, the hypervisor's steal among it; less
this process's own CPU time, `/proc/self/stat`) over the last few seconds, and looks again every few seconds
(`ThreadFit`). On a machine without `/proc` (macOS, Windows) nothing is measured and the threads stay as they are.

Measured on a 2-core AMD EPYC (the main job's tiny-BERT pretraining step, 60 steps): quiet, 17.5 ms on two threads
and 26.4 on one; beside `python3 -c "while True: pass"`, 52.8 ms on two threads (the process got 1.35 of its 2
cores, spikes to 196 ms) and 25.7 on one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
SELF_STAT = Path("/proc/self/stat")
CHECK_SECONDS = 5.0   # a fitting run looks at the machine this often: long enough for the counts to mean something


def usable_cores() -> int:
    """CPUs this process may run on (its affinity: a container's or `taskset`'s limit, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class _Counts:
    wall: float
    busy: float     # seconds of CPU time every usable CPU spent on anything, steal included
    steal: float    # ... of it the hypervisor's (another machine's)
    own: float      # seconds of CPU time this process got, all its threads


def read_counts() -> _Counts | None:
    """The kernel's counters now, in seconds; None where there is no /proc to read."""
    try:
        stat = PROC_STAT.read_text().splitlines()
        own = SELF_STAT.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else None
    busy = steal = 0.0
    for line in stat:
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        if cpus is not None and fields[0] not in cpus:
            continue
        # user nice system idle iowait irq softirq steal (guest time is counted in user already)
        values = [int(v) for v in fields[1:9]] + [0] * max(0, 9 - len(fields))
        busy += sum(values[:3]) + sum(values[5:8])
        steal += values[7]
    # after ")": state is field 3 of the line, utime and stime fields 14 and 15
    return _Counts(time.monotonic(), busy / tick, steal / tick, (int(own[11]) + int(own[12])) / tick)


@dataclass(frozen=True)
class Load:
    """What the usable CPUs did over a window of `seconds`, in cores' worth (1.0 = one CPU the whole window)."""

    seconds: float
    cores: int
    others: float     # what other processes took, and the hypervisor's steal
    own: float        # what this process got
    steal: float

    @property
    def free(self) -> float:
        return max(0.0, self.cores - self.others)

    def describe(self) -> str:
        said = f"other processes used {self.others:.1f} of the {self.cores} cores"
        if self.steal >= 0.05:
            said += f" ({self.steal:.1f} of it the hypervisor's steal)"
        return said


def load_between(before: _Counts, after: _Counts) -> Load | None:
    """The load over the window between two readings of the counters; None for a window too short to say."""
    seconds = after.wall - before.wall
    if seconds < 0.2:
        return None
    cores = usable_cores()
    clamp = lambda x: min(float(cores), max(0.0, x / seconds))  # noqa: E731 - the counters tick at 100 Hz
    return Load(seconds, cores, clamp((after.busy - before.busy) - (after.own - before.own)),
                clamp(after.own - before.own), clamp(after.steal - before.steal))


def measure_load(seconds: float = 1.0) -> Load | None:
    """The load over the next `seconds`, this process idle meanwhile: what the others take when it leaves them
    the machine."""
    before = read_counts()
    if before is None:
        return None
    time.sleep(seconds)
    after = read_counts()
    return None if after is None else load_between(before, after)


def fitting_threads(load: Load, most: int) -> int:
    """Threads for the cores the others leave: `most` less every whole core they hold (more than half a core counts
    as one: two threads beside a process that holds 0.6 of a core already wait for it), at least one."""
    return max(1, min(most, load.cores - round(load.others)))


class ThreadFit:
    """torch's intra-op threads kept at the cores other processes leave free (`fitting_threads`), at most the count
    torch chose when this process started (its physical cores; never more than that), looked at again every
    CHECK_SECONDS by `tick`, which a training loop calls once a step (it costs a clock reading). `changes` records
    each change: (seconds since the fit began, threads, the load that made it)."""

    def __init__(self) -> None:
        import torch

        self.most = min(torch.get_num_threads(), usable_cores())
        self.started = time.monotonic()
        self._last = read_counts()
        self.changes: list[tuple[float, int, Load]] = []
        self.load: Load | None = None

    @property
    def threads(self) -> int:
        import torch

        return torch.get_num_threads()

    def tick(self) -> None:
        if self._last is not None and time.monotonic() - self._last.wall >= CHECK_SECONDS:
            self.update()

    def update(self, load: Load | None = None) -> int:
        """Fit the threads to `load`, or to the load since the last look; returns the threads now."""
        import torch

        now = read_counts()
        if load is None and self._last is not None and now is not None:
            load = load_between(self._last, now)
        self._last = now
        if load is None:
            return torch.get_num_threads()
        self.load = load
        threads = fitting_threads(load, self.most)
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
            self.changes.append((time.monotonic() - self.started, threads, load))
        return threads

    def fit_now(self, seconds: float = 1.0) -> int:
        """Measure the others' load for `seconds` with this process idle, and fit the threads to it (before a
        timing: the threads the timed work will run on)."""
        return self.update(measure_load(seconds))


_FIT: ThreadFit | None = None


def thread_fit() -> ThreadFit | None:
    """The process's one ThreadFit (every stage of a job adjusts the same count), made on first use; None where
    OMP_NUM_THREADS is set (the user's count wins) or nothing can be measured."""
    global _FIT
    if os.environ.get("OMP_NUM_THREADS") or read_counts() is None:
        return None
    if _FIT is None:
        _FIT = ThreadFit()
    return _FIT


def parse_threads(value: str | int | None) -> int | str | None:
    """A --threads value: None (torch's choice), a count of at least 1, or "fit"; anything else is refused."""
    from bertkit.errors import InputError

    if value is None or value == "fit":
        return value
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise InputError(f"--threads takes a number of threads or fit, got {value!r}") from None
    if count < 1 or str(count) != str(value).strip():
        raise InputError(f"--threads takes a number of threads (1 or more) or fit, got {value!r}")
    return count


def apply_threads(choice: int | str | None) -> ThreadFit | None:
    """Set torch's threads as a run's --threads says: a count is set, fit is fitted now (`ThreadFit`, returned for
    the run to `tick`), None leaves them as they are."""
    import torch

    choice = parse_threads(choice)
    if isinstance(choice, int):
        torch.set_num_threads(choice)
        return None
    if choice == "fit":
        fit = thread_fit()
        if fit is not None:
            fit.update()
        return fit
    return None
