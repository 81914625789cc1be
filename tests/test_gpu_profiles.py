"""The GPU profiles as Snakemake plans them (a dry run on a CPU, no data needed): every
training run of the paper and paper_mini profiles is one job that asks for one GPU, so
``--resources gpu=N`` runs N at once and pdelab.runtime.gpu_slots gives each its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from pdelab.spec.config import load_params
from pdelab.spec.run_sheet import same_runs, validate

pytestmark = pytest.mark.slow
SCALING = ROOT / "docs" / "scaling.md"  # the cost plan's table


def dry_run(work: Path, profile: str) -> str:
    """``snakemake -n`` on a copy of the workflow whose params.yaml names ``profile``."""
    for name in ("Snakefile", "dvc.yaml", "tasks.yaml", "workflow", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    text = (ROOT / "params.yaml").read_text()
    text, n = re.subn(r"(?m)^profile: \w+$", f"profile: {profile}", text)
    assert n == 1
    (work / "params.yaml").write_text(text)  # as written: its YAML anchors stay
    out = subprocess.run(
        ["snakemake", "-n", "--cores", "1"], cwd=work, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize("profile", ["paper", "paper_mini"])
def test_every_training_job_asks_for_one_gpu(tmp_path, profile):
    params = load_params(ROOT / "params.yaml")
    specs = validate(params, profile)
    shared = {(k.task, k.variant, k.seed) for k in same_runs(specs)}  # trained once
    expected = {
        f"task={s.task}, variant={s.variant}, seed={s.seed}"
        for s in specs
        if (s.task, s.variant, s.seed) not in shared
    }
    assert all(s.device == "cuda" and s.train.precision == "bf16" for s in specs)

    planned = {}
    out = dry_run(tmp_path, profile)
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        if block.startswith("rule train:"):
            wildcards = re.search(r"wildcards: profile=\w+, (.*)", block).group(1)
            planned[wildcards] = re.search(r"resources: (.*)", block).group(1)
    assert set(planned) == expected
    assert all("gpu=1" in resources.split(", ") for resources in planned.values())
    # the cost-plan table (docs/scaling.md) says how many jobs of each kind Snakemake plans
    total = int(re.search(r"(?m)^total\s+(\d+)$", out).group(1))
    row = re.search(rf"(?m)^\| `{profile}` \| (\d+) of (\d+) \|", SCALING.read_text())
    assert (int(row.group(1)), int(row.group(2))) == (len(planned), total)


def test_paper_mini_is_the_paper_profile_for_one_epoch_on_small_data():
    params = load_params(ROOT / "params.yaml")
    paper = {(s.task, s.variant): s for s in validate(params, "paper")}
    mini = {(s.task, s.variant): s for s in validate(params, "paper_mini")}
    assert set(mini) <= set(paper) and {t for t, _ in mini} == {t for t, _ in paper}
    for key, run in mini.items():
        assert run.model == paper[key].model  # the paper's model sizes
        assert run.train.epochs == 1
        same = ("batch_size", "lr", "betas", "weight_decay", "seq_len", "precision")
        assert all(getattr(run.train, f) == getattr(paper[key].train, f) for f in same)
    for task, block in params["data"]["paper_mini"].items():
        # the same fetchers as the paper profile, on a few hundred examples
        assert block["source"] == params["data"]["paper"][task]["source"], task
        sizes = [block[k] for k in ("n_train", "n_val", "n_test") if k in block]
        assert all(n <= 500 for n in sizes), task


def test_a_gpu_profile_stops_before_any_job_where_no_gpu_is_visible(tmp_path):
    """No GPU here (PDELAB_GPUS empty, whatever the machine has): the run stops once, before
    any job, naming the fix, instead of starting training jobs that each fail alone."""
    dry_run(tmp_path, "paper_mini")  # the copy, and its plan
    (tmp_path / "profiles").symlink_to("workflow/profiles")
    target = "results/runs/paper_mini/listops/baseline/seed0/run.json"
    env = {**os.environ, "PDELAB_GPUS": "", "PYTHONPATH": str(tmp_path / "src")}
    out = subprocess.run(["snakemake", "--cores", "1", target], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0
    assert "run profile paper_mini trains on device: cuda, and no GPU is visible" in said
    assert "none of its 1 training jobs would run" in said
    assert "profiles.paper_mini.device: auto" in said
    assert not (tmp_path / "results" / "logs").exists()  # no job started, the data job neither


# -- what each job asks for (pdelab.runtime.cluster), and the GPU slot of every job that opens CUDA
# --

# every rule whose job opens CUDA on a CUDA run profile: the trainer takes its GPU slot itself
# (pdelab.runtime.gpu_slots); the others run under pdelab.runtime.gpu_job, which takes one for them
CUDA_RULES = {"train", "replicate", "cost_timing", "mechanisms_timing", "fna_tail", "fna_graphs"}
SMALL_RULES = {"aggregate", "study", "heatmap", "learning", "report"}  # tables from Parquet


def planned_jobs(out: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, resources, shell command) of every job a dry run lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        if rule := re.match(r"(?:local)?rule (\w+):", block):
            found = re.search(r"resources: (.*)", block)
            resources = dict(kv.split("=", 1) for kv in found.group(1).split(", ")) if found else {}
            shell = re.search(r"Shell command: (.*)", block)
            jobs.append((rule.group(1), resources, shell.group(1) if shell else ""))
    return jobs


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, list[tuple[str, dict[str, str], str]]]:
    return {p: planned_jobs(dry_run(tmp_path_factory.mktemp(p), p)) for p in ("paper", "smoke")}


def test_the_jobs_that_ask_for_a_gpu_are_exactly_those_that_open_cuda(plans) -> None:
    asking = {rule for rule, res, _ in plans["paper"] if res.get("gpu") == "1"}
    assert asking == CUDA_RULES
    assert sum(rule == "mechanisms_timing" for rule, _, _ in plans["paper"]) == 5
    assert not [rule for rule, res, _ in plans["smoke"] if res.get("gpu", "0") != "0"]


@pytest.fixture(scope="module")
def shells() -> dict[str, str]:
    """Each rule's shell command as written (read through Snakemake's API, no job runs)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(), snakefile=ROOT / "Snakefile", workdir=ROOT
        )
        workflow = wf._workflow  # noqa: SLF001 - the rules as parsed; the API exposes no other
        return {rule.name: rule.shellcmd or "" for rule in workflow.rules}


@pytest.mark.parametrize("rule", sorted(CUDA_RULES - {"train", "replicate"}))  # their own slot
def test_a_job_that_opens_cuda_takes_a_gpu_slot(plans, shells, rule) -> None:
    """Locally each takes a slot of its own before its command starts (so a timing never
    measures beside a training job): pdelab.runtime.gpu_job is given the job's gpu resource, 1 on a
    CUDA profile (on SLURM: a GPU allocation), 0 on a CPU one."""
    assert "python -m pdelab.runtime.gpu_job {resources.gpu} python -m " in shells[rule]
    for profile, gpus in (("paper", "1"), ("smoke", "0")):
        jobs = [res for name, res, _ in plans[profile] if name == rule]
        assert jobs and all(res["gpu"] == gpus for res in jobs), (profile, rule)


def test_training_takes_its_slot_in_the_trainer() -> None:
    source = (ROOT / "src/pdelab/training/train.py").read_text()
    assert "gpu_slots.claim(run.device)" in source  # tests/test_gpu_slots.py runs it


@pytest.mark.parametrize("profile", ["paper", "smoke"])
def test_each_job_asks_for_its_rules_memory_and_time(plans, profile) -> None:
    from pdelab.runtime import cluster

    device = "cuda" if profile == "paper" else "cpu"
    for rule, res, _ in plans[profile]:
        ask = (int(res.get("mem_mb", 0)), int(res.get("runtime", 0)))
        if rule in ("train", "replicate"):  # no cost plan in the copy: the device's allowance
            assert ask == (
                cluster.TRAIN_DEFAULT[device].mem_mb,
                cluster.TRAIN_DEFAULT[device].runtime,
            )
        elif rule in SMALL_RULES:
            assert ask == (cluster.SMALL.mem_mb, cluster.SMALL.runtime), rule
        elif rule in CUDA_RULES:
            assert ask == (cluster.PROBE[device].mem_mb, cluster.PROBE[device].runtime), rule
