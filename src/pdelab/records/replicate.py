"""The nondeterminism floor's records: one run trained again, with its own seed, on the same
machine (pdelab.training.replicate trains it), compared with the run.

A replicate is that run, not a run of its own: it is trained from the spec run.json records
(with the code and data that run.json names, or not at all), into a temporary folder (the
run's folder is only read), and its JSON carries the run's identity. This module holds what is
records, not training (the layers: pdelab.records sits below pdelab.training): which run
stands for its task, the comparison of two trainings' records and the replicate's JSON.

Set beside the run's numbers, the replicate's say how far two trainings of one experiment
part on this machine: on CPU the trainer is deterministic, so the two are bitwise equal; on a
GPU the non-deterministic kernels (atomic adds in reductions, cuDNN's algorithm choice) show
as a difference. An effect smaller than that difference cannot be told from the machine's own
noise (pdelab.report.floor).

Which run stands for its task: the first of the task's runs in the run sheet's order (the run
profile's first variant and seed of it, :func:`replicate_runs`): one replicate per task measures
the machine's floor for that task's model and data without doubling the build.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pdelab.records import environment
from pdelab.records.atomic import write_text
from pdelab.records.run import describe, read_run_json, shown_path

# result.parquet's columns that measure the job, not the experiment: they differ between any
# two trainings and are left out of the comparison
NOT_COMPARED = frozenset(
    {"median_step_s", "peak_memory_mb", "memory_kind", "mlflow_run_id", "resumed"}
)
HISTORY_NOT_COMPARED = frozenset({"epoch_time_s"})  # metrics.parquet's timing column


def replicate_runs(runs: Iterable[tuple[str, str, Any]]) -> dict[str, tuple[str, str, Any]]:
    """{task: (task, variant, seed)}: the run replicated for each task, its first in ``runs``
    (the run sheet's order: the run profile's first variant and seed of the task)."""
    chosen: dict[str, tuple[str, str, Any]] = {}
    for task, variant, seed in runs:
        chosen.setdefault(task, (task, variant, seed))
    return chosen


def compared(row: Mapping[str, Any], skip: frozenset[str]) -> dict[str, float]:
    """A record row's numbers (booleans and strings aside) that two trainings of one
    experiment should share, by name."""
    return {
        name: float(value)
        for name, value in row.items()
        if name not in skip and isinstance(value, int | float) and not isinstance(value, bool)
    }


def same_value(a: float, b: float) -> bool:
    """Bitwise equal: the same float, NaN equal to NaN (a diverged run's test is NaN twice)."""
    return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))


def absolute_difference(a: float, b: float) -> float | None:
    """|a - b|; 0 for two NaN, None (not a number to compare) for one NaN."""
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return None
    return abs(a - b)


def values_sha256(rows: Sequence[Mapping[str, float]]) -> str:
    """The sha256 of a record's compared values (each row's names in order, each value's
    IEEE-754 bytes): equal exactly when every value is bitwise equal. The files' own sha256
    cannot say it: they also hold the job's timings."""
    digest = hashlib.sha256()
    for row in rows:
        for name in sorted(row):
            digest.update(name.encode() + b"\0" + struct.pack("<d", row[name]))
    return digest.hexdigest()


def read_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def comparison(run_dir: Path, replicate_dir: Path) -> dict[str, Any]:
    """The run's final metrics beside the replicate's, each metric's absolute difference,
    and whether the result and per-epoch records are bitwise equal."""
    ours, theirs = (read_rows(d / "result.parquet")[0] for d in (run_dir, replicate_dir))
    run_values, replicate_values = compared(ours, NOT_COMPARED), compared(theirs, NOT_COMPARED)
    metrics = {
        name: {
            "run": _json_number(value),
            "replicate": _json_number(replicate_values[name]),
            "abs_diff": absolute_difference(value, replicate_values[name]),
            "bitwise_equal": same_value(value, replicate_values[name]),
        }
        for name, value in run_values.items()
        if name in replicate_values
    }
    histories = [
        [compared(row, HISTORY_NOT_COMPARED) for row in read_rows(d / "metrics.parquet")]
        for d in (run_dir, replicate_dir)
    ]
    result_sha = [values_sha256([v]) for v in (run_values, replicate_values)]
    history_sha = [values_sha256(rows) for rows in histories]
    return {
        "metrics": metrics,
        "result_values_sha256": {"run": result_sha[0], "replicate": result_sha[1]},
        "history_values_sha256": {"run": history_sha[0], "replicate": history_sha[1]},
        "bitwise_equal": result_sha[0] == result_sha[1] and history_sha[0] == history_sha[1],
    }


def _json_number(value: float) -> float | None:
    """JSON has no NaN: a missing number is null."""
    return None if math.isnan(value) else value


class NotReplicable(ValueError):
    """A run that cannot be trained again as it was: its code or data changed since."""


def replicable_run(record: Mapping[str, Any], run_dir: Path) -> Any:
    """The RunSpec run.json records, provided this checkout's code for it and the task's
    prepared data (its manifest's content hash) are the ones the run was trained with;
    NotReplicable names what changed and the fix."""
    from pdelab.records import provenance
    from pdelab.spec.config import RunSpec

    run = RunSpec.from_dict(record["spec"])
    made = (record.get("provenance") or {}).get("code_digest")
    if made != (now := provenance.code_digest(run)):
        raise NotReplicable(
            f"{run_dir}: the run was trained by code {made}, this checkout's is {now}: a "
            "replicate of it would be another experiment. Run `snakemake` to train the run "
            "with today's code first, then replicate it"
        )
    manifest = Path(run.data_dir) / "manifest.json"
    try:
        data = str(json.loads(manifest.read_text())["content_hash"])
    except (OSError, ValueError, KeyError) as err:
        raise NotReplicable(
            f"{run_dir}: cannot read its task's prepared data ({manifest}: {err}); run "
            "`snakemake` (or `dvc repro`), which prepares it"
        ) from None
    if data != record["identity"]["data_hash"]:
        raise NotReplicable(
            f"{run_dir}: the run was trained on data {record['identity']['data_hash'][:12]}, "
            f"{run.data_dir} now holds {data[:12]}. Run `snakemake` to train the run on "
            "today's data first, then replicate it"
        )
    return run


def replicate_record(
    record: Mapping[str, Any], run_dir: Path, replicate_dir: Path
) -> dict[str, Any]:
    """A replicate's JSON: the run's identity (a replicate is that run, not one of its own),
    the two trainings' numbers and differences, the device and both environments. The
    replicate in ``replicate_dir`` must carry the run's identity, else NotReplicable."""
    again = read_run_json(replicate_dir)
    if again.get("identity") != record["identity"]:
        raise NotReplicable(
            f"{run_dir}: the replicate trained {describe(again.get('identity') or {})}, not "
            f"{describe(record['identity'])}"
        )
    trained_with = record.get("environment") or {}
    replicate_env = again.get("environment") or {}
    return {
        "identity": dict(record["identity"]),
        "run": shown_path(Path(run_dir).resolve()).as_posix(),
        "device": replicate_env.get("device", record["spec"].get("device")),
        "environment": {"run": trained_with, "replicate": replicate_env},
        "environment_differences": environment.differences(trained_with, replicate_env),
        "execution": {"run": record.get("execution"), "replicate": again.get("execution")},
    } | comparison(Path(run_dir), Path(replicate_dir))


def write_replicate(path: Path | str, found: Mapping[str, Any]) -> None:
    """The replicate's JSON, written atomically (its folder made if need be)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(found, indent=2, sort_keys=True) + "\n")
