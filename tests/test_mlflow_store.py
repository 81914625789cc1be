"""The project's MLflow store (pdelab.tracking.store): a copied tree logs into its own store and
finds its artifacts there; printed texts name the store relative to the project; provenance
tags; a read-only store folder stops nothing but the MLflow commands, which name the fix.

Run records: the tiny ListOps run of tests/test_tracking's ``live`` fixture, copied under other
(variant, seed) names where the workflow keeps records."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import relabel_run
from pdelab.records.run import run_dir, tracking_uri
from pdelab.spec.config import load_params
from pdelab.spec.studies import report_groups
from pdelab.tracking.log import log_record
from pdelab.tracking.store import DB, LOCATIONS, planned_id, read_id, read_only
from pdelab.tracking.sync import client_for, log_report, read_record, sync
from tests.test_tracking import live  # noqa: F401 - the module-scoped fixture, reused

EXPERIMENT = "pdelab-listops-smoke"
# In the fast tier: the tests that need neither the trained run nor the tracking commands; the
# others (a training run, stores, subprocesses: seconds each) are marked slow.


def copy_run(source: Path, project: Path, variant: str, seed: int, **record: Any) -> Path:
    """The source run's records as (variant, seed)'s, where the workflow keeps them in
    ``project``; ``record``: run.json entries to set (provenance, ...)."""
    dest = run_dir("smoke", "listops", variant, seed, project / "results" / "runs")
    return relabel_run(source, dest, record, variant=variant, seed=seed)


def stored_locations(db: Path) -> list[str]:
    """Every artifact location the database keeps (experiments' and runs')."""
    with sqlite3.connect(db) as con:
        return [
            row[0]
            for table, _, column in LOCATIONS
            for row in con.execute(f"SELECT {column} FROM {table}")
        ]


def files_under(folder: Path) -> set[Path]:
    return {p.resolve() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """An empty project folder, the working directory, on the project's own store."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    folder = tmp_path / "A"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def write_report_files(params: dict[str, Any], root: Path) -> None:
    """Stand-ins for every study's tables and figures (what log_report logs)."""
    for group in report_groups(params):
        for f in group.files:
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_bytes(f"{group.name} {f}".encode())


def copy_and_delete(a: Path, monkeypatch) -> Path:
    """cp -a A B, then A deleted: whatever writes into A from now on recreates it."""
    b = a.with_name("B")
    shutil.copytree(a, b, symlinks=True)
    monkeypatch.chdir(b)
    shutil.rmtree(a)
    return b


@pytest.mark.slow
def test_a_copied_tree_logs_into_its_own_store(live, project, monkeypatch) -> None:  # noqa: F811
    params = load_params(live[0] / "params.yaml")
    folders = [copy_run(live[1], project, v, 0) for v in ("baseline", "after_embedding")]
    first = sync(folders, client_for())
    assert [r["action"] for r in first] == ["logged", "logged"]
    assert not any(loc.startswith(("/", "file:")) for loc in stored_locations(DB))

    b = copy_and_delete(project, monkeypatch)
    before = files_under(b)
    moved = [b / f.relative_to(project) for f in folders]
    record = json.loads((moved[0] / "run.json").read_text())
    record["tracking"]["end_ms"] += 1  # retrained: its run is replaced, with new artifacts
    (moved[0] / "run.json").write_text(json.dumps(record))
    added = copy_run(live[1], b, "baseline", 1)
    rows = sync([*moved, added], client_for())
    assert [r["action"] for r in rows] == ["replaced", "kept", "logged"]
    write_report_files(params, b / "results")
    report = log_report(params, "smoke", b / "results", client_for())

    assert not project.exists(), "a sync in the copy wrote into the original tree"
    written = files_under(b) - before
    artifacts = (b / "results/mlflow/artifacts").resolve()
    logged = [f for f in written if f.is_relative_to(artifacts)]
    per_run = 3 + 2  # the record files, and metrics.csv and result.json to read them
    assert len(logged) == 2 * per_run + sum(len(g.files) for g in report_groups(params))
    client = client_for()
    for row in [*rows, *report]:
        run = client.get_run(row["run_id"])
        assert not run.info.artifact_uri.startswith(("/", "file:"))
        names = {a.path for a in client.list_artifacts(row["run_id"])}
        assert names, row
        if row in rows:  # the copy's records, read back through MLflow from the copy
            local = client.download_artifacts(row["run_id"], "run.json", str(b / "dl"))
            assert Path(local).read_bytes() == (Path(row["run_dir"]) / "run.json").read_bytes()
    assert not any(loc.startswith(("/", "file:")) for loc in stored_locations(DB))


@pytest.mark.slow
def test_a_store_with_absolute_locations_is_relocated_when_opened(
    live,  # noqa: F811
    project,
    monkeypatch,
) -> None:
    """A store built with absolute artifact locations (as MLflow keeps them), copied with its
    tree: opened in the copy, it reads and writes the copy's artifacts."""
    from mlflow.tracking import MlflowClient

    folder = copy_run(live[1], project, "baseline", 0)
    DB.parent.mkdir(parents=True)
    client = MlflowClient(f"sqlite:///{DB.resolve()}")
    where = (project / "results/mlflow/artifacts" / EXPERIMENT).as_uri()
    exp_id = client.create_experiment(EXPERIMENT, artifact_location=where)
    old = log_record(client, exp_id, read_record(folder))
    assert client.get_run(old).info.artifact_uri.startswith(where)

    b = copy_and_delete(project, monkeypatch)
    client = client_for()
    assert [a.path for a in client.list_artifacts(old)] == [
        "metrics.csv",
        "metrics.parquet",
        "result.json",
        "result.parquet",
        "run.json",
    ]
    [row] = sync([copy_run(live[1], b, "baseline", 1)], client)
    assert row["action"] == "logged" and not project.exists()
    assert (b / client.get_run(row["run_id"]).info.artifact_uri / "run.json").is_file()


@pytest.mark.slow
def test_the_ui_of_a_copied_tree_serves_its_artifacts(live, project, monkeypatch) -> None:  # noqa: F811
    """`mlflow ui` as docs/mlflow.md starts it, in the copy (the original deleted)."""
    folders = [copy_run(live[1], project, "baseline", 0)]
    [row] = sync(folders, client_for())
    b = copy_and_delete(project, monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "mlflow", "ui", "--port", str(port)]
    command += ["--backend-store-uri", "sqlite:///results/mlflow/mlflow.db"]
    ui = subprocess.Popen(
        command, cwd=b, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        base = f"http://127.0.0.1:{port}"
        listing = f"{base}/ajax-api/2.0/mlflow/artifacts/list?run_id={row['run_id']}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(listing, timeout=5) as answer:
                    files = {f["path"] for f in json.load(answer)["files"]}
                break
            except OSError:
                assert ui.poll() is None and time.monotonic() < deadline, "mlflow ui did not start"
                time.sleep(1)
        assert files == {"metrics.parquet", "result.parquet", "run.json"} | {
            "metrics.csv",
            "result.json",
        }
        served = f"{base}/get-artifact?path=run.json&run_uuid={row['run_id']}"
        with urllib.request.urlopen(served, timeout=30) as answer:
            assert answer.read() == (b / folders[0].relative_to(project) / "run.json").read_bytes()
        assert not project.exists()
    finally:
        os.killpg(ui.pid, 15)
        ui.wait(timeout=30)


# --------------------------------------------------------------------------------------------
# What is printed names the store relative to the project
# --------------------------------------------------------------------------------------------


def tracking_cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    environment = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run(
        [sys.executable, "-m", "pdelab.tracking", *args],
        cwd=cwd,
        env=environment | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_printed_texts_name_the_store_relative_to_the_project(live, project) -> None:  # noqa: F811
    work_copy(live[0], project)
    folder = copy_run(live[1], project, "baseline", 0)
    assert tracking_uri(shown=True) == "sqlite:///results/mlflow/mlflow.db"
    assert tracking_uri() == f"sqlite:///{project / 'results/mlflow/mlflow.db'}"
    out = project / "results/mlflow"
    runs = [
        tracking_cli(project, "init", EXPERIMENT, "--out", str(out / "experiments.json")),
        tracking_cli(project, "sync", str(folder), "--out", str(out / "synced.json")),
        tracking_cli(project, "links"),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert str(project) not in run.stdout
    texts = [(out / name).read_text() for name in ("experiments.json", "synced.json")]
    for text in texts:
        assert json.loads(text)["tracking_uri"] == "sqlite:///results/mlflow/mlflow.db"
    assert all(str(project) not in t.replace(str(folder), "") for t in texts)  # run_dir aside
    assert "(tracking store sqlite:///results/mlflow/mlflow.db)" in runs[2].stdout


def test_the_report_names_the_store_relative_to_the_project(tmp_path, monkeypatch) -> None:
    from pdelab.report.__main__ import main
    from tests.test_golden import COMMON, EXPECTED, GOLDEN

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(EXPECTED / "tables", tmp_path / "tables")
    shutil.copytree(GOLDEN / "cost", tmp_path / "cost")
    main(["report", *COMMON, "--out", str(tmp_path / "REPORT.md")])
    text = (tmp_path / "REPORT.md").read_text()
    assert "logged to MLflow at `sqlite:///results/mlflow/mlflow.db`" in text
    assert str(tmp_path) not in text


# --------------------------------------------------------------------------------------------
# The store's id, read when the workflow parses
# --------------------------------------------------------------------------------------------


def test_the_store_id_is_read_without_mlflow(project) -> None:
    """What the workflow calls when it parses: the database's header, no mlflow import."""
    code = (
        "import sys; from pdelab.tracking.store import planned_id, read_only; "
        "import pdelab.tracking.sync; print(planned_id(), read_only()); "
        "assert 'mlflow' not in sys.modules, 'mlflow imported'"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) > 0  # no store: a new id for the store rule to give it


@pytest.mark.slow
def test_the_store_rule_gives_the_store_its_id(project) -> None:
    first = planned_id()
    assert planned_id() != first  # no store yet: each parse plans a new one
    made = tracking_cli(project, "init", EXPERIMENT, "--store-id", first, "--out", "s.json")
    assert made.returncode == 0, made.stderr
    assert read_id(DB) == int(first) == json.loads(Path("s.json").read_text())["store_id"]
    assert planned_id() == first  # the store there is the one the rule made
    DB.unlink()  # a damaged store, deleted: another id, so the rule runs again
    assert planned_id() != first
    DB.write_bytes(b"not a database")
    assert planned_id() != first
    refused = tracking_cli(project, "init", EXPERIMENT, "--store-id", planned_id())
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "results/mlflow/mlflow.db is not an SQLite database" in refused.stderr
    assert "python -m pdelab.tracking rebuild" in refused.stderr


# --------------------------------------------------------------------------------------------
# Provenance tags
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sync_tags_each_scalar_of_the_records_provenance(live, project) -> None:  # noqa: F811
    provenance = {"code_digest": "ab12", "git_commit": "c0ffee", "git_dirty": True}
    provenance |= {
        "code": {"src/pdelab/training/train.py": "99"}
    }  # not a scalar: stays in run.json
    with_it = copy_run(live[1], project, "baseline", 0, provenance=provenance)
    without = copy_run(live[1], project, "baseline", 1)
    doc = json.loads((without / "run.json").read_text())
    doc.pop("provenance", None)
    (without / "run.json").write_text(json.dumps(doc))
    client = client_for()
    rows = sync([with_it, without], client)
    tags = [client.get_run(r["run_id"]).data.tags for r in rows]
    sync_tags = {"pdelab.current", "pdelab.group", "pdelab.spec_sha256"}  # not provenance
    sync_tags.add("pdelab.display_name")  # the papers' names for the task and variant
    provenance = {k: v for k, v in tags[0].items() if k.startswith("pdelab.")}
    assert {k: v for k, v in provenance.items() if k not in sync_tags} == {
        "pdelab.code_digest": "ab12",
        "pdelab.git_dirty": "true",
    }
    assert not [k for k in tags[1] if k.startswith("pdelab.") and k not in sync_tags]
    assert [r["action"] for r in sync([with_it, without], client)] == ["kept", "kept"]


# --------------------------------------------------------------------------------------------
# A read-only store folder
# --------------------------------------------------------------------------------------------


@pytest.fixture
def read_only_run() -> Iterator[Callable[[Path, list[str]], list[str]]]:
    """command, run with a folder read-only for any user: chmod a-w, and for root (whom
    permission bits do not stop) a read-only bind mount in a private mount namespace; skipped
    where neither works. Undone afterwards."""
    changed: list[Path] = []

    def wrap(folder: Path, command: list[str]) -> list[str]:
        folder = folder.resolve()
        if os.geteuid() != 0:
            folder.chmod(0o555)
            changed.append(folder)
            return command
        probe = ["unshare", "-Urm", "true"]
        if shutil.which("unshare") is None or subprocess.run(probe).returncode != 0:
            pytest.skip("root without user namespaces: no folder is read-only for root")
        script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        return ["unshare", "-Urm", "sh", "-c", script, str(folder), *command]

    yield wrap
    for folder in changed:
        folder.chmod(0o755)


def work_copy(live_work: Path, dest: Path) -> Path:
    """The live fixture's project (params.yaml, prepared data) without its runs or stores."""
    shutil.copytree(live_work / "data", dest / "data")
    shutil.copyfile(live_work / "params.yaml", dest / "params.yaml")
    return dest


@pytest.mark.slow
def test_live_training_goes_on_with_a_read_only_store(live, project, read_only_run) -> None:  # noqa: F811
    work = work_copy(live[0], project)
    made = tracking_cli(work, "init", EXPERIMENT)
    assert made.returncode == 0, made.stderr
    train = [
        sys.executable,
        "-m",
        "pdelab.training.train",
        "--task",
        "listops",
        "--variant",
        "baseline",
    ]
    train += ["--seed", "0", "--out", "out", "--tracking", "live", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        read_only_run(work / "results/mlflow", train),
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the run continues without MLflow logging" in done.stderr
    assert all((work / "out" / f).is_file() for f in ("metrics.parquet", "run.json"))


@pytest.mark.slow
def test_mlflow_commands_name_the_read_only_folder_and_the_fix(
    live,  # noqa: F811
    project,
    read_only_run,
) -> None:
    work = work_copy(live[0], project)
    folder = copy_run(live[1], work, "baseline", 0)
    (work / "results/mlflow").mkdir(parents=True)
    tracking = [sys.executable, "-m", "pdelab.tracking"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    for args in (["init", EXPERIMENT], ["sync", str(folder)], ["rebuild"]):
        done = subprocess.run(
            read_only_run(work / "results/mlflow", [*tracking, *args]),
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1, (args, done.stderr[-3000:])
        assert "MLflow's folder results/mlflow is not writable" in done.stderr, done.stderr
        assert "chmod -R u+w results/mlflow" in done.stderr and "Traceback" not in done.stderr
    assert not (work / "results/mlflow/mlflow.db").exists()


def test_the_workflow_sees_a_read_only_store_folder(project, read_only_run) -> None:
    (project / "results/mlflow").mkdir(parents=True)
    assert read_only() is None
    code = "from pdelab.tracking.store import read_only; print(read_only())"
    done = subprocess.run(
        read_only_run(project / "results/mlflow", [sys.executable, "-c", code]),
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "results/mlflow is read-only", done.stderr
