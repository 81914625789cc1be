"""Content decides what reruns, never a date (pdelab.records.made, pdelab.records.staleness): on a
tiny finished build, each kind of edit (code with and without effect, params, the data's code,
record bytes, dates moved forward and back, a copy that keeps no dates, Snakemake's memory
gone), tried with a seeded random choice of file and shift; `snakemake -n` and `pdelab status`
agree on the runs to train, and the dry run plans exactly the jobs whose inputs' content
changed."""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import BuiltTree, copy_tree
from tests.test_workflow import edit_params, pdelab_status, planned

pytestmark = pytest.mark.slow

RNG = random.Random(44)
RUNS = {"baseline", "after_embedding"}  # the tiny build's ListOps runs (seed 0)
TABLE_JOBS = {"aggregate", "study", "report"}  # what every table of the build is made by


@pytest.fixture(scope="module")
def project(tiny_built: BuiltTree, tmp_path_factory) -> Path:
    return tiny_built.copy(tmp_path_factory.mktemp("content"))


def stale_runs(status: list[str]) -> set[str]:
    """The variants `pdelab status` says would be trained again."""
    found = set()
    for line in status:
        m = re.match(r"listops (\S+) seed 0: (.*)", line)
        if m and not m.group(2).startswith("kept"):
            found.add(m.group(1))
    return found


def trained(jobs: dict[str, list[str]]) -> set[str]:
    return {w.split("variant=")[1].split(",")[0] for w in jobs.get("train", [])}


def shift_dates(root: Path, seconds: float, under: tuple[str, ...]) -> None:
    for folder in under:
        for path in (root / folder).rglob("*"):
            if path.is_file() and ".snakemake" not in path.parts:
                st = path.stat()
                os.utime(path, (st.st_atime + seconds, st.st_mtime + seconds))


def edited(file: Path, new_text: str, keep_date: bool) -> Callable[[], None]:
    """Write ``new_text`` (its date put back when ``keep_date``, as rsync -t or a restore
    does); returns what restores the file."""
    original, stat = file.read_bytes(), file.stat()
    file.write_text(new_text)
    if keep_date:
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    def restore() -> None:
        file.write_bytes(original)
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return restore


CODE_FILES = ["src/pdelab/models/transformer.py", "src/pdelab/training/train.py"]
TRACKING_FILES = ["src/pdelab/tracking/log.py", "src/pdelab/runtime/warm.py"]
REPORT_FILES = ["src/pdelab/report/stats.py", "src/pdelab/report/tables.py"]


def comment(project: Path) -> Callable[[], None]:
    file = project / RNG.choice([*CODE_FILES, *TRACKING_FILES, *REPORT_FILES])
    return edited(file, file.read_text() + "\n# a remark, no code\n", keep_date=RNG.random() < 0.5)


def code_effect(project: Path) -> Callable[[], None]:
    """Code every job runs, edited with an effect (a module-level statement)."""
    file = project / RNG.choice([*CODE_FILES, *TRACKING_FILES])
    return edited(file, file.read_text() + "\nEDITED = 1\n", keep_date=RNG.random() < 0.5)


def report_effect(project: Path) -> Callable[[], None]:
    """The report's code, edited with its date put back: the tables rebuild, nothing trains."""
    file = project / RNG.choice(REPORT_FILES)
    return edited(file, file.read_text() + "\nEDITED = 1\n", keep_date=True)


def data_code(project: Path) -> Callable[[], None]:
    file = project / "src/pdelab/data/listops.py"
    return edited(file, file.read_text() + "\nEDITED = 1\n", keep_date=True)


def rule_option(project: Path) -> Callable[[], None]:
    """A rule's command edited (the step timing's, here its spacing): that job runs again,
    as any change to a command's options would."""
    file = project / "src/pdelab/papers/diffusion_positions/rules.smk"
    text = file.read_text()
    assert '"OMP_NUM_THREADS={params.threads} MKL_NUM_THREADS={params.threads} "' in text
    new = text.replace("MKL_NUM_THREADS={params.threads} ", "MKL_NUM_THREADS={params.threads}  ", 1)
    return edited(file, new, keep_date=True)


def params_edit(project: Path) -> Callable[[], None]:
    lr = RNG.choice([2e-3, 5e-3])
    original = edit_params(
        project,
        lambda p: (
            p["profiles"]["smoke"]
            .setdefault("variants", {})
            .update({"after_embedding": {"train": {"lr": lr}}})
        ),
    )
    return lambda: (project / "params.yaml").write_text(original)


def record_bytes(project: Path) -> Callable[[], None]:
    variant = RNG.choice(sorted(RUNS))
    file = project / f"results/runs/smoke/listops/{variant}/seed0/result.parquet"
    original = file.read_bytes()
    file.write_bytes(original[:-4] + b"\0\0\0\0")
    return lambda: file.write_bytes(original)


def dates_forward(project: Path) -> Callable[[], None]:
    hours = RNG.choice([2, 30])
    shift_dates(project, hours * 3600, ("results", "data", "src"))
    return lambda: None


def dates_back(project: Path) -> Callable[[], None]:
    shift_dates(project, -RNG.choice([2, 30]) * 3600, ("results", "src"))
    return lambda: None


def memory_gone(project: Path) -> Callable[[], None]:
    shutil.rmtree(project / ".snakemake", ignore_errors=True)
    return lambda: None


# case -> (edit, the runs it trains, job kinds it must plan, job kinds it must not)
CASES: dict[str, tuple[Callable, set[str], set[str], set[str]]] = {
    "comment": (comment, set(), set(), {"train", "data", *TABLE_JOBS}),
    "code with effect": (code_effect, RUNS, {"train", *TABLE_JOBS}, {"data"}),
    "report code, date put back": (report_effect, set(), {"study", "report"}, {"train", "data"}),
    "data code, date put back": (data_code, RUNS, {"data", "train"}, set()),
    "params": (params_edit, {"after_embedding"}, {"train", *TABLE_JOBS}, {"data"}),
    "a rule's command": (rule_option, set(), {"cost_timing", "study"}, {"train", "data"}),
    "record bytes": (record_bytes, None, {"train", "aggregate"}, {"data"}),
    "dates forward": (dates_forward, set(), set(), {"train", "data", *TABLE_JOBS}),
    "dates back": (dates_back, set(), set(), {"train", "data", *TABLE_JOBS}),
    "snakemake memory gone": (memory_gone, set(), set(), {"train", "data", *TABLE_JOBS}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_dry_run_and_status_plan_exactly_what_content_changed(project: Path, case: str) -> None:
    edit, runs, planned_kinds, unplanned_kinds = CASES[case]
    assert planned(project) == {}  # the build, and each case put back, is current
    restore = edit(project)
    try:
        jobs = planned(project)
        status = pdelab_status(project)
    finally:
        restore()
    assert trained(jobs) == stale_runs(status), (jobs, status)
    if runs is not None:
        assert trained(jobs) == runs
    else:
        assert len(trained(jobs)) == 1
    assert planned_kinds <= set(jobs), jobs
    assert not unplanned_kinds & set(jobs), jobs
    if case == "data code, date put back":  # status names what changed in the data job's recipe
        assert any(
            line.startswith("data listops: files.src/pdelab/data/listops.py: ") for line in status
        )
    assert planned(project) == {}  # put back: nothing to do, whatever the dates now


def test_a_copy_that_keeps_no_dates_plans_nothing(project: Path, tmp_path: Path) -> None:
    """`cp -r` (every date now, in file order), a CI cache, an artifact: without .snakemake/."""
    copy = tmp_path / "copy"
    copy_tree(project, copy)
    shutil.rmtree(copy / ".snakemake", ignore_errors=True)
    now = time.time()
    for i, path in enumerate(sorted(p for p in copy.rglob("*") if p.is_file())):
        os.utime(path, (now - i * 1e-3, now - i * 1e-3))  # upstream files newest, at random
    assert planned(copy) == {}
    assert stale_runs(pdelab_status(copy)) == set()
