"""Run profiles are params, never code: a profile declares what code needs to know (judged,
device, a description), may ``extends:`` another (inheriting its settings and every paper's
blocks for it), and no module of the package compares, defaults to or names a profile."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from pdelab.spec.config import ConfigError, load_params, origins, resolve
from pdelab.spec.run_sheet import trained_runs

PROFILES = ("smoke", "paper", "paper_mini")  # params.yaml's profiles: no code may name them


def with_profile(tmp_path: Path, name: str, block: dict) -> Path:
    """params.yaml with one more run profile, the papers' config files beside it."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["profiles"][name] = block
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "src" / "pdelab").mkdir(parents=True)
    (tmp_path / "src" / "pdelab" / "papers").symlink_to(ROOT / "src" / "pdelab" / "papers")
    if (ROOT / "tasks.yaml").exists():
        (tmp_path / "tasks.yaml").symlink_to(ROOT / "tasks.yaml")
    return tmp_path / "params.yaml"


def spec_of(params: dict, run, profile: str) -> dict:
    """A run's resolved spec less what names its profile (the name and the data folder)."""
    spec = resolve(params, run.task, run.variant, run.seed, profile).to_dict()
    return {k: v for k, v in spec.items() if k not in ("profile", "data_dir")}


def test_a_profile_that_extends_paper_resolves_every_spec_as_paper_does(tmp_path: Path) -> None:
    """One block of params.yaml: every paper's blocks for `paper` (FNA's d 256, 6 layers, lr
    1e-4 among them) are the new profile's too, and its runs are paper's runs."""
    params = load_params(with_profile(tmp_path, "paper_h100", {"extends": "paper"}))
    runs = trained_runs(params, "paper")
    assert [(r.task, r.variant, r.seed) for r in trained_runs(params, "paper_h100")] == [
        (r.task, r.variant, r.seed) for r in runs
    ]
    for run in runs:
        assert spec_of(params, run, "paper_h100") == spec_of(params, run, "paper"), run
    fna = resolve(params, "imdb_bytes_lra", "fna", 0, "paper_h100")
    assert (fna.model.dim, fna.model.layers, fna.train.lr) == (256, 6, 1e-4)
    assert params["data"]["paper_h100"] == params["data"]["paper"]  # its data block, inherited


def test_a_key_an_extending_profile_sets_is_the_only_difference(tmp_path: Path) -> None:
    block = {"extends": "paper", "overrides": {"train": {"batch_size": 7}}, "seeds": [0]}
    params = load_params(with_profile(tmp_path, "paper_small", block))
    changed = 0
    for run in trained_runs(params, "paper_small"):
        ours, theirs = spec_of(params, run, "paper_small"), spec_of(params, run, "paper")
        # the override wins where no later layer (a profile's task or variant block) sets it
        later = origins(params, run.task, run.variant, "paper")["train.batch_size"]
        wins = not later.startswith(("profiles.paper.tasks.", "profiles.paper.variants."))
        assert ours["train"].pop("batch_size") == (7 if wins else theirs["train"]["batch_size"])
        theirs["train"].pop("batch_size")
        assert ours == theirs, run
        changed += wins
    assert changed > 0
    assert params["profiles"]["paper_small"]["overrides"]["train"]["precision"] == "bf16"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"extends": "papr"}, "profiles.cyclic.extends"),
        ({"extends": "cyclic"}, "cyclic -> cyclic is a cycle"),
    ],
)
def test_an_unknown_or_cyclic_base_is_refused(tmp_path: Path, block: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_params(with_profile(tmp_path, "cyclic", block))


def profile_names_in_logic(path: Path) -> list[str]:
    """Where a module compares with, defaults to or names as a constant a run profile."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        constants: list[ast.expr] = []
        if isinstance(node, ast.Compare):  # profile == "smoke", ctx.profile != "paper"
            operands = [node.left, *node.comparators]
            if any("profile" in ast.unparse(o).lower() for o in operands):
                constants = operands
        elif isinstance(node, ast.Call) and any(  # add_argument("--profile", default=...)
            isinstance(a, ast.Constant) and a.value == "--profile" for a in node.args
        ):
            constants = [k.value for k in node.keywords if k.arg == "default"]
        elif isinstance(node, ast.Assign) and any(  # PAPER_PROFILE = "paper"
            isinstance(t, ast.Name) and "PROFILE" in t.id for t in node.targets
        ):
            constants = [node.value]
        for c in constants:
            if isinstance(c, ast.Constant) and c.value in PROFILES:
                found.append(f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}")
    return found


def test_no_module_names_a_run_profile_in_its_logic() -> None:
    modules = [p for p in (ROOT / "src" / "pdelab").rglob("*.py") if "tests" not in p.parts]
    found = [hit for path in modules for hit in profile_names_in_logic(path)]
    assert not found, found


def test_every_profile_describes_itself_and_says_whether_it_is_judged() -> None:
    from pdelab.report.profiles import PROFILE_NOTES

    params = load_params(ROOT / "params.yaml")
    for name, block in params["profiles"].items():
        assert isinstance(block.get("judged"), bool) and block.get("device"), name
        assert PROFILE_NOTES[name].startswith(f"{name} profile: "), name


@pytest.mark.parametrize(
    "code",
    [
        'def f(ctx):\n    return ctx.profile == "smoke"\n',
        'def f(profile):\n    return "paper" != profile\n',
        'PAPER_PROFILE = "paper"\n',
        'def f(p):\n    p.add_argument("--profile", default="paper_mini")\n',
    ],
)
def test_the_scan_finds_a_profile_named_in_logic(tmp_path: Path, code: str) -> None:
    module = ROOT / "build" / "planted_profile_check.py"  # under ROOT: paths are reported so
    module.parent.mkdir(exist_ok=True)
    module.write_text(code)
    try:
        assert len(profile_names_in_logic(module)) == 1
    finally:
        module.unlink()
