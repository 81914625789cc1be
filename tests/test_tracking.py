"""MLflow tracking: live and batch logging give the same record; the sync is idempotent,
replaces changed runs and repairs in place a value edited in the store; the check names what
MLflow misses or holds otherwise than the records; the profile's tracking switch."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import ANY

import jsonschema
import pandas as pd
import pytest
import yaml

from conftest import ROOT
from pdelab.records.run import now_ms, run_dir
from pdelab.spec.config import ConfigError, load_params, resolve, tracking_mode
from pdelab.spec.run_sheet import RunKey, same_runs, trained_runs, validate
from pdelab.spec.studies import report_groups, study
from pdelab.tracking.log import (
    DIGEST_CHARS,
    batch_calls,
    create_experiments,
    experiment_name,
    init_store,
    log_opening,
    log_record,
    report_experiment,
    run_name,
    runs_url,
    study_filter,
)
from pdelab.tracking.settle import (
    LEASE_MS,
    LEASE_TAG,
    busy,
)
from pdelab.tracking.sync import (
    active_runs,
    check,
    client_for,
    log_report,
    memberships,
    metric_histories,
    read_record,
    run_problem,
    sync,
)
from pdelab.training.train import train

KEY = ("listops", "baseline", "0")
# In the fast tier: the live run against its batch sync, the final values, the dataset input
# and the live job's run kept; the other syncs (each a fresh store: seconds) are marked slow.


@pytest.fixture(scope="module")
def live(tiny_workdir, tmp_path_factory) -> tuple[Path, Path, str]:
    """(work folder, run folder, MLflow run id): one tiny run trained with live tracking, its
    records where the workflow keeps them."""
    work = tiny_workdir(tmp_path_factory.mktemp("tracking"))
    params = load_params(work / "params.yaml")
    positions = params["studies"]["positions"]
    only = {"tasks": ["listops"], "variants": ["baseline"], "seeds": [0]}
    params["studies"] = {"positions": positions | only}  # the run sheet: this one run
    for profile in params["profiles"].values():
        profile.pop("studies", None)  # what each profile runs of the studies dropped here
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    folder = run_dir("smoke", "listops", "baseline", 0, work / "runs")
    run = resolve(params, "listops", "baseline", 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'live.db'}")
        init_store(["pdelab-listops-smoke"])
        train(replace(run, train=replace(run.train, epochs=2)), folder, progress=False)
    run_id = pd.read_parquet(folder / "result.parquet").iloc[0]["mlflow_run_id"]
    assert run_id
    return work, folder, run_id


@pytest.fixture
def store(live, monkeypatch, tmp_path) -> Any:
    """A client of a fresh, empty store; the test runs in the work folder."""
    monkeypatch.chdir(live[0])
    return client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")


def view(client: Any, run_id: str) -> dict[str, Any]:
    """What a person browsing MLflow sees of a run (NaN compared by its repr)."""
    run = client.get_run(run_id)
    history = {
        key: sorted(
            (m.step, m.timestamp, repr(m.value)) for m in client.get_metric_history(run_id, key)
        )
        for key in run.data.metrics
    }
    return {
        "experiment": client.get_experiment(run.info.experiment_id).name,
        "name": run.info.run_name,
        "status": run.info.status,
        "times": (run.info.start_time, run.info.end_time),
        "params": run.data.params,
        "tags": run.data.tags,
        "metrics": history,
        "artifacts": sorted(a.path for a in client.list_artifacts(run_id)),
        "inputs": [
            (d.dataset.name, d.dataset.digest, d.dataset.source_type, d.dataset.source)
            for d in run.inputs.dataset_inputs
        ],
    }


def test_live_and_batch_logging_give_the_same_run(live, store) -> None:
    work, folder, live_id = live
    [row] = sync([folder], store)
    live_view = view(client_for(f"sqlite:///{work / 'live.db'}"), live_id)
    batch_view = view(store, row["run_id"])
    synced = {"pdelab.current": "true", "mlflow.parentRunId": ANY}  # set by a sync, not the run
    assert {k: batch_view["tags"].pop(k) for k in synced} == synced
    assert batch_view == live_view
    assert set(live_view["tags"]) >= {"task", "variant", "seed", "profile", "git_commit"}
    assert live_view["tags"]["pdelab.display_name"] == "ListOps: Transformer"  # the papers' names
    assert live_view["metrics"]["val_acc"][1][0] == 2  # step = epoch
    assert live_view["artifacts"] == [
        "metrics.csv",
        "metrics.parquet",
        "result.json",
        "result.parquet",
        "run.json",
    ]
    assert live_view["status"] == "FINISHED" and live_view["name"] == "listops/baseline/seed0"


def test_counts_are_params_and_the_records_are_readable(live, store, tmp_path) -> None:
    """Browsing: each value once (no final_* param beside its metric), counts such as the
    parameters as params, the seed an integer param, and each Parquet record has a copy the
    UI shows."""
    [row] = sync([live[1]], store)
    run = store.get_run(row["run_id"])
    result = pd.read_parquet(live[1] / "result.parquet").iloc[0]
    assert not [k for k in (*run.data.metrics, *run.data.params) if k.startswith("final_")]
    assert run.data.params["parameters"] == str(result["parameters"])
    assert "parameters" not in run.data.metrics and run.data.params["seed"] == "0"
    assert "pdelab.git_commit" not in run.data.tags  # the commit is tagged once: git_commit
    got = Path(store.download_artifacts(row["run_id"], "", str(tmp_path)))
    metrics = pd.read_csv(got / "metrics.csv")
    expected = pd.read_parquet(live[1] / "metrics.parquet")
    assert list(metrics.columns) == list(expected.columns) and len(metrics) == 2
    assert metrics["val_acc"].tolist() == expected["val_acc"].tolist()
    doc = json.loads((got / "result.json").read_text())  # strict JSON: NaN written as null
    assert doc["task"] == "listops" and doc["test_acc"] == result["test_acc"]
    assert doc["mlflow_run_id"] == live[2] and doc["max_leak"] is None


def test_final_values_are_metrics_the_runs_table_sorts_by(live, store) -> None:
    """Browsing: each final value is a metric named as in result.parquet (a column of the runs
    table that sorts and filters); a value the task kind lacks (a classifier's perplexity)
    is neither a metric nor a param, and no epoch logs it."""
    [row] = sync([live[1]], store)
    run = store.get_run(row["run_id"])
    result = pd.read_parquet(live[1] / "result.parquet").iloc[0]
    assert run.data.metrics["test_acc"] == result["test_acc"]
    assert run.data.metrics["epochs_run"] == 2
    assert math.isnan(result["test_ppl"])
    assert not {"test_ppl", "val_ppl", "max_leak"} & set(run.data.metrics)
    assert not {"test_ppl", "max_leak"} & set(run.data.params)
    [found] = store.search_runs(
        [run.info.experiment_id], "metrics.test_acc > 0", order_by=["metrics.test_acc DESC"]
    )
    assert found.info.run_id == row["run_id"]


def test_a_runs_duration_is_its_training_time(live, store) -> None:
    """Start and end are run.json's training stamps, not the time of the sync."""
    [row] = sync([live[1]], store)
    run = store.get_run(row["run_id"])
    stamps = json.loads((live[1] / "run.json").read_text())["tracking"]
    assert (run.info.start_time, run.info.end_time) == (stamps["start_ms"], stamps["end_ms"])


@pytest.mark.slow
def test_a_run_an_older_version_logged_is_brought_up_to_date(live, store) -> None:
    """A run timed by its sync and holding a NaN perplexity (what an older version logged) is
    logged anew by the next sync (MLflow can neither move a run's start nor delete a metric),
    the old one kept with `pdelab.current` = false; a run lacking only the final metrics gets
    them in place."""
    from mlflow.entities import Metric

    record = read_record(live[1])
    exp_id = init_store([record.opening.experiment], store)[record.opening.experiment]
    old = replace(record, opening=replace(record.opening, start_ms=now_ms()))
    old_id = log_record(store, exp_id, old)
    store.log_batch(old_id, metrics=[Metric("val_ppl", math.nan, now_ms(), 1)])
    [row] = sync([live[1]], store)
    assert row["action"] == "replaced" and row["run_id"] != old_id
    kept = store.get_run(old_id)  # kept as history, never deleted
    assert kept.info.lifecycle_stage == "active" and kept.data.tags["pdelab.current"] == "false"
    store.delete_run(old_id)  # out of the way of what follows
    run = store.get_run(row["run_id"])
    assert "val_ppl" not in run.data.metrics and run.info.start_time == record.opening.start_ms
    assert sync([live[1]], store)[0]["action"] == "kept"
    bare = replace(record, closing=replace(record.closing, metrics={}))
    store.delete_run(row["run_id"])
    bare_id = log_record(store, exp_id, bare)
    [row] = sync([live[1]], store)
    assert (row["run_id"], row["action"]) == (bare_id, "relabelled")
    assert store.get_run(bare_id).data.metrics["test_acc"] == record.closing.metrics["test_acc"]


@pytest.mark.slow
def test_a_rerun_keeps_runs_of_the_same_records(live, store) -> None:
    [first] = sync([live[1]], store)
    [again] = sync([live[1]], store)
    assert (first["action"], again["action"]) == ("logged", "kept")
    assert again["run_id"] == first["run_id"]


@pytest.mark.slow
def test_changed_records_get_a_new_run_and_the_old_one_is_kept(live, store, tmp_path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("metrics.parquet", "result.parquet", "run.json"):
        (folder / name).write_bytes((live[1] / name).read_bytes())
    [first] = sync([folder], store)
    record = json.loads((folder / "run.json").read_text())
    record["tracking"]["end_ms"] += 1  # retrained: other records, same (task, variant, seed)
    (folder / "run.json").write_text(json.dumps(record))
    [second] = sync([folder], store)
    assert second["action"] == "replaced" and second["run_id"] != first["run_id"]
    exp = store.get_experiment_by_name("pdelab-listops-smoke")
    runs = {r.info.run_id: r for r in active_runs(store, exp.experiment_id)[KEY]}
    assert sorted(runs) == sorted([first["run_id"], second["run_id"]])  # none deleted
    assert runs[first["run_id"]].data.tags["pdelab.current"] == "false"
    assert runs[second["run_id"]].data.tags["pdelab.current"] == "true"


@pytest.mark.slow
def test_a_run_cut_short_is_logged_again(live, store) -> None:
    record = read_record(live[1])
    exp_id = init_store([record.opening.experiment], store)[record.opening.experiment]
    dead = {LEASE_TAG: f"{socket.gethostname()} {dead_pid()} {now_ms()}"}
    opening = replace(record.opening, tags=record.opening.tags | dead)
    partial = log_opening(store, exp_id, opening)  # a sync killed after creating it
    [row] = sync([live[1]], store)
    assert row["action"] == "replaced"
    assert [r.info.run_id for r in active_runs(store, exp_id)[KEY]] == [row["run_id"]]
    assert store.get_run(partial).info.lifecycle_stage == "deleted"


@pytest.mark.slow
def test_check_names_each_run_mlflow_misses(live, store) -> None:
    work, folder, _ = live
    params = load_params(work / "params.yaml")
    problems, _ = check(params, "smoke", work / "runs", store)
    assert len(problems) == 1 and "pdelab-listops-smoke: baseline seed 0" in problems[0]
    [row] = sync([folder], store)
    problems, summary = check(params, "smoke", work / "runs", store)
    assert problems == [] and summary == ["pdelab-listops-smoke: 1/1 runs in MLflow"]

    store.delete_run(row["run_id"])  # a complete run missing an epoch instead
    record = read_record(folder)
    exp_id = store.get_experiment_by_name("pdelab-listops-smoke").experiment_id
    log_record(store, exp_id, replace(record, epochs=record.epochs[:1]))
    problems, _ = check(params, "smoke", work / "runs", store)
    want = record.epochs[1].metrics["val_acc"]
    assert (
        len(problems) == 1
        and f"metric val_acc at step 2: MLflow absent, records {want!r}" in (problems[0])
    )


def sql(client: Any, statement: str, *args: Any) -> None:
    """Edit the client's SQLite store behind MLflow's back."""
    import sqlite3

    db = client.tracking_uri.removeprefix("sqlite:///")
    with sqlite3.connect(db) as con:
        assert con.execute(statement, args).rowcount == 1


PARAM = "parameters"  # the param an edit changes


def edit_final_metric_at_a_later_step(store: Any, run_id: str, record: Any) -> tuple[str, str]:
    store.log_metric(run_id, "test_acc", 0.999, step=record.closing.step + 1)
    return "metric test_acc", "MLflow 0.999"


def edit_final_metric_in_sql(store: Any, run_id: str, record: Any) -> tuple[str, str]:
    """The history's row only: the runs table's latest value still is the records'."""
    sql(store, "UPDATE metrics SET value = 0.999 WHERE run_uuid = ? AND key = 'test_acc'", run_id)
    return "metric test_acc", "MLflow 0.999"


def edit_epoch_metric_in_sql(store: Any, run_id: str, record: Any) -> tuple[str, str]:
    sql(
        store,
        "UPDATE metrics SET value = 0.999 WHERE run_uuid = ? AND key = 'val_acc' AND step = 1",
        run_id,
    )
    return "metric val_acc at step 1", "MLflow 0.999"


def edit_param_in_sql(store: Any, run_id: str, record: Any) -> tuple[str, str]:
    sql(store, "UPDATE params SET value = '0.999' WHERE run_uuid = ? AND key = ?", run_id, PARAM)
    return f"param {PARAM}", "MLflow '0.999'"


def edit_tag(store: Any, run_id: str, record: Any) -> tuple[str, str]:
    store.set_tag(run_id, "data_hash", "edited")
    return "tag data_hash", "MLflow 'edited'"


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit",
    [
        edit_final_metric_at_a_later_step,
        edit_final_metric_in_sql,
        edit_epoch_metric_in_sql,
        edit_param_in_sql,
        edit_tag,
    ],
)
def test_a_value_edited_in_the_store_is_caught_and_repaired_in_place(live, store, edit) -> None:
    """MLflow is a view of the records, checked value by value: an edited value fails the
    check, which names the run, the key, both values and the fix; the next sync logs the
    records' value again into the same run (none deleted), and the check passes."""
    from mlflow.entities import ViewType

    work, folder, _ = live
    params = load_params(work / "params.yaml")
    [row] = sync([folder], store)
    run_id, record = row["run_id"], read_record(folder)
    assert check(params, "smoke", work / "runs", store)[0] == []
    where, edited = edit(store, run_id, record)

    problems, summary = check(params, "smoke", work / "runs", store)
    assert summary == ["pdelab-listops-smoke: 0/1 runs in MLflow"]
    [problem] = problems
    assert problem.startswith(f"pdelab-listops-smoke: baseline seed 0: MLflow run {run_id} ")
    assert f"{where}: {edited}, records " in problem
    assert f"`python -m pdelab.tracking sync {folder}`" in problem

    [again] = sync([folder], store)
    assert (again["run_id"], again["action"]) == (run_id, "repaired")
    exp_id = store.get_run(run_id).info.experiment_id
    everything = store.search_runs([exp_id], "tags.seed != ''", run_view_type=ViewType.ALL)
    assert [(r.info.run_id, r.info.lifecycle_stage) for r in everything] == [(run_id, "active")]
    assert check(params, "smoke", work / "runs", store) == (
        [],
        ["pdelab-listops-smoke: 1/1 runs in MLflow"],
    )
    run = store.get_run(run_id)
    assert run.data.metrics["test_acc"] == record.closing.metrics["test_acc"]
    assert run.data.tags["data_hash"] == record.opening.tags["data_hash"]
    if edit is edit_param_in_sql:  # MLflow never overwrites a param: the records' value tagged
        assert run.data.params[PARAM] == "0.999"
        assert run.data.tags[f"records_param.{PARAM}"] == record.closing.params[PARAM]
    assert sync([folder], store)[0]["action"] == "kept"


def test_metric_histories_read_every_value_of_every_run(live, store) -> None:
    """The check's bulk read gives what MLflow's per-metric history gives, for each run."""
    first = sync([live[1]], store)[0]["run_id"]
    exp_id = store.get_run(first).info.experiment_id
    second = log_record(store, exp_id, read_record(live[1]))
    store.log_metric(second, "val_acc", 0.5, step=7)
    runs = [store.get_run(first), store.get_run(second)]
    got = metric_histories(store, runs, ["not_logged"])
    for run in runs:
        run_id = run.info.run_id
        assert set(got[run_id]) == {*run.data.metrics, "not_logged"}
        assert got[run_id]["not_logged"] == []
        for key in run.data.metrics:
            want = store.get_metric_history(run_id, key)
            assert sorted(map(repr, got[run_id][key])) == sorted(map(repr, want))
    assert max(m.step for m in got[second]["val_acc"]) == 7


@pytest.mark.slow
def test_sync_and_check_commands(live, tmp_path) -> None:
    work, folder, _ = live
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'cli.db'}"}
    out = tmp_path / "synced" / "pdelab-listops-smoke.json"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pdelab.tracking", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    missing = cli("check", "--runs", "runs")
    assert missing.returncode == 1 and "baseline seed 0" in missing.stderr
    synced = cli("sync", str(folder), "--out", str(out))
    assert synced.returncode == 0, synced.stderr
    [row] = json.loads(out.read_text())["runs"]
    assert (row["task"], row["variant"], row["seed"]) == ("listops", "baseline", 0)
    assert client_for(env["MLFLOW_TRACKING_URI"]).get_run(row["run_id"]).info.status == "FINISHED"
    complete = cli("check", "--runs", "runs")
    assert complete.returncode == 0, complete.stderr
    assert "pdelab-listops-smoke: 1/1 runs in MLflow" in complete.stdout


def test_read_record_without_stamps_uses_the_files_time(live, tmp_path) -> None:
    """Records written before run.json kept wall-clock stamps still sync."""
    for name in ("metrics.parquet", "result.parquet"):
        (tmp_path / name).write_bytes((live[1] / name).read_bytes())
    record = json.loads((live[1] / "run.json").read_text())
    del record["tracking"]
    (tmp_path / "run.json").write_text(json.dumps(record))
    mtime = int((tmp_path / "metrics.parquet").stat().st_mtime * 1000)
    got = read_record(tmp_path)
    assert {e.stamp_ms for e in got.epochs} == {mtime} and got.opening.start_ms == mtime
    assert got.opening.tags["git_commit"] == "unknown"
    assert not math.isnan(got.closing.metrics["test_acc"])


def test_tracking_is_a_profile_switch(params) -> None:
    assert tracking_mode(params, "smoke") == "batch" and tracking_mode(params, "paper") == "live"
    bare = {"profile": "p", "profiles": {"p": {"device": "cpu", "seeds": [0]}}}
    assert tracking_mode(bare) == "live"
    bare["profiles"]["p"]["tracking"] = "later"
    with pytest.raises(ConfigError, match=r"profiles\.p\.tracking: unknown name 'later'"):
        tracking_mode(bare)
    schema = yaml.safe_load((ROOT / "workflow/schemas/params.schema.yaml").read_text())
    profile = schema["properties"]["profiles"]["additionalProperties"]
    for mode in ("live", "batch"):
        jsonschema.validate({"device": "cpu", "seeds": [0], "tracking": mode}, profile)
    with pytest.raises(jsonschema.ValidationError, match="later"):
        jsonschema.validate({"device": "cpu", "seeds": [0], "tracking": "later"}, profile)


def test_each_run_logs_its_prepared_data_as_a_dataset_input(live, store) -> None:
    [row] = sync([live[1]], store)
    [(name, digest, kind, source)] = view(store, row["run_id"])["inputs"]
    data_hash = store.get_run(row["run_id"]).data.tags["data_hash"]
    assert (name, kind) == ("listops", "dvc") and digest == data_hash[:DIGEST_CHARS]
    assert json.loads(source) == {
        "uri": "data/smoke/prepared/listops",
        "dvc_stage": "prepare@listops",
        "content_hash": data_hash,
    }


def test_memberships_place_every_run_of_each_study(params) -> None:
    """Every trained run is in a study, and each study's runs carry it: a run shared by
    studies carries each, and a variant another repeats counts for the trained run."""
    specs = validate(params)
    studies = memberships(params, specs=specs)
    trained = {(s.task, s.variant, str(s.seed)) for s in trained_runs(params)}
    assert set(studies) == trained
    same = same_runs(specs)
    for name in params["studies"]:
        for key in study(params, name).runs:
            run = same.get(key, key)
            assert isinstance(run, RunKey)
            assert name in studies[(run.task, run.variant, str(run.seed))], (name, key)
    assert any(len(names) > 1 for names in studies.values())  # the studies share runs


@pytest.mark.slow
def test_sync_tags_each_run_with_its_studies_and_moves_them(live, store) -> None:
    exp = "pdelab-listops-smoke"
    [first] = sync([live[1]], store, {KEY: ["positions", "seeds"]})
    tags = store.get_run(first["run_id"]).data.tags
    assert tags["studies"] == "positions,seeds"
    assert tags["study.positions"] == tags["study.seeds"] == "1"
    exp_id = store.get_experiment_by_name(exp).experiment_id
    for name, found in (("seeds", 1), ("cost", 0), ("position", 0)):
        where = f"{study_filter(name)} and tags.seed != ''"  # the run, not its parent
        assert len(store.search_runs([exp_id], where)) == found

    [moved] = sync([live[1]], store, {KEY: ["seeds", "cost"]})  # params.yaml changed
    assert (moved["action"], moved["run_id"]) == ("relabelled", first["run_id"])
    tags = store.get_run(first["run_id"]).data.tags
    assert "study.positions" not in tags and tags["studies"] == "cost,seeds"
    [again] = sync([live[1]], store, {KEY: ["seeds", "cost"]})
    assert again["action"] == "kept"


@pytest.mark.slow
def test_each_study_tables_and_figures_are_logged_once(live, store, tmp_path) -> None:
    params = load_params(live[0] / "params.yaml")
    groups = report_groups(params)
    assert [g.study for g in groups if g.study] == list(params["studies"])
    with pytest.raises(FileNotFoundError, match="not built yet"):
        log_report(params, "smoke", tmp_path, store)
    for group in groups:
        for f in group.files:
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f).write_bytes(f"{group.name} {f}".encode())
    first = log_report(params, "smoke", tmp_path, store)
    assert [r["action"] for r in first] == ["logged"] * len(groups)
    run = store.get_run(first[0]["run_id"])
    assert run.data.tags["study.positions"] == "1" and run.info.status == "FINISHED"
    # the study's saved view: the filter that shows its runs, as a tag and in the run's note
    assert run.data.tags["pdelab.view"] == study_filter("positions")
    assert study_filter("positions") in run.data.tags["mlflow.note.content"]
    logged = {
        a.path for d in ("tables", "figures") for a in store.list_artifacts(run.info.run_id, d)
    }
    assert logged == set(groups[0].files)
    assert {r["action"] for r in log_report(params, "smoke", tmp_path, store)} == {"kept"}
    (tmp_path / groups[0].files[0]).write_text("rebuilt")
    again = log_report(params, "smoke", tmp_path, store)
    assert [r["action"] for r in again] == ["replaced"] + ["kept"] * (len(groups) - 1)
    exp_id = store.get_experiment_by_name("pdelab-report-smoke").experiment_id
    assert len(store.search_runs([exp_id], study_filter("positions"))) == 1


def test_links_open_the_runs_table() -> None:
    one = runs_url("http://h:5000/", ["7"], study_filter("seeds"))
    assert one.startswith("http://h:5000/#/experiments/7/runs?workflowType=machine_learning&")
    assert "searchFilter=tags.%60study.seeds%60+%3D+%271%27" in one
    many = runs_url("http://h:5000", ["7", "12"])
    assert many.startswith("http://h:5000/#/compare-experiments/s?experiments=")
    assert "%5B%2212%22%2C+%227%22%5D" in many and "workflowType=machine_learning" in many


class WithoutInputs:
    """A client as an older version of this package used it: it logged no dataset input."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def log_inputs(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.mark.slow
def test_a_run_logged_without_its_dataset_input_gets_it(live, store) -> None:
    [old] = sync([live[1]], WithoutInputs(store))
    assert store.get_run(old["run_id"]).inputs.dataset_inputs == []
    [now] = sync([live[1]], store)
    assert (now["action"], now["run_id"]) == ("relabelled", old["run_id"])
    [data] = store.get_run(old["run_id"]).inputs.dataset_inputs
    assert data.dataset.name == "listops"
    assert sync([live[1]], store)[0]["action"] == "kept"


@pytest.mark.parametrize(("n_params", "n_metrics"), [(0, 0), (3, 40), (100, 900), (250, 2500)])
def test_batch_calls_keep_every_entity_within_log_batch_limits(n_params, n_metrics) -> None:
    params, metrics, tags = list(range(n_params)), list(range(n_metrics)), ["status"]
    calls = list(batch_calls(params, metrics, tags))
    for call in calls:
        assert len(call["params"]) <= 100 and len(call["tags"]) <= 100
        assert sum(len(v) for v in call.values()) <= 1000
    assert [p for c in calls for p in c["params"]] == params
    assert [m for c in calls for m in c["metrics"]] == metrics
    assert [t for c in calls for t in c["tags"]] == tags


# --------------------------------------------------------------------------------------------
# Names, and the run a key keeps
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_project_name_prefixes_every_experiment(monkeypatch, live, tmp_path) -> None:
    monkeypatch.delenv("PDELAB_MLFLOW_PROJECT", raising=False)
    assert experiment_name("listops", "smoke") == "pdelab-listops-smoke"
    assert report_experiment("paper") == "pdelab-report-paper"
    assert run_name("listops", "baseline", 3) == "listops/baseline/seed3"
    monkeypatch.setenv("PDELAB_MLFLOW_PROJECT", "lab-alice")
    assert experiment_name("listops", "smoke") == "lab-alice-listops-smoke"
    assert report_experiment("smoke") == "lab-alice-report-smoke"
    assert read_record(live[1]).opening.experiment == "lab-alice-listops-smoke"
    monkeypatch.setenv("PDELAB_MLFLOW_PROJECT", "my lab/1")
    with pytest.raises(ValueError, match=r"PDELAB_MLFLOW_PROJECT='my lab/1' is not a project"):
        experiment_name("listops", "smoke")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'cli.db'}"}
    done = subprocess.run(
        [sys.executable, "-m", "pdelab.tracking", "sync", str(live[1])],
        cwd=live[0],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "export PDELAB_MLFLOW_PROJECT=lab-alice" in done.stderr


def test_a_server_stores_the_artifacts_itself(monkeypatch) -> None:
    """Experiments made on a tracking server name no artifact location (the server's
    --serve-artifacts store takes them); any other store gets the project's folder."""

    class Recorder:
        def __init__(self, uri: str) -> None:
            self.tracking_uri, self.made = uri, {}

        def get_experiment_by_name(self, name: str) -> Any:
            return self.made.get(name)

        def create_experiment(self, name: str, artifact_location: str | None, tags: Any) -> None:
            self.made[name] = SimpleNamespace(experiment_id="1", location=artifact_location)

    server = Recorder("http://127.0.0.1:5000")
    create_experiments(server, ["pdelab-listops-smoke"])
    assert server.made["pdelab-listops-smoke"].location is None
    database = Recorder("postgresql://db/mlflow")
    create_experiments(database, ["pdelab-listops-smoke"])
    location = database.made["pdelab-listops-smoke"].location
    assert location.startswith("file:") and location.endswith(
        "results/mlflow/artifacts/pdelab-listops-smoke"
    )


@pytest.fixture
def live_store(live, monkeypatch, tmp_path) -> Any:
    """A client of a copy of the store the live run was logged to."""
    monkeypatch.chdir(live[0])
    shutil.copyfile(live[0] / "live.db", tmp_path / "live.db")
    return client_for(f"sqlite:///{tmp_path / 'live.db'}")


def test_a_sync_keeps_the_run_a_live_job_logged(live, live_store) -> None:
    """The run id in result.parquet names an active run after any sync: copies a sync logged
    meanwhile go, a retrained run's older run is kept (not current), the live one stays."""
    _, folder, live_id = live
    record = read_record(folder)
    assert record.live_id == live_id
    exp_id = live_store.get_experiment_by_name(record.opening.experiment).experiment_id
    other = replace(record.closing, tags=record.closing.tags | {"records_sha256": "0" * 64})
    older = log_record(live_store, exp_id, replace(record, closing=other))
    copies = [log_record(live_store, exp_id, record) for _ in range(3)]  # some sort first
    [row] = sync([folder], live_store)
    assert row["run_id"] == live_id and row["action"] in ("kept", "relabelled")
    assert sorted(r.info.run_id for r in active_runs(live_store, exp_id)[KEY]) == sorted(
        [live_id, older]
    )
    assert live_store.get_run(older).data.tags["pdelab.current"] == "false"
    assert live_store.get_run(live_id).data.tags["pdelab.current"] == "true"
    for gone in copies:
        assert live_store.get_run(gone).info.lifecycle_stage == "deleted"


def test_a_live_run_cut_short_is_completed_in_place(live, live_store) -> None:
    _, folder, live_id = live
    live_store.delete_tag(live_id, "records_sha256")  # its finish failed: never sealed
    live_store.update_run(live_id, status="RUNNING")
    [row] = sync([folder], live_store)
    assert (row["run_id"], row["action"]) == (live_id, "completed")
    run = live_store.get_run(live_id)
    assert run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"
    assert run.data.tags["records_sha256"] == read_record(folder).closing.records_sha256
    exp_id = run.info.experiment_id
    assert (
        run_problem(live_store, active_runs(live_store, exp_id)[KEY], read_record(folder), folder)
        is None
    )
    assert sync([folder], live_store)[0]["action"] == "kept"


def dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


@pytest.mark.slow
def test_a_run_another_sync_is_logging_is_left_to_it(live, store) -> None:
    """A run with a fresh lease of a live process (another sync, mid-way) is not deleted;
    once that process is gone, or its lease is old, the next sync deletes it."""
    record = read_record(live[1])
    exp_id = init_store([record.opening.experiment], store)[record.opening.experiment]
    host = socket.gethostname()
    held = {LEASE_TAG: f"{host} {os.getppid()} {now_ms()}"}
    partial = log_opening(store, exp_id, replace(record.opening, tags=record.opening.tags | held))
    [row] = sync([live[1]], store)
    assert row["action"] == "logged"  # nothing to replace: the other run is being logged
    assert len(active_runs(store, exp_id)[KEY]) == 2
    store.set_tag(partial, LEASE_TAG, f"{host} {dead_pid()} {now_ms()}")  # its sync died
    [again] = sync([live[1]], store)
    assert (again["action"], again["run_id"]) == ("kept", row["run_id"])
    assert [r.info.run_id for r in active_runs(store, exp_id)[KEY]] == [row["run_id"]]


@pytest.mark.slow
def test_a_retry_of_this_syncs_own_attempt_replaces_nothing(live, store, monkeypatch) -> None:
    """An attempt cut short (a server error after the run was created) is retried: the run it
    left is deleted and the key holds the retry's run, counted as logged, not replaced."""
    import pdelab.tracking.settle as settle_module
    import pdelab.tracking.sync as sync_module

    record = read_record(live[1])
    exp_id = init_store([record.opening.experiment], store)[record.opening.experiment]
    calls, real_log = [], sync_module.log_record

    def cut_short_once(client: Any, *args: Any, **kwargs: Any) -> str:
        run_id = real_log(client, *args, **kwargs)
        calls.append(run_id)
        if len(calls) == 1:  # the run is logged, then the connection drops before the seal
            client.delete_tag(run_id, "records_sha256")
            raise ConnectionError("the server went away")
        return run_id

    monkeypatch.setattr(sync_module, "log_record", cut_short_once)
    monkeypatch.setattr(settle_module.time, "sleep", lambda s: None)
    [row] = sync([live[1]], store)
    assert len(calls) == 2 and row["run_id"] == calls[1]
    assert row["action"] == "logged"
    assert [r.info.run_id for r in active_runs(store, exp_id)[KEY]] == [calls[1]]
    assert store.get_run(calls[0]).info.lifecycle_stage == "deleted"


def test_busy_means_an_unsealed_run_with_a_live_lease() -> None:
    def run(**tags: str) -> Any:
        return SimpleNamespace(data=SimpleNamespace(tags=tags))

    now, host = now_ms(), socket.gethostname()
    assert busy(run(sync_lease=f"elsewhere 1 {now}"), "records_sha256")
    assert not busy(run(sync_lease=f"elsewhere 1 {now - LEASE_MS}"), "records_sha256")
    assert not busy(run(sync_lease=f"elsewhere 1 {now}", records_sha256="a"), "records_sha256")
    assert busy(run(sync_lease=f"{host} {os.getppid()} {now}"), "records_sha256")
    assert not busy(run(sync_lease=f"{host} {os.getpid()} {now}"), "records_sha256")  # mine
    assert not busy(run(sync_lease=f"{host} {dead_pid()} {now}"), "records_sha256")
    assert not busy(run(), "records_sha256")  # a live job's, or a sync's before leases


@pytest.mark.slow
def test_a_run_logged_before_these_names_is_renamed_in_place(live, store) -> None:
    """A store built by an older version (run named variant-seedN) keeps its runs: the sync
    renames them in place, logging nothing anew."""
    record = read_record(live[1])
    exp_id = init_store([record.opening.experiment], store)[record.opening.experiment]
    run_id = log_record(store, exp_id, record)
    store.update_run(run_id, name="baseline-seed0")
    [row] = sync([live[1]], store)
    assert (row["run_id"], row["action"]) == (run_id, "relabelled")
    run = store.get_run(run_id)
    assert run.info.run_name == "listops/baseline/seed0"
    assert sync([live[1]], store)[0]["action"] == "kept"
