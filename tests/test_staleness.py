"""Staleness from the records (pdelab.records.staleness): a run's plan stamp is dated by whether its
run.json says it was made from what it would be made from now, whatever Snakemake remembers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import write_run
from pdelab.records import staleness
from pdelab.records.run import record_table, write_records

DATA = "d" * 64  # what conftest.write_run records
SPEC = {
    "task": "listops",
    "variant": "baseline",
    "seed": 0,
    "profile": "smoke",
    "train": {"lr": 1e-3},
}


def trained(folder: Path, spec: dict = SPEC, digest: str = "c0de") -> None:
    """A run folder whose records say it was made from ``spec`` and code ``digest``."""
    record = write_run(folder, spec=spec)
    record["provenance"] = {"code_digest": digest}
    write_records(
        folder, record, record_table([{"seed": 0, "epoch": 1}]), record_table([record["result"]])
    )


def stamped(tmp_path: Path, plan: dict) -> float:
    stamp = staleness.write_stamp(tmp_path / "stamp.json", tmp_path / "run", plan)
    return Path(stamp).stat().st_mtime


def test_records_made_from_the_plan_leave_the_stamp_long_ago(tmp_path: Path) -> None:
    trained(tmp_path / "run")
    assert stamped(tmp_path, staleness.planned(SPEC, "c0de", DATA)) == staleness.LONG_AGO


@pytest.mark.parametrize(
    "plan",
    [
        staleness.planned(SPEC | {"train": {"lr": 2e-3}}, "c0de", DATA),  # a params edit
        staleness.planned(SPEC, "beef", DATA),  # a code edit
        staleness.planned(SPEC, "c0de", "e" * 64),  # the data prepared again, or a forgery's
    ],
)
def test_records_of_another_spec_code_or_data_date_the_stamp_now(
    tmp_path: Path, plan: dict
) -> None:
    trained(tmp_path / "run")
    assert stamped(tmp_path, plan) > time.time() - 60


def test_no_records_or_records_no_reader_would_take_date_it_now(tmp_path: Path) -> None:
    plan = staleness.planned(SPEC, "c0de", DATA)
    first = stamped(tmp_path, plan)
    assert first > time.time() - 60  # not trained
    trained(tmp_path / "run")  # its outputs are newer than the stamp: current
    assert stamped(tmp_path, plan) == first
    time.sleep(0.05)
    result = tmp_path / "run" / "result.parquet"
    result.write_bytes(result.read_bytes()[:-8])  # damaged after the run: the same plan
    assert stamped(tmp_path, plan) > first


def test_an_unchanged_stamp_keeps_its_date_so_touch_keeps_runs(tmp_path: Path) -> None:
    """The opt-out of a cosmetic edit: the stamp was dated once for the new code; the touched
    outputs are newer, and later parses leave it as it is."""
    trained(tmp_path / "run")
    plan = staleness.planned(SPEC, "beef", DATA)
    first = stamped(tmp_path, plan)
    time.sleep(0.05)
    assert stamped(tmp_path, plan) == first


def test_a_jobs_code_inputs_are_the_files_its_imports_run() -> None:
    files = staleness.module_files(["pdelab.report.__main__"])
    assert "src/pdelab/report/stats.py" in files and "src/pdelab/report/aggregate.py" in files
    assert "src/pdelab/training/train.py" not in files
