"""``pdelab`` (pdelab.cli): list, explain and status read params.yaml and the run records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from pdelab.cli import changes, explain, main, status
from pdelab.config import resolve


def test_explain_names_the_layer_that_set_each_key(params) -> None:
    lines = explain(params, "listops", "after_embedding", 1, "smoke")
    line = {ln.split()[0]: ln for ln in lines[1:]}
    assert line["train.lr"].endswith("<- profiles.smoke.overrides.train.lr")
    assert line["train.batch_size"].endswith("<- profiles.smoke.tasks.listops.train.batch_size")
    assert line["diffusion.sites"].endswith("<- variants.after_embedding.diffusion.sites")
    assert line["train.seq_len"].endswith("<- (the default)")
    assert line["device"].endswith("<- profiles.smoke.device") and '"cpu"' in line["device"]


def test_changes_are_key_old_new_lines() -> None:
    old = {"train": {"lr": 0.001, "epochs": 3}, "model": {"dim": 8}}
    new = {"train": {"lr": 0.01, "epochs": 3}, "model": {"dim": 8, "patch": 4}}
    assert changes(old, new) == ['model.patch: "unset" -> 4', "train.lr: 0.001 -> 0.01"]


def test_status_lists_untrained_runs_and_changed_specs(params, tmp_path: Path) -> None:
    lines = status(params, "smoke", tmp_path)
    assert lines and all(line.endswith(": not trained") for line in lines)
    spec = resolve(params, "listops", "baseline", 0, "smoke").to_dict()
    folder = tmp_path / "smoke/listops/baseline/seed0"
    folder.mkdir(parents=True)
    old = json.loads(json.dumps(spec))
    old["train"]["lr"] = 0.001
    (folder / "run.json").write_text(json.dumps({"spec": old}))
    assert "listops baseline seed 0: train.lr: 0.001 -> 0.01" in status(params, "smoke", tmp_path)
    (folder / "run.json").write_text(json.dumps({"spec": spec}))
    assert not [ln for ln in status(params, "smoke", tmp_path) if "listops baseline seed 0" in ln]


def test_the_command_lists_and_refuses_naming_the_key(capsys) -> None:
    assert main(["--params", str(ROOT / "params.yaml"), "list"]) == 0
    out = capsys.readouterr().out
    assert "multiscale (multiscale): 1 x 13 x 2" in out and "runs trained:" in out
    assert main(["--params", str(ROOT / "params.yaml"), "explain", "listopz", "baseline"]) == 2
    assert "task: unknown name 'listopz'" in capsys.readouterr().err


def test_the_command_line_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pdelab.cli", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and "explain" in out.stdout and "status" in out.stdout
