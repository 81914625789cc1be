"""``python -m pdelab.data {fetch,prepare} TASK --profile P``: the DVC data stages' commands;
``python -m pdelab.data build TASK --profile P``: both, then verify, in one process (the
workflow's data job: DVC records the result afterwards with ``dvc commit``);
``python -m pdelab.data verify [TASK ...] --profile P``: every prepared file against its
manifest's size and sha256 (all prepared tasks of the profile by default)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from pdelab.config import PARAMS_FILE, data_dir, load_params
from pdelab.data import TASK_DATA, data_spec, raw_dir
from pdelab.data.store import MANIFEST, CorruptDataError, check_files, load_manifest


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pdelab.data", description=__doc__)
    parser.add_argument("stage", choices=["fetch", "prepare", "build", "verify"])
    parser.add_argument("task", nargs="*", help="one task (fetch, prepare); any (verify)")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--params", default=str(PARAMS_FILE))
    args = parser.parse_args(argv)
    if args.stage == "verify":  # any prepared folder, registered task or not
        sys.exit(verify(args.profile, args.task))
    for task in args.task:
        if task not in TASK_DATA:
            parser.error(f"unknown task {task!r}; known: {', '.join(TASK_DATA.names())}")
    if len(args.task) != 1:
        parser.error(f"{args.stage} takes exactly one task")
    task = args.task[0]

    spec = data_spec(load_params(args.params), args.profile, task)
    module = TASK_DATA.get(task).module
    raw = raw_dir(args.profile, task)
    if args.stage in ("fetch", "build"):
        if args.stage == "build":
            shutil.rmtree(raw, ignore_errors=True)  # as `dvc repro` removes a stage's outs
        module.fetch(spec, raw)
        if args.stage == "fetch":
            return
    out = Path(data_dir(args.profile, task))
    shutil.rmtree(out, ignore_errors=True)  # never mix files of two builds
    manifest = module.prepare(spec, raw, out)
    print(json.dumps({k: manifest[k] for k in ("content_hash", "splits")}, indent=2))
    if args.stage == "build":
        sys.stdout.flush()
        sys.exit(verify(args.profile, [task]))


if __name__ == "__main__":
    main()
