"""``python -m pdelab.data {fetch,prepare} TASK --profile P``: the DVC data stages' commands;
``python -m pdelab.data build TASK --profile P``: both, then verify, in one process (the
workflow's data job: DVC records the result afterwards with ``dvc commit``);
``python -m pdelab.data verify [TASK ...] --profile P``: every prepared file against its
manifest's size and sha256 (all prepared tasks of the profile by default);
``python -m pdelab.data status [TASK ...] [--profile P]``: where each task's data comes from,
what of it is on disk, and where a copy you already have goes (params.yaml's profile by
default; reads the disk only, never the network).

A fetch that fails (no network, a wrong path, a file that is not the pinned one) prints its
reason and the task's status, exit status 1, instead of a traceback."""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import textwrap
from pathlib import Path

from pdelab.data import cache_restore
from pdelab.data.errors import FetchError
from pdelab.data.sources import WIDTH, data_status, fetch_module, report, task_status
from pdelab.data.store import MANIFEST, CorruptDataError, check_files, load_manifest, mark_built
from pdelab.spec.config import PARAMS_FILE, active_profile, data_dir, load_params
from pdelab.spec.data import TASK_DATA, data_spec, raw_dir
from pdelab.spec.fields import ConfigError


def verify(profile: str, tasks: list[str]) -> int:
    """Check each task's prepared files; print one line per task; 1 if any is corrupt."""
    if not tasks:
        tasks = sorted(p.parent.name for p in Path(data_dir(profile, "")).glob(f"*/{MANIFEST}"))
    failed = 0
    for task in tasks:
        folder = Path(data_dir(profile, task))
        try:
            manifest = load_manifest(folder)
            check_files(folder, manifest, hashes=True)
        except (CorruptDataError, FileNotFoundError) as err:
            print(f"{task}: CORRUPT: {err}", file=sys.stderr)
            failed = 1
            continue
        size = sum(manifest.get("sizes", {}).values())
        print(f"{task}: ok, {len(manifest['files'])} files, {size:,} bytes, sha256 checked")
    return failed


def failed(params: dict, profile: str, task: str, stage: str, err: Exception) -> int:
    """Print why the task's data could not be fetched and its status (where a copy goes);
    1, the exit status."""
    head = f"python -m pdelab.data {stage} {task} --profile {profile}: cannot fetch its data:"
    lines = [
        head,
        *textwrap.wrap(
            str(err),
            WIDTH,
            initial_indent="  ",
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        ),
        "",
    ]
    lines += task_status(data_spec(params, profile, task), profile, task).lines()
    print("\n".join(lines), file=sys.stderr)
    return 1


def restored(params_file: str, profile: str, task: str) -> bool:
    """Whether DVC's run cache gave back this task's data for today's params and code, and
    the files verify (a build that finds them prepares nothing)."""
    if not cache_restore.restore(params_file, profile, task):
        return False
    out = Path(data_dir(profile, task))
    if verify(profile, [task]) != 0:
        return False  # prepared again below
    mark_built(out, load_manifest(out))
    print(f"restored {out} from DVC's cache (recorded by an earlier dvc commit); nothing prepared")
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pdelab.data", description=__doc__)
    parser.add_argument("stage", choices=["fetch", "prepare", "build", "verify", "status"])
    parser.add_argument("task", nargs="*", help="one task (fetch, prepare); any (verify, status)")
    parser.add_argument("--profile", help="the run profile (status: params.yaml's by default)")
    parser.add_argument("--params", default=str(PARAMS_FILE))
    args = parser.parse_intermixed_args(argv)  # tasks may follow --profile
    if args.stage != "status" and args.profile is None:
        parser.error(f"{args.stage} needs --profile")
    if args.stage == "verify":  # any prepared folder, registered task or not
        sys.exit(verify(args.profile, args.task))
    for task in args.task:
        if task not in TASK_DATA:
            parser.error(f"unknown task {task!r}; known: {', '.join(TASK_DATA.names())}")
    params = load_params(args.params)
    if args.stage == "status":
        try:
            profile = active_profile(params, args.profile)
            tasks = args.task or [t for t in TASK_DATA.in_order() if t in params["data"][profile]]
            print(report(data_status(params, profile, tasks), profile))
        except (ConfigError, KeyError) as err:
            sys.exit(f"invalid params.yaml: {err}")
        return
    if len(args.task) != 1:
        parser.error(f"{args.stage} takes exactly one task")
    task = args.task[0]

    try:
        spec = data_spec(params, args.profile, task)
    except ConfigError as err:
        sys.exit(f"invalid params.yaml: {err}")
    module = TASK_DATA.get(task).module
    raw = raw_dir(args.profile, task)
    if args.stage == "build" and restored(args.params, args.profile, task):
        return
    if args.stage in ("fetch", "build"):
        if args.stage == "build":
            shutil.rmtree(raw, ignore_errors=True)  # as `dvc repro` removes a stage's outs
        try:
            importlib.import_module(fetch_module(task)).fetch(spec, raw)
        except FetchError as err:
            sys.exit(failed(params, args.profile, task, args.stage, err))
        if args.stage == "fetch":
            return
    out = Path(data_dir(args.profile, task))
    shutil.rmtree(out, ignore_errors=True)  # never mix files of two builds
    manifest = module.prepare(spec, raw, out)
    print(json.dumps({k: manifest[k] for k in ("content_hash", "splits")}, indent=2))
    if args.stage == "build":
        sys.stdout.flush()
        status = verify(args.profile, [task])
        if status == 0:
            mark_built(out, manifest)  # what the workflow's dvc commit may record
        sys.exit(status)


if __name__ == "__main__":
    main()
