"""dvc.yaml is generated from the task registry (pdelab.dvc_stages): the task list is declared
once, where each task's data is registered."""

from __future__ import annotations

from pathlib import Path

import yaml

from pdelab.data import TASK_DATA
from pdelab.dvc_stages import check, main, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_dvc_yaml_is_what_the_registry_makes() -> None:
    assert check(ROOT / "dvc.yaml") is None


def test_every_registered_task_has_a_fetch_and_a_prepare_stage() -> None:
    stages = yaml.safe_load(render([*TASK_DATA.in_order(), "a_new_task"]))["stages"]
    for stage in ("fetch", "prepare"):
        assert stages[stage]["foreach"] == [*TASK_DATA.in_order(), "a_new_task"]


def test_a_stale_dvc_yaml_is_named_with_its_fix(tmp_path: Path, capsys) -> None:
    stale = tmp_path / "dvc.yaml"
    stale.write_text(render(TASK_DATA.in_order()[:-1]))
    assert "run `python -m pdelab.dvc_stages`" in (check(stale) or "")
    assert main(["--check", "--path", str(stale)]) == 1
    assert "TASK_DATA" in capsys.readouterr().err
    assert main(["--path", str(stale)]) == 0 and check(stale) is None
