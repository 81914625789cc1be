"""A tracking server shared by many writers, as on a cluster: a real ``mlflow server
--serve-artifacts`` on 127.0.0.1 (SQLite backend and artifact store in a temporary folder of
its own). Sixteen concurrent sync processes lose no run and no metric; eight concurrent syncs
of the same runs, each from a folder of its own, leave one run per key, every artifact
readable through the server; the sync backfills a run deleted from MLflow and, run again,
logs nothing new; headless Chromium opens the links of docs/mlflow.md on the runs table, a run
of each task on it.

The run set: the tiny ListOps run of tests/test_tracking's ``live`` fixture, copied under
other (variant, seed) names for the writers, and under each registered task's name for the
UI (records in the real format; what the UI test checks is display, not training)."""

from __future__ import annotations

import html
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, relabel_run
from pdelab.records.run import RECORD_FILES
from pdelab.tracking.log import experiment_name, runs_url
from pdelab.tracking.settle import (
    LEASE_TAG,
)
from pdelab.tracking.sync import (
    active_runs,
    client_for,
    read_record,
    run_problem,
    sync,
)
from tests.test_tracking import live  # noqa: F401 - the module-scoped fixture, reused

pytestmark = pytest.mark.slow
WRITERS = 16
RUNS_PER_WRITER = 2
SAME_WRITERS = 8  # writers of the same runs
SAME_RUNS = 3
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The address of a fresh ``mlflow server`` (its own process group, ended afterwards):
    docs/mlflow.md's command, artifacts stored by the server in a folder only it knows."""
    folder = tmp_path_factory.mktemp("server")
    port = free_port()
    log = (folder / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--serve-artifacts", "--artifacts-destination", str(folder / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mlflow server did not start: {(folder / 'server.log').read_text()}"
                    ) from None
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


def copy_run(source: Path, dest: Path, **spec: Any) -> Path:
    """The source run's records under other spec values (task, variant, seed, data_dir)."""
    return relabel_run(source, dest, **spec)


@pytest.fixture(scope="module")
def writer_runs(live, tmp_path_factory) -> list[list[Path]]:  # noqa: F811
    """Each writer's run folders: distinct (variant, seed) keys of one experiment."""
    root = tmp_path_factory.mktemp("writers")
    return [
        [
            copy_run(live[1], root / f"w{w}" / f"r{r}", variant=f"writer{w}", seed=r)
            for r in range(RUNS_PER_WRITER)
        ]
        for w in range(WRITERS)
    ]


def run_sync(url: str, folders: list[Path], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pdelab.tracking", "sync", *map(str, folders)],
        cwd=cwd,
        env={**os.environ, "MLFLOW_TRACKING_URI": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def missing(client: Any, folders: list[Path]) -> list[str]:
    """What MLflow lacks of these runs: a run, or any metric step (as `check` reports)."""
    problems = []
    exp = client.get_experiment_by_name("pdelab-listops-smoke")
    runs = active_runs(client, exp.experiment_id) if exp else {}
    for folder in folders:
        record = read_record(folder)
        problem = run_problem(client, runs.get(record.key, []), record, folder)
        if problem:
            problems.append(f"{folder}: {problem}")
    return problems


def test_sixteen_concurrent_writers_lose_nothing(server, writer_runs, live) -> None:  # noqa: F811
    procs = [run_sync(server, folders, live[0]) for folders in writer_runs]
    outs = [p.communicate(timeout=540) for p in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip().endswith(
            f"logged: {RUNS_PER_WRITER}, replaced: 0, completed: 0, repaired: 0"
        ), out
    folders = [f for group in writer_runs for f in group]
    client = client_for(server)
    assert missing(client, folders) == []
    exp = client.get_experiment_by_name("pdelab-listops-smoke")
    runs = active_runs(client, exp.experiment_id)
    assert sum(len(v) for v in runs.values()) == WRITERS * RUNS_PER_WRITER
    assert all(len(v) == 1 for v in runs.values())
    run = next(iter(runs.values()))[0]
    [data] = run.inputs.dataset_inputs  # the prepared data as a dataset input, once
    assert data.dataset.name == "listops" and data.dataset.source_type == "dvc"


@pytest.fixture(scope="module")
def same_runs(live, tmp_path_factory) -> list[Path]:  # noqa: F811
    """The runs every one of the eight writers syncs, each from its own copy: no folder is
    shared by two writers, nor by a writer and the server."""
    root = tmp_path_factory.mktemp("same")
    source = [
        copy_run(live[1], root / "source" / f"r{r}", variant="shared", seed=r)
        for r in range(SAME_RUNS)
    ]
    nodes = []
    for w in range(SAME_WRITERS):
        node = root / f"node{w}"
        node.mkdir()
        shutil.copy2(live[0] / "params.yaml", node / "params.yaml")
        for r, run in enumerate(source):
            (node / "runs" / f"r{r}").mkdir(parents=True)
            for name in RECORD_FILES:
                shutil.copy2(run / name, node / "runs" / f"r{r}" / name)
        nodes.append(node)
    return nodes


def test_eight_concurrent_syncs_of_the_same_runs_leave_one_run_per_key(
    server, same_runs, tmp_path
) -> None:
    runs = [f"runs/r{r}" for r in range(SAME_RUNS)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pdelab.tracking", "sync", *runs, "--out", "synced.json"],
            cwd=node,
            env={**os.environ, "MLFLOW_TRACKING_URI": server},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in same_runs
    ]
    outs = [p.communicate(timeout=540) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    client = client_for(server)
    exp = client.get_experiment_by_name("pdelab-listops-smoke")
    assert exp.artifact_location.startswith("mlflow-artifacts:"), exp.artifact_location
    mine = {
        key: found
        for key, found in active_runs(client, exp.experiment_id).items()
        if key[1] == "shared"
    }
    assert sorted(mine) == [("listops", "shared", str(r)) for r in range(SAME_RUNS)]
    assert {key: len(found) for key, found in mine.items()} == dict.fromkeys(mine, 1)
    assert missing(client, [same_runs[0] / run for run in runs]) == []
    for key, [run] in mine.items():
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
        assert run.info.run_name == f"listops/shared/seed{key[2]}"
        assert LEASE_TAG not in run.data.tags  # sealed: the writer's lease is gone
        got = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / key[2])))
        source = same_runs[0] / "runs" / f"r{key[2]}"
        for name in RECORD_FILES:  # the records, byte for byte, through the server
            assert (got / name).read_bytes() == (source / name).read_bytes(), name
        assert sorted(p.name for p in got.iterdir()) == sorted(
            [*RECORD_FILES, "metrics.csv", "result.json"]
        )
    for node in same_runs:  # no writer wrote an artifact to a folder of its own
        assert not (node / "results").exists() and not (node / "mlruns").exists()


def test_sync_backfills_a_deleted_run_and_then_logs_nothing(server, writer_runs, live) -> None:  # noqa: F811
    folders = [f for group in writer_runs for f in group]
    client = client_for(server)
    first = {r["run_dir"]: r for r in sync(folders, client)}  # whatever ran before: in sync
    lost = folders[3]
    client.delete_run(first[str(lost)]["run_id"])  # MLflow loses a run; its records remain
    assert len(missing(client, folders)) == 1
    backfill = sync(folders, client)
    actions = {r["run_dir"]: r["action"] for r in backfill}
    assert actions.pop(str(lost)) == "logged" and set(actions.values()) == {"kept"}
    assert missing(client, folders) == []
    again = sync(folders, client)
    assert {r["action"] for r in again} == {"kept"}
    assert [r["run_id"] for r in again] == [r["run_id"] for r in backfill]


# --------------------------------------------------------------------------------------------
# The UI, as a person browsing it sees it
# --------------------------------------------------------------------------------------------


def page_text(url: str, shot: Path, budget_ms: int = 40000) -> str:
    """The page's visible text once its scripts ran (Chromium's DOM after a virtual-time
    budget), and its screenshot. A fresh browser profile: no stored UI choice helps."""
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000"]
    base += [f"--virtual-time-budget={budget_ms}", f"--user-data-dir={shot.parent / 'profile'}"]
    subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, timeout=240)
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=240)
    text = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", dom.stdout, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)"
)
def test_the_documented_links_open_the_runs_table_of_each_task(
    server,
    live,  # noqa: F811
    params,
    tmp_path,
) -> None:
    tasks = sorted(params["tasks"])
    folders = [
        copy_run(live[1], tmp_path / "runs" / t, task=t, data_dir=f"data/smoke/prepared/{t}")
        for t in tasks
    ]
    client = client_for(server)
    sync(folders, client)
    ids = [client.get_experiment_by_name(experiment_name(t, "smoke")).experiment_id for t in tasks]

    only = "tags.variant = 'baseline'"  # these runs, not the writers' of the other tests
    text = page_text(runs_url(server, ids, only), tmp_path / "runs_table.png")
    assert (tmp_path / "runs_table.png").stat().st_size > 10_000
    assert "Run Name" in text and "Dataset" in text, text[-2000:]  # the runs table's header
    # each task's seed run and its parent (pdelab.tracking.parents): the table shows the
    # parent's row, the seeds nested under it (their Dataset cells show once expanded)
    assert f"{2 * len(tasks)} matching runs" in text, text[-2000:]
    for task in tasks:
        assert f" {task}/baseline " in text, f"no run of {task} on the runs table"


def test_the_mlflow_doc_documents_the_links() -> None:
    doc = (ROOT / "docs" / "mlflow.md").read_text()
    assert "python -m pdelab.tracking links" in doc and "workflowType=machine_learning" in doc


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)"
)
def test_the_runs_table_sorts_by_accuracy(server, live, tmp_path) -> None:  # noqa: F811
    """test_acc is a metric: a column of the runs table, which the link sorts by."""
    folders = [
        copy_run(live[1], tmp_path / "runs" / f"s{s}", variant="after_mlp", seed=s) for s in (7, 8)
    ]
    client = client_for(server)
    sync(folders, client)
    exp = client.get_experiment_by_name(experiment_name("listops", "smoke")).experiment_id
    url = runs_url(server, [exp], "tags.variant = 'after_mlp'", order_by="metrics.`test_acc`")
    assert "orderByKey=metrics.%60test_acc%60" in url and "orderByAsc=false" in url
    text = page_text(url, tmp_path / "sorted.png")
    # the two seeds and their parent, whose row nests them
    assert "3 matching runs" in text and "Sort: test_acc" in text, text[-2000:]
    assert "listops/after_mlp " in text, text[-2000:]
