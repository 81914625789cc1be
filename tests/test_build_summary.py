"""A build ends with a summary: runs trained and reused, their training time, failed jobs,
and where the results are."""

from __future__ import annotations

import json
from pathlib import Path

from pdelab.records.build_summary import build_summary, duration


def record(folder: Path, start_ms: int, end_ms: int) -> Path:
    folder.mkdir(parents=True)
    stamps = {"tracking": {"start_ms": start_ms, "end_ms": end_ms}}
    (folder / "run.json").write_text(json.dumps(stamps))
    return folder


def test_the_summary_counts_trained_and_reused_runs(tmp_path: Path) -> None:
    since = 1_000_000
    folders = [
        record(tmp_path / "a", since + 10, since + 65_010),  # trained now: 65 s
        record(tmp_path / "b", since + 20, since + 60_020),  # trained now: 60 s
        record(tmp_path / "c", 10, 5_000),  # an earlier build's
        tmp_path / "d",  # never trained
    ]
    lines = build_summary(folders, since, "sqlite:///results/mlflow/mlflow.db")
    assert "2 run(s) trained in this build (2 min 05 s of training)" in lines[2]
    assert "1 reused from earlier builds, 1 not trained" in lines[2]
    assert any("results/REPORT.md" in ln for ln in lines)
    assert any("pdelab mlflow" in ln and "mlflow.db" in ln for ln in lines)
    failed = build_summary(folders, since, "uri", failed_log=".snakemake/log/x.log")
    assert any("Some jobs failed" in ln and "x.log" in ln for ln in failed)


def test_durations_read_as_a_person_says_them() -> None:
    assert duration(12_400) == "12 s" and duration(185_000) == "3 min 05 s"
    assert duration(3_720_000) == "1 h 02 min"
