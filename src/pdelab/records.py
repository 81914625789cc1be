"""A run's records on disk, defined once: where they live, their Parquet and digest, the commit
and clock they are stamped with, and the address of the MLflow store they are logged to.

The trainer writes them, MLflow's sync logs them and the report reads them; none of those
layers owns them, so they live here, below all three. Nothing here imports pandas, pyarrow or
mlflow at module level: the training job imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdelab.atomic import atomic_path

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MLFLOW_DIR = Path("results/mlflow")  # relative to the workflow's directory
RUNS_DIR = Path("results/runs")  # a run's records: RUNS_DIR/profile/task/variant/seedN
RECORD_FILES = ("metrics.parquet", "result.parquet", "run.json")  # also its MLflow artifacts


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the project's SQLite store."""
    local = f"sqlite:///{(MLFLOW_DIR / 'mlflow.db').resolve()}"
    return os.environ.get("MLFLOW_TRACKING_URI") or local


def run_dir(profile: str, task: str, variant: str, seed: int, root: Path = RUNS_DIR) -> Path:
    """Where the workflow's train rule writes a run's records."""
    return root / profile / task / variant / f"seed{seed}"


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def now_ms() -> int:
    return int(time.time() * 1000)


def records_sha256(out: Path) -> str:
    """One digest of a run's record files: a batch sync skips runs logged with the same."""
    digest = hashlib.sha256()
    for name in RECORD_FILES:
        digest.update(name.encode() + b"\0" + hashlib.sha256((out / name).read_bytes()).digest())
    return digest.hexdigest()


def write_parquet(frame: pd.DataFrame | pa.Table, path: Path) -> None:
    """Write atomically, so a killed job never leaves a half-written record behind."""
    with atomic_path(path) as tmp:
        if hasattr(frame, "to_parquet"):
            frame.to_parquet(tmp, index=False)
        else:
            import pyarrow.parquet as pq

            pq.write_table(frame, tmp)


def arrow_type(value: Any) -> pa.DataType:
    """The Parquet column type pandas would give a Python value."""
    import pyarrow as pa

    for kind, arrow in ((bool, pa.bool_()), (int, pa.int64()), (float, pa.float64())):
        if isinstance(value, kind):
            return arrow
    if isinstance(value, str):
        return pa.string()
    raise TypeError(f"no record column type for {value!r}")


def record_table(
    rows: list[dict[str, Any]], types: dict[str, pa.DataType] | None = None
) -> pa.Table:
    """A Table of bool, int, float and str columns (types from the first row unless given),
    built from raw buffers: pyarrow's own converters import pandas on first use, most of a
    second that a training job would pay for nothing. Read back, it equals pandas' writing."""
    import numpy as np
    import pyarrow as pa

    types = types or {k: arrow_type(v) for k, v in rows[0].items()}
    arrays = []
    for name, kind in types.items():
        values = [row[name] for row in rows]
        if kind == pa.string():
            encoded = [str(v).encode() for v in values]
            offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int32)
            buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        elif kind == pa.bool_():
            bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
            buffers = [None, pa.py_buffer(bits)]
        else:
            dtype = np.int64 if kind == pa.int64() else np.float64
            buffers = [None, pa.py_buffer(np.asarray(values, dtype=dtype))]
        arrays.append(pa.Array.from_buffers(kind, len(rows), buffers))
    return pa.Table.from_arrays(arrays, names=list(types))


def read_run_json(folder: Path) -> dict[str, Any]:
    """A run folder's run.json; one that is missing or does not parse names its path and the
    repair (the train rule rewrites it)."""
    path = Path(folder) / "run.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path}: cannot read the run's record ({err}); delete the run folder and run "
            "`snakemake` to train it again"
        ) from None
