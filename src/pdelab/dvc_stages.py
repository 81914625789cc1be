"""dvc.yaml, generated from the task registry (pdelab.data.TASK_DATA): one fetch and one prepare
stage per registered task, in registration order.

DVC reads dvc.yaml itself, so the file is committed; this module writes it and checks it, so the
task list is declared once (where a task's data is registered) and never typed out twice:

    python -m pdelab.dvc_stages          # write dvc.yaml
    python -m pdelab.dvc_stages --check  # exit 1, naming the fix, if dvc.yaml is not current

The workflow runs the check when it parses, before any job starts.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from pdelab.data import TASK_DATA

DVC_YAML = Path("dvc.yaml")  # relative to the workflow's directory

HEADER = """\
# Data stages only (Snakemake owns results/). One fetch and one prepare stage per task, for
# the profile that params.yaml's `profile` names (DVC reads params.yaml only), e.g.
# `dvc repro prepare@listops`. Each depends on the data code and its params block.
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
        ("fetch", ["src/pdelab/data"], "raw"),
        ("prepare", ["data/${profile}/raw/${item}", "src/pdelab/data"], "prepared"),
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
        f"{path} does not list the registered tasks' data stages (pdelab.data.TASK_DATA); "
        "run `python -m pdelab.dvc_stages` to write it"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdelab.dvc_stages", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check dvc.yaml")
    parser.add_argument("--path", type=Path, default=DVC_YAML)
    args = parser.parse_args(argv)
    if args.check:
        problem = check(args.path)
        if problem:
            print(problem, file=sys.stderr)
        return 1 if problem else 0
    args.path.write_text(expected())
    return 0


if __name__ == "__main__":
    sys.exit(main())
