"""The project's own MLflow store, ``results/mlflow``: a copy of the tree is a store of its own.

* **Relocatable.** Artifact locations are kept relative to the project folder
  (``results/mlflow/artifacts/<experiment>``), which MLflow, and ``mlflow ui`` started there,
  resolve against the working directory: the project folder for every job and command. MLflow
  itself stores absolute ones (it resolves a relative location when it creates an experiment,
  and each run's from its experiment's), so :func:`relocate` rewrites them in the database each
  time a client of a SQLite store is made (:func:`open_store`): a store copied or moved with
  its tree, or built before, never writes into the tree it came from.
* **Identified.** The database carries an id in its SQLite header (``user_version``, which
  SQLite leaves to applications); ``experiments.json`` records it. The workflow reads it when it
  parses (:func:`planned_id`: the file's first 100 bytes, no mlflow import) and hands it to
  the store rule as a param, so a database deleted, replaced or damaged (another id, or none)
  reruns the store rule and, after it, every sync, which logs each run again from its records.
* **Made once.** A new database is built under a temporary name and linked into place only if
  none is there yet (:func:`create_db`): several live training jobs may ask for it at once, and
  MLflow builds its schema in many steps that a process killed half-way leaves unusable.

Nothing here imports mlflow at module level: the workflow imports it when it parses.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pdelab.records.run import MLFLOW_DIR, shown_path, tracking_uri

if TYPE_CHECKING:
    import sqlite3  # imported where used: the training job and every parse import this module

DB = MLFLOW_DIR / "mlflow.db"
ARTIFACTS = MLFLOW_DIR / "artifacts"
STORE_FILE = MLFLOW_DIR / "experiments.json"  # the store rule's output
SQLITE_MAGIC = b"SQLite format 3\x00"
EXTERNAL = "external"  # planned_id when MLFLOW_TRACKING_URI names another store
BUSY_MS = 60_000  # parallel sync jobs share the database: wait for its lock this long
# (table, key, column) of every artifact location MLflow keeps for what this package logs
LOCATIONS = (
    ("experiments", "experiment_id", "artifact_location"),
    ("runs", "run_uuid", "artifact_uri"),
)


def local_db(uri: str | None = None) -> Path | None:
    """The SQLite file of a tracking URI (the project's by default), or None for a server or
    another database."""
    uri = tracking_uri() if uri is None else uri
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(uri[len("sqlite:///") :].split("?", 1)[0]))


def new_id() -> int:
    import secrets

    return secrets.randbelow(2**31 - 1) + 1  # SQLite's user_version: a signed 32-bit int


def read_id(db: Path) -> int:
    """The id in a database's header; 0 if it has none, is missing or is not SQLite."""
    try:
        with open(db, "rb") as f:
            header = f.read(100)
    except OSError:
        return 0
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return 0
    return int.from_bytes(header[60:64], "big", signed=True)


def damaged(db: Path) -> bool:
    """A database file that is not SQLite at all (its header says so): MLflow cannot open it,
    and only a rebuild from the records mends it."""
    try:
        with open(db, "rb") as f:
            header = f.read(len(SQLITE_MAGIC))
    except OSError:
        return False
    return header != SQLITE_MAGIC and len(header) > 0


def damaged_message(db: Path) -> str:
    """What the commands print for a :func:`damaged` database: the file, and the fix."""
    return (
        f"{shown_path(db)} is not an SQLite database (damaged?). MLflow only mirrors the "
        "records in results/runs: rebuild it from them with `python -m pdelab.tracking "
        "rebuild`, or delete it and run `snakemake`, which notices and logs every run again."
    )


def write_id(db: Path, store_id: int) -> None:
    """Give the database its id (the workflow's store rule does)."""
    with connect(db) as con:
        con.execute(f"PRAGMA user_version = {int(store_id)}")


def planned_id() -> str:
    """The store rule's param, computed when the workflow parses: the id of the database that
    is there, or a new one for the rule to give the database it makes (a random one, so each
    parse of a tree without a store plans the rule again). ``external`` for another store."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return EXTERNAL
    return str(read_id(DB) or new_id())


@contextmanager
def connect(db: Path) -> Iterator[sqlite3.Connection]:
    """A connection to the database, one transaction committed on leaving, then closed."""
    import sqlite3

    with closing(sqlite3.connect(db, timeout=BUSY_MS / 1000)) as con, con:
        yield con


def create_db(db: Path, store_id: int = 0) -> bool:
    """Create an MLflow database at ``db`` unless one is there: built (schema, id) under a
    temporary name, then hard-linked into place, which fails if another process made it
    first (theirs is used). True if this call made it."""
    from mlflow.tracking import MlflowClient

    db.parent.mkdir(parents=True, exist_ok=True)
    tmp = db.with_name(f".{db.stem}.{os.getpid()}.tmp{db.suffix}")
    try:
        MlflowClient(f"sqlite:///{tmp.resolve()}")  # builds the schema
        if store_id:
            write_id(tmp, store_id)
        relocate(tmp)
        try:
            os.link(tmp, db)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a smaller window, same outcome
            if db.exists():
                return False
            os.replace(tmp, db)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def relocatable(location: str) -> str | None:
    """The relative form of an absolute local artifact location, or None to keep it: one
    inside some tree's results/mlflow/artifacts (this tree's, or the one a copied store came
    from) becomes the same place in this tree; one elsewhere in the project folder, relative
    to it; one outside it (a location chosen by hand) is kept."""
    if location.startswith("file:"):
        path = unquote(urlparse(location).path)
    elif location.startswith("/"):
        path = location
    else:
        return None  # relative already, or a remote store (s3://, mlflow-artifacts:, ...)
    marker = f"/{ARTIFACTS.as_posix()}/"
    if marker in path + "/":
        rest = (path + "/").rsplit(marker, 1)[1].rstrip("/")
        return f"{ARTIFACTS.as_posix()}/{rest}" if rest else ARTIFACTS.as_posix()
    if Path(path).is_relative_to(Path.cwd()):
        return Path(path).relative_to(Path.cwd()).as_posix() or "."
    return None


def relocate(db: Path) -> int:
    """Rewrite the database's absolute artifact locations (experiments' and runs') in their
    relative form (:func:`relocatable`); returns how many changed. Two small reads, about a
    millisecond, when none is absolute (the usual case)."""
    changed = 0
    with connect(db) as con:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
        for table, key, column in LOCATIONS:
            if table not in tables:
                continue
            absolute = f"{column} LIKE 'file:%' OR {column} LIKE '/%'"
            query = f"SELECT {key}, {column} FROM {table} WHERE {absolute}"
            for row_key, location in con.execute(query).fetchall():
                new = relocatable(location)
                if new is not None and new != location:
                    con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (new, row_key))
                    changed += 1
    return changed


def ensure(db: Path, store_id: int | None = None) -> None:
    """The database at ``db``, made if missing (:func:`create_db`), given ``store_id`` if
    asked, its artifact locations relative (:func:`relocate`)."""
    if not db.exists():
        create_db(db, store_id or 0)
    elif store_id and read_id(db) != store_id:
        write_id(db, store_id)
    import sqlite3

    try:
        relocate(db)
    except sqlite3.OperationalError:
        if unwritable(db.parent) is None:
            raise  # a read-only store is read as it is: nothing is written to it


def open_store(uri: str | None = None, store_id: int | None = None) -> Any:
    """An MlflowClient of ``uri`` (the project's store by default). A SQLite store is made
    first if missing, safely, and its artifact locations made relative; the only way this
    package makes a client."""
    from mlflow.tracking import MlflowClient

    uri = uri or tracking_uri()
    db = local_db(uri)
    if db is not None:
        ensure(db, store_id)
    return MlflowClient(uri)


def unwritable(folder: Path = MLFLOW_DIR) -> str | None:
    """Why MLflow's folder cannot take writes (a file made and removed there, and the
    database opened for writing), or None if it can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe."):
            pass
        db = folder / DB.name
        if db.exists():
            with open(db, "r+b"):
                pass
    except OSError as err:
        return str(err.strerror or err)
    return None


def unwritable_message(folder: Path = MLFLOW_DIR, reason: str = "") -> str:
    """What the MLflow commands print when its folder is not writable: the folder (relative
    to the project when inside it), and the fix. MLflow is for browsing runs only; nothing
    else waits for it."""
    folder = shown_path(folder)
    why = f" ({reason})" if reason else ""
    return (
        f"MLflow's folder {folder} is not writable{why}. MLflow is only for browsing runs: "
        f"training, the tables and the report never need it, and every run is kept in "
        f"results/runs. To fill it, make the folder writable (`chmod -R u+w {folder}`), or "
        f"delete it (`rm -rf {folder}`: the store is rebuilt from the records), then run "
        "`snakemake` again."
    )


def prune_artifacts(db: Path, root: Path = ARTIFACTS) -> list[Path]:
    """Delete the run artifact folders (root/<experiment>/<run id>) of runs the database does
    not hold: a rebuilt store's predecessor's. Returns them."""
    with connect(db) as con:
        kept = {row[0] for row in con.execute("SELECT run_uuid FROM runs")}
    gone = [
        folder
        for folder in sorted(root.glob("*/*"))
        if folder.is_dir()
        and re.fullmatch(r"[0-9a-f]{32}", folder.name)
        and folder.name not in kept
    ]
    for folder in gone:
        shutil.rmtree(folder)
    return gone


def read_only() -> str | None:
    """Why the workflow's MLflow rules cannot write their folder, or None: one access() call
    per path that exists (cheap enough for every parse of the workflow; root is refused only
    by a read-only file system)."""
    for path in (MLFLOW_DIR, MLFLOW_DIR / "synced", ARTIFACTS, DB):
        if path.exists() and not os.access(path, os.W_OK):
            return f"{path} is read-only"
    return None
