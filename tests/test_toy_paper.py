"""Adding a paper is one folder: a toy paper (one attention kernel, one study kind, its variant
and study in its own config.yaml) written into a copy of the project is planned, trained,
tabled and captioned by the workflow with no edit anywhere else, params.yaml included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_workflow import set_studies

pytestmark = pytest.mark.slow  # the whole workflow of a copied project

ROOT = Path(__file__).resolve().parents[1]

TOY = {
    "__init__.py": '''"""A toy paper: attention over cosine similarities at a temperature."""

from pdelab.spec.options import ATTENTION_OPTIONS, KernelOptions
from pdelab.spec.plugins import Paper, register


def check(temperature: float = 0.1) -> None:
    if not temperature > 0:
        raise ValueError(f"option 'temperature'={temperature} must be > 0")


ATTENTION_OPTIONS.register("cosine")(KernelOptions(names=("temperature",), check=check))

PAPER = register(
    Paper(
        name="toy",
        title="A Toy Paper on Cosine Attention",
        study_kinds=("toy_accuracy",),
        mechanisms=("kernel",),
    )
)
''',
    "kernel.py": '''"""Softmax over cosine similarities of queries and keys, over a temperature."""

import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.models.attention import ATTENTION_KERNELS, attention_mask


@ATTENTION_KERNELS.register("cosine")
class CosineKernel(nn.Module):
    def __init__(self, heads: int, head_dim: int, dropout: float = 0.0, temperature: float = 0.1):
        super().__init__()
        self.temperature = temperature

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask, causal: bool) -> Tensor:
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        mask = attention_mask(key_padding_mask, causal, q.shape[-2], q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return (scores / self.temperature).softmax(dim=-1) @ v
''',
    "report.py": '''"""The toy paper's study: accuracy per task and variant, ours only."""

from pdelab.report.claims import NEEDS_PAPER, Claim
from pdelab.report.context import StudyContext
from pdelab.report.figures import accuracy_by_variant
from pdelab.report.table_file import TableFile
from pdelab.report.tables import accuracy_tables, study_frame


def write_accuracy(s: StudyContext) -> TableFile:
    frame = study_frame(s.summary, s.study, None)
    accuracy_by_variant(frame, s.title, s.profile, s.figure)
    return accuracy_tables(frame, s.title, s.profile)


STUDY_WRITERS = {"toy_accuracy": write_accuracy}


def claims(ctx) -> list[Claim]:
    return [
        Claim("Cosine attention learns ListOps", "Abstract", "cosine attention learns", "",
              "", NEEDS_PAPER, ctx.profile, reason="the toy paper prints no number"),
    ]


def appendix(ctx) -> list[str]:
    return []
''',
    "config.yaml": """\
# The toy paper's variant and study, on a task of another paper (ListOps), one seed in smoke.
variants:
  toy_cosine: {model: {attention: cosine, attention_options: {temperature: 0.2}}}
studies:
  toy:
    kind: toy_accuracy
    title: "Toy: cosine attention against softmax attention"
    tasks: [listops]
    variants: [baseline, toy_cosine]
profiles:
  smoke:
    studies:
      toy: {seeds: [0]}
""",
}
TOY_CONFIG = "src/pdelab/papers/toy/config.yaml"


def params_yaml_unchanged(tree: Path) -> bool:
    return (tree / "params.yaml").read_bytes() == (ROOT / "params.yaml").read_bytes()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's files and the toy paper's folder: nothing else is edited."""
    tree = tmp_path_factory.mktemp("toy") / "project"
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    folder = tree / "src" / "pdelab" / "papers" / "toy"
    folder.mkdir()
    for name, text in TOY.items():
        (folder / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)  # DVC needs a repository
    return tree


def pdelab(tree: Path, *args: str) -> str:
    """The copy's ``pdelab`` command, with the copy's pdelab."""
    env = os.environ | {"PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_toy_papers_runs_join_the_project_with_params_yaml_untouched(project: Path) -> None:
    assert params_yaml_unchanged(project)
    listed = pdelab(project, "list")
    assert "  toy (toy_accuracy): 1 x 2 x 1  tasks listops" in listed
    assert "  positions (accuracy): 5 x 8 x 2" in listed  # the other papers' runs stay
    explained = pdelab(project, "explain", "listops", "toy_cosine")
    assert f"<- {TOY_CONFIG}: variants.toy_cosine.model.attention" in explained
    assert params_yaml_unchanged(project)


def snakemake(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(tree / "src"), "PDELAB_WARM": "0"}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_toy_paper_is_planned_trained_tabled_and_captioned(project: Path) -> None:
    """Built with the other papers' studies left out of the copy (their config files'), so
    that only the toy's runs train."""
    set_studies(project, {})
    (project / TOY_CONFIG).write_text(TOY["config.yaml"])  # the toy's study, put back
    plan = snakemake(project, "-n", "--quiet", "rules")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "train" in plan.stdout and "study" in plan.stdout

    run = snakemake(project, "--quiet", "rules")
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    record = project / "results/runs/smoke/listops/toy_cosine/seed0/run.json"
    assert '"attention": "cosine"' in record.read_text()
    table = (project / "results/tables/toy.md").read_text()
    assert "toy_cosine" in table and "baseline" in table
    report = (project / "results/REPORT.md").read_text()
    assert "A Toy Paper on Cosine Attention" in report.split("## ", 2)[1]  # on the scoreboard
    page = (project / "results/report/toy.md").read_text()  # the paper's own page
    assert "Cosine attention learns ListOps" in page and "toy" in page

    zipped = project / "report.zip"
    made = snakemake(project, "--report", str(zipped))
    assert made.returncode == 0, made.stderr[-3000:]
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        assert any(n.endswith("toy.md") for n in names)
        html = "".join(
            archive.read(n).decode(errors="ignore") for n in names if n.endswith(".html")
        )
    assert "A Toy Paper on Cosine Attention" in html  # its table filed under the paper
    assert params_yaml_unchanged(project)


def test_a_profile_declared_in_params_yaml_alone_runs_the_toy_paper(project: Path) -> None:
    """A run profile no code knows, one block that extends smoke, selected in params.yaml:
    the toy paper's runs train under it, in its own folders, and the report names it by its
    own description (run after the build above, on the same copy)."""
    import yaml

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["profile"] = "toy"
    params["profiles"]["toy"] = {
        "extends": "smoke",
        "description": "the toy paper's own check, one seed",
        "seeds": [0],
    }
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run = snakemake(project, "--quiet", "rules")
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    record = project / "results/runs/toy/listops/toy_cosine/seed0/run.json"
    assert '"profile": "toy"' in record.read_text()
    assert not (project / "results/runs/toy/listops/toy_cosine/seed1").exists()
    report = (project / "results/REPORT.md").read_text()
    assert "toy profile: the toy paper's own check, one seed" in report
