"""Dynamic batching: every request's inputs wait in one queue; one worker thread takes, oldest first, as many as fit
a token budget, runs them as one batch, and answers each request once all its inputs are done.

    batcher = Batcher(served.run, max_batch_tokens=4096)
    batcher.start()
    job = Job(rows, loop)            # in the event loop
    batcher.submit(job)
    outputs = await job.future       # one output (or exception) per row, in order

The budget counts padded tokens, rows × the longest row, which is what a padded forward computes: a batch of short
texts takes many, one long text takes a batch of its own. The worker does not wait for a batch to fill: while one
batch runs, the requests that arrive meanwhile queue up and become the next batch, so batches grow with the load
and a lone request is answered at once. torch releases the GIL inside its kernels, so the event loop keeps reading
requests while the model runs.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bertkit.errors import InputError
from bertkit.inference.batching import EncodedText

logger = logging.getLogger(__name__)


class Job:
    """One request's inputs on their way through the queue; `future` gets their outputs, in order."""

    __slots__ = ("rows", "outputs", "remaining", "loop", "future")

    def __init__(self, rows: Sequence[EncodedText], loop: asyncio.AbstractEventLoop) -> None:
        self.rows = rows
        self.outputs: list[Any] = [None] * len(rows)
        self.remaining = len(rows)
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()


def _deliver(jobs: list[Job]) -> None:
    for job in jobs:
        if not job.future.done():  # a request cancelled meanwhile has no one to answer
            job.future.set_result(job.outputs)


class Batcher:
    """The queue and its one worker thread. `run(rows) -> outputs` computes one batch (an exception it raises
    becomes every row's output); `observe(rows, padded_tokens, seconds)` hears of every batch run."""

    def __init__(self, run: Callable[[list[EncodedText]], list[Any]], max_batch_tokens: int,
                 observe: Callable[[int, int, float], None] | None = None) -> None:
        if max_batch_tokens < 1:
            raise InputError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.run = run
        self.max_batch_tokens = max_batch_tokens
        self.observe = observe
        self._queue: collections.deque[tuple[Job, int]] = collections.deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="bertkit-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued(self) -> int:
        """Inputs waiting for a batch."""
        return len(self._queue)

    def submit(self, job: Job) -> None:
        """Queue every input of `job`; its future gets the outputs."""
        if not job.rows:
            job.future.set_result([])
            return
        with self._ready:
            if self._stopping:
                raise RuntimeError("the batcher has stopped")
            self._queue.extend((job, index) for index in range(len(job.rows)))
            self._ready.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Run what is queued, then end the worker."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[tuple[Job, int]]:
        """The oldest inputs whose padded batch fits the token budget (always at least one)."""
        taken: list[tuple[Job, int]] = []
        longest = 0
        while self._queue:
            job, index = self._queue[0]
            wider = max(longest, len(job.rows[index].input_ids))
            if taken and wider * (len(taken) + 1) > self.max_batch_tokens:
                break
            taken.append(self._queue.popleft())
            longest = wider
        return taken

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._stopping:
                    self._ready.wait()
                if not self._queue:
                    return
                taken = self._take()
            rows = [job.rows[index] for job, index in taken]
            start = time.perf_counter()
            try:
                outputs = self.run(rows)
            except Exception as err:  # noqa: BLE001 - the requests get the error; the worker serves on
                logger.exception("inference failed on a batch of %d inputs", len(rows))
                outputs = [err] * len(rows)
            if self.observe is not None:
                self.observe(len(rows), len(rows) * max(len(row.input_ids) for row in rows),
                             time.perf_counter() - start)
            finished: dict[asyncio.AbstractEventLoop, list[Job]] = {}
            for (job, index), output in zip(taken, outputs, strict=True):
                job.outputs[index] = output
                job.remaining -= 1
                if job.remaining == 0:
                    finished.setdefault(job.loop, []).append(job)
            for loop, jobs in finished.items():
                try:
                    loop.call_soon_threadsafe(_deliver, jobs)
                except RuntimeError:  # the loop has closed: no one is waiting any more
                    pass
