"""``python -m pdelab.tracking``: the MLflow store's command line.

init NAME...                      create the store and experiments, print their ids
sync RUN_DIR... --out FILE.json   log finished runs (batch tracking), idempotent
check [--params P] [--profile N]  every run the profile trains is in MLflow, or exit 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pdelab.atomic import write_text
from pdelab.config import PARAMS_FILE, load_params
from pdelab.tracking import RUNS_DIR, init_store, tracking_uri
from pdelab.tracking.sync import check, sync


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.tracking",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="create the store and the named experiments")
    init.add_argument("names", nargs="+")
    s = commands.add_parser("sync", help="log finished runs from their records")
    s.add_argument("run_dirs", nargs="+", type=Path)
    s.add_argument("--out", type=Path, help="JSON: (task, variant, seed) -> MLflow run id")
    c = commands.add_parser("check", help="MLflow holds every run the profile trains")
    c.add_argument("--params", default=str(PARAMS_FILE))
    c.add_argument("--profile", help="defaults to params.yaml's `profile`")
    c.add_argument("--runs", type=Path, default=RUNS_DIR, help="the runs' records folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "init":
        ids = init_store(args.names)
        print(json.dumps({"tracking_uri": tracking_uri(), "experiments": ids}, indent=2))
        return 0
    if args.command == "sync":
        rows = sync(args.run_dirs)
        doc = json.dumps({"tracking_uri": tracking_uri(), "runs": rows}, indent=2) + "\n"
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_text(args.out, doc)
        actions = [r["action"] for r in rows]
        print(", ".join(f"{a}: {actions.count(a)}" for a in ("kept", "logged", "replaced")))
        return 0
    problems, summary = check(load_params(args.params), args.profile, args.runs)
    print("\n".join(summary))
    if problems:
        print(f"MLflow misses {len(problems)} run(s):", *problems, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
