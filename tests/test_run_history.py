"""A params change never destroys a run, and a revert trains nothing (pdelab.records.run_store):
on a copy of the tiny finished build, a learning rate is changed and the workflow rebuilt,
then set back and rebuilt. The second rebuild's train jobs put the kept versions back (their
logs say so, and no epoch is trained), the run folders and the table are the first build's
bytes again, and both versions of each run stay in the store, their records checked when
read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BuiltTree, sh
from pdelab.records import run_store
from pdelab.records.run import check_run
from pdelab.tracking.sync import client_for
from tests.test_workflow import edit_params, pdelab_status

pytestmark = pytest.mark.slow

RUNS = ("baseline", "after_embedding")  # the tiny build's ListOps runs (seed 0)
RESULTS = [f"results/runs/smoke/listops/{v}/seed0/result.parquet" for v in RUNS]
TABLE = "results/tables/positions.md"


def train_logs(project: Path) -> dict[str, str]:
    logs = project / "results/logs/train/smoke/listops"
    return {v: (logs / v / "seed0.log").read_text() for v in RUNS}


def kept(project: Path) -> list[run_store.Version]:
    return list(run_store.versions("smoke", "listops", root=project / run_store.STORE_DIR))


def test_a_revert_restores_the_kept_runs_and_trains_nothing(
    tiny_built: BuiltTree, tmp_path: Path
) -> None:
    project = tiny_built.copy(tmp_path / "tree")
    first = {rel: (project / rel).read_bytes() for rel in [*RESULTS, TABLE]}
    assert {v.variant for v in kept(project)} == set(RUNS)  # each finished run is kept

    def lower_lr(params: dict) -> None:
        params["profiles"]["smoke"]["overrides"]["train"]["lr"] = 0.003

    original = edit_params(project, lower_lr)
    sh(["snakemake", "--cores", "2"], project)
    assert all("restored" not in log for log in train_logs(project).values())
    assert all((project / rel).read_bytes() != first[rel] for rel in RESULTS)  # retrained
    assert len(kept(project)) == 2 * len(RUNS)  # the earlier versions are still there

    (project / "params.yaml").write_text(original)
    status = pdelab_status(project)
    assert sum("restorable: kept version" in line for line in status) == len(RUNS), status
    sh(["snakemake", "--cores", "2"], project)
    for variant, log in train_logs(project).items():
        assert "nothing trained" in log and '"epoch"' not in log, (variant, log)
    for rel, data in first.items():
        assert (project / rel).read_bytes() == data, rel  # the first build's bytes and table
    assert len(kept(project)) == 2 * len(RUNS)
    for version in kept(project):  # every kept version's records verify when read back
        record = check_run(version.path)
        assert run_store.record_key(record) == version.key
    assert sh(["snakemake", "-n", "--cores", "1"], project).stdout.count("rule train") == 0

    # MLflow keeps both versions of each run, the current one marked
    client = client_for(f"sqlite:///{project / 'results/mlflow/mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name.endswith("listops-smoke")]
    for variant in RUNS:
        where = f"tags.variant = '{variant}' and tags.seed = '0'"
        runs = [r for r in client.search_runs([experiment.experiment_id], where)]
        runs = [r for r in runs if r.data.tags.get("pdelab.parent") != "true"]
        current = [r.data.tags.get("pdelab.current") for r in runs]
        assert len(runs) >= 2 and current.count("true") == 1, (variant, current)

    # both versions side by side: history, compare, and gc of the one no params use
    shown = pdelab(project, "history", "listops", "baseline")
    assert sum(line.startswith("version ") for line in shown) == 2, shown
    assert any("(current)" in line for line in shown)
    assert any("differs from today: train.lr: 0.003 -> " in line for line in shown), shown
    parents = {r.info.run_id for r in client.search_runs([experiment.experiment_id])}
    links = [line.split("/runs/")[-1] for line in shown if line.startswith("  MLflow: http")]
    assert len(links) == 2 and set(links) <= parents, shown  # each version's parent run
    assert (
        sum(
            line.startswith("  MLflow seeds (1): http://127.0.0.1:5000/#/compare-runs?")
            for line in shown
        )
        == 2
    )
    lowered = project / "lowered.yaml"
    lowered.write_text(original)
    edit_params(project, lower_lr, "lowered.yaml")
    compared = pdelab(project, "compare", "lowered.yaml", "params.yaml")
    assert any(line.startswith("listops baseline: train.lr") for line in compared), compared
    assert not any("not trained" in line for line in compared), compared
    assert sum(line.startswith("  MLflow: http") for line in compared) >= 2, compared
    dry = pdelab(project, "gc")
    assert dry[-1].startswith(f"{len(RUNS)} kept runs and 0 unfinished ones no current params")
    assert len(kept(project)) == 2 * len(RUNS)  # a dry run removes nothing
    pdelab(project, "gc", "--yes")
    assert {v.key for v in kept(project)} == {
        run_store.record_key(check_run(project / rel.rsplit("/", 1)[0])) for rel in RESULTS
    }


def pdelab(project: Path, *args: str) -> list[str]:
    """A `pdelab` command in the copy, with the copy's code."""
    env = os.environ | {"PYTHONPATH": str(project / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_a_reverted_data_param_comes_back_from_dvc_s_cache(
    tiny_built: BuiltTree, tmp_path: Path
) -> None:
    """A data param set back to a value a `dvc commit` recorded: the data job checks the
    folders out of DVC's run cache and prepares nothing, the manifest is the first build's
    bytes, and so the runs come back from the store and nothing trains."""
    project = tiny_built.copy(tmp_path / "tree")
    manifest = project / "data/smoke/prepared/listops/manifest.json"
    first = manifest.read_bytes()

    def reseed(params: dict) -> None:
        params["data"]["smoke"]["listops"]["seed"] = 1

    original = edit_params(project, reseed)
    sh(["snakemake", "--cores", "2"], project)
    assert manifest.read_bytes() != first  # other data: prepared and trained
    (project / "params.yaml").write_text(original)
    sh(["snakemake", "--cores", "2"], project)
    data_log = (project / "results/logs/data/smoke/listops.log").read_text()
    assert "from DVC's cache" in data_log and "nothing prepared" in data_log, data_log
    assert manifest.read_bytes() == first
    for variant, log in train_logs(project).items():
        assert "nothing trained" in log, (variant, log)
