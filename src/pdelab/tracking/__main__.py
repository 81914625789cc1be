"""``python -m pdelab.tracking``: the MLflow store's command line.

init NAME...                      create the store and experiments, print their ids
sync RUN_DIR... --out FILE.json   log finished runs missing from MLflow (or changed) from their
                                  records, repair in place any value MLflow holds otherwise,
                                  and set their study tags; idempotent
report --out FILE.json            log each study's tables and figures once (report experiment)
rebuild [--profile N]...          make results/mlflow afresh from the records alone (every
                                  trained run of params.yaml's run profile and of each N, and
                                  the report), as the workflow's MLflow rules leave it
check [--params P] [--profile N]  every run the profile trains is in MLflow with its records'
                                  values (metrics, params, tags), or exit 1 naming each
links [--ui URL]                  the UI links that open each study's and task's runs table

The commands that write to the project's store (init, sync, report, rebuild) exit 1 with the
fix when its folder is not writable: nothing but them needs it. MLFLOW_TRACKING_URI names
another store (a tracking server), PDELAB_MLFLOW_PROJECT the experiments' prefix there
(default pdelab).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Every command opens the store. Imported here, at the top, so that the warm job server
# (pdelab.runtime.warm) loads MLflow's client and SQL store once, not once per sync job.
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
from mlflow.tracking import MlflowClient  # noqa: F401

from pdelab.records import made
from pdelab.records.atomic import write_text
from pdelab.records.run import RUNS_DIR, tracking_uri
from pdelab.spec.config import PARAMS_FILE, load_params
from pdelab.tracking.log import (
    experiment_name,
    init_store,
    project_name,
    report_experiment,
    runs_url,
    study_filter,
)
from pdelab.tracking.store import (
    ARTIFACTS,
    EXTERNAL,
    MLFLOW_DIR,
    STORE_FILE,
    damaged,
    damaged_message,
    local_db,
    read_id,
    unwritable,
    unwritable_message,
)
from pdelab.tracking.sync import check, client_for, log_report, memberships, rebuild, sync

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
    init.add_argument("--store-id", help="the id to give the project's store (the workflow's)")
    init.add_argument("--out", type=Path, help="JSON: the store and its experiments' ids")
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
    b = commands.add_parser("rebuild", help="make the project's store afresh from the records")
    b.add_argument("--params", default=str(PARAMS_FILE))
    b.add_argument("--profile", action="append", default=[], help="another run profile's runs")
    b.add_argument("--runs", type=Path, default=RUNS_DIR, help="the runs' records folder")
    b.add_argument("--results", type=Path, default=Path("results"))
    c = commands.add_parser("check", help="MLflow holds every run the profile trains")
    c.add_argument("--params", default=str(PARAMS_FILE))
    c.add_argument("--profile", help="defaults to params.yaml's `profile`")
    c.add_argument("--runs", type=Path, default=RUNS_DIR, help="the runs' records folder")
    return parser.parse_args(argv)


WRITERS = ("init", "sync", "report", "rebuild")  # the commands that write to the store


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        project_name()
    except ValueError as err:
        print(err, file=sys.stderr)
        return 1
    db = local_db()
    if db is not None and args.command != "rebuild" and damaged(db):
        print(damaged_message(db), file=sys.stderr)
        return 1
    if args.command in WRITERS and db is not None:
        mine = db.parent == MLFLOW_DIR.resolve() and ARTIFACTS.exists()
        for where in (db.parent, *([ARTIFACTS] if mine else [])):
            if (why := unwritable(where)) is not None:
                print(unwritable_message(db.parent, why), file=sys.stderr)
                return 1
    if args.command == "init":
        store_id = None if args.store_id in (None, EXTERNAL) else int(args.store_id)
        ids = init_store(args.names, store_id=store_id)
        text = store_doc(ids)
        if args.out:
            write_out(args.out, text)
        print(text, end="")
        return 0
    if args.command in ("sync", "report"):
        params = load_params(args.params)
        if args.command == "sync":
            rows = sync(args.run_dirs, studies=memberships(params, args.profile))
        else:
            rows = log_report(params, args.profile, args.results)
        if args.out:
            write_out(args.out, runs_doc(rows))
        print(counts(rows))
        return 0
    if args.command == "rebuild":
        return rebuilt(args)
    if args.command == "links":
        print("\n".join(ui_links(load_params(args.params), args.profile, args.ui)))
        return 0
    problems, summary = check(load_params(args.params), args.profile, args.runs)
    print("\n".join(summary))
    if problems:
        print(
            f"MLflow misses or differs from the records in {len(problems)} run(s):",
            *problems,
            sep="\n  ",
            file=sys.stderr,
        )
        return 1
    return 0


def write_out(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)


def store_doc(ids: dict[str, str]) -> str:
    """experiments.json (the store rule's output): the store as printed, its id (the
    workflow compares it with the database's on every parse) and its experiments' ids."""
    db = local_db()
    doc = {"tracking_uri": tracking_uri(shown=True), "store_id": read_id(db) if db else None}
    return json.dumps(doc | {"experiments": ids}, indent=2) + "\n"


def runs_doc(rows: list[dict]) -> str:
    """A sync's or report's JSON (synced/<experiment>.json, report.json)."""
    return json.dumps({"tracking_uri": tracking_uri(shown=True), "runs": rows}, indent=2) + "\n"


def counts(rows: list[dict]) -> str:
    actions = [r["action"] for r in rows]
    kinds = ("kept", "relabelled", "logged", "replaced", "completed", "repaired")
    return ", ".join(f"{a}: {actions.count(a)}" for a in kinds)


def rebuilt(args: argparse.Namespace) -> int:
    """``rebuild``: the store afresh, then the files the workflow's MLflow rules write
    (experiments.json, then each experiment's synced/ file and report.json, in that order, as
    their rules would), so that Snakemake finds nothing left to do."""
    try:
        done = rebuild(load_params(args.params), args.profile, args.runs, args.results)
    except ValueError as err:  # another store than the project's
        print(err, file=sys.stderr)
        return 1
    write_out(STORE_FILE, store_doc(done.experiments))
    written = [STORE_FILE]
    for name, rows in done.synced.items():
        written.append(MLFLOW_DIR / "synced" / f"{name}.json")
        write_out(written[-1], runs_doc(rows))
        print(f"{name}: {counts(rows)}")
    if done.report is not None:
        written.append(MLFLOW_DIR / "report.json")
        write_out(written[-1], runs_doc(done.report))
        print(f"report: {counts(done.report)}")
    else:
        print("report: not built yet (results/REPORT.md); `snakemake` logs it when it is")
    made.adopt(written)  # what the MLflow rules would have written: their jobs stay current
    if done.missing:
        print(f"{len(done.missing)} run(s) have no records yet (not trained): {done.missing[0]}")
    print(f"MLflow store rebuilt from the records: {tracking_uri(shown=True)}")
    return 0


def ui_links(params: dict, profile: str | None, ui: str) -> list[str]:
    """Markdown lines: each study's runs (the experiments of its tasks, filtered to the study)
    and its tables and figures, then each task's experiment; all open on the runs table."""
    from pdelab.spec.config import active_profile
    from pdelab.spec.studies import studies_of

    profile = active_profile(params, profile)
    studies = studies_of(params, profile)
    client = client_for()
    ids = {e.name: e.experiment_id for e in client.search_experiments()}
    report = ids.get(report_experiment(profile))
    lines = [f"MLflow UI at {ui} (tracking store {tracking_uri(shown=True)})", "", "Studies:"]
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
