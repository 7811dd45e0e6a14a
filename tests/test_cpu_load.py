"""Threads that fit the machine as it is: the load other processes put on the cores, read from the kernel's counts,
and torch's intra-op threads kept at the cores they leave free."""

import os
import subprocess
import sys
import time

import pytest
import torch

from bertkit.errors import InputError
from bertkit.utils import cpu_load
from bertkit.utils.cpu_load import Load, ThreadFit, _Counts, fitting_threads, load_between, parse_threads

needs_proc = pytest.mark.skipif(cpu_load.read_counts() is None, reason="no /proc on this system")


def test_the_threads_that_fit_the_cores_others_leave():
    quiet = Load(seconds=5, cores=2, others=0.1, own=1.9, steal=0.0)
    busy = Load(seconds=5, cores=2, others=0.67, own=1.33, steal=0.0)  # a third process beside two threads
    full = Load(seconds=5, cores=2, others=2.0, own=0.0, steal=0.0)
    assert [fitting_threads(x, 2) for x in (quiet, busy, full)] == [2, 1, 1]  # at least one
    assert fitting_threads(Load(5, 16, 3.2, 0.0, 0.0), 8) == 8  # never above the count torch chose
    assert fitting_threads(Load(5, 16, 12.4, 0.0, 0.0), 8) == 4
    assert busy.describe() == "other processes used 0.7 of the 2 cores"
    assert "steal" in Load(5, 2, 1.0, 1.0, 0.4).describe()


def test_the_load_between_two_readings():
    before = _Counts(wall=100.0, busy=50.0, steal=1.0, own=20.0)
    after = _Counts(wall=105.0, busy=58.0, steal=1.5, own=25.0)  # 8 s busy in 5 s, 5 of them this process's
    load = load_between(before, after)
    assert (load.seconds, load.own, load.others, load.steal) == pytest.approx((5.0, 1.0, 0.6, 0.1))
    assert load_between(before, _Counts(100.1, 50.0, 1.0, 20.0)) is None  # too short a window to say


@needs_proc
def test_a_busy_process_is_seen_and_the_threads_follow_it(monkeypatch):
    """A real process spinning on a core: the load says about one core taken, and the fit drops to one thread
    where torch had two; once it ends, the fit goes back."""
    monkeypatch.setattr(cpu_load, "usable_cores", lambda: 2)
    threads = torch.get_num_threads()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        load = cpu_load.measure_load(1.0)
        assert load is not None and 0.6 < load.others <= 2.0, load
        torch.set_num_threads(2)
        fit = ThreadFit()
        assert fit.most == 2
        assert fit.update(load) == 1 and torch.get_num_threads() == 1 and fit.changes[0][1] == 1
        assert fit.update(Load(1.0, 2, 0.0, 1.0, 0.0)) == 2 and torch.get_num_threads() == 2
    finally:
        spinner.kill()
        spinner.wait()
        torch.set_num_threads(threads)


def test_threads_option():
    assert [parse_threads(v) for v in (None, "fit", "3", 2)] == [None, "fit", 3, 2]
    for bad in ("0", "two", "1.5", "-1"):
        with pytest.raises(InputError, match="--threads"):
            parse_threads(bad)


def test_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_load.thread_fit() is None  # the user's count: nothing is fitted
    threads = torch.get_num_threads()
    assert cpu_load.apply_threads("fit") is None and torch.get_num_threads() == threads
    try:
        assert cpu_load.apply_threads("1") is None and torch.get_num_threads() == 1  # --threads N: set
    finally:
        torch.set_num_threads(threads)
    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_a_training_run_takes_its_threads(tmp_path):
    from bertkit.pipelines.demo import _finetune_options, pretrain_options, tapt_options
    from bertkit.pipelines.demo_plan import FinetuneRun
    from bertkit.pipelines.options import DemoOptions, PretrainOptions
    from bertkit.pipelines.presets import DEMO_TASKS

    demo = DemoOptions(out=str(tmp_path))
    assert demo.threads == "fit"  # the main job fits its threads, and every run it makes does too
    run = FinetuneRun("random-init", 50, 0, 80, 5e-4)
    assert {pretrain_options(demo, tmp_path / "v", tmp_path / "p").threads, tapt_options(demo, tmp_path / "t").threads,
            _finetune_options(demo, DEMO_TASKS["thucnews"], run, "m", tmp_path / "f").threads} == {"fit"}
    made = PretrainOptions(corpus=["x"], vocab="v", out=str(tmp_path), max_steps=1, threads="1")
    assert made.threads == "1" and made.training_arguments(1).threads == 1
    with pytest.raises(InputError, match="--threads"):
        PretrainOptions(corpus=["x"], vocab="v", out=str(tmp_path), max_steps=1, threads="many")
