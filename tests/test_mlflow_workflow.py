"""The workflow and the MLflow store, on a tiny copy of the workflow (tests/test_workflow's):
training waits for no MLflow rule; a store deleted or damaged is noticed when the workflow
parses and rebuilt from the records; `rebuild` leaves it nothing to do; a read-only store
folder leaves MLflow out of the run, naming the fix, and trains and reports as usual."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import sh, tiny_project
from pdelab.tracking.store import read_id
from tests.test_mlflow_store import read_only_run  # noqa: F401 - the fixture, reused
from tests.test_workflow import (
    planned,
    project,  # noqa: F401 - a copy of the session's built tiny tree, reused
)

pytestmark = pytest.mark.slow  # each test runs Snakemake

STORE = "results/mlflow/experiments.json"


def dag_edges(cwd: Path) -> set[tuple[str, str]]:
    """(rule, rule) for each edge of the job graph `snakemake --dag` draws."""
    dot = sh(["snakemake", "--dag"], cwd).stdout
    labels = {n: label.split("\\n")[0] for n, label in re.findall(r'(\d+)\[label = "([^"]+)"', dot)}
    return {(labels[a], labels[b]) for a, b in re.findall(r"(\d+) -> (\d+)", dot)}


def test_training_waits_for_no_mlflow_rule(tmp_path: Path) -> None:
    edges = dag_edges(tiny_project(tmp_path))
    assert ("mlflow_store", "mlflow_sync") in edges and ("train", "mlflow_sync") in edges
    assert {b for a, b in edges if a.startswith("mlflow")} <= {
        "mlflow_sync",
        "mlflow_report",
        "all",
    }


# the store's stamp (pdelab.records.made): its recipe names the store's id, address and project
STORE_STALE = "reason: Updated input files: results/stamps/jobs/mlflow_store/all.json"


def test_a_deleted_or_damaged_store_reruns_the_store_rule(tmp_path: Path) -> None:
    work = tiny_project(tmp_path)
    sh(["snakemake", "--cores", "1", STORE], work)
    db = work / "results/mlflow/mlflow.db"
    made = read_id(db)
    assert made > 0
    only_store = ["snakemake", "-n", "--cores", "1", STORE]
    assert "Nothing to be done" in sh(only_store, work).stdout
    db.unlink()  # a corrupt store, deleted
    assert STORE_STALE in sh(only_store, work).stdout
    db.write_bytes(b"\0damaged\0" * 512)
    assert STORE_STALE in sh(only_store, work).stdout
    db.unlink()
    sh(["snakemake", "--cores", "1", STORE], work)
    assert read_id(db) not in (0, made)
    assert "Nothing to be done" in sh(only_store, work).stdout


# --------------------------------------------------------------------------------------------
# Whole builds (a tiny one: two training runs)
# --------------------------------------------------------------------------------------------


def mlflow_runs(work: Path) -> str:
    return sh([sys.executable, "-m", "pdelab.tracking", "check"], work).stdout


MLFLOW_JOBS = ["all", "mlflow_report", "mlflow_store", "mlflow_sync"]


def test_snakemake_rebuilds_a_deleted_store_from_the_records(project: Path) -> None:  # noqa: F811
    (project / "results/mlflow/mlflow.db").unlink()
    assert sorted(planned(project)) == MLFLOW_JOBS
    sh(["snakemake", "--cores", "2"], project)
    assert "pdelab-listops-smoke: 2/2 runs in MLflow" in mlflow_runs(project)
    assert planned(project) == {}


def test_rebuild_leaves_the_workflow_nothing_to_do(project: Path) -> None:  # noqa: F811
    done = sh([sys.executable, "-m", "pdelab.tracking", "rebuild"], project)
    assert "pdelab-listops-smoke: kept: 0, relabelled: 0, logged: 2, replaced: 0" in done.stdout
    assert planned(project) == {}
    assert "pdelab-listops-smoke: 2/2 runs in MLflow" in mlflow_runs(project)


def test_a_read_only_store_folder_leaves_mlflow_out_and_training_goes_on(
    tmp_path: Path,
    read_only_run: Callable[[Path, list[str]], list[str]],  # noqa: F811
) -> None:
    work = tiny_project(tmp_path)
    (work / "results/mlflow").mkdir(parents=True)
    # cold jobs: a warm server started elsewhere would not see the folder read-only
    env = {**os.environ, "PDELAB_WARM": "0"}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        read_only_run(work / "results/mlflow", ["snakemake", "--cores", "2"]),
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MLflow is left out of this run: MLflow's folder results/mlflow is not writable" in (
        done.stderr
    )
    assert "chmod -R u+w results/mlflow" in done.stderr
    runs = work / "results/runs/smoke/listops"
    assert all(
        (runs / v / "seed0/result.parquet").is_file() for v in ("baseline", "after_embedding")
    )
    assert (work / "results/REPORT.md").is_file()
    assert sorted(planned(work)) == MLFLOW_JOBS  # writable again: MLflow is all that is left


def dry_run(work: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["snakemake", "-n", "--cores", "1", *args],
        cwd=work,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_another_tracking_server_reruns_the_store_rule(tmp_path: Path) -> None:
    """From one tracking server to another (each a store other than the project's): the
    address is the rules' param, so the store rule runs again there."""
    work = tiny_project(tmp_path)
    first = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'first.db'}"}
    done = subprocess.run(
        ["snakemake", "--cores", "1", STORE], cwd=work, env={**os.environ, **first}, timeout=600
    )
    assert done.returncode == 0
    assert "Nothing to be done" in dry_run(work, first, STORE)
    second = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'second.db'}"}
    assert STORE_STALE in dry_run(work, second, STORE)
    assert STORE_STALE in dry_run(work, first | {"PDELAB_MLFLOW_PROJECT": "b"}, STORE)


def test_a_finished_tree_pointed_elsewhere_logs_every_run_there(project: Path) -> None:  # noqa: F811
    """Another store, or another project name on the same store: every MLflow rule runs
    again (the syncs for their own params, not only because the store rule ran), and
    nothing else."""
    elsewhere = {"MLFLOW_TRACKING_URI": f"sqlite:///{project.parent / 'elsewhere.db'}"}
    # the syncs and the report alone (Snakemake names a job's first reason only: with the
    # store rule in the run, "Input files updated by another job")
    only = ["--allowed-rules", "mlflow_sync", "mlflow_report"]
    assert "Nothing to be done" in dry_run(project, {}, *only)
    out = dry_run(project, elsewhere, *only)
    for rule in ("mlflow_sync", "mlflow_report"):
        block = out.split(f"rule {rule}:", 1)[1].split("\nrule ", 1)[0]
        assert f"reason: Updated input files: results/stamps/jobs/{rule}/" in block, out[-3000:]
    for env in (elsewhere, {"PDELAB_MLFLOW_PROJECT": "lab-alice"}):
        out = dry_run(project, env)
        jobs = sorted(set(re.findall(r"^(?:local)?rule (\w+):", out, re.M)))
        assert jobs == MLFLOW_JOBS, out[-3000:]
    out = dry_run(project, {"PDELAB_MLFLOW_PROJECT": "lab-alice"})
    assert "results/mlflow/synced/lab-alice-listops-smoke.json" in out
