"""Fault injection: Snakemake's whole process group killed (SIGKILL) at a seeded random moment
inside each stage (data, training, aggregate, report) and at six seeded random times after a
restart, ten random kills in all;
after `snakemake --unlock` and a plain rerun, the tables, summary.parquet and the MLflow runs
equal those of an uninterrupted run. A second `snakemake` in a folder where one runs is
refused by its lock.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from conftest import BuiltTree, sh, tiny_project

pytestmark = [pytest.mark.slow, pytest.mark.faults]

# measured per process (wall clock, memory), or provenance: `resumed` says a run continued
# from a checkpoint, which is what an interrupted run does (its metrics must not change)
MEASURED = ("median_step_s", "peak_memory_mb", "memory_kind", "mlflow_run_id", "resumed")
TIMED_TABLES = ("cost.md", "cost.tex", "cost.html", "cost.csv")  # timings differ run to run


def outcome(project: Path) -> dict[str, object]:
    """What a finished run is judged by: every table (except timings), the summary without
    its wall-clock columns, and the MLflow runs per experiment."""
    tables = {
        p.name: p.read_text()
        for p in sorted((project / "results/tables").iterdir())
        if p.name not in TIMED_TABLES
    }
    summary = pd.read_parquet(project / "results/summary.parquet")
    summary = summary.drop(columns=[c for c in MEASURED if c in summary.columns])
    summary = summary.sort_values(["task", "variant", "seed"]).reset_index(drop=True)
    check = sh(["python", "-m", "pdelab.tracking", "check"], project).stdout
    return {"tables": tables, "summary": summary, "mlflow": check}


def start(project: Path) -> subprocess.Popen:
    """`snakemake --cores 2` in a process group of its own (as a terminal would run it)."""
    return subprocess.Popen(
        ["snakemake", "--cores", "2"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_when(project: Path, ready: Callable[[Path], bool], timeout: float = 300) -> bool:
    """Run the workflow until ``ready(project)``, then SIGKILL its process group; False if
    the workflow ended first."""
    proc = start(project)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if ready(project):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.02)
        return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finish(project: Path) -> None:
    """What the README and docs/troubleshooting.md say to do after a crash: unlock, then run
    again."""
    sh(["snakemake", "--unlock"], project)
    sh(["snakemake", "--cores", "2"], project)
    assert "Nothing to be done" in sh(["snakemake", "-n"], project).stdout


def exists(pattern: str) -> Callable[[Path], bool]:
    return lambda project: any(project.glob(pattern))


MOMENTS = {
    "data": exists("results/logs/data/smoke/*.log"),
    "training": exists("results/runs/smoke/*/*/seed*/checkpoint.pt"),
    "aggregate": exists("results/logs/aggregate.log"),
    "report": exists("results/logs/report.log"),
}


# how far into a stage its kill may fall (seconds after the stage's first trace): the short
# stages get a short reach, so that the kill still lands before the workflow ends
STAGE_REACH = {"data": 3.0, "training": 3.0, "aggregate": 0.3, "report": 0.3}


def after(ready: Callable[[Path], bool], delay: float) -> Callable[[Path], bool]:
    """True from ``delay`` seconds after ``ready`` first is: a moment inside the stage."""
    seen: list[float] = []

    def check(project: Path) -> bool:
        if not seen and ready(project):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay

    return check


@pytest.fixture(scope="module")
def reference(tiny_built: BuiltTree, tmp_path_factory) -> dict[str, object]:
    """An uninterrupted build's outcome (a copy of the session's built tiny tree) and its
    build time."""
    project = tiny_built.copy(tmp_path_factory.mktemp("reference"))
    return outcome(project) | {"seconds": tiny_built.seconds}


@pytest.mark.parametrize("stage", list(MOMENTS))
def test_killed_in_a_stage_then_rerun_equals_uninterrupted(reference, tmp_path, stage) -> None:
    project = tiny_project(tmp_path)
    delay = random.Random(stage).uniform(0, STAGE_REACH[stage])
    killed = kill_when(project, after(MOMENTS[stage], delay))
    assert killed, f"the workflow ended before {delay:.2f} s into the {stage} stage"
    finish(project)
    got = outcome(project)
    assert got["tables"] == reference["tables"]
    pd.testing.assert_frame_equal(got["summary"], reference["summary"])
    assert got["mlflow"] == reference["mlflow"]


RANDOM_KILLS = 6  # with one at a random moment in each stage above: ten random kills


def test_killed_at_random_moments_then_rerun_equals_uninterrupted(reference, tmp_path) -> None:
    """Six kills, each at a seeded random time after a restart (1 s to an eighth of an
    uninterrupted build, so that all six land before the build ends); finished jobs stay
    done, so the kills move on through the build (data, training)."""
    project = tiny_project(tmp_path)
    rng = random.Random(14)
    reach = max(2.0, reference["seconds"] / 8)
    for delay in sorted(rng.uniform(1, reach) for _ in range(RANDOM_KILLS)):
        deadline = time.monotonic() + delay
        killed = kill_when(project, lambda _, end=deadline: time.monotonic() > end)
        assert killed, f"the workflow ended within {delay:.1f} s, before its kill"
        sh(["snakemake", "--unlock"], project)
    finish(project)
    got = outcome(project)
    assert got["tables"] == reference["tables"]
    pd.testing.assert_frame_equal(got["summary"], reference["summary"])
    assert got["mlflow"] == reference["mlflow"]


def test_a_second_snakemake_in_the_same_folder_is_refused(tmp_path) -> None:
    project = tiny_project(tmp_path)
    first = start(project)
    try:
        deadline = time.monotonic() + 120
        while not any((project / ".snakemake/locks").glob("*")):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = sh(["snakemake", "--cores", "1"], project, check=False)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert second.returncode != 0
    assert "Directory cannot be locked" in second.stdout + second.stderr
