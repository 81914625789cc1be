"""``python -m pdelab.tracking``: the MLflow store's command line.

init NAME...                      create the store and experiments, print their ids
sync RUN_DIR... --out FILE.json   log finished runs missing from MLflow (or changed) from their
                                  records and set their study tags; idempotent
report --out FILE.json            log each study's tables and figures once (report experiment)
check [--params P] [--profile N]  every run the profile trains is in MLflow, or exit 1
links [--ui URL]                  the UI links that open each study's and task's runs table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Every command opens the store. Imported here, at the top, so that the warm job server
# (pdelab.warm) loads MLflow's client and SQL store once, not once per sync job.
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
from mlflow.tracking import MlflowClient  # noqa: F401

from pdelab.atomic import write_text
from pdelab.config import PARAMS_FILE, load_params
from pdelab.records import RUNS_DIR, tracking_uri
from pdelab.tracking import (
    REPORT_EXPERIMENT,
    experiment_name,
    init_store,
    runs_url,
    study_filter,
)
from pdelab.tracking.sync import check, client_for, log_report, memberships, sync

UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


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
    r = commands.add_parser("report", help="log each study's tables and figures once")
    r.add_argument("--results", type=Path, default=Path("results"))
    r.add_argument("--out", type=Path, help="JSON: study -> MLflow run id")
    links = commands.add_parser("links", help="UI links to each study's and task's runs")
    links.add_argument("--ui", default=UI, help=f"the MLflow UI's address (default {UI})")
    for sub in (s, r, links):
        sub.add_argument("--params", default=str(PARAMS_FILE))
        sub.add_argument("--profile", help="defaults to params.yaml's `profile`")
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
    if args.command in ("sync", "report"):
        params = load_params(args.params)
        if args.command == "sync":
            rows = sync(args.run_dirs, studies=memberships(params, args.profile))
        else:
            rows = log_report(params, args.profile, args.results)
        doc = json.dumps({"tracking_uri": tracking_uri(), "runs": rows}, indent=2) + "\n"
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_text(args.out, doc)
        actions = [r["action"] for r in rows]
        kinds = ("kept", "relabelled", "logged", "replaced")
        print(", ".join(f"{a}: {actions.count(a)}" for a in kinds))
        return 0
    if args.command == "links":
        print("\n".join(ui_links(load_params(args.params), args.profile, args.ui)))
        return 0
    problems, summary = check(load_params(args.params), args.profile, args.runs)
    print("\n".join(summary))
    if problems:
        print(f"MLflow misses {len(problems)} run(s):", *problems, sep="\n  ", file=sys.stderr)
        return 1
    return 0


def ui_links(params: dict, profile: str | None, ui: str) -> list[str]:
    """Markdown lines: each study's runs (the experiments of its tasks, filtered to the study)
    and its tables and figures, then each task's experiment; all open on the runs table."""
    from pdelab.config import active_profile
    from pdelab.studies import studies_of

    profile = active_profile(params, profile)
    studies = studies_of(params, profile)
    client = client_for()
    ids = {e.name: e.experiment_id for e in client.search_experiments()}
    report = ids.get(REPORT_EXPERIMENT.format(profile=profile))
    lines = [f"MLflow UI at {ui} (tracking store {tracking_uri()})", "", "Studies:"]
    for study in studies:
        tasks = sorted({r.task for r in studies[study].runs})
        exps = [ids[n] for t in tasks if (n := experiment_name(t, profile)) in ids]
        if not exps:
            continue
        line = f"- {study}: runs {runs_url(ui, exps, study_filter(study))}"
        if report:
            line += f" ; tables and figures {runs_url(ui, [report], study_filter(study))}"
        lines.append(line)
    lines += ["", "Tasks:"]
    tasks = sorted({r.task for s in studies.values() for r in s.runs})
    for task in tasks:
        if (name := experiment_name(task, profile)) in ids:
            lines.append(f"- {task}: {runs_url(ui, [ids[name]])}")
    if len(lines) == 5:
        lines.append("(no experiments in the store yet: run `snakemake --cores all` first)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
