"""Staleness from the records (pdelab.records.staleness, pdelab.records.made): a run's plan stamp
and any other job's stamp are dated by whether the job's records say it was made from what it
would be made from now, whatever the files' dates or Snakemake remembers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import write_run
from pdelab.records import made, staleness
from pdelab.records.run import RECORD_FILES, record_table, write_records

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
    stamp = tmp_path / "stamp.json"
    staleness.write_stamp(stamp, tmp_path / "run", plan)
    return stamp.stat().st_mtime


def oldest_record(run: Path) -> float:
    return min((run / name).stat().st_mtime for name in RECORD_FILES)


def test_records_made_from_the_plan_date_the_stamp_1970(tmp_path: Path) -> None:
    trained(tmp_path / "run")
    assert stamped(tmp_path, staleness.planned(SPEC, "c0de", DATA)) == made.LONG_AGO


@pytest.mark.parametrize(
    "plan",
    [
        staleness.planned(SPEC | {"train": {"lr": 2e-3}}, "c0de", DATA),  # a params edit
        staleness.planned(SPEC, "beef", DATA),  # a code edit
        staleness.planned(SPEC, "c0de", "e" * 64),  # the data prepared again, or a forgery's
    ],
)
@pytest.mark.parametrize("shift_s", [0.0, 7200.0, -7200.0], ids=["now", "ahead", "behind"])
def test_records_of_another_spec_code_or_data_date_the_stamp_after_them(
    tmp_path: Path, plan: dict, shift_s: float
) -> None:
    """However the records are dated (a clock two hours ahead, a restore that put them back),
    the stamp of a stale run is newer than its oldest record, and not in the future."""
    run = tmp_path / "run"
    trained(run)
    for name in RECORD_FILES:
        when = (run / name).stat().st_mtime + shift_s
        os.utime(run / name, (when, when))
    when = stamped(tmp_path, plan)
    assert oldest_record(run) < when <= max(time.time(), oldest_record(run) + 1)


def test_damaged_records_date_the_stamp_after_them(tmp_path: Path) -> None:
    plan = staleness.planned(SPEC, "c0de", DATA)
    assert stamped(tmp_path, plan) == made.LONG_AGO  # not trained: no outputs to compare
    trained(tmp_path / "run")
    assert stamped(tmp_path, plan) == made.LONG_AGO
    result = tmp_path / "run" / "result.parquet"
    result.write_bytes(result.read_bytes()[:-8])  # damaged after the run: the same plan
    assert stamped(tmp_path, plan) > oldest_record(tmp_path / "run")


def test_a_touch_does_not_make_a_stale_run_current(tmp_path: Path) -> None:
    """Dates never decide: records of other code touched to now stay stale."""
    run = tmp_path / "run"
    trained(run)
    plan = staleness.planned(SPEC, "beef", DATA)
    for name in RECORD_FILES:
        (run / name).touch()
    assert stamped(tmp_path, plan) > oldest_record(run)


def test_a_current_run_is_dated_no_earlier_than_its_data(tmp_path: Path) -> None:
    """A copy that did not keep dates leaves the manifest newer than the run: the parse dates
    the run's records after it, so Snakemake's comparison agrees with the records."""
    run, manifest = tmp_path / "run", tmp_path / "manifest.json"
    trained(run)
    manifest.write_text("{}")
    ahead = time.time() + 3600
    os.utime(manifest, (ahead, ahead))
    stamp = tmp_path / "stamp.json"
    assert staleness.write_stamp(
        stamp, run, staleness.planned(SPEC, "c0de", DATA), True, [manifest]
    )
    assert oldest_record(run) >= manifest.stat().st_mtime
    assert not staleness.write_stamp(stamp, run, staleness.planned(SPEC, "c0de", DATA), False)


def test_a_jobs_code_inputs_are_the_files_its_imports_run() -> None:
    files = staleness.module_files(["pdelab.report.__main__"])
    assert "src/pdelab/report/stats.py" in files and "src/pdelab/report/aggregate.py" in files
    assert "src/pdelab/training/train.py" not in files


OWN = {"code": {"src/pdelab/report/stats.py": "c0de"}, "params": {}}


def made_job(tmp_path: Path, own: dict = OWN) -> tuple[Path, Path, Path]:
    """A job that read ``upstream`` and wrote ``out``, its made record written as it ends."""
    stamp, upstream, out = tmp_path / "stamp.json", tmp_path / "in.parquet", tmp_path / "out.md"
    upstream.write_text("rows")
    states = {str(upstream): made.content_state(upstream, True)}
    made.settle(stamp, own, states, [out])
    out.write_text("table")
    made.write_made(stamp, [out])
    return stamp, upstream, out


def settled(stamp: Path, upstream: Path, out: Path, own: dict = OWN, current: bool = True) -> bool:
    return made.settle(stamp, own, {str(upstream): made.content_state(upstream, current)}, [out])


def test_a_job_made_from_its_recipe_is_current_and_dated_1970(tmp_path: Path) -> None:
    stamp, upstream, out = made_job(tmp_path)
    assert stamp.stat().st_mtime == made.LONG_AGO  # the job dated it as it ended
    assert settled(stamp, upstream, out)
    assert stamp.stat().st_mtime == made.LONG_AGO


@pytest.mark.parametrize(
    "change",
    ["code", "params", "input bytes", "input pending", "output edited", "output removed", "record"],
)
def test_any_change_of_content_makes_a_job_stale(tmp_path: Path, change: str) -> None:
    """Each thing a job is made from, changed, and only that, dates its stamp after its output;
    the dates of the files play no part."""
    stamp, upstream, out = made_job(tmp_path)
    own, current = OWN, True
    if change == "code":
        own = {**OWN, "code": {"src/pdelab/report/stats.py": "beef"}}
    elif change == "params":
        own = {**OWN, "params": {"level": 0.5}}
    elif change == "input bytes":
        upstream.write_text("other rows")
    elif change == "input pending":
        current = False
    elif change == "output edited":
        out.write_text("TABLE")
    elif change == "output removed":
        out.unlink()
    else:
        made.made_path(stamp).write_text("{}")
    assert not settled(stamp, upstream, out, own, current)
    if out.exists():  # else Snakemake runs the job for its missing output
        assert stamp.stat().st_mtime > out.stat().st_mtime


def test_an_edit_put_back_leaves_the_job_current(tmp_path: Path) -> None:
    stamp, upstream, out = made_job(tmp_path)
    assert not settled(stamp, upstream, out, {**OWN, "params": {"level": 0.5}})
    assert settled(stamp, upstream, out)
    assert stamp.stat().st_mtime == made.LONG_AGO
