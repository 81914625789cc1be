"""A run's records on disk, defined once: where they live, their Parquet and digest, the
identity every record carries (whose run, spec and data) and its check on every read, the clock
they are stamped with, and the address of the MLflow store they are logged to.

The trainer writes them, MLflow's sync logs them and the report reads them; none of those
layers owns them, so they live here, below all three. Nothing here imports pandas, pyarrow or
mlflow at module level: the training job imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdelab.records.atomic import atomic_path, write_text

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MLFLOW_DIR = Path("results/mlflow")  # relative to the workflow's directory
RUNS_DIR = Path("results/runs")  # a run's records: RUNS_DIR/profile/task/variant/seedN
RECORD_FILES = ("metrics.parquet", "result.parquet", "run.json")  # also its MLflow artifacts


def tracking_uri(shown: bool = False) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the project's SQLite store (absolute: a client's
    connections must not depend on a later working directory). ``shown``: the form to print
    (reports, logs, JSON), a SQLite file inside the project relative to it, so no text names
    the folder a tree was built in, which a copy or another checkout does not share."""
    prefix = "sqlite:///"
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri is None:
        db = MLFLOW_DIR / "mlflow.db"
        return f"{prefix}{db.as_posix() if shown else db.resolve()}"
    if shown and uri.startswith(prefix):
        return f"{prefix}{shown_path(Path(uri[len(prefix) :])).as_posix()}"
    return uri


def shown_path(path: Path) -> Path:
    """A path as printed: relative to the project (the working directory) when inside it, so
    no text names the folder a tree was built in."""
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        return path.relative_to(Path.cwd())
    return path


def run_dir(profile: str, task: str, variant: str, seed: int, root: Path = RUNS_DIR) -> Path:
    """Where the workflow's train rule writes a run's records."""
    return root / profile / task / variant / f"seed{seed}"


class ForeignRecord(ValueError):
    """A record (result, metrics, checkpoint) that is not the run's whose folder holds it."""


def spec_sha256(spec: Mapping[str, Any]) -> str:
    """A short digest of a resolved spec (its canonical JSON,
    pdelab.spec.config.RunSpec.to_json)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def identity(spec: Mapping[str, Any], data_hash: str) -> dict[str, Any]:
    """Whose a record is: the run (task, variant, seed), its resolved spec and the data bytes
    it trained on. Every record file carries it, and every reader checks it."""
    key = {k: spec[k] for k in ("task", "variant", "seed")}
    return key | {"spec_sha256": spec_sha256(spec), "data_hash": data_hash}


def plan_text(plan: Mapping[str, Any]) -> str:
    """A run's plan (pdelab.records.staleness.planned: its resolved spec, code digest and data hash)
    as the workflow writes it for the training job: canonical JSON, so one plan is one text."""
    return json.dumps(dict(plan), sort_keys=True, indent=1) + "\n"


def plan_sha256(text: str) -> str:
    """A short digest of a plan's text: the train rule hands it to the job with the plan's
    path, so the job trains the plan this workflow read, not one a later parse wrote there."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_plan(path: Path | str) -> tuple[dict[str, Any], str]:
    """A plan file's plan and the digest of its text; a missing or unreadable file raises
    ValueError naming it."""
    try:
        text = Path(path).read_text()
        return json.loads(text), plan_sha256(text)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read the run's plan ({err})") from None


def describe(ident: Mapping[str, Any]) -> str:
    """An identity as one phrase: ``listops/baseline/seed1 (spec 1a2b..., data 3c4d...)``."""
    run = f"{ident.get('task')}/{ident.get('variant')}/seed{ident.get('seed')}"
    spec, data = str(ident.get("spec_sha256", "?")), str(ident.get("data_hash", "?"))
    return f"{run} (spec {spec[:12]}, data {data[:12]})"


def check_identity(
    path: Path, found: Mapping[str, Any] | None, expected: Mapping[str, Any]
) -> None:
    """ForeignRecord unless ``found`` is ``expected`` (on the keys ``expected`` has), naming the
    file, both identities and the repair."""
    if found is not None and all(found.get(k) == v for k, v in expected.items()):
        return
    whose = describe(found) if found else "no run (it carries no identity)"
    raise ForeignRecord(
        f"{path} belongs to {whose}, not to {describe(expected)}, whose folder holds it; "
        f"delete {Path(path).parent} and run `snakemake` to train the run again"
    )


def folder_key(folder: Path) -> dict[str, Any] | None:
    """(task, variant, seed) from a run folder laid out as RUNS_DIR/profile/task/variant/seedN,
    or None for a folder laid out otherwise (a test's, a copy)."""
    parts = Path(folder).parts
    if len(parts) < 3 or not parts[-1].startswith("seed") or not parts[-1][4:].isdigit():
        return None
    return {"task": parts[-3], "variant": parts[-2], "seed": int(parts[-1][4:])}


IDENTITY_KEY = b"pdelab.identity"  # a record Parquet file's metadata entry


class DamagedRecord(ValueError):
    """A record file whose bytes are not the ones its run wrote (edited, truncated, damaged)."""


def repair(folder: Path) -> str:
    return f"delete {Path(folder)} and run `snakemake` to train the run again"


def parquet_identity(path: Path) -> dict[str, Any] | None:
    """The identity a record Parquet file carries in its metadata (its schema alone is read);
    a file that is not whole Parquet (truncated, damaged) raises DamagedRecord with the repair."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise DamagedRecord(
            f"{path}: not a readable Parquet file ({err}); {repair(Path(path).parent)}"
        ) from None
    return json.loads(metadata[IDENTITY_KEY]) if IDENTITY_KEY in metadata else None


DIGESTED = ("metrics.parquet", "result.parquet")  # their sha256 in run.json's ``records``


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_contents(folder: Path, record: Mapping[str, Any]) -> None:
    """Each Parquet record's bytes are the ones the run wrote: their sha256 is run.json's
    ``records`` entry for it (a result rewritten after the run, a truncated metrics file, are
    refused before a number is read). Records written before run.json held the digests are
    checked for their identity only."""
    for name, expected in (record.get("records") or {}).items():
        path = Path(folder) / name
        try:
            found = file_sha256(path)
        except OSError as err:
            raise DamagedRecord(f"{path}: cannot read it ({err}); {repair(folder)}") from None
        if found != expected:
            raise DamagedRecord(
                f"{path}: its bytes (sha256 {found[:12]}) are not the ones its run wrote "
                f"({expected[:12]}, run.json's records): the file was edited, truncated or "
                f"damaged since; {repair(folder)}"
            )


def check_run(folder: Path) -> dict[str, Any]:
    """A run folder's records all of one run, as written: run.json's identity matches its own
    spec and data, the folder's place (RUNS_DIR/profile/task/variant/seedN) and the identity
    both Parquet files carry, whose bytes are the ones run.json recorded. Returns run.json,
    whose ``identity`` is then the checked one; ForeignRecord or DamagedRecord names the odd
    file and the repair."""
    folder = Path(folder)
    record = read_run_json(folder)
    ident = identity(record["spec"], record["result"]["data_hash"])
    check_identity(folder / "run.json", record.get("identity"), ident)
    if (key := folder_key(folder)) is not None:
        check_identity(folder / "run.json", ident, key)
    for name in ("result.parquet", "metrics.parquet"):
        check_identity(folder / name, parquet_identity(folder / name), ident)
    check_contents(folder, record)
    return record


def now_ms() -> int:
    return int(time.time() * 1000)


def records_sha256(out: Path) -> str:
    """One digest of a run's record files: a batch sync skips runs logged with the same."""
    digest = hashlib.sha256()
    for name in RECORD_FILES:
        digest.update(name.encode() + b"\0" + hashlib.sha256((out / name).read_bytes()).digest())
    return digest.hexdigest()


def write_parquet(
    frame: pd.DataFrame | pa.Table, path: Path, ident: Mapping[str, Any] | None = None
) -> None:
    """Write atomically, so a killed job never leaves a half-written record behind; ``ident``:
    the run's :func:`identity`, kept in the file's metadata (a pyarrow Table's)."""
    with atomic_path(path) as tmp:
        if hasattr(frame, "to_parquet"):
            frame.to_parquet(tmp, index=False)
        else:
            import pyarrow.parquet as pq

            if ident is not None:
                metadata = (frame.schema.metadata or {}) | {IDENTITY_KEY: json.dumps(ident)}
                frame = frame.replace_schema_metadata(metadata)
            pq.write_table(frame, tmp)


def write_records(out: Path, record: dict[str, Any], history: pa.Table, result: pa.Table) -> None:
    """A run's record files (RECORD_FILES), each carrying ``record["identity"]`` (run.json in
    its body, the Parquet files in their metadata), each written atomically; run.json last,
    with the Parquet files' sha256 (``records``), which every reader checks (check_run)."""
    write_parquet(history, out / "metrics.parquet", record["identity"])
    write_parquet(result, out / "result.parquet", record["identity"])
    record = record | {"records": {name: file_sha256(out / name) for name in DIGESTED}}
    write_text(out / "run.json", json.dumps(record, indent=2, default=str) + "\n")


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
