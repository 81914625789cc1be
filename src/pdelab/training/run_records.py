"""A finished run's records: result.parquet's row, metrics.parquet's history and run.json,
written together (pdelab.records.run.write_records) and handed to MLflow with them."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from pdelab.records import environment, provenance, run_store
from pdelab.records.run import now_ms, record_table, write_records
from pdelab.runtime import gpu_slots
from pdelab.spec.config import RunSpec
from pdelab.tracking.log import Tracker
from pdelab.training import job
from pdelab.training.resume import run_identity
from pdelab.training.session import Session

if TYPE_CHECKING:
    import pyarrow as pa


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


def history_columns(s: Session) -> tuple[str, ...]:
    """metrics.parquet's columns: the task kind's, and the GPU's usage where it was sampled."""
    return s.task_kind.history_columns + s.gpu_usage.columns


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
    history = history_table(run, state.history, history_columns(s))
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
    run_store.keep(out)  # kept by its version: a later params change destroys nothing
    tracker.finish(result, out, end_ms)
    return history
