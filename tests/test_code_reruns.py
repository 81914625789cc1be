"""A code edit retrains exactly the runs that execute the edited file (pdelab.records.provenance),
on a tiny built copy of the workflow: a kernel's runs for a kernel edit, every run for the
backbone, none for the report; a table built from runs of different code says so."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import BuiltTree, set_studies, sh
from pdelab.spec.config import load_params
from tests.test_workflow import PAPERS, POSITIONS, edit_params, pdelab_status, planned

pytestmark = pytest.mark.slow

FNA_KERNEL = "src/pdelab/papers/fractional_attention/attention.py"


@pytest.fixture(scope="module")
def project(tiny_built: BuiltTree, tmp_path_factory) -> Path:
    """The tiny workflow with one more study whose second variant runs the FNA kernel: a copy
    of the session's built tiny tree, the study added and built."""
    work = tiny_built.copy(tmp_path_factory.mktemp("code"))
    studies = load_params(work / "params.yaml")["studies"]
    kernels = {"title": "Kernels", "variants": ["baseline", "lra_fna"], "diagnose": False}
    set_studies(work, studies | {"kernels": studies["positions"] | kernels})
    sh(["snakemake", "--cores", "2"], work)
    return work


def edited(project: Path, path: str, planned_jobs=planned) -> dict[str, list[str]]:
    """The jobs a dry run plans after appending a line to one source file (put back after, with
    its modification time)."""
    file = project / path
    original, stat = file.read_text(), file.stat()
    file.write_text(original + "\nEDITED = True  # a change of content\n")
    try:
        return planned_jobs(project)
    finally:
        file.write_text(original)
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def forget(project: Path) -> None:
    """What clearing a lock, a backup or a CI cache does: Snakemake's memory is gone."""
    shutil.rmtree(project / ".snakemake", ignore_errors=True)


def trained(jobs: dict[str, list[str]]) -> list[str]:
    return sorted(w.split("variant=")[1].split(",")[0] for w in jobs.get("train", []))


def test_nothing_to_do_after_the_build(project: Path) -> None:
    assert planned(project) == {}


def test_without_snakemakes_memory_the_records_say_nothing_reruns(project: Path) -> None:
    forget(project)
    assert planned(project) == {}


@pytest.mark.parametrize(
    ("file", "variant", "section", "key", "value"),
    [
        (POSITIONS, "after_embedding", "diffusion", "alpha", 0.2),
        (str(PAPERS / "mechanisms" / "config.yaml"), "lra_fna", "model", "attention_dropout", 0.1),
    ],
)
def test_without_snakemakes_memory_a_params_edit_retrains_exactly_its_runs(
    project: Path, file: str, variant: str, section: str, key: str, value: float
) -> None:
    """The records decide (pdelab.records.staleness): with .snakemake/ deleted, an edit of one
    variant in its paper's config file retrains that variant's runs and no other (those of
    another paper's file included); put back, nothing."""
    forget(project)
    params = project / file
    stat = params.stat()
    original = edit_params(
        project, lambda p: p["variants"][variant][section].update({key: value}), file
    )
    try:
        jobs = planned(project)
        said = pdelab_status(project)
    finally:
        params.write_text(original)
        os.utime(params, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert trained(jobs) == [variant]
    stale = sorted({line.split()[1] for line in said if line.startswith("listops ")})
    assert stale == [variant] and "1 of 3 runs would be trained again" in said[-1]
    forget(project)
    assert planned(project) == {}


def test_a_number_written_another_way_reruns_nothing(project: Path) -> None:
    """`epochs: 1` as `1.0`, `n_train: 64` as `64.0`: the same runs and the same data, so
    nothing is planned, with Snakemake's memory or without."""

    def respelled(p: dict) -> None:
        p["profiles"]["smoke"]["overrides"]["train"]["epochs"] = 1.0
        p["data"]["smoke"]["listops"]["n_train"] = 64.0

    params = project / "params.yaml"
    stat = params.stat()
    original = edit_params(project, respelled)
    try:
        remembered = planned(project)
        forget(project)
        forgotten = planned(project)
    finally:
        params.write_text(original)
        os.utime(params, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert remembered == {} and forgotten == {}


def test_without_snakemakes_memory_a_code_edit_retrains_exactly_its_runs(project: Path) -> None:
    forget(project)
    assert trained(edited(project, FNA_KERNEL)) == ["lra_fna"]


@pytest.mark.parametrize(
    "path",
    [
        "src/pdelab/report/stats.py",
        "src/pdelab/report/claims.py",
        "src/pdelab/papers/diffusion_positions/tables.py",
        "src/pdelab/papers/diffusion_positions/paper_tables/diffusion_positions_lra.csv",
    ],
)
def test_a_report_edit_rebuilds_the_tables_and_trains_nothing(project: Path, path: str) -> None:
    """The table jobs' code and the papers' numbers are their inputs: an edit (with Snakemake's
    memory gone too) plans the tables that use it, and no training."""
    forget(project)
    jobs = edited(project, path)
    assert "train" not in jobs and "study" in jobs and "report" in jobs


def test_a_kernel_edit_retrains_that_kernels_runs_only(project: Path) -> None:
    jobs = edited(project, FNA_KERNEL)
    assert trained(jobs) == ["lra_fna"]
    assert {"aggregate", "study", "report"} <= set(jobs)


def test_a_backbone_edit_retrains_every_run(project: Path) -> None:
    assert trained(edited(project, "src/pdelab/models/transformer.py")) == [
        "after_embedding",
        "baseline",
        "lra_fna",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "src/pdelab/report/tables.py",
        "src/pdelab/tracking/sync.py",
        "src/pdelab/cli.py",
        "src/pdelab/data/download.py",  # its files are named by their pinned checksums
        "src/pdelab/data/pathfinder.py",  # another task's data module (the tiny tree: ListOps)
    ],
)
def test_an_edit_outside_any_runs_code_retrains_nothing(project: Path, path: str) -> None:
    jobs = edited(project, path)
    assert "train" not in jobs and "data" not in jobs, jobs


def test_a_tasks_data_module_edit_reruns_its_data_job_then_its_runs(project: Path) -> None:
    """A data job's inputs are the code it runs: an edit to ListOps's generator re-prepares
    ListOps, and Snakemake, which cannot know the data will come out the same, plans its runs."""
    jobs = edited(project, "src/pdelab/data/listops.py")
    assert jobs["data"] == ["profile=smoke, task=listops"], jobs
    assert trained(jobs) == ["after_embedding", "baseline", "lra_fna"]


def test_each_run_trained_the_plan_the_workflow_wrote(project: Path) -> None:
    """A job trains its run's plan (results/stamps/..., pdelab.records.staleness) and resolves
    nothing itself: every run.json holds its plan's spec, code digest and data, a kernel's run
    too."""
    assert planned(project) == {}  # a parse: each plan names the prepared data too
    stamps = sorted((project / "results/stamps/smoke/listops").glob("*/seed0.json"))
    assert [s.parent.name for s in stamps] == ["after_embedding", "baseline", "lra_fna"]
    for stamp in stamps:
        plan = json.loads(stamp.read_text())
        run = project / "results/runs/smoke/listops" / stamp.parent.name / "seed0"
        made = json.loads((run / "run.json").read_text())
        assert made["spec"] == plan["spec"], stamp
        assert made["provenance"]["code_digest"] == plan["code_digest"], stamp
        assert made["identity"]["data_hash"] == plan["data_hash"], stamp


def test_run_json_records_the_code_it_ran(project: Path) -> None:
    made = json.loads((project / "results/runs/smoke/listops/lra_fna/seed0/run.json").read_text())[
        "provenance"
    ]
    assert FNA_KERNEL.removeprefix("src/") in made["code"] and len(made["code_digest"]) == 16
    assert made["git_dirty"] in (True, False, None) and made["git_commit"]


@pytest.mark.parametrize(
    "cosmetic",
    ["\n# a cosmetic comment\n", '\n\ndef _unused():\n    """A docstring."""\n'],
    ids=["comment", "docstring-only function"],
)
def test_a_comment_edit_retrains_nothing(project: Path, cosmetic: str) -> None:
    """Code is digested without comments and docstrings (pdelab.records.provenance.code_text):
    a comment in the backbone, with .snakemake/ kept or gone, plans nothing and every run stays
    current; a function whose body is only a docstring is code (it becomes ``pass``)."""
    backbone = project / "src/pdelab/models/transformer.py"
    original = backbone.read_text()
    backbone.write_text(original + cosmetic)
    try:
        jobs = planned(project)
        status = "\n".join(pdelab_status(project))
    finally:
        backbone.write_text(original)
    if "#" in cosmetic:
        assert jobs == {}
        assert "every run is trained from its current spec, code and data" in status
    else:
        assert len(trained(jobs)) == 3


def test_a_touch_keeps_no_stale_run(project: Path) -> None:
    """Dates never decide (docs/reruns.md): `snakemake --touch` after an edit that changes the
    code marks nothing current, the records still say the runs ran other code."""
    backbone = project / "src/pdelab/models/transformer.py"
    original = backbone.read_text()
    backbone.write_text(original + "\nEDITED = True\n")
    try:
        sh(["snakemake", "--cores", "1", "--touch"], project)
        assert len(trained(planned(project))) == 3
    finally:
        backbone.write_text(original)
    assert planned(project) == {}


def test_a_table_of_runs_of_different_code_says_so(project: Path) -> None:
    """One run retrained after a backbone edit, the table built before the others: it names
    the file its runs ran in two versions. (Last in this module: it leaves a run of the edited
    code behind.)"""
    backbone = project / "src/pdelab/models/transformer.py"
    backbone.write_text(backbone.read_text() + "\nEDITED = True\n")
    run = "results/runs/smoke/listops/baseline/seed0/run.json"
    sh(["snakemake", "--cores", "2", run], project)
    status = "\n".join(pdelab_status(project))
    assert "listops lra_fna seed 0: code: pdelab/models/transformer.py" in status
    assert "2 of 3 runs would be trained again" in status
    table = "results/tables/kernels.md"
    sh(["snakemake", "--cores", "2", table, "--allowed-rules", "aggregate", "study"], project)
    text = (project / table).read_text()
    assert "Built from runs of different code: pdelab/models/transformer.py (2 versions)" in text
