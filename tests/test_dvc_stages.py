"""dvc.yaml is generated from the task registry (pdelab.runtime.dvc_stages): the task list is
declared once, where each task's data is registered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pdelab.runtime.dvc_stages import (
    CHECKSUMMED_TRANSPORT,
    check,
    data_job_code,
    local_sources,
    main,
    render,
)
from pdelab.spec.data import TASK_DATA

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
    assert "run `python -m pdelab.runtime.dvc_stages`" in (check(stale) or "")
    assert main(["--check", "--path", str(stale)]) == 1
    assert "TASK_DATA" in capsys.readouterr().err
    assert main(["--path", str(stale)]) == 0 and check(stale) is None


def test_an_interrupted_commit_leaves_a_lock_the_next_one_replaces(
    tmp_path: Path, monkeypatch
) -> None:
    """A dvc.lock cut by a kill (empty, or half a mapping) is removed before the commit, which
    writes it again; a good one is left to DVC."""
    import subprocess

    from pdelab.runtime import dvc_stages

    ran: list[list[str]] = []
    monkeypatch.setattr(
        subprocess, "run", lambda cmd, **kw: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    lock = tmp_path / "dvc.lock"
    for cut in ("", "schema: '2.0'\nstages:\n  fetch@listops:\n    cmd: [", "- a list\n"):
        lock.write_text(cut)
        assert not dvc_stages.readable_lock(lock)
        assert dvc_stages.commit(["fetch@listops"], lock) == 0 and not lock.exists()
    lock.write_text("schema: '2.0'\nstages: {}\n")
    assert dvc_stages.commit(["fetch@listops"], lock) == 0 and lock.exists()
    assert ran == [["dvc", "commit", "--force", "fetch@listops"]] * 4


@pytest.mark.parametrize(
    ("built", "changed", "commits"),
    [
        ("job", True, True),  # the data job prepared what differs from dvc.lock: recorded
        ("hand", True, False),  # prepared again by hand (a consistent manifest too): refused
        ("hand", False, True),  # what dvc.lock holds already: nothing to refuse
    ],
)
def test_the_commit_refuses_prepared_data_no_data_job_made(
    tmp_path: Path, monkeypatch, capsys, built: str, changed: bool, commits: bool
) -> None:
    """The workflow's `dvc commit --force` records only prepared data its own data job made:
    data changed by hand are named with their repair instead of being laundered into
    dvc.lock (after which `dvc status` would call them current)."""
    import json
    import subprocess

    import numpy as np

    from pdelab.data.store import mark_built, write_prepared
    from pdelab.runtime import dvc_stages

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "data/smoke/prepared/listops"

    def prepare(labels: list[int]) -> dict:
        splits = {
            s: ([np.array([2, 3]), np.array([4])], np.array(labels))
            for s in ("train", "val", "test")
        }
        return write_prepared(folder, splits, ["<pad>", "<cls>", "a", "b", "c"], 2, {"task": "t"})

    mark_built(folder, prepare([0, 1]))
    if built == "hand":
        prepare([1, 0])  # same sizes, a manifest of its own: consistent, but no job's
    ran: list[list[str]] = []

    def run(cmd, **kw):
        ran.append(cmd)
        out = json.dumps({"prepare@listops": [{"changed outs": {}}]} if changed else {})
        return subprocess.CompletedProcess(cmd, 0, stdout=out)

    monkeypatch.setattr(subprocess, "run", run)
    status = dvc_stages.commit(["fetch@listops", "prepare@listops"], tmp_path / "dvc.lock", "smoke")
    committed = ["dvc", "commit", "--force", "fetch@listops", "prepare@listops"] in ran
    assert (status == 0) == commits and committed == commits
    if not commits:
        err = capsys.readouterr().err
        assert f"{Path('data/smoke/prepared/listops')} (restore: `dvc checkout" in err


# A data job's code (the data rule's inputs): what a fresh interpreter has loaded after it.
DATA_JOB = """
import json, sys
from pdelab.data.__main__ import main
from pdelab.spec.data import TASK_DATA
if sys.argv[1] == "import":  # the command, the task's module and its fetch, not run
    import importlib
    from pdelab.data.sources import fetch_module
    TASK_DATA.get(sys.argv[2]).module
    importlib.import_module(fetch_module(sys.argv[2]))
else:
    try:
        main(sys.argv[1:])
    except SystemExit as done:
        assert not done.code, done.code
print(json.dumps(sorted(m for m in sys.modules if m == "pdelab" or m.startswith("pdelab."))))
"""


def loaded_files(argv: list[str], cwd: Path) -> set[str]:
    """The project source files a fresh interpreter has loaded after ``DATA_JOB argv``."""
    from pdelab.records import provenance

    out = subprocess.run(
        [sys.executable, "-c", DATA_JOB, *argv], cwd=cwd, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return {f"src/{provenance.source_path(m)}" for m in loaded}


@pytest.mark.parametrize("task", TASK_DATA.in_order())
def test_a_data_job_s_modules_are_its_inputs_download_aside(task: str) -> None:
    """Every project module a task's data command and module load is among its data rule's
    inputs (a module loaded but not an input could change the data unseen), but download.py,
    whose files are named by their pinned checksums."""
    code = set(data_job_code(task))
    module = f"src/{TASK_DATA.get(task).qualified.replace('.', '/')}.py"
    assert module in code and CHECKSUMMED_TRANSPORT not in code
    assert loaded_files(["import", task], ROOT) - code <= {CHECKSUMMED_TRANSPORT}


@pytest.mark.slow
def test_a_real_data_job_loads_only_its_inputs(tiny_workdir, tmp_path: Path) -> None:
    """A whole ListOps data job (generate, prepare, verify) loads nothing more."""
    work = tiny_workdir(tmp_path / "work")
    loaded = loaded_files(["build", "listops", "--profile", "smoke"], work)
    assert "src/pdelab/data/listops.py" in loaded
    assert loaded - set(data_job_code("listops")) <= {CHECKSUMMED_TRANSPORT}


def test_dvc_yaml_s_stages_depend_on_the_data_package_but_the_transport() -> None:
    stages = yaml.safe_load(render(TASK_DATA.in_order()))["stages"]
    package = {f"src/pdelab/data/{p.name}" for p in (ROOT / "src/pdelab/data").glob("*.py")}
    assert set(stages["fetch"]["do"]["deps"]) == package - {CHECKSUMMED_TRANSPORT}
    assert set(stages["prepare"]["do"]["deps"]) - set(stages["fetch"]["do"]["deps"]) == {
        "data/${profile}/raw/${item}"
    }


def test_a_fetch_kept_apart_is_its_data_job_s_code() -> None:
    """Multi30K's fetch (translation_fetch.py) is no part of the training job's imports, but
    it is its data job's code."""
    code = data_job_code("multi30k")
    assert "src/pdelab/data/translation_fetch.py" in code
    assert "src/pdelab/data/translation.py" in code
    assert "src/pdelab/data/translation_fetch.py" not in data_job_code("listops")


def with_own_folder(root: Path, task: str = "multi30k") -> Path:
    """params.yaml (the committed one) in ``root``, its run profile's ``task`` reading a
    folder of the user's; the folder."""
    folder = root / "my copy" / task
    folder.mkdir(parents=True)
    (folder / "train.en").write_text("a\n")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    profile = params["profile"]
    params["data"][profile][task]["source"] = str(folder)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return folder


def test_a_source_folder_of_the_user_s_is_its_fetch_stage_s_dependency(
    tmp_path: Path, monkeypatch
) -> None:
    """A task whose source is a folder of the user's: dvc.yaml's fetch stage of that task
    depends on the folder (as DVC itself resolves the stage), the other tasks' stages on their
    data module, and the check asks for dvc.yaml to be written again until it says so."""
    folder = with_own_folder(tmp_path)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert local_sources(params, TASK_DATA.in_order()) == {"multi30k": str(folder)}
    dvc_yaml = tmp_path / "dvc.yaml"
    dvc_yaml.write_text((ROOT / "dvc.yaml").read_text())  # no source of the user's
    assert "source paths of params.yaml's run profile" in (check(dvc_yaml) or "")
    assert main(["--path", str(dvc_yaml)]) == 0 and check(dvc_yaml) is None
    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    assert stages["fetch"]["foreach"]["multi30k"] == {"source": str(folder)}
    assert stages["fetch"]["foreach"]["listops"] == {"source": "src/pdelab/data/listops.py"}
    assert stages["fetch"]["do"]["deps"][0] == "${item.source}"
    assert stages["prepare"]["foreach"] == TASK_DATA.in_order()  # reads the raw folder only

    from dvc.repo import Repo

    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)  # DVC collects stages from the working directory's dvc.yaml
    with Repo(str(tmp_path)) as repo:
        deps = {tmp_path / d.def_path for d in repo.stage.collect("fetch@multi30k")[0].deps}
        other = {tmp_path / d.def_path for d in repo.stage.collect("fetch@listops")[0].deps}
    assert folder in deps and folder not in other
    assert tmp_path / "src/pdelab/data/listops.py" in other
