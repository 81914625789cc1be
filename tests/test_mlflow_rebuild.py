"""`python -m pdelab.tracking rebuild`: a store made afresh from the records alone (the old one
damaged past opening) holds what the workflow's MLflow rules had logged: the same runs, params,
metrics with every epoch, tags, dataset inputs and artifacts; only the run ids MLflow draws,
and the report runs' clock times, differ. It keeps the store's id, so the workflow finds
nothing to do, and removes the old store's artifacts."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdelab.spec.config import load_params
from pdelab.spec.studies import report_groups
from pdelab.tracking.log import report_experiment
from pdelab.tracking.store import DB, read_id
from pdelab.tracking.sync import client_for
from tests.test_mlflow_store import (
    EXPERIMENT,
    copy_run,
    project,  # noqa: F401 - the fixture, reused
    tracking_cli,
    work_copy,
    write_report_files,
)
from tests.test_tracking import live  # noqa: F401 - the module-scoped fixture, reused

pytestmark = pytest.mark.slow  # a tiny training run, two stores and the tracking commands

STORE_ID = "4242"


def store_view(client: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Everything a person browsing the store sees of each run, by (experiment, run name):
    not the run ids MLflow draws, nor the clock times of the report's runs (logged at the
    time, not from records)."""
    view = {}
    for exp in client.search_experiments():
        runs = client.search_runs([exp.experiment_id])
        names = {run.info.run_id: run.info.run_name for run in runs}
        for run in runs:
            run_id = run.info.run_id
            report = exp.name == report_experiment("smoke")
            history = {
                key: sorted(
                    (m.step, None if report else m.timestamp, repr(m.value))
                    for m in client.get_metric_history(run_id, key)
                )
                for key in run.data.metrics
            }
            view[(exp.name, run.info.run_name)] = {
                "status": run.info.status,
                "times": None if report else (run.info.start_time, run.info.end_time),
                "params": run.data.params,
                # a seed's parent by its name: its id is drawn by MLflow
                "tags": run.data.tags | parent_name(run.data.tags, names),
                "metrics": history,
                "artifacts": artifacts(client, run_id),
                "inputs": [
                    (d.dataset.name, d.dataset.digest, d.dataset.source)
                    for d in run.inputs.dataset_inputs
                ],
            }
    return view


def tags_of(view: dict, name: str) -> dict[str, str]:
    return view[(EXPERIMENT, name)]["tags"]


def parent_name(tags: dict[str, str], names: dict[str, str]) -> dict[str, str]:
    parent = tags.get("mlflow.parentRunId")
    return {} if parent is None else {"mlflow.parentRunId": names.get(parent, "?")}


def artifacts(client: Any, run_id: str, path: str | None = None) -> dict[str, str]:
    """Each artifact's path -> sha256 of its bytes, read where the store says it is."""
    root = Path(client.get_run(run_id).info.artifact_uri)
    found = {}
    for item in client.list_artifacts(run_id, path):
        if item.is_dir:
            found |= artifacts(client, run_id, item.path)
        else:
            found[item.path] = hashlib.sha256((root / item.path).read_bytes()).hexdigest()
    return found


def test_rebuild_from_the_records_equals_the_store_the_workflow_built(
    live,  # noqa: F811
    project,  # noqa: F811
) -> None:
    work = work_copy(live[0], project)
    params = load_params(work / "params.yaml")
    study = params["studies"]["positions"]
    study |= {"variants": ["baseline", "after_embedding"], "seeds": [0, 1]}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    provenance = {"code_digest": "ab12", "git_commit": "c0ffee", "git_dirty": False}
    folders = [
        copy_run(live[1], work, variant, seed, provenance=provenance | {"seed": seed})
        for variant in study["variants"]
        for seed in study["seeds"]
    ]
    write_report_files(params, work / "results")
    (work / "results/REPORT.md").write_text("# pdelab report\n")

    mlflow = work / "results/mlflow"  # what the workflow's MLflow rules run
    steps = [
        ["init", EXPERIMENT, "--store-id", STORE_ID, "--out", str(mlflow / "experiments.json")],
        ["sync", *map(str, folders), "--out", str(mlflow / "synced" / f"{EXPERIMENT}.json")],
        ["report", "--out", str(mlflow / "report.json")],
    ]
    for step in steps:
        done = tracking_cli(work, *step)
        assert done.returncode == 0, done.stderr
    shutil.copyfile(DB, work / "built.db")
    built = store_view(client_for(f"sqlite:///{work / 'built.db'}"))
    parents = len(study["variants"])  # one per variant: its seeds' aggregates
    assert len(built) == len(folders) + parents + len(report_groups(params))
    parent = built[(EXPERIMENT, "listops/after_embedding")]
    assert parent["tags"]["pdelab.parent"] == "true" and "test_acc_mean" in parent["metrics"]
    assert tags_of(built, "listops/after_embedding/seed1")["mlflow.parentRunId"] == (
        "listops/after_embedding"
    )
    tags = built[(EXPERIMENT, "listops/after_embedding/seed1")]["tags"]
    assert tags["pdelab.code_digest"] == "ab12" and tags["pdelab.git_dirty"] == "false"
    old_artifacts = set((mlflow / "artifacts").glob("*/*"))

    DB.write_bytes(b"\0damaged\0" * 4096)  # past opening: rebuilt from the records alone
    done = tracking_cli(work, "rebuild")
    assert done.returncode == 0, done.stderr
    assert f"{EXPERIMENT}: kept: 0, relabelled: 0, logged: 4, replaced: 0" in done.stdout
    assert "MLflow store rebuilt from the records: sqlite:///results/mlflow/mlflow.db" in (
        done.stdout
    )

    client = client_for()  # the rebuilt database: not opened in this process before
    assert store_view(client) == built
    assert read_id(DB) == int(STORE_ID)  # the workflow's param: nothing to rerun
    assert json.loads((mlflow / "experiments.json").read_text())["store_id"] == int(STORE_ID)
    synced = json.loads((mlflow / "synced" / f"{EXPERIMENT}.json").read_text())["runs"]
    exp = client.get_experiment_by_name(EXPERIMENT)
    assert {r["run_id"] for r in synced} == {
        r.info.run_id for r in client.search_runs([exp.experiment_id], "tags.seed != ''")
    }
    now = set((mlflow / "artifacts").glob("*/*"))
    assert not now & old_artifacts  # the damaged store's artifacts are gone
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert {p.name for p in now} <= {r.info.run_id for r in client.search_runs(experiments)}
    assert {p.name for p in now} >= {r["run_id"] for r in synced}
