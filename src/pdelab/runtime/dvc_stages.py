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
from typing import Any

import yaml

import pdelab.data
from pdelab.data.source_digest import local_source, source_digest
from pdelab.data.sources import fetch_module
from pdelab.data.store import built_here
from pdelab.records import made
from pdelab.records.staleness import module_files
from pdelab.spec.config import PARAMS_FILE, load_params
from pdelab.spec.data import TASK_DATA, data_spec
from pdelab.spec.fields import ConfigError

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
# download.py, whose files are named by their checksums) and its params block; a task whose
# source is a file or folder of your own fetches from it, so its fetch stage depends on it.
"""

STAGE = """\
  {stage}:
{foreach}
    do:
      cmd: python -m pdelab.data {stage} ${{{name}}} --profile ${{profile}}
      deps:
{deps}
      params:
        - profile
        - data.${{profile}}.${{{name}}}
      outs:
        - data/${{profile}}/{out}/${{{name}}}
"""


def data_package() -> list[str]:
    """The data package's source files, as paths from the project root, but the checksummed
    transport: what every data stage of dvc.yaml depends on."""
    folder = Path(pdelab.data.__file__).parent
    files = (f"src/pdelab/data/{p.name}" for p in sorted(folder.glob("*.py")))
    return [f for f in files if f != CHECKSUMMED_TRANSPORT]


def data_job_code(task: str) -> list[str]:
    """The source files a task's data job executes (its command, the task's data module and
    the module that fetches its data, read from the imports), but the checksummed transport:
    the data rule's code inputs, so an edit reruns the data jobs that run it, and one to
    another task's module reruns none."""
    modules = ("pdelab.data.__main__", TASK_DATA.get(task).qualified, fetch_module(task))
    return [f for f in module_files(dict.fromkeys(modules)) if f != CHECKSUMMED_TRANSPORT]


def data_params(config: dict[str, Any], profile: str, task: str) -> str:
    """A task's data block as written, each value in its key's canonical form (``n: 1200.0``
    is ``n: 1200``), so a number's spelling reruns no data job."""
    spec = data_spec(config, profile, task)
    given = config["data"][profile][task] or {}
    return json.dumps(
        {k: list(v) if isinstance(v, tuple) else v for k in given for v in [getattr(spec, k)]},
        sort_keys=True,
    )


# the workflow's data rule's command (workflow/rules/data.smk), part of its recipe
DATA_COMMAND = (
    "python -m pdelab.runtime.warm pdelab.data build {wildcards.task} --profile "
    "{wildcards.profile} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"
)


def data_recipe(config: dict[str, Any], profile: str, task: str) -> dict[str, Any]:
    """What a task's data job is made from (pdelab.records.made): the code it executes, its
    params block, the user's own files a ``source:`` path names and its command. The
    workflow's data rule and ``pdelab status`` read this one recipe."""
    return {
        "code": {},
        "files": made.files_digest(data_job_code(task)),
        "params": {
            "source": source_digest(config, profile, task),
            "spec": data_params(config, profile, task),
        },
        "profile": profile,
        "command": DATA_COMMAND,
    }


def local_sources(params: dict[str, Any], tasks: list[str]) -> dict[str, str]:
    """Task -> the file or folder of the user's that its fetch reads (its ``source`` path),
    for the tasks of params.yaml's run profile (DVC's) whose source is a path. A task whose
    data parameters do not validate is left out: the parameters' check names it."""
    profile = params.get("profile")
    block = (params.get("data") or {}).get(profile) or {}
    found = {}
    for task in tasks:
        if task not in block:
            continue
        try:
            path = local_source(params, str(profile), task)
        except ConfigError:
            continue
        if path is not None:
            found[task] = str(path)
    return found


def _foreach(tasks: list[str], sources: dict[str, str]) -> str:
    """The foreach of a stage: a list of the tasks, or, where ``sources`` names a task's own
    files, a mapping of each task to the extra file it depends on (DVC gives every item the
    same deps, so a task without files of its own names its data module there)."""
    if not sources:
        return textwrap.fill(
            ", ".join(tasks) + "]",
            width=100,
            initial_indent="    foreach: [",
            subsequent_indent=" " * len("    foreach: ["),
            break_on_hyphens=False,
        )
    lines = ["    foreach:"]
    for task in tasks:
        own = sources.get(task) or f"src/{TASK_DATA.get(task).qualified.replace('.', '/')}.py"
        lines.append(f"      {task}: {{source: {json.dumps(own)}}}")
    return "\n".join(lines)


def render(tasks: list[str], sources: dict[str, str] | None = None) -> str:
    """dvc.yaml's text for these tasks; ``sources``: the tasks whose fetch reads a file or
    folder of the user's, and its path (:func:`local_sources`)."""
    sources = {t: p for t, p in (sources or {}).items() if t in tasks}
    stages = []
    for stage, deps, out, own in (
        ("fetch", data_package(), "raw", sources),
        ("prepare", ["data/${profile}/raw/${item}", *data_package()], "prepared", {}),
    ):
        name = "key" if own else "item"
        deps = ["${item.source}", *deps] if own else deps
        lines = "\n".join(f"        - {d}" for d in deps)
        foreach = _foreach(tasks, own)
        stages.append(STAGE.format(stage=stage, foreach=foreach, deps=lines, out=out, name=name))
    return HEADER + "stages:\n" + "".join(stages)


def expected(params_file: Path = PARAMS_FILE) -> str:
    """dvc.yaml's text: the registered tasks, and the source paths of params.yaml's run profile
    (none when there is no params.yaml)."""
    tasks = TASK_DATA.in_order()
    params = load_params(params_file) if params_file.exists() else {}
    return render(tasks, local_sources(params, tasks) if isinstance(params, dict) else {})


def check(path: Path = DVC_YAML) -> str | None:
    """None when dvc.yaml is what the task registry and the params.yaml beside it make, else
    what is wrong and the fix."""
    if path.exists() and path.read_text() == expected(path.parent / PARAMS_FILE.name):
        return None
    return (
        f"{path} does not list the registered tasks' data stages (pdelab.spec.data.TASK_DATA) "
        "and the source paths of params.yaml's run profile; run `python -m "
        "pdelab.runtime.dvc_stages` to write it"
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


def own_data_block(profile: str, params_file: Path = PARAMS_FILE) -> bool:
    """Whether params.yaml itself (what DVC reads) holds the profile's data block (true where
    there is no params.yaml to read: nothing says otherwise)."""
    if not Path(params_file).exists():
        return True
    own = yaml.safe_load(Path(params_file).read_text()) or {}
    return profile in (own.get("data") or {})


def commit(stages: list[str], lock: Path = DVC_LOCK, profile: str | None = None) -> int:
    """``dvc commit --force`` the stages, first removing a dvc.lock an interrupted commit left
    unreadable; the exit status is DVC's. With ``profile``, first refuse (exit 1) prepared data
    that differ from dvc.lock unless the data job prepared them: a commit would record files
    changed by hand as the stage's output, and ``dvc status`` would then call them current."""
    if profile is not None and not own_data_block(profile):
        print(
            f"DVC does not record data/{profile}: params.yaml has no data.{profile} block (the "
            f"profile takes its base's through extends:, and DVC reads params.yaml alone); give "
            f"it one (data: {{{profile}: ...}}) for dvc status, push and checkout to cover it"
        )
        return 0
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
    args.path.write_text(expected(args.path.parent / PARAMS_FILE.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
