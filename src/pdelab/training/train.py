"""Train one (task, variant, seed) run: ``train(run, out)``; ``main()`` only parses arguments.

AdamW with linear warm-up then cosine decay, gradient clipping and early stopping on the task
kind's validation score (pdelab.spec.task_kinds, which also loads, scores and tests each task
kind); the test is taken at the best-validation checkpoint. ``train`` reads as its steps:
:func:`build` the session, :func:`resume` it from its checkpoint (pdelab.training.resume: a
killed or stopped job resumes exactly), :func:`run_epoch` until done, :func:`evaluate_best`
and :func:`finish` (pdelab.training.run_records). An epoch is steps of
pdelab.training.step.train_step, which read nothing back to the host; their sums are read once
per log interval (pdelab.training.step_metrics), where a non-finite loss ends the run as
"diverged", a result, not a crash. How the steps are computed is not what the run is
(pdelab.training.micro_batch.Execution): micro-batches, block checkpointing, torch.compile
(pdelab.training.compiled) and, under torchrun, one rank of several
(pdelab.training.distributed: rank 0 alone writes records, checkpoints and MLflow). The
workflow's train rule hands the job its plan (``--plan``: the spec the workflow resolved,
pdelab.records.staleness), which it trains as it is; by hand, ``--task --variant --seed``
resolve params.yaml once. pdelab.training.job keeps the command line's fixed cost low.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pdelab.records import provenance
from pdelab.records.run import now_ms, read_plan
from pdelab.runtime import gpu_slots
from pdelab.spec.config import (
    PARAMS_FILE,
    TRACKING_MODES,
    RunSpec,
    compile_mode,
    gpu_memory_gb,
    load_params,
    resolve,
    tracking_mode,
)
from pdelab.tracking.log import Tracker
from pdelab.training import checkpoint, distributed, job, micro_batch
from pdelab.training.checkpoint import Stopped
from pdelab.training.distributed import World
from pdelab.training.gpu_usage import GpuUsage
from pdelab.training.micro_batch import Execution
from pdelab.training.resume import (
    CHECKPOINT,
    restored,
    resume,
    run_identity,
    save_checkpoint,
    say,
)
from pdelab.training.run_records import finish, history_columns, history_table
from pdelab.training.session import Partial, Session, build
from pdelab.training.step import train_step
from pdelab.training.step_metrics import EpochMeter
from pdelab.training.strategy import batches
from pdelab.training.trained import BEST

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

provenance.read_sources()  # the import graph a run's code digest needs, before the stamp
job.mark_imported()  # on the command line: every import training needs is done

__all__ = ["BEST", "CHECKPOINT", "Session", "batches", "build", "train", "train_step"]


def train_epoch(s: Session, epoch: int, progress: bool) -> tuple[float, float] | None:
    """One pass over the training split: (loss, accuracy) per item, or None on a non-finite
    loss. The batch order depends only on (seed, epoch), so a resumed run sees the same; one
    stopped mid-epoch goes on from the step and running sums its checkpoint holds. The sums
    stay on the device between reads (every LOG_EVERY steps, and at the end)."""
    s.model.train()
    order = np.random.default_rng([s.run.seed, epoch]).permutation(len(s.data["train"]))
    part = s.state.partial or Partial(step=0, loss_sum=0.0, correct=0, seen=0)
    meter = EpochMeter(part, s.device, s.world)
    todo = batches(len(order), s.run.train.batch_size, order)
    for index in job.progress_bar(todo, part["step"], f"epoch {epoch}", progress):
        s.timing.setdefault("first_step", time.time())
        meter.clock.start()
        meter.add(train_step(s, index))
        meter.clock.stop()
        halt = stopping(s)
        if meter.due() or halt:
            read = meter.read()
            s.state.step_times += meter.clock.read()
            if read is None:
                return None
            if halt:
                s.state.partial = read
                stop(s)
    read = meter.read()
    s.state.step_times += meter.clock.read()
    s.state.partial = None
    if read is None:
        return None
    return read["loss_sum"] / read["seen"], read["correct"] / read["seen"]


def stopping(s: Session) -> bool:
    """Whether SIGTERM reached this process, or any of the run's processes: all stop at the
    same step (pdelab.training.distributed.any_of)."""
    return distributed.any_of(s.stop.requested, s.world, s.device)


def stop_if_asked(s: Session) -> None:
    """After SIGTERM: checkpoint the state as it stands and raise :class:`Stopped`."""
    if stopping(s):
        stop(s)


def stop(s: Session) -> None:
    """Checkpoint the state as it stands and raise :class:`Stopped`."""
    save_checkpoint(s)
    part, epoch = s.state.partial, s.state.epoch
    where = f"after step {part['step']} of epoch {epoch + 1}" if part else f"after epoch {epoch}"
    raise Stopped(
        f"pdelab.training.train: stopped by SIGTERM {where}; checkpoint written to "
        f"{s.out / CHECKPOINT}. Run the same command again to resume from it"
    )


def run_epoch(s: Session, tracker: Tracker, progress: bool) -> None:
    """Train one epoch and validate; a non-finite loss marks the run diverged (a result, not
    a crash). Otherwise the epoch's row is recorded and checkpointed."""
    epoch, epoch_start = s.state.epoch + 1, time.perf_counter()
    trained = train_epoch(s, epoch, progress)
    if trained is None:
        s.state.status = "diverged"
        return
    val = s.validate("val")
    measured = None  # a non-finite validation loss: diverged
    if math.isfinite(val["loss"]):
        row = (
            {
                "epoch": epoch,
                "train_loss": trained[0],
                "train_acc": trained[1],
                "val_loss": val["loss"],
                "val_acc": val["acc"],
                "val_ppl": val.get("ppl", math.nan),
                "lr": s.schedule.get_last_lr()[0],
                "epoch_time_s": time.perf_counter() - epoch_start,
            }
            | s.task_kind.history_extras(val)
            | s.gpu_usage.epoch()
        )
        measured = row, s.task_kind.score(val)
    # every rank validates (none waits on another's pass); rank 0's numbers are kept on all,
    # so that no rounding difference between ranks parts their early stopping
    measured = distributed.from_first(measured, s.world)
    if measured is None:
        s.state.status = "diverged"
        return
    record_epoch(s, *measured, tracker, now_ms())


def record_epoch(
    s: Session, row: dict[str, float], score: float, tracker: Tracker, end_ms: int
) -> None:
    """Keep the best-validation weights (the test is taken there), count epochs without
    improvement for early stopping, log, and checkpoint so a killed job resumes here."""
    state = s.state
    state.history.append(row)
    state.epoch_end_ms.append(end_ms)
    if score > state.best_val:
        state.best_val, state.best_epoch, state.bad_epochs = score, int(row["epoch"]), 0
        if s.world.rank == 0:  # one writer of the run's files
            checkpoint.save_best(s.model.state_dict(), run_identity(s), s.out / BEST)
    else:
        state.bad_epochs += 1
    state.epoch = int(row["epoch"])
    tracker.log_epoch(row, end_ms)
    say(s, json.dumps({k: round(v, 4) for k, v in row.items()}))
    save_checkpoint(s)


def evaluate_best(s: Session) -> dict[str, Any]:
    """Test metrics at the best-validation checkpoint (none if the run diverged), with the
    task kind's own columns (a language model's or a decoder's causality probe, so a leaky
    model's perplexity is flagged; translation's BLEU)."""
    test: dict[str, Any] = {"loss": math.nan, "acc": math.nan, "ppl": math.nan}
    test |= {"causality": "", "max_leak": math.nan}  # the probe's columns, until it runs
    test |= s.task_kind.untested(s.data, s.manifest)
    if not s.state.best_epoch:  # a best.pt there is another spec's, not this run's
        return test
    s.model.load_state_dict(checkpoint.load_best(s.out / BEST, run_identity(s), s.device))
    if s.ok:
        test |= s.validate("test")
    return s.task_kind.test_metrics(s, test)


def run_training(
    run: RunSpec,
    out: Path | str,
    *,
    track: bool = True,
    progress: bool = True,
    threads: int | None = None,
    execution: Execution | None = None,
    world: World | None = None,
) -> pa.Table:
    """Train and evaluate one run; writes metrics.parquet, result.parquet and run.json to out.
    ``track``: log live to MLflow; ``execution``: micro-batches and block checkpointing
    (pdelab.training.micro_batch); ``world``: this process's rank among the processes that compute
    each batch (pdelab.training.distributed.join), rank 0 alone writing files and logging, the
    ``threads`` shared among them. Returns the per-epoch history as a pyarrow Table."""
    out, world = Path(out), world or World()
    if world.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(max(1, threads // world.size))
    session = build(run, out, execution, world)
    distributed.same_parameters(session.model, world)  # as DistributedDataParallel starts
    resume(session)
    session.timing["built"] = time.time()
    commit, dirty = provenance.git_state(provenance.code_files(run))
    tracker = Tracker(run, session.manifest["content_hash"], enabled=track and world.rank == 0)
    state = session.state
    state.start_ms = state.start_ms or now_ms()
    state.run_id = tracker.start(state.run_id, commit, state.start_ms)
    session.gpu_usage = GpuUsage.of(session.device).start()
    with session.stop:  # SIGTERM: checkpoint after the current step, raise Stopped
        try:
            while session.training():
                stop_if_asked(session)
                run_epoch(session, tracker, progress and world.rank == 0)
            stop_if_asked(session)
        finally:
            session.gpu_usage.stop()
    if world.rank != 0:  # the records, the test and MLflow are rank 0's
        return history_table(run, state.history, history_columns(session))
    test = evaluate_best(session)
    session.timing["last_test_batch"] = time.time()
    return finish(session, test, tracker, commit, dirty)


def train(
    run: RunSpec,
    out: Path | str,
    *,
    track: bool = True,
    progress: bool = True,
    threads: int | None = None,
    execution: Execution | None = None,
) -> pd.DataFrame:
    """:func:`run_training`, returning the per-epoch history as a DataFrame (for callers in
    Python; the command line skips it, as importing pandas costs a job most of a second)."""
    history = run_training(
        run, out, track=track, progress=progress, threads=threads, execution=execution
    )
    return history.to_pandas()


def planned_run(plan: Path, digest: str | None) -> RunSpec:
    """The run the workflow planned: the resolved spec its plan file holds
    (pdelab.records.staleness), trained as it is, with no second resolution of params.yaml that
    could differ from it. The job stops rather than train anything else: a file holding another plan
    than the one the workflow read (``digest``: a later parse, after an edit of params.yaml, planned
    the run anew) or code other than the plan's (a source file edited since the workflow parsed, or
    another checkout's pdelab imported). The plan's data hash is not checked here: a data job
    of the same build may prepare the data anew; the job hashes what it reads and records it."""
    try:
        found, text_digest = read_plan(plan)
    except ValueError as err:
        sys.exit(f"pdelab.training.train: {err}; run `snakemake` again, which writes it")
    if digest and text_digest != digest:
        sys.exit(
            f"pdelab.training.train: {plan} holds another plan (digest {text_digest}) than the "
            "workflow "
            f"read ({digest}): params.yaml or the code changed and a later `snakemake` planned "
            "the run anew. Run `snakemake` again to train it as planned now"
        )
    try:
        run = RunSpec.from_dict(found["spec"])
    except (KeyError, TypeError, ValueError) as err:  # ConfigError names the key
        sys.exit(
            f"pdelab.training.train: {plan} holds no run spec this code reads ({err}); "
            "run `snakemake`"
        )
    code = provenance.code_digest(run)
    if found.get("code_digest") != code:
        sys.exit(
            f"pdelab.training.train: this job imports pdelab from {provenance.source_root()}, "
            "whose code "
            f"for this run (digest {code}) is not the code its plan names "
            f"({found.get('code_digest')}): a source file changed since the workflow planned "
            "it, or the job imports another checkout's pdelab. Run `snakemake` again, from the "
            "checkout whose results these are"
        )
    return run


def main(argv: list[str] | None = None) -> None:
    """The command line: the workflow's plan (``--plan``), or a run named by hand and resolved
    from params.yaml once; then train."""
    args = job.arguments(argv, __doc__, PARAMS_FILE, TRACKING_MODES)
    if args.plan is not None:  # the train rule's: how to run it comes on the command line
        run, mode, card = planned_run(args.plan, args.plan_digest), args.tracking, args.card_gb
        compiling = args.compile or "off"
    else:
        params = load_params(args.params)
        run = resolve(params, args.task, args.variant, args.seed, args.profile)
        mode = args.tracking or tracking_mode(params, run.profile)
        card = gpu_memory_gb(params, run.profile) if args.card_gb is None else args.card_gb
        compiling = args.compile or compile_mode(params, run.profile)
    mode = "batch" if args.no_mlflow else mode or "live"
    if restored(run, args.out):  # this very run was trained before: put back, not trained
        return
    gpu_slots.claim(run.device)  # one GPU per concurrent job, before torch initialises CUDA
    world = distributed.join(run.device)  # one of torchrun's processes: its rank and GPU
    try:
        live, progress = mode == "live", not args.no_progress
        execution = Execution(args.micro_batch, args.checkpoint_blocks)
        if execution == Execution():  # none asked for: the cost plan's fit to the card
            execution = micro_batch.planned(run, card) or execution
        execution = replace(execution, compile=compiling)
        run_training(
            run,
            args.out,
            track=live,
            progress=progress,
            threads=args.threads,
            execution=execution,
            world=world,
        )
    except Stopped as stopped:
        print(stopped, file=sys.stderr)
        sys.exit(stopped.exit_status)
    finally:
        distributed.leave(world)


if __name__ == "__main__":
    main()
    job.exit_now()
