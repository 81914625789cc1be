"""A run's code provenance (pdelab.records.provenance): the source it executes, read without
importing it, matches what a job imports; each registered kernel and block is found where it
registers; a digest changes with exactly the files it covers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pdelab.records import provenance
from pdelab.spec import task_kinds
from pdelab.spec.options import ATTENTION_OPTIONS, BLOCK_OPTIONS
from pdelab.spec.plugins import load_all
from pdelab.spec.run_sheet import validate

load_all()  # every paper registers its kernels' and blocks' options
KERNELS = ATTENTION_OPTIONS.names()
BLOCKS = BLOCK_OPTIONS.names()
TASK_KIND_MODULES = tuple(task_kinds.TASK_KINDS.get(n).module for n in task_kinds.TASK_KINDS)


@pytest.fixture(scope="module")
def smoke_runs(params: dict) -> list:
    return validate(params, "smoke")


def test_the_core_read_from_the_source_is_what_a_job_imports() -> None:
    """``import pdelab.training.train`` in a fresh interpreter loads exactly the static closure of
    the core, MLflow's logging included (a job imports its own task kind's strategy and
    mechanisms later, and no other's)."""
    code = (
        "import sys, pdelab.training.train; print(*sorted(m for m in sys.modules if 'pdelab' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    static = provenance.closure((provenance.CORE_ENTRY,))
    assert loaded == static
    assert "pdelab.tracking.log" in static  # it runs in every job, so it is hashed


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_attention_kernel_is_found_where_it_registers(kernel: str) -> None:
    from pdelab.models.attention import ATTENTION_KERNELS
    from pdelab.spec.plugins import import_mechanisms

    import_mechanisms()
    declared = ATTENTION_OPTIONS.get(kernel).module
    roots = (declared,) if declared else (provenance.CORE_ENTRY, *TASK_KIND_MODULES)
    assert ATTENTION_KERNELS.get(kernel).__module__ in provenance.closure(roots)
    assert set(ATTENTION_KERNELS.names()) == set(KERNELS)  # no kernel without options


@pytest.mark.parametrize("block", BLOCKS)
def test_each_encoder_block_is_found_where_it_registers(block: str) -> None:
    from pdelab.models.transformer import ENCODER_BLOCKS
    from pdelab.spec.plugins import import_mechanisms

    import_mechanisms()
    declared = BLOCK_OPTIONS.get(block).module
    if block == "transformer":  # the backbone's own block is built in, not registered
        assert declared == ""
        return
    assert ENCODER_BLOCKS.get(block).__module__ in provenance.closure((declared,))


def test_a_runs_code_is_the_core_and_the_mechanisms_its_spec_names(smoke_runs: list) -> None:
    by_variant = {(r.task, r.variant): provenance.code_files(r) for r in smoke_runs}
    baseline = by_variant["listops", "baseline"]
    fna = by_variant["listops", "lra_fna"]
    ldn = by_variant["listops", "ldn"]
    assert "pdelab/training/train.py" in baseline and "pdelab/models/transformer.py" in baseline
    # of the papers, a baseline run executes only their registrations (every job validates
    # its spec against them): each package's __init__ and the option checks it imports
    registration = {f for f in baseline if f.startswith("pdelab/papers/")}
    assert registration == {"pdelab/papers/__init__.py"} | {
        provenance.source_path(m)
        for m in provenance.closure(provenance.registrations())
        if m.startswith("pdelab.papers")
    }
    assert "pdelab/papers/fractional_attention/__init__.py" in registration
    assert not [f for f in registration if f.endswith(("/attention.py", "/layer.py"))]
    assert set(fna) - set(baseline) == {
        "pdelab/papers/fractional_attention/attention.py",
        "pdelab/papers/fractional_attention/flex.py",  # imported by attention.py (CUDA path)
    }
    assert "pdelab/papers/linear_diffusion/layer.py" in ldn
    assert "pdelab/training/language_model.py" in by_variant["wikitext", "baseline"]
    assert "pdelab/training/language_model.py" not in baseline
    # nor the data stages: a classification job reads prepared data, it fetches nothing
    assert not {"pdelab/data/download.py", "pdelab/data/sources.py"} & set(baseline)
    for files in by_variant.values():  # the report is no run's code; what starts a job is
        assert not [f for f in files if f.startswith("pdelab/report/")]
        assert {"pdelab/runtime/warm.py", "pdelab/tracking/log.py"} <= set(files)


def test_a_digest_changes_with_exactly_the_files_it_covers(smoke_runs: list, monkeypatch) -> None:
    """An edit of the FNA kernel changes the digest of every run whose spec names an FNA
    kernel and of no other; an edit of the backbone changes them all."""
    before = {(r.task, r.variant, r.seed): provenance.code_digest(r) for r in smoke_runs}

    def digests_after_editing(module: str) -> dict:
        real = provenance.file_sha256

        def edited(name: str) -> str:
            return "0" * 64 if name == module else real(name)

        monkeypatch.setattr(provenance, "file_sha256", edited)
        for cached in (provenance.files_of, provenance.digest_of):
            cached.cache_clear()
        try:
            return {(r.task, r.variant, r.seed): provenance.code_digest(r) for r in smoke_runs}
        finally:
            monkeypatch.setattr(provenance, "file_sha256", real)
            for cached in (provenance.files_of, provenance.digest_of):
                cached.cache_clear()

    after = digests_after_editing("pdelab.papers.fractional_attention.attention")
    changed = {k for k in before if before[k] != after[k]}
    fna = {(r.task, r.variant, r.seed) for r in smoke_runs if r.model.attention.startswith("fna")}
    assert changed == fna and fna
    after = digests_after_editing("pdelab.models.transformer")
    assert all(before[k] != after[k] for k in before)


def test_files_in_more_than_one_version_are_named() -> None:
    one, two = {"a.py": "1", "b.py": "1"}, {"a.py": "2", "b.py": "1"}
    assert provenance.versions([one, two, one]) == {"a.py": 2}
    assert provenance.versions([one, one]) == {}
    assert provenance.changed_files(one, two | {"c.py": "1"}) == ["a.py", "c.py"]


def test_the_git_state_names_the_commit_and_a_dirty_tree() -> None:
    commit, dirty = provenance.git_state()
    assert commit == "unknown" or (len(commit) >= 7 and isinstance(dirty, bool))


def test_a_run_is_dirty_only_when_its_own_source_differs(tmp_path: Path, monkeypatch) -> None:
    """What a build writes itself (dvc.lock) or an edit of a file the run does not execute
    leaves the run clean; an edit of one of its files, or one not committed, makes it dirty."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "src/pdelab/training").mkdir(parents=True)
    for name in ("src/pdelab/training/train.py", "src/pdelab/other.py", "dvc.lock"):
        (tmp_path / name).write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(provenance, "source_root", lambda: str(tmp_path / "src"))
    runs = ["pdelab/training/train.py"]
    (tmp_path / "dvc.lock").write_text("rewritten by the build\n")
    (tmp_path / "src/pdelab/other.py").write_text("x = 2\n")
    assert provenance.git_state(runs)[1] is False
    assert provenance.git_state()[1] is True  # the whole tree is dirty
    assert provenance.git_state([*runs, "pdelab/new.py"])[1] is False  # absent: not its code
    (tmp_path / "src/pdelab/new.py").write_text("x = 3\n")
    assert provenance.git_state([*runs, "pdelab/new.py"])[1] is True  # its code, uncommitted
    (tmp_path / "src/pdelab/training/train.py").write_text("x = 2\n")
    assert provenance.git_state(runs)[1] is True


# Run in a fresh interpreter: the job's command line, then the project modules it has loaded.
JOB = """
import json, sys
from pdelab.training import train
train.main(sys.argv[1:])
print(json.dumps(sorted(m for m in sys.modules if m == "pdelab" or m.startswith("pdelab."))))
"""


@pytest.fixture(scope="module")
def job_dir(tiny_workdir, tmp_path_factory) -> Path:
    """Prepared tiny ListOps and a variant per registered kernel and block (one epoch)."""
    work = tiny_workdir(tmp_path_factory.mktemp("job"))
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["profiles"]["smoke"]["overrides"]["train"].update(epochs=1, patience=1)
    for kernel in KERNELS:
        params["variants"][f"probe_{kernel}"] = {"model": {"attention": kernel}}
    for block in BLOCKS:
        params["variants"][f"probe_block_{block}"] = {"model": {"block": block}}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    return work


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant", [f"probe_{k}" for k in KERNELS] + [f"probe_block_{b}" for b in BLOCKS]
)
def test_every_project_module_a_real_job_loads_is_in_its_digest(
    job_dir: Path, variant: str
) -> None:
    """A training job of each registered kernel and block (so of each paper) ends with no
    project module loaded that its code digest leaves out (a module imported at run time but
    not hashed could change the run's numbers unseen), observers aside; its own mechanism
    module is among them."""
    from pdelab.spec.config import load_params, resolve

    args = ["--task", "listops", "--variant", variant, "--seed", "0", "--out", variant]
    out = subprocess.run(
        [sys.executable, "-c", JOB, *args, "--threads", "1", "--no-mlflow", "--no-progress"],
        cwd=job_dir,
        env=os.environ | {"PDELAB_WARM": "0"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    run = resolve(load_params(job_dir / "params.yaml"), "listops", variant, 0, "smoke")
    files = provenance.code_files(run)
    unhashed = loaded - {m for m in loaded if provenance.source_path(m) in files}
    assert unhashed == set()
    assert set(provenance.mechanism_modules(run)) <= loaded
    recorded = json.loads((job_dir / variant / "run.json").read_text())["provenance"]
    assert recorded["code"] == files


@pytest.mark.parametrize(
    "edit",
    [
        "# a comment\n",
        '"""A docstring, reworded."""\n',
    ],
)
def test_a_comment_or_docstring_edit_leaves_the_code_digest(edit: str) -> None:
    """Comments, docstrings and layout are not code: the digest of every module stays."""
    for module in ("pdelab.training.train", "pdelab.tracking.log", "pdelab.models.transformer"):
        source = provenance.import_graph.modules()[module].read_bytes()
        edited = edit.encode() + source if "#" in edit else source.replace(b'"""', b'"""Re: ', 1)
        assert provenance.code_sha256(edited) == provenance.code_sha256(source)
        assert provenance.code_sha256(source + b"\nEDITED = 1\n") != provenance.code_sha256(source)


def test_a_function_docstring_alone_is_replaced_by_pass() -> None:
    only = b'def f():\n    """Why."""\n'
    assert "pass" in provenance.code_text(only)
    assert provenance.code_sha256(only) != provenance.code_sha256(b"def g():\n    pass\n")
