"""Naming the inputs that differ from the commit: a run's record lists them (``uncommitted``) and
the report writes them beside its commit, so "commit 5cf4f64" never stands for a tree that edits
params.yaml, a paper's config.yaml or the source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pdelab.records import provenance
from pdelab.report import document
from pdelab.spec.config import load_params, resolve

ROOT = Path(__file__).parents[1]
FILES = (
    "params.yaml",
    "src/pdelab/papers/demo/__init__.py",  # a paper package: its config.yaml is read
    "src/pdelab/papers/demo/config.yaml",
    "src/pdelab/training/train.py",
    "src/pdelab/other.py",
    "dvc.lock",
)


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed checkout laid out as the project's, worked in from its top; data/ ignored."""
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x: 1\n")
    (tmp_path / ".gitignore").write_text("/data/\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_clean_tree_has_no_uncommitted_inputs(checkout: Path) -> None:
    assert provenance.uncommitted(FILES) == []
    assert provenance.uncommitted(["."]) == []


def test_exactly_the_edited_and_untracked_inputs_are_named(checkout: Path) -> None:
    (checkout / "params.yaml").write_text("x: 2\n")
    (checkout / "src/pdelab/training/train.py").write_text("x = 2\n")
    (checkout / "src/pdelab/new.py").write_text("x = 3\n")  # untracked
    (checkout / "src/pdelab/other.py").unlink()  # deleted: differs from the commit too
    (checkout / "dvc.lock").write_text("rewritten by the build\n")  # not an input below
    (checkout / "data").mkdir()
    (checkout / "data/prepared.npy").write_text("ignored\n")
    inputs = [
        "params.yaml",
        "src/pdelab/papers/demo/config.yaml",
        "src/pdelab/training/train.py",
        "src/pdelab/new.py",
        "src/pdelab/other.py",
        "data/prepared.npy",
    ]
    assert provenance.uncommitted(inputs) == [
        "params.yaml",
        "src/pdelab/new.py",
        "src/pdelab/other.py",
        "src/pdelab/training/train.py",
    ]
    # a folder names what differs under it; absolute paths and a subfolder's cwd read alike
    assert provenance.uncommitted([checkout / "src"]) == [
        "src/pdelab/new.py",
        "src/pdelab/other.py",
        "src/pdelab/training/train.py",
    ]
    sub = checkout / "src/pdelab"
    assert provenance.uncommitted(["training/train.py"], cwd=sub) == [
        "src/pdelab/training/train.py"
    ]
    git(checkout, "add", "params.yaml")  # staged is still not committed
    assert provenance.uncommitted(["params.yaml"]) == ["params.yaml"]


def test_a_path_with_pattern_characters_is_that_path(checkout: Path) -> None:
    (checkout / "src/pdelab/o*.py").write_text("x = 4\n")
    (checkout / "src/pdelab/other.py").write_text("x = 5\n")
    assert provenance.uncommitted(["src/pdelab/o*.py"]) == ["src/pdelab/o*.py"]


def test_outside_a_git_checkout_is_none(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("x: 1\n")
    assert provenance.uncommitted(["params.yaml"], cwd=tmp_path) is None
    assert provenance.edits_phrase(None) == ""


def test_paths_outside_the_checkout_are_not_its_to_name(checkout: Path, tmp_path_factory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "params.yaml"
    elsewhere.write_text("x: 1\n")
    (checkout / "params.yaml").write_text("x: 2\n")
    assert provenance.uncommitted([elsewhere, "params.yaml"]) == ["params.yaml"]


def test_without_git_it_is_none(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(checkout / "no-bin"))
    assert provenance.uncommitted(["params.yaml"]) is None


@pytest.mark.parametrize(
    ("edited", "phrase"),
    [
        ([], "commit 5cf4f64"),
        (None, "commit 5cf4f64"),
        (["params.yaml"], "commit 5cf4f64 plus uncommitted edits to params.yaml (1 file)"),
        (
            ["params.yaml", "src/pdelab/papers/demo/config.yaml"],
            "commit 5cf4f64 plus uncommitted edits to params.yaml, "
            "src/pdelab/papers/demo/config.yaml (2 files)",
        ),
        (
            [f"src/f{i}.py" for i in range(8)],
            "commit 5cf4f64 plus uncommitted edits to src/f0.py, src/f1.py, src/f2.py, "
            "src/f3.py, src/f4.py and 3 more (8 files)",
        ),
    ],
)
def test_the_commit_phrase_names_the_edited_files(edited: list[str] | None, phrase: str) -> None:
    assert provenance.commit_phrase("5cf4f64", edited) == phrase


def test_the_report_names_the_edits_inside_the_masked_commit_span(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPORT.md writes ``at commit `<sha> plus ...```: one code span, the one the golden test
    masks, so a report made from an edited tree still compares equal there."""
    monkeypatch.setattr(provenance, "source_root", lambda: str(checkout / "src"))
    sha = git(checkout, "rev-parse", "--short", "HEAD")
    assert document.made_at() == sha
    (checkout / "src/pdelab/papers/demo/config.yaml").write_text("x: 2\n")
    (checkout / "dvc.lock").write_text("rewritten by the build\n")  # not the project's input
    made = document.made_at()
    assert made == f"{sha} plus uncommitted edits to src/pdelab/papers/demo/config.yaml (1 file)"
    assert "`" not in made  # the header's one code span holds it whole


def test_a_run_record_names_its_uncommitted_inputs(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """record() finds the run's inputs itself (its code files and its params files): an edit of
    a file the run does not execute is not among them."""
    run = resolve(load_params(ROOT / "params.yaml"), "listops", "baseline", 0, "smoke")
    code = provenance.code_files(run)
    monkeypatch.setattr(provenance, "source_root", lambda: str(checkout / "src"))
    for name in code:
        (checkout / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / "src" / name).write_text("x = 1\n")
    git(checkout, "add", ".")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    assert provenance.record(run, "c0ffee", False)["uncommitted"] == []
    executed = next(iter(code))
    (checkout / "src" / executed).write_text("x = 2\n")
    (checkout / "src/pdelab/other.py").write_text("x = 2\n")  # not the run's code
    (checkout / "params.yaml").write_text("x: 2\n")
    (checkout / "src/pdelab/papers/demo/config.yaml").write_text("x: 2\n")
    block = provenance.record(run, "c0ffee", True)
    assert block["uncommitted"] == sorted(
        ["params.yaml", "src/pdelab/papers/demo/config.yaml", f"src/{executed}"]
    )
    assert block["code"] == code and block["code_digest"] == provenance.digest(code)
    assert json.loads(json.dumps(block)) == block  # run.json holds it as written
