"""One model-agnostic training loop: AdamW, warmup + decay, clipping, accumulation, autocast, checkpoints, resume, DDP.

The examples of each step are a pure function of the step (data_order.py: a seeded permutation per epoch, each
process's share, a collation seed per example). So a step's examples, their masking, and (with `loss_sums`) the loss
and gradient do not depend on the number of processes or accumulation steps, and a resumed run repeats nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.errors import BertkitError, InputError
from bertkit.training import checkpointing as ckpt
from bertkit.training.arguments import TrainingArguments, TrainState
from bertkit.training.compiling import compile_forward
from bertkit.training.data_order import DataOrder, MicroBatches, collating_loader, count_tokens, loader_workers
from bertkit.training.distributed import Distributed, average_gradients, setup_distributed
from bertkit.training.memory import keep_freed_memory
from bertkit.training.schedule import build_optimizer, build_scheduler, follow_clock
from bertkit.utils import jsonfiles
from bertkit.utils.cpu_load import apply_threads
from bertkit.utils.devices import bf16_on, to_device

__all__ = ["Trainer", "TrainingArguments", "TrainState", "TrainingError"]

logger = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot continue (a NaN/inf loss or gradient); `step` and `checkpoint` say where it stopped."""

    def __init__(self, message: str, step: int, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint


def _field(output: Any, name: str) -> Any:
    return output.get(name) if isinstance(output, Mapping) else getattr(output, name, None)


class Trainer:
    """Trains `model` on `train_dataset` as `args` says; `train()` runs it.

    - model: `model(**batch)` returns an object (or dict) with `.loss`; it may also expose
      `loss_sums = {term: sum of per-item losses}`. It has `save_pretrained(dir)`; resuming reads the weights
      back with its `load_weights(dir)` if it has one (bertkit's models do), else by `load_state_dict`.
    - collate_fn(examples, seeds) -> dict of tensors; seeds[j] = example_seed(args.seed, epoch, index of
      example j): the collator's only source of randomness, so batches do not depend on the process count.
    - count_items(batch) -> {term: number of items}: with `loss_sums`, each term is divided by its item
      count over the whole global batch, so a step equals one big-batch step exactly. The same terms
      on every call. Without it, micro-batch losses are averaged weighted by their number of examples.
    - eval_fn(model) -> {name: value}: every `eval_every` steps and at the end, on rank 0, in eval mode.
    - tokenizer: saved (`save_pretrained`) beside every saved model.

    Under torchrun the model is wrapped in DistributedDataParallel, unless it says `runs_forward_in_backward` (a
    cached loss's backward runs the encoder again, mini-batch by mini-batch, which DDP's gradient hooks cannot
    follow): its gradients are then averaged over the processes in one all_reduce after the backward.
    """

    def __init__(self, model: nn.Module, args: TrainingArguments, train_dataset: Sequence[Any],
                 collate_fn: Callable[[list[Any], list[int]], dict[str, torch.Tensor]],
                 eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
                 count_items: Callable[[dict[str, torch.Tensor]], dict[str, int]] | None = None,
                 tokenizer: Any = None) -> None:
        self.model, self.args, self.train_dataset = model, args, train_dataset
        self.collate_fn, self.eval_fn, self.count_items, self.tokenizer = collate_fn, eval_fn, count_items, tokenizer
        if args.metric_for_best and eval_fn is None:
            raise InputError(f"metric_for_best={args.metric_for_best!r} needs an eval_fn")
        # which examples each step trains on, and their collation (a pure function of the step: data_order.py)
        self.data = DataOrder(train_dataset, collate_fn, args.batch_size, args.seed, args.group_by_length,
                              args.gradient_accumulation_steps)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.total_steps = args.max_steps or math.ceil(args.num_epochs * self.steps_per_epoch)
        self.warmup_steps = args.warmup_steps or math.ceil(args.warmup_ratio * self.total_steps)
        self.output_dir = Path(args.output_dir)
        self.optimizer = build_optimizer(model, args.learning_rate, args.weight_decay,
                                         (args.adam_beta1, args.adam_beta2), args.adam_epsilon)
        self.scheduler = build_scheduler(self.optimizer, args.lr_schedule, self.warmup_steps, self.total_steps)
        self._threads = None  # the ThreadFit of a run with threads="fit" on the CPU (`train`)
        self.frozen = [p for name, p in model.named_parameters() if name.startswith(args.freeze)] if args.freeze else []
        if args.freeze and not self.frozen:
            raise InputError(f"freeze {list(args.freeze)} names no parameter of {type(model).__name__}")
        if self.frozen and args.freeze_steps >= self.total_steps:
            logger.warning("freeze_steps %d is not less than the run's %d steps: the parameters it holds (%s) are "
                           "never trained", args.freeze_steps, self.total_steps, ", ".join(args.freeze))
        self.dist = Distributed()  # a single process until train() sets up torchrun's process group, if any
        # what a step runs the model through: the model itself until train() knows the process group, then wrapped
        # in DistributedDataParallel under torchrun and compiled with args.compile
        self._wrapped: nn.Module = model
        self._forward: Callable[..., Any] = model
        self._loaded: Iterator | None = None
        self._warned_no_sums = False
        self.bf16 = args.bf16  # as the device allows it, once train() knows the device (`bf16_on`)

    # ---- data ------------------------------------------------------------------------------------

    def _micro_batches(self, step: int) -> MicroBatches:
        """This process's micro-batches of a step, collated on the CPU, as (num_examples, batch): from the data
        loader's workers when they run (`dataloader_workers`), else collated now."""
        if self._loaded is not None:
            loaded_step, micro = next(self._loaded)
            if loaded_step != step:
                raise RuntimeError(f"the data loader gave step {loaded_step} for step {step}")
            if isinstance(micro, BertkitError):
                raise micro
            return micro
        return self.data.collated(step, self.dist.rank, self.dist.world_size)

    # ---- one optimizer step ----------------------------------------------------------------------

    def _global_counts(self, micro: MicroBatches) -> tuple[list[str], list[float]]:
        """Loss terms and their item counts over the whole global batch (all micro-batches, all processes), counted
        on the host copies of the batches: reading a count back from a GPU would wait for the GPU."""
        if self.count_items is None:
            return [], []
        counts = [self.count_items(batch) for _, batch in micro]
        terms = sorted(counts[0])
        local = torch.tensor([[float(c[t]) for t in terms] for c in counts], dtype=torch.float64)
        if not self.dist.enabled:
            return terms, local.sum(0).tolist()
        return terms, self.dist.all_reduce_sum(local.sum(0).to(self.dist.device)).tolist()

    def _train_step(self, step: int) -> tuple[torch.Tensor, float, list[str], float]:
        """Forward/backward over all micro-batches of `step`, then clip and update. Returns the step's statistics as
        one float64 tensor on the device (loss, examples, tokens, gradient norm, then each loss term's mean if the
        loss is exact over the global batch), its learning rate, those terms' names, and the seconds its batches took
        to reach the device. Nothing here reads a value back from the device (`_settle` reads them)."""
        args, dist, fetched = self.args, self.dist, time.perf_counter()
        cpu_micro = self._micro_batches(step)
        terms, totals = self._global_counts(cpu_micro)
        tokens = sum(count_tokens(batch) for _, batch in cpu_micro)
        micro = [(size, to_device(batch, dist.device)) for size, batch in cpu_micro]
        data_seconds = time.perf_counter() - fetched
        autocast = torch.autocast(dist.device.type, dtype=torch.bfloat16, enabled=self.bf16)
        # loss, examples, tokens, then each term's mean loss; summed over micro-batches, then processes
        stats = torch.zeros(3 + len(terms), dtype=torch.float64, device=dist.device)
        exact = bool(terms)
        held = step < args.freeze_steps
        with self._holding(held):
            exact = self._forward_backward(micro, terms, totals, stats, exact, autocast)
        if dist.enabled and self._wrapped is self.model:  # a model DistributedDataParallel does not wrap
            average_gradients(self.model)
        stats[1] += sum(size for size, _ in micro)
        stats[2] += tokens
        stats = dist.all_reduce_sum(stats)
        lr = self.optimizer.param_groups[0]["lr"]
        if held:  # held fixed: no gradient, so AdamW neither moves nor decays them
            for p in self.frozen:
                p.grad = None
        max_norm = args.max_grad_norm or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if dist.device.type == "cpu":
            # reading back is free on the CPU: stop before an update with a non-finite loss or gradient reaches the
            # weights. A GPU's steps are checked as they are read back, every log_every steps (`_settle`), and
            # nothing is evaluated or saved before they are.
            self._check_step(step + 1, stats[0].item(), grad_norm.item())
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        values = torch.cat([stats[:3], grad_norm.detach().to(stats).reshape(1), stats[3:]])
        return values, lr, terms if exact else [], data_seconds

    def _check_step(self, step: int, loss: float, grad_norm: float) -> None:
        for name, value in (("loss", loss), ("gradient norm", grad_norm)):
            if not math.isfinite(value):
                self._fail(step, f"{name} is {value}")

    @contextmanager
    def _holding(self, held: bool) -> Iterator[None]:
        """While the frozen parameters are held, let autograd skip them: with requires_grad off, the backward
        stops where they begin (a held encoder costs its forward only). Under DDP the reducer expects every
        gradient, so there they are computed and dropped after the backward instead (`_train_step`)."""
        if not held or self.dist.enabled:
            yield
            return
        for p in self.frozen:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in self.frozen:
                p.requires_grad_(True)

    def _forward_backward(self, micro: MicroBatches, terms: list[str], totals: list[float],
                          stats: torch.Tensor, exact: bool, autocast: Any) -> bool:
        """Forward and backward over the micro-batches of one step, adding into `stats`; whether every output
        had loss_sums (the loss is then exact over the global batch)."""
        args, dist = self.args, self.dist
        for k, (size, batch) in enumerate(micro):
            ddp = isinstance(self._wrapped, nn.parallel.DistributedDataParallel)
            sync = self._wrapped.no_sync() if ddp and k < len(micro) - 1 else nullcontext()
            with sync:
                with autocast:
                    output = self._forward(**batch)
                sums = _field(output, "loss_sums") if terms else None
                exact = exact and sums is not None
                if exact:
                    unknown = set(sums) - set(terms)
                    if unknown:
                        raise ValueError(f"loss_sums has terms {sorted(unknown)} that count_items does not count")
                    # Per-item sums over the global item counts: together, the big-batch mean of each term.
                    means = [sums[t].float() / max(total, 1.0) if t in sums else torch.zeros((), device=dist.device)
                             for t, total in zip(terms, totals)]
                    loss = torch.stack(means).sum()
                    stats[3:] += torch.stack(means).detach().double()
                else:
                    if terms and not self._warned_no_sums:
                        logger.warning("count_items was given but the model output has no loss_sums; "
                                       "weighting micro-batch losses by their number of examples")
                        self._warned_no_sums = True
                    # Exact for losses that are means over examples (e.g. classification).
                    loss = _field(output, "loss").float() * (size / args.batch_size)
                # DDP averages gradients over processes; scale up so the result is the global sum.
                if loss.requires_grad:  # not when every parameter the loss reaches is held
                    (loss * dist.world_size).backward()
            stats[0] += loss.detach().double()
        return exact

    def _check_weights(self, step: int) -> None:
        """Fail (TrainingError) when an update left a weight NaN or infinite: the loss of the step that made it was
        still finite, so only the weights tell, and an evaluation or checkpoint of them would mean nothing."""
        bad = [name for name, p in self.model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            self._fail(step, f"its update left {len(bad)} weight tensor{'s' if len(bad) > 1 else ''} NaN or "
                             f"infinite ({bad[0]}{', ...' if len(bad) > 1 else ''})")

    def _fail(self, step: int, what: str) -> None:
        found = ckpt.list_checkpoints(self.output_dir)
        last = found[-1][1] if found else None
        kept = f"the last good checkpoint is {last}" if last else "no checkpoint was saved before it"
        self.optimizer.zero_grad(set_to_none=True)
        raise TrainingError(f"training stopped at step {step}: {what}, so the run diverged; {kept}. Lower the "
                            "learning rate and start again (--overwrite replaces this run)", step, last)

    # ---- evaluation, logging, saving -------------------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Run eval_fn on rank 0 (eval mode, no grad), broadcast its metrics, prefixed with "eval_".

        An eval_fn that finds the model's outputs not finite (a FloatingPointError, such as inference's
        NonFiniteOutputError) gives the metric `eval_outputs` = NaN, so every process sees the run diverged."""
        metrics: dict[str, float] = {}
        if self.dist.is_main:
            self.model.eval()
            autocast = torch.autocast(self.dist.device.type, dtype=torch.bfloat16, enabled=self.bf16)
            try:
                with torch.no_grad(), autocast:
                    raw = self.eval_fn(self.model)
            except FloatingPointError:
                raw = {"outputs": math.nan}
            self.model.train()
            for key, value in raw.items():
                if isinstance(value, (dict, list, tuple, str)):  # e.g. per-type scores: not a log scalar
                    logger.warning("eval_fn returned a non-scalar %r; it is not logged", key)
                    continue
                metrics[key if key.startswith("eval_") else f"eval_{key}"] = float(value)
        return self.dist.broadcast(metrics)

    def _update_best(self, state: TrainState, metrics: dict[str, float]) -> None:
        name = self.args.metric_for_best
        if name not in metrics:
            raise InputError(f"metric_for_best {name!r} is not among the evaluation metrics {sorted(metrics)}")
        value = metrics[name]
        # a score that is no number is worse than any that is (and than none only until one comes)
        better = state.best_metric is None or math.isfinite(value) and (not math.isfinite(state.best_metric) or (
            value > state.best_metric if self.args.greater_is_better else value < state.best_metric))
        if better:
            state.best_metric, state.best_step, state.evals_without_improvement = value, state.step, 0
            if self.dist.is_main:
                with ckpt.atomic_directory(self.output_dir / ckpt.BEST_DIR) as tmp:
                    ckpt.save_model_dir(tmp, self.model, self.tokenizer)
                    ckpt.write_json(tmp / "eval_results.json", {"step": state.step, **metrics})
        else:
            state.evals_without_improvement += 1
            if self.args.early_stopping_patience and \
                    state.evals_without_improvement >= self.args.early_stopping_patience:
                state.stop_reason = "early_stopping"

    def _log(self, state: TrainState, record: dict[str, Any]) -> None:
        state.log_history.append(record)
        if self.dist.is_main:
            with open(self.output_dir / ckpt.METRICS_NAME, "a", encoding="utf-8") as f:
                f.write(jsonfiles.dumps(record) + "\n")

    def _save(self, state: TrainState) -> None:
        rng_states = self.dist.gather(ckpt.get_rng_state())
        if self.dist.is_main:
            trainer_state = {**state.to_json(), "world_size": self.dist.world_size,
                             "steps_per_epoch": self.steps_per_epoch, "total_steps": self.total_steps,
                             "num_examples": len(self.train_dataset), "batch_size": self.args.batch_size,
                             "seed": self.args.seed}
            ckpt.save_checkpoint(ckpt.checkpoint_path(self.output_dir, state.step), self.model, self.tokenizer,
                                 self.optimizer, self.scheduler, rng_states, trainer_state)
            ckpt.rotate_checkpoints(self.output_dir, self.args.save_total_limit, keep_step=state.best_step)
        self.dist.barrier()

    # ---- start / resume --------------------------------------------------------------------------

    def _resume(self, where: str | os.PathLike) -> TrainState:
        directory = ckpt.resolve_checkpoint(where)
        loaded = ckpt.load_checkpoint(directory, self.dist.device)
        saved = loaded["state"]
        for key, now in (("num_examples", len(self.train_dataset)), ("batch_size", self.args.batch_size),
                         ("seed", self.args.seed)):
            if saved.get(key) != now:
                logger.warning("resuming with %s=%s but the checkpoint was trained with %s; the data order "
                               "will not continue exactly", key, now, saved.get(key))
        ckpt.load_weights_into(self.model, directory)
        self.optimizer.load_state_dict(loaded["optimizer"])
        self.scheduler.load_state_dict(loaded["scheduler"])
        names = {f.name for f in dataclasses.fields(TrainState)}
        state = TrainState(**{k: v for k, v in saved.items() if k in names})
        state.start_step, state.stop_reason = state.step, None
        # RNG last, so nothing above can consume random numbers after it is restored.
        if len(loaded["rng"]) == self.dist.world_size:
            ckpt.set_rng_state(loaded["rng"][self.dist.rank])
        else:
            logger.warning("checkpoint has RNG states of %d processes, this job has %d; reseeding",
                           len(loaded["rng"]), self.dist.world_size)
            ckpt.seed_everything(self.args.seed + self.dist.rank + 1_000_003 * state.step)
        logger.info("resumed from %s at step %d", directory, state.step)
        return state

    # ---- the loop --------------------------------------------------------------------------------

    def train(self, resume: bool | str | os.PathLike = False) -> TrainState:
        """Train to max_steps / num_epochs / max_seconds / early stop; `resume` = True (newest checkpoint
        in output_dir) or a checkpoint / output directory to continue from exactly."""
        from tqdm.auto import tqdm

        args = self.args
        keep_freed_memory()
        self.dist = setup_distributed(args.device)
        dist = self.dist
        self.bf16 = bf16_on(dist.device, args.bf16)
        try:
            if args.batch_size < dist.world_size * args.gradient_accumulation_steps:
                raise InputError(f"batch_size {args.batch_size} is smaller than processes × accumulation steps "
                                 f"({dist.world_size} × {args.gradient_accumulation_steps}): some would get no data")
            self.model.to(dist.device)
            # a count of threads is set; "fit" follows the cores other processes leave free, looked at again every
            # few seconds of the loop (`_loop`); a GPU run's threads only feed the GPU
            self._threads = apply_threads(args.threads) if dist.device.type == "cpu" else None
            if resume:
                state = self._resume(self.output_dir if resume is True else resume)
            else:
                if ckpt.list_checkpoints(self.output_dir):
                    raise FileExistsError(f"{self.output_dir} already holds checkpoints; pass resume=True to "
                                          "continue that run, or choose an empty output_dir")
                state = TrainState()
                ckpt.seed_everything(args.seed + dist.rank)
            if dist.is_main:
                ckpt.start_output(self.output_dir, state.step if resume else None, self.args.to_dict())
            dist.barrier()
            self._wrapped = self.model
            if dist.enabled and not getattr(self.model, "runs_forward_in_backward", False):
                self._wrapped = nn.parallel.DistributedDataParallel(
                    self.model, device_ids=[dist.device.index] if dist.device.type == "cuda" else None,
                    find_unused_parameters=args.ddp_find_unused_parameters)
            self._forward = compile_forward(self._wrapped) if args.compile else self._wrapped
            self.model.train()
            return self._loop(state, tqdm)
        finally:
            dist.close()

    def _loop(self, state: TrainState, tqdm: Callable[..., Any]) -> TrainState:
        args, dist = self.args, self.dist
        bar = tqdm(total=self.total_steps, initial=state.step, desc="train", dynamic_ncols=True,
                   disable=not (args.progress and dist.is_main))
        run_start, seconds_before = time.perf_counter(), state.seconds
        window: dict[str, float] = {}  # sums over the steps since the last log record
        pending: list[tuple[torch.Tensor, float, list[str], float, float]] = []  # steps not read back from the device
        self._loaded = collating_loader(
            self.data, state.step, self.total_steps, loader_workers(self.args.dataloader_workers, self.dist.device),
            self.dist.rank, self.dist.world_size)
        try:
            while state.stop_reason is None:
                if state.step >= self.total_steps:
                    state.stop_reason = "max_steps"
                    break
                if self._threads is not None:
                    self._threads.tick()
                started = time.perf_counter()
                values, lr, terms, data_seconds = self._train_step(state.step)
                state.step += 1
                state.epoch, state.position = divmod(state.step, self.steps_per_epoch)
                # throughput excludes evaluation and saving; on a GPU the host's clock runs a little ahead of the
                # GPU between read-backs, and catches up at each one
                pending.append((values, lr, terms, time.perf_counter() - started, data_seconds))
                state.seconds = seconds_before + time.perf_counter() - run_start
                bar.update(1)
                if args.max_seconds is not None:
                    clock = state.seconds
                    if dist.enabled:  # every process must agree on the clock: the mean of theirs
                        clock = dist.all_reduce_sum(torch.tensor([clock], dtype=torch.float64,
                                                                 device=dist.device)).item() / dist.world_size
                    if clock >= args.max_seconds:
                        state.stop_reason = "max_seconds"
                    elif args.time_aware_schedule:
                        # the schedule at whichever is further along, the steps or the clock (follow_clock)
                        follow_clock(self.optimizer, self.scheduler, max(float(state.step), clock /
                                     args.max_seconds * self.total_steps))
                final = state.step >= self.total_steps or state.stop_reason is not None
                evaluate = self.eval_fn is not None and (
                    final or (args.eval_every is not None and state.step % args.eval_every == 0))
                save = bool(args.save_every) and (state.step % args.save_every == 0 or final)
                log = evaluate or final or state.step % args.log_every == 0
                if log or save:
                    stats = self._settle(state, pending, window)
                    state.seconds = seconds_before + time.perf_counter() - run_start
                if evaluate or final or save:
                    self._check_weights(state.step)  # nothing is scored or saved from a diverged model
                if log:
                    record = self._record(state, stats, window)
                    window = {}
                    if evaluate:
                        metrics = self.evaluate()
                        nan = sorted(k for k, v in metrics.items() if not math.isfinite(v))
                        broken = [k for k in nan if k == "eval_outputs" or k.endswith(("loss", "perplexity"))]
                        if broken:  # outputs or a loss that are no number: the weights have gone
                            what = "outputs" if broken[0] == "eval_outputs" else broken[0]
                            self._fail(state.step, f"the model's {what} on the evaluation data are not finite")
                        if nan and dist.is_main:  # a score of finite outputs that is no number: data, not divergence
                            logger.warning("step %d: %s is not a number, though the model's outputs are finite: a "
                                           "score of outputs (or data) that are all alike; it counts as the worst",
                                           state.step, ", ".join(nan))
                        record.update(metrics)
                        if args.metric_for_best:
                            self._update_best(state, metrics)
                    self._log(state, record)
                    bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{stats['lr']:.2e}")
                final = state.step >= self.total_steps or state.stop_reason is not None  # early stopping
                if args.save_every and (state.step % args.save_every == 0 or final):
                    self._settle(state, pending, window)
                    self._save(state)
        finally:
            self._loaded = None  # stops the data loader's workers, if any
            bar.close()
        if self.frozen and state.step <= args.freeze_steps < self.total_steps and dist.is_main:
            logger.warning("the run stopped at step %d (%s), within the %d steps that hold %s fixed: those parameters "
                           "were never trained", state.step, state.stop_reason, args.freeze_steps,
                           ", ".join(args.freeze))
        if dist.is_main:
            ckpt.publish_model(self.output_dir, self.model, self.tokenizer)
            found = ckpt.list_checkpoints(self.output_dir)
            ckpt.write_json(self.output_dir / ckpt.RESULTS_NAME,
                            {**state.to_json(), "log_history": state.log_history[-1:],
                             "last_checkpoint": str(found[-1][1]) if found else None, "total_steps": self.total_steps})
        dist.barrier()
        return state

    def _settle(self, state: TrainState, pending: list[tuple[torch.Tensor, float, list[str], float, float]],
                window: dict[str, float]) -> dict[str, Any]:
        """Read the statistics of the steps in `pending` back from the device in one copy (on a GPU the only wait
        for it between logs), check each step's loss and gradient norm in order, and add them to `state` and
        `window`; `pending` is emptied. Returns the last step's statistics."""
        if not pending:
            return {}
        first = state.step - len(pending) + 1
        waited = time.perf_counter()
        rows = torch.stack([values for values, *_ in pending]).cpu().tolist()
        # the steps' own seconds are the host's, which queued them; the wait here is the rest of the GPU's
        window["seconds"] = window.get("seconds", 0.0) + time.perf_counter() - waited
        stats: dict[str, Any] = {}
        for k, (row, (_, lr, terms, seconds, data_seconds)) in enumerate(zip(rows, pending)):
            self._check_step(first + k, row[0], row[3])
            stats = {"loss": row[0], "lr": lr, "grad_norm": row[3], "examples": int(row[1]), "tokens": int(row[2]),
                     "seconds": seconds, "data_seconds": data_seconds,
                     **{f"loss_{t}": row[4 + j] for j, t in enumerate(terms)}}
            state.examples += stats["examples"]
            state.tokens += stats["tokens"]
            state.losses.append(stats["loss"])
            for key, value in {**stats, "steps": 1}.items():
                window[key] = window.get(key, 0.0) + value
        pending.clear()
        return stats

    def _record(self, state: TrainState, stats: dict[str, Any], window: dict[str, float]) -> dict[str, Any]:
        """The metrics.jsonl record of this step: losses averaged over the steps since the last record."""
        steps, seconds = window["steps"], max(window["seconds"], 1e-9)
        record = {"step": state.step, "epoch": state.step / self.steps_per_epoch,
                  "loss": window["loss"] / steps, "lr": stats["lr"], "grad_norm": stats["grad_norm"],
                  "seconds": round(state.seconds, 3), "examples_per_second": window["examples"] / seconds}
        if window["tokens"]:
            record["tokens_per_second"] = window["tokens"] / seconds
        # the share of the time spent getting the batches onto the device: near 1, the data sets the pace
        record["data_share"] = round(min(1.0, window["data_seconds"] / seconds), 4)
        record.update({k: v / steps for k, v in window.items() if k.startswith("loss_")})
        return record
