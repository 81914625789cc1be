"""dvc.yaml, generated from the task registry (pdelab.spec.data.TASK_DATA): one fetch and one
prepare stage per registered task, in registration order.

DVC reads dvc.yaml itself, so the file is committed; this module writes it and checks it, so the
task list is declared once (where a task's data is registered) and never typed out twice:

    python -m pdelab.runtime.dvc_stages          # write dvc.yaml
    python -m pdelab.runtime.dvc_stages --check  # exit 1, naming the fix, if dvc.yaml is not
    current python -m pdelab.runtime.dvc_stages --commit STAGE... --profile P  # `dvc commit
    --force` them

The workflow runs the check when it parses, before any job starts, and its dvc_commit job the
commit. DVC rewrites dvc.lock in place: a commit killed while writing leaves it empty or cut,
and every later DVC command refuses the file. Such a dvc.lock holds nothing to keep (the
commit records every stage of the run profile again), so the commit removes it first, saying
so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

import pdelab.data
from pdelab.data.store import built_here
from pdelab.records.staleness import module_files
from pdelab.spec.data import TASK_DATA

DVC_YAML = Path("dvc.yaml")  # relative to the workflow's directory
DVC_LOCK = Path("dvc.lock")

# download.py moves bytes that a pinned checksum names: a file appears under its name only once
# its sha256 matches the pin, so an edit to it cannot change what a data job makes. No data
# stage depends on it, in dvc.yaml or in the workflow, and so no training run either.
CHECKSUMMED_TRANSPORT = "src/pdelab/data/download.py"

HEADER = """\
# Data stages only (Snakemake owns results/). One fetch and one prepare stage per task, for
# the profile that params.yaml's `profile` names (DVC reads params.yaml only), e.g.
# `dvc repro prepare@listops`. Each depends on the data code (all of the data package but
# download.py, whose files are named by their checksums) and its params block.
"""

STAGE = """\
  {stage}:
{foreach}
    do:
      cmd: python -m pdelab.data {stage} ${{item}} --profile ${{profile}}
      deps:
{deps}
      params:
        - profile
        - data.${{profile}}.${{item}}
      outs:
        - data/${{profile}}/{out}/${{item}}
"""


def data_package() -> list[str]:
    """The data package's source files, as paths from the project root, but the checksummed
    transport: what every data stage of dvc.yaml depends on."""
    folder = Path(pdelab.data.__file__).parent
    files = (f"src/pdelab/data/{p.name}" for p in sorted(folder.glob("*.py")))
    return [f for f in files if f != CHECKSUMMED_TRANSPORT]


def data_job_code(task: str) -> list[str]:
    """The source files a task's data job executes (its command and the task's data module,
    read from the imports), but the checksummed transport: the data rule's code inputs, so an
    edit reruns the data jobs that run it, and one to another task's module reruns none."""
    modules = ("pdelab.data.__main__", TASK_DATA.get(task).qualified)
    return [f for f in module_files(modules) if f != CHECKSUMMED_TRANSPORT]


def render(tasks: list[str]) -> str:
    """dvc.yaml's text for these tasks."""
    foreach = textwrap.fill(
        ", ".join(tasks) + "]",
        width=100,
        initial_indent="    foreach: [",
        subsequent_indent=" " * len("    foreach: ["),
        break_on_hyphens=False,
    )
    stages = []
    for stage, deps, out in (
        ("fetch", data_package(), "raw"),
        ("prepare", ["data/${profile}/raw/${item}", *data_package()], "prepared"),
    ):
        lines = "\n".join(f"        - {d}" for d in deps)
        stages.append(STAGE.format(stage=stage, foreach=foreach, deps=lines, out=out))
    return HEADER + "stages:\n" + "".join(stages)


def expected() -> str:
    return render(TASK_DATA.in_order())


def check(path: Path = DVC_YAML) -> str | None:
    """None when dvc.yaml is what the task registry makes, else what is wrong and the fix."""
    if path.exists() and path.read_text() == expected():
        return None
    return (
        f"{path} does not list the registered tasks' data stages (pdelab.spec.data.TASK_DATA); "
        "run `python -m pdelab.runtime.dvc_stages` to write it"
    )


def readable_lock(path: Path = DVC_LOCK) -> bool:
    """Whether dvc.lock is absent or a YAML mapping of stages (what a finished commit writes)."""
    if not path.exists():
        return True
    try:
        return isinstance(yaml.safe_load(path.read_text()), dict)
    except yaml.YAMLError:
        return False


def changed_stages(stages: list[str]) -> set[str]:
    """The stages whose deps or outs differ from what dvc.lock records (``dvc status``); all
    of them when DVC cannot say."""
    out = subprocess.run(["dvc", "status", "--json", *stages], capture_output=True, text=True)
    try:
        return set(json.loads(out.stdout)) if out.returncode == 0 else set(stages)
    except ValueError:
        return set(stages)


def unprepared(stages: list[str], profile: str) -> list[str]:
    """The prepared folders of these prepare stages that differ from dvc.lock and that this
    project's data job did not prepare (changed or replaced by hand since)."""
    changed = changed_stages(stages)
    found = []
    for stage in stages:
        kind, _, task = stage.partition("@")
        folder = Path("data") / profile / "prepared" / task
        if kind == "prepare" and stage in changed and not built_here(folder):
            found.append(
                f"{folder} (restore: `dvc checkout {folder}`; rebuild: `dvc repro {stage}`)"
            )
    return found


def commit(stages: list[str], lock: Path = DVC_LOCK, profile: str | None = None) -> int:
    """``dvc commit --force`` the stages, first removing a dvc.lock an interrupted commit left
    unreadable; the exit status is DVC's. With ``profile``, first refuse (exit 1) prepared data
    that differ from dvc.lock unless the data job prepared them: a commit would record files
    changed by hand as the stage's output, and ``dvc status`` would then call them current."""
    if profile is not None and (odd := unprepared(stages, profile)):
        print(
            "refusing to record prepared data that differ from dvc.lock and that no data job "
            "prepared (changed by hand?): " + "; ".join(odd),
            file=sys.stderr,
        )
        return 1
    if not readable_lock(lock):
        print(f"{lock} is empty or cut (a commit was interrupted): removed; committed again")
        lock.unlink()
    return subprocess.run(["dvc", "commit", "--force", *stages]).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.runtime.dvc_stages", description=__doc__
    )
    parser.add_argument("--check", action="store_true", help="only check dvc.yaml")
    parser.add_argument("--commit", nargs="+", metavar="STAGE", help="dvc commit these stages")
    parser.add_argument("--profile", help="with --commit: the run profile whose data to check")
    parser.add_argument("--path", type=Path, default=DVC_YAML)
    args = parser.parse_args(argv)
    if args.commit:
        return commit(args.commit, profile=args.profile)
    if args.check:
        problem = check(args.path)
        if problem:
            print(problem, file=sys.stderr)
        return 1 if problem else 0
    args.path.write_text(expected())
    return 0


if __name__ == "__main__":
    sys.exit(main())
