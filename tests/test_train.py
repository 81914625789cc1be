"""Training: resume after a kill equals an uninterrupted run; divergence is a result; MLflow;
the command line's records, timing stamps and what it imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from pdelab.records import provenance, staleness
from pdelab.records.run import plan_sha256, plan_text, records_sha256
from pdelab.spec.config import load_params, resolve
from pdelab.tracking.log import init_store
from pdelab.training import job
from pdelab.training.strategy import HISTORY_COLUMNS
from pdelab.training.train import train


@pytest.fixture(scope="module")
def workdir(tiny_workdir, tmp_path_factory) -> Path:
    """A copy of conftest's tiny work folder (tiny params.yaml, prepared ListOps data)."""
    return tiny_workdir(tmp_path_factory.mktemp("work"))


def run_cli(
    work: Path, out: str, variant: str = "after_embedding", *extra: str
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pdelab.training.train",
            "--task",
            "listops",
            "--variant",
            variant,
            "--seed",
            "0",
            "--out",
            out,
            "--threads",
            "1",
            "--no-mlflow",
            "--no-progress",
            *extra,
        ],
        cwd=work,
        env=os.environ | {"PDELAB_RETRAIN": "1"},  # these tests train: a kept run is not put back
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_killed_run_resumes_to_identical_metrics(workdir: Path) -> None:
    assert run_cli(workdir, "full").wait(timeout=300) == 0
    proc = run_cli(workdir, "killed")
    checkpoint = workdir / "killed" / "checkpoint.pt"
    deadline = time.time() + 120
    while not checkpoint.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert checkpoint.exists() and not (workdir / "killed" / "result.parquet").exists()

    resumed = run_cli(workdir, "killed")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0 and "resuming from epoch" in err
    full = pd.read_parquet(workdir / "full" / "result.parquet").iloc[0]
    again = pd.read_parquet(workdir / "killed" / "result.parquet").iloc[0]
    assert bool(again["resumed"]) and not bool(full["resumed"])
    for key in ("test_acc", "test_loss", "best_val_acc", "best_epoch", "epochs_run"):
        assert again[key] == full[key], key
    stamps = json.loads((workdir / "killed" / "run.json").read_text())["tracking"]
    assert len(stamps["epoch_end_ms"]) == again["epochs_run"]  # the killed job's epochs too
    cols = ["train_loss", "train_acc", "val_loss", "val_acc", "lr"]
    h_full = pd.read_parquet(workdir / "full" / "metrics.parquet")[cols]
    h_again = pd.read_parquet(workdir / "killed" / "metrics.parquet")[cols]
    pd.testing.assert_frame_equal(h_full, h_again)


@pytest.mark.slow
def test_a_run_in_micro_batches_killed_between_steps_resumes_exactly(workdir: Path) -> None:
    """Batches of 64 as 13 micro-batches of 5 (the last of 4): a SIGTERM mid-epoch checkpoints
    after the optimizer step it is in, and the run resumed from there equals the uninterrupted
    one; run.json records the micro-batch, the spec does not hold it."""
    micro = ("--micro-batch", "5")
    assert run_cli(workdir, "micro_full", "baseline", *micro).wait(timeout=300) == 0
    proc = run_cli(workdir, "micro_stopped", "baseline", *micro)
    checkpoint = workdir / "micro_stopped" / "checkpoint.pt"
    deadline = time.time() + 120
    while not checkpoint.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)  # the first epoch's: the handler is set, the second epoch begins
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, "the run finished before it could be stopped"
    assert "stopped by SIGTERM after step" in err  # mid-epoch: between optimizer steps
    resumed = run_cli(workdir, "micro_stopped", "baseline", *micro)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0 and "resuming from step" in err
    cols = ["train_loss", "train_acc", "val_loss", "val_acc", "lr"]
    frames = [
        pd.read_parquet(workdir / d / "metrics.parquet")[cols]
        for d in ("micro_full", "micro_stopped")
    ]
    pd.testing.assert_frame_equal(*frames)
    record = json.loads((workdir / "micro_stopped" / "run.json").read_text())
    assert record["execution"] == {
        "micro_batch": 5,
        "checkpoint_blocks": False,
        "compile": "off",
        "accumulation_steps": 13,
        "processes": 1,
    }
    assert record["result"]["micro_batch"] == 5 and "micro_batch" not in json.dumps(record["spec"])


def test_checkpoint_of_another_spec_is_not_resumed(workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    train(replace(run, train=replace(run.train, epochs=1)), "other", track=False, progress=False)
    changed = replace(run, train=replace(run.train, epochs=2, lr=2e-3))
    train(changed, "other", track=False, progress=False)
    result = pd.read_parquet("other/result.parquet").iloc[0]
    assert not bool(result["resumed"]) and result["epochs_run"] == 2


def test_a_finished_run_started_again_trains_again(workdir: Path, monkeypatch, capfd) -> None:
    """``snakemake -f`` on a run deletes its records and starts its job again, in a folder
    whose checkpoint is the finished run's: the job trains afresh (``resumed`` false, every
    epoch run again), it does not re-read the end it finds."""
    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    run = replace(run, train=replace(run.train, epochs=2))
    train(run, "forced", track=False, progress=False)
    for name in ("metrics.parquet", "result.parquet", "run.json"):  # what Snakemake deletes
        (workdir / "forced" / name).unlink()
    capfd.readouterr()
    train(run, "forced", track=False, progress=False)
    result = pd.read_parquet("forced/result.parquet").iloc[0]
    assert not bool(result["resumed"]) and result["epochs_run"] == 2
    assert "is of a finished run; training it again" in capfd.readouterr().err


def test_run_json_records_the_environment_it_trained_in(workdir: Path, monkeypatch) -> None:
    """Python, torch, CUDA, numpy, the thread count, the device and the imported packages,
    and a dirty flag about the run's own source files (a clean tree's run is clean)."""
    import platform

    import numpy
    import torch

    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    train(replace(run, train=replace(run.train, epochs=1)), "env", track=False, progress=False)
    made = json.loads((workdir / "env" / "run.json").read_text())
    env = made["environment"]
    assert env["python"] == platform.python_version() and env["torch"] == torch.__version__
    assert env["numpy"] == numpy.__version__ and env["cuda"] == (torch.version.cuda or "none")
    assert env["threads"] == torch.get_num_threads() and env["device"] == "cpu"
    assert "torch" in env["packages"] and "numpy" in env["packages"]


def test_test_accuracy_is_taken_at_the_best_validation_epoch(workdir: Path, monkeypatch):
    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    history = train(run, "best", track=False, progress=False)
    result = pd.read_parquet("best/result.parquet").iloc[0]
    best = history.loc[history["val_acc"].idxmax()]
    assert result["best_epoch"] == best["epoch"] and result["best_val_acc"] == best["val_acc"]
    # ListOps generated at a smaller setting than LRA's is a stand-in, and the result says so
    assert result["stand_in"].startswith("LRA's ListOps generator at a smaller setting")


def test_divergence_is_a_result_not_a_crash(workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    wild = replace(run, train=replace(run.train, lr=1e12, warmup_steps=1, grad_clip=1e12))
    train(wild, "diverged", track=False, progress=False)
    result = pd.read_parquet("diverged/result.parquet").iloc[0]
    assert result["status"] == "diverged" and pd.isna(result["test_acc"])


def test_runs_are_logged_to_mlflow_per_epoch(workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    init_store(["pdelab-listops-smoke"])
    run = resolve(load_params("params.yaml"), "listops", "in_attention", 0)
    run = replace(run, train=replace(run.train, epochs=2))
    train(run, "tracked", track=True, progress=False)
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    run_id = pd.read_parquet("tracked/result.parquet").iloc[0]["mlflow_run_id"]
    logged = client.get_run(run_id)
    assert logged.data.tags["variant"] == "in_attention" and logged.data.tags["profile"] == "smoke"
    assert logged.data.params["diffusion.sites"] == '["in_attention"]'
    assert [m.step for m in client.get_metric_history(run_id, "val_acc")] == [1, 2]
    assert {a.path for a in client.list_artifacts(run_id)} >= {"metrics.parquet", "run.json"}
    assert logged.info.status == "FINISHED"
    assert logged.data.tags["records_sha256"] == records_sha256(workdir / "tracked")


def test_broken_mlflow_store_does_not_stop_the_run(workdir: Path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    with pytest.warns(UserWarning, match="MLflow start failed"):
        train(replace(run, train=replace(run.train, epochs=1)), "untracked", progress=False)
    assert (workdir / "untracked" / "result.parquet").exists()


# The command line runs ~200 times in the smoke workflow: what it imports is its fixed cost.
@pytest.fixture(scope="module")
def batch_run(workdir: Path) -> tuple[Path, set[str]]:
    """A command-line run under the smoke profile (tracking: batch), and the top-level
    packages it imported (``-X importtime`` lists every import as it happens)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pdelab.training.train", "--task", "listops"]
        + ["--variant", "baseline", "--seed", "0", "--out", "batch", "--threads", "1"]
        + ["--no-progress"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [x for x in out.stderr.splitlines() if x.startswith("import time:")]
    imported = {x.rpartition("|")[2].strip().split(".")[0] for x in lines}
    assert {"torch", "pyarrow"} <= imported  # the listing is read right
    return workdir / "batch", imported


@pytest.mark.slow
def test_batch_tracking_never_imports_mlflow_or_pandas(batch_run) -> None:
    folder, imported = batch_run
    assert load_params(folder.parent / "params.yaml")["profiles"]["smoke"]["tracking"] == "batch"
    assert "mlflow" not in imported and "pandas" not in imported
    assert pd.read_parquet(folder / "result.parquet").iloc[0]["mlflow_run_id"] == ""


def test_records_read_back_as_pandas_wrote_them(batch_run) -> None:
    """The job writes its Parquet files without pandas; the report reads them with it."""
    folder, _ = batch_run
    result = json.loads((folder / "run.json").read_text())["result"]
    pd.testing.assert_frame_equal(
        pd.read_parquet(folder / "result.parquet"), pd.DataFrame([result])
    )
    rows = pq.read_table(folder / "metrics.parquet").to_pylist()
    expected = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    for key in ("task", "variant", "seed"):
        expected.insert(0, key, rows[0][key])
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "metrics.parquet"), expected)


def test_run_json_keeps_wall_clock_stamps(batch_run) -> None:
    folder, _ = batch_run
    record = json.loads((folder / "run.json").read_text())
    t, kept = record["timing"], record["tracking"]
    order = ["process_start", "imported", "built", "first_step", "last_test_batch"]
    assert [t[k] for k in order] == sorted(t[k] for k in order)
    ends = kept["epoch_end_ms"]
    assert (
        len(ends)
        == record["result"]["epochs_run"]
        == len(pd.read_parquet(folder / "metrics.parquet"))
    )
    assert kept["start_ms"] <= ends[0] and ends == sorted(ends) and ends[-1] <= kept["end_ms"]
    # the stamps in ms are whole (now_ms truncates): compare at that resolution
    ms = {k: int(t[k] * 1000) for k in ("first_step", "last_test_batch")}
    assert ms["first_step"] <= ends[0] and ms["last_test_batch"] <= kept["end_ms"]


# The workflow's jobs: the plan the workflow wrote (pdelab.records.staleness), trained as it is.
def write_plan(folder: Path, run, code: str | None = None) -> tuple[Path, str]:
    """A run's plan as the workflow writes it, and the digest the train rule hands the job."""
    plan = staleness.planned(run.to_dict(), code or provenance.code_digest(run), None)
    path = folder / "plan.json"
    path.write_text(plan_text(plan))
    return path, plan_sha256(plan_text(plan))


def train_planned(cwd: Path, plan: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    args = ["--plan", str(plan), "--out", out, "--threads", "1", "--no-progress", *extra]
    return subprocess.run(
        [sys.executable, "-m", "pdelab.training.train", *args],
        cwd=cwd,
        env=os.environ | {"PDELAB_WARM": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_planned_job_trains_its_plans_spec_and_reads_no_params(workdir, tmp_path) -> None:
    """The job trains the spec of its plan, one params.yaml does not resolve to, in a folder
    with no params.yaml at all: there is no second resolution to differ from the plan."""
    run = resolve(load_params(workdir / "params.yaml"), "listops", "baseline", 0)
    run = replace(run, train=replace(run.train, epochs=1, lr=0.0123))
    (tmp_path / "data").symlink_to(workdir / "data")  # the prepared data, and nothing else
    plan, digest = write_plan(tmp_path, run)
    done = train_planned(tmp_path, plan, "planned", "--plan-digest", digest, "--tracking", "batch")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "params.yaml").exists()
    record = json.loads((tmp_path / "planned" / "run.json").read_text())
    assert record["spec"] == json.loads(plan.read_text())["spec"] == json.loads(run.to_json())
    assert record["provenance"]["code_digest"] == json.loads(plan.read_text())["code_digest"]
    assert record["result"]["mlflow_run_id"] == ""  # --tracking batch, from the command line


def test_a_plan_rewritten_since_the_workflow_read_it_is_refused(workdir, tmp_path) -> None:
    """A later parse (params.yaml edited while a build runs) wrote another plan where the
    build's job reads its own: the job stops rather than train what the build did not plan."""
    run = resolve(load_params(workdir / "params.yaml"), "listops", "baseline", 0)
    plan, digest = write_plan(tmp_path, run)
    write_plan(tmp_path, replace(run, train=replace(run.train, lr=0.5)))  # a later parse's
    done = train_planned(workdir, plan, str(tmp_path / "out"), "--plan-digest", digest)
    assert done.returncode == 1 and "holds another plan" in done.stderr
    assert f"than the workflow read ({digest})" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_plan_of_other_code_is_refused(workdir, tmp_path) -> None:
    """The code the job imports must be the code its plan names (a source file edited since
    the workflow parsed, another checkout's pdelab on the path)."""
    run = resolve(load_params(workdir / "params.yaml"), "listops", "baseline", 0)
    plan, _ = write_plan(tmp_path, run, code="0" * 16)
    done = train_planned(workdir, plan, str(tmp_path / "out"))
    assert done.returncode == 1 and f"imports pdelab from {ROOT / 'src'}" in done.stderr
    assert "is not the code its plan names (0000000000000000)" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--plan", "p.json", "--task", "listops"],  # two ways to name one run
        ["--task", "listops", "--variant", "baseline"],  # no seed
        ["--plan-digest", "ab12", "--task", "listops", "--variant", "v", "--seed", "0"],
    ],
)
def test_a_run_is_named_by_its_plan_or_by_hand_not_both(args: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        job.arguments([*args, "--out", "x"], None, Path("params.yaml"), ("live", "batch"))
    assert stop.value.code == 2
