"""The GPU profiles as Snakemake plans them (a dry run on a CPU, no data needed): every
training run of the paper and paper_mini profiles is one job that asks for one GPU, so
``--resources gpu=N`` runs N at once and pdelab.gpu_slots gives each its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from pdelab.config import load_params
from pdelab.run_sheet import same_runs, validate

pytestmark = pytest.mark.slow
README = ROOT / "README.md"


def dry_run(work: Path, profile: str) -> str:
    """``snakemake -n`` on a copy of the workflow whose params.yaml names ``profile``."""
    for name in ("Snakefile", "dvc.yaml", "workflow", "src"):
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
    # the README's cost-plan table says how many jobs of each kind Snakemake plans
    total = int(re.search(r"(?m)^total\s+(\d+)$", out).group(1))
    row = re.search(rf"(?m)^\| `{profile}` \| (\d+) of (\d+) \|", README.read_text())
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
