"""Train one (task, variant, seed) run: ``train(run, out)``; ``main()`` only parses arguments.

AdamW with linear warm-up then cosine decay, gradient clipping and early stopping on the task
kind's validation score (pdelab.spec.task_kinds, which also loads, scores and tests each task kind);
the test is taken at the best-validation checkpoint. A checkpoint after every epoch, and after
the current step on SIGTERM (a cluster's time limit), lets a job started again resume exactly:
batch order depends only on (seed, epoch), so on CPU a resumed run's metrics equal an
uninterrupted run's (pdelab.training.checkpoint: verified, ``weights_only``, a damaged one gives way
to the previous one). A non-finite loss ends the run as "diverged", a result, not a crash.
A step may be computed in micro-batches whose gradients add up to the full batch's
(pdelab.training.micro_batch): checkpoints fall between optimizer steps only, so a resume is as
exact. Under torchrun (a job on several GPUs) each process is a rank of one run
(pdelab.training.distributed): each computes its share of every batch, rank 0 alone writes the
records, checkpoints and MLflow and picks the checkpoint to resume from, and a SIGTERM stops every
rank at one step. ``train`` reads as its steps: :func:`build`, :func:`resume`, :func:`run_epoch`
until done, :func:`evaluate_best` and :func:`finish`; pdelab.training.job keeps the command
line's fixed cost low. The workflow's train rule hands the job its plan (``--plan``: the spec
the workflow resolved, pdelab.records.staleness), which it trains as it is; by hand, ``--task
--variant --seed`` resolve params.yaml once.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from pdelab.records import environment, provenance
from pdelab.records.run import (
    check_identity,
    identity,
    now_ms,
    read_plan,
    record_table,
    write_records,
)
from pdelab.runtime import gpu_slots
from pdelab.spec.config import (
    PARAMS_FILE,
    TRACKING_MODES,
    RunSpec,
    gpu_memory_gb,
    load_params,
    resolve,
    tracking_mode,
)
from pdelab.tracking.log import Tracker
from pdelab.training import checkpoint, distributed, job, micro_batch
from pdelab.training.checkpoint import CorruptCheckpoint, Stopped
from pdelab.training.distributed import World
from pdelab.training.micro_batch import Execution
from pdelab.training.precision import autocast
from pdelab.training.session import Partial, RunState, Session, build
from pdelab.training.strategy import batches, to_device
from pdelab.training.trained import BEST

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

provenance.read_sources()  # the import graph a run's code digest needs, before the stamp
job.mark_imported()  # on the command line: every import training needs is done

CHECKPOINT = "checkpoint.pt"


def resume(s: Session) -> None:
    """Continue from the last good checkpoint (a damaged one gives way to the previous one),
    but only one of this very spec, data and code: anything else (an edited params.yaml,
    re-prepared data, an edited source file the run executes) starts afresh rather than
    mixing runs. A damaged best.pt cannot be rebuilt from a checkpoint, so it too means a
    fresh start, and so does a finished run's checkpoint (its job ran to the end, so a job
    started again was asked to train it again: ``snakemake -f``). A checkpoint or best.pt
    of another run (task, variant or seed) stops the job, naming both (pdelab.records.run).
    With several processes rank 0 alone decides (it alone moves a damaged file aside) and
    the others load the file it chose, so every rank resumes from the same state."""
    found = resumable(s) if s.world.rank == 0 else None
    path = distributed.from_first(None if found is None else str(found[1]), s.world)
    if path is None:
        return
    ckpt = found[0] if found is not None else checkpoint.load(Path(path), s.device)
    state = RunState.from_checkpoint(ckpt["state"])
    s.model.load_state_dict(ckpt["model"])
    s.optimizer.load_state_dict(ckpt["optimizer"])
    s.schedule.load_state_dict(ckpt["schedule"])
    checkpoint.restore_rng(ckpt["rng"])
    s.state, s.resumed = state, True
    part = state.partial
    where = f"step {part['step']} of epoch {state.epoch + 1}" if part else f"epoch {state.epoch}"
    say(s, f"resuming from {where} of {path}")


def resumable(s: Session) -> tuple[dict[str, Any], Path] | None:
    """The checkpoint :func:`resume` continues from, and its file; None to start afresh."""
    found = checkpoint.load_latest(s.out / CHECKPOINT, s.device)
    if found is None:
        return None
    ckpt, path = found
    ours = run_identity(s)
    theirs = identity(json.loads(ckpt["spec"]), ckpt["data_hash"])
    check_identity(path, theirs, {k: ours[k] for k in ("task", "variant", "seed")})
    if theirs != ours:  # this run's, before params.yaml or the data changed
        print(f"{path} is of another spec or data; starting afresh", file=sys.stderr)
        return None
    code = provenance.code_digest(s.run)
    if ckpt.get("code_digest") != code:  # this run's, trained by code since edited
        made = ckpt.get("code_digest", "unrecorded")
        print(f"{path} is of other code ({made} -> {code}); starting afresh", file=sys.stderr)
        return None
    state = RunState.from_checkpoint(ckpt["state"])
    if finished(state, s.run):  # its job ran to the end: running it again is training it again
        print(f"{path} is of a finished run; training it again", file=sys.stderr)
        return None
    if state.best_epoch:
        try:
            checkpoint.load_best(s.out / BEST, ours, torch.device("cpu"))
        except CorruptCheckpoint as bad:
            print(f"{bad}; starting from scratch", file=sys.stderr)
            return None
    return ckpt, path


def say(s: Session, line: str) -> None:
    """A line on stderr, from rank 0 alone where several processes train the run."""
    if s.world.rank == 0:
        print(line, file=sys.stderr)


def finished(state: RunState, run: RunSpec) -> bool:
    """Whether a checkpoint's run had nothing left to train (every epoch, its patience spent,
    or diverged): only a job that ran to its end leaves one, so a job that finds it was asked
    to run again (``snakemake -f``), and trains afresh instead of re-reading that end."""
    if state.partial is not None:
        return False
    return not (
        state.epoch < run.train.epochs
        and state.status == "ok"
        and (state.bad_epochs < run.train.patience)
    )


def train_step(s: Session, index: np.ndarray) -> tuple[Tensor, int, int] | None:
    """One optimizer step on the training items ``index``: (loss, correct, items), or None
    (and no update) on a non-finite loss. With a micro-batch smaller than ``index``, the
    gradients of its micro-batches are summed first, each weighted by its share of the
    window's items, so the step is the full batch's (pdelab.training.micro_batch); with several
    processes each computes its share of the window and their gradients are summed
    (pdelab.training.distributed). Clipping, the optimizer and the schedule then step once. The cost
    study times this very function."""
    world, include_pad = s.world, s.run.train.loss_includes_pad
    micro = s.execution.micro(len(index))
    whole = world.alone and micro >= len(index)  # one pass on the batch: no weighing
    if whole:
        parts, counts, window = [to_device(s.data["train"], index, s.device)], [1], 1
    else:
        arrays = micro_batch.window_arrays(s.data["train"], index)
        window = s.task_kind.loss_items(*micro_batch.on_cpu(arrays), include_pad)
        mine = {k: v[distributed.share(len(index), world)] for k, v in arrays.items()}
        parts = micro_batch.micro_batches(mine, micro, s.device)
        counts = [s.task_kind.loss_items(i, y, include_pad) for i, y in parts]
    total, correct, seen, zeroed, finite = torch.zeros((), device=s.device), 0, 0, False, True
    for (inputs, labels), items in zip(parts, counts, strict=True):
        if not items:
            continue  # nothing to score: no loss, no gradient
        with autocast(s.device, s.run.train.precision):  # bf16: pdelab.training.precision
            loss, right, n = s.task_kind.loss(s.model, inputs, labels, include_pad)
        if not torch.isfinite(loss):
            finite = False
            break
        if not zeroed:  # the last step's gradients stay until the first loss (pdelab.plan.counting)
            s.optimizer.zero_grad(set_to_none=True)
            zeroed = True
        scale = micro_batch.weight(items, window, len(parts))
        (loss if whole else loss * scale).backward()
        total = total + loss.detach() * scale  # the window's mean, as the full batch's
        correct, seen = correct + right, seen + n
    if not distributed.all_of(finite, world, s.device):
        return None
    if not zeroed:  # nothing scored here (a rank's empty share): no gradient of its own
        s.optimizer.zero_grad(set_to_none=True)
    distributed.sum_gradients(s.model, world)
    nn.utils.clip_grad_norm_(s.model.parameters(), s.run.train.grad_clip)
    s.optimizer.step()
    s.schedule.step()
    if whole:
        return loss, correct, seen
    if not world.alone:
        summed = distributed.summed([float(total), correct, seen], world, s.device)
        return torch.tensor(summed[0]), int(summed[1]), int(summed[2])
    return total, correct, seen


def train_epoch(s: Session, epoch: int, progress: bool) -> tuple[float, float] | None:
    """One pass over the training split: (loss, accuracy) per item, or None on a non-finite
    loss. The batch order depends only on (seed, epoch), so a resumed run sees the same; one
    stopped mid-epoch goes on from the step and running sums its checkpoint holds."""
    s.model.train()
    order = np.random.default_rng([s.run.seed, epoch]).permutation(len(s.data["train"]))
    part = s.state.partial or Partial(step=0, loss_sum=0.0, correct=0, seen=0)
    todo = batches(len(order), s.run.train.batch_size, order)
    for index in job.progress_bar(todo, part["step"], f"epoch {epoch}", progress):
        step_start = time.perf_counter()
        s.timing.setdefault("first_step", time.time())
        stepped = train_step(s, index)
        if stepped is None:
            return None
        loss, right, n = stepped
        if s.device.type == "cuda":
            torch.cuda.synchronize(s.device)
        s.state.step_times.append(time.perf_counter() - step_start)
        part = Partial(
            step=part["step"] + 1,
            loss_sum=part["loss_sum"] + loss.item() * n,
            correct=part["correct"] + right,
            seen=part["seen"] + n,
        )
        if stopping(s):
            s.state.partial = part
            stop(s)
    s.state.partial = None
    return part["loss_sum"] / part["seen"], part["correct"] / part["seen"]


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
        row = {
            "epoch": epoch,
            "train_loss": trained[0],
            "train_acc": trained[1],
            "val_loss": val["loss"],
            "val_acc": val["acc"],
            "val_ppl": val.get("ppl", math.nan),
            "lr": s.schedule.get_last_lr()[0],
            "epoch_time_s": time.perf_counter() - epoch_start,
        } | s.task_kind.history_extras(val)
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


def save_checkpoint(s: Session) -> None:
    """Everything a resume needs, in a form ``weights_only`` loading accepts; the last
    checkpoint is kept as checkpoint.prev.pt (pdelab.training.checkpoint). Rank 0's alone: every
    rank's state is the same."""
    if s.world.rank != 0:
        return
    saved = {
        "spec": s.run.to_json(),
        "data_hash": s.manifest["content_hash"],
        "code_digest": provenance.code_digest(s.run),  # a resume needs the same code
        "model": s.model.state_dict(),
        "optimizer": s.optimizer.state_dict(),
        "schedule": s.schedule.state_dict(),
        "rng": checkpoint.rng_state(s.device),
        "state": asdict(s.state),
    }
    checkpoint.save(saved, s.out / CHECKPOINT)


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


def run_identity(s: Session) -> dict[str, Any]:
    """Whose records these are (pdelab.records.run.identity): every record file carries it."""
    return identity(s.run.to_dict(), s.manifest["content_hash"])


def result_row(s: Session, test: dict[str, Any]) -> dict[str, Any]:
    """result.parquet's one row: the run's identity, test metrics, selection and cost."""
    state, run = s.state, s.run
    memory, memory_kind = job.peak_memory_mb(s.device)
    best = state.history[state.best_epoch - 1]["val_acc"] if state.best_epoch else math.nan
    steps = state.step_times
    execution = s.execution.record(run.train.batch_size, s.world.size)
    return {
        **{k: getattr(run, k) for k in ("task", "variant", "seed", "profile")},
        "status": state.status,
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "test_ppl": float(test["ppl"]),  # LM, translation: exp(test loss per real token)
        "causality": test["causality"],  # LM, translation (decoder): the probe's verdict
        "max_leak": float(test["max_leak"]),
        "best_val_acc": best,
        "best_epoch": state.best_epoch,
        "epochs_run": state.epoch,
        "median_step_s": statistics.median(steps) if steps else float("nan"),
        "peak_memory_mb": memory,
        "memory_kind": memory_kind,
        "device": s.device.type,
        "precision": run.train.precision,  # bf16: forward passes under autocast
        "parameters": sum(p.numel() for p in s.model.parameters()),
        "data_hash": s.manifest["content_hash"],
        "stand_in": s.manifest.get("stand_in", ""),  # what stands in for the paper's data
        "resumed": s.resumed,
        "mlflow_run_id": state.run_id or "",
        # how the steps were computed, not what the run is (pdelab.training.micro_batch,
        # distributed)
        "micro_batch": execution["micro_batch"],
        "accumulation_steps": execution["accumulation_steps"],
        "processes": execution["processes"],
    } | {k: float(test[k]) for k in s.task_kind.result_columns if k in test}


def history_table(
    run: RunSpec, history: list[dict[str, float]], columns: tuple[str, ...]
) -> pa.Table:
    """metrics.parquet: one row per epoch, named by (seed, variant, task) in front."""
    import pyarrow as pa

    identity = {"seed": run.seed, "variant": run.variant, "task": run.task}
    types = {k: pa.int64() if k == "seed" else pa.string() for k in identity}
    types |= {k: pa.int64() if k == "epoch" else pa.float64() for k in columns}
    return record_table([identity | row for row in history], types)


def finish(
    s: Session, test: dict[str, Any], tracker: Tracker, commit: str, dirty: bool | None
) -> pa.Table:
    """Write the records the workflow reads (metrics, result, run.json) and close the MLflow
    run with them as artifacts; returns the per-epoch history. run.json also keeps what a
    later MLflow sync needs beyond the Parquet files (commit, wall-clock stamps) and the code
    that made the run (pdelab.records.provenance)."""
    run, out, state = s.run, s.out, s.state
    history = history_table(run, state.history, s.task_kind.history_columns)
    result = result_row(s, test)
    end_ms = now_ms()
    tracking = {"git_commit": commit, "start_ms": state.start_ms}
    tracking |= {"epoch_end_ms": state.epoch_end_ms, "end_ms": end_ms}
    ident = run_identity(s)
    record = {"spec": run.to_dict(), "identity": ident, "result": result, "tracking": tracking}
    record["provenance"] = provenance.record(run, commit, dirty)
    record["environment"] = environment.environment(str(s.device))
    # the GPUs this job was given on a multi-GPU node, if any (pdelab.runtime.gpu_slots)
    record |= {"timing": job.timing(s.timing), "gpu_slot": gpu_slots.held_record()}
    record["execution"] = s.execution.record(run.train.batch_size, s.world.size)
    write_records(out, record, history, record_table([result]))
    tracker.finish(result, out, end_ms)
    return history


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
    with session.stop:  # SIGTERM: checkpoint after the current step, raise Stopped
        while session.training():
            stop_if_asked(session)
            run_epoch(session, tracker, progress and world.rank == 0)
        stop_if_asked(session)
    if world.rank != 0:  # the records, the test and MLflow are rank 0's
        return history_table(run, state.history, session.task_kind.history_columns)
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
    else:
        params = load_params(args.params)
        run = resolve(params, args.task, args.variant, args.seed, args.profile)
        mode = args.tracking or tracking_mode(params, run.profile)
        card = gpu_memory_gb(params, run.profile) if args.card_gb is None else args.card_gb
    mode = "batch" if args.no_mlflow else mode or "live"
    gpu_slots.claim(run.device)  # one GPU per concurrent job, before torch initialises CUDA
    world = distributed.join(run.device)  # one of torchrun's processes: its rank and GPU
    try:
        live, progress = mode == "live", not args.no_progress
        execution = Execution(args.micro_batch, args.checkpoint_blocks)
        if execution == Execution():  # none asked for: the cost plan's fit to the card
            execution = micro_batch.planned(run, card) or execution
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
