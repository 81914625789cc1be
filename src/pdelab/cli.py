"""``pdelab``: what the params (params.yaml and each paper's config.yaml) mean for the active
run profile, without running anything.

    pdelab list                       # the run profile's studies, tasks and variants
    pdelab explain listops baseline   # a run's resolved spec, the file and layer of each key
    pdelab status                     # runs not trained, or from another spec, code or data
    pdelab data status                # each task's data: source, pins, on disk, where a copy goes
    pdelab plan [--format md]         # what training will cost: FLOPs, memory, GPU-/core-hours
    pdelab show positions             # a study's table of the last build, in the terminal
    pdelab mlflow                     # the MLflow UI on the project's store, and its links
    pdelab tracking check             # the jobs run by hand: tracking, rehearsal, report

``status`` compares each trained run's run.json with what it would be trained from now: the
spec params.yaml resolves, the source it would execute (pdelab.records.provenance) and the prepared
data's content hash, as ``key: old -> new`` lines. Snakemake retrains exactly those runs.

``--params`` and ``--profile`` may come before or after the subcommand. A task, variant or
study that params.yaml does not name is answered with the closest names; outside a project
(no params.yaml) one line says what to do, and the exit status is 2.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

from pdelab.data.store import MANIFEST, CorruptDataError, verified_manifest
from pdelab.records import environment, run_store
from pdelab.records.provenance import changed_files, code_files, digest
from pdelab.records.run import (
    RUNS_DIR,
    ForeignRecord,
    check_run,
    read_run_json,
    run_dir,
)
from pdelab.report import history
from pdelab.spec.config import (
    PARAMS_FILE,
    RunSpec,
    Sources,
    active_profile,
    load_with_sources,
    origins,
    resolve,
)
from pdelab.spec.fields import ConfigError
from pdelab.spec.run_sheet import trained_runs
from pdelab.spec.shadowed import warning as shadowed_warning
from pdelab.spec.studies import studies_of


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"dim": 8}} -> {"model.dim": 8}; lists and other values are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def explain(
    params: dict[str, Any],
    task: str,
    variant: str,
    seed: int,
    profile: str,
    sources: Sources | None = None,
) -> list[str]:
    """Each key of the run's resolved spec, its value and the layer that set it, as
    ``file: key`` with ``sources`` (params.yaml or the paper's config.yaml that holds it)."""
    check_seed(params, task, variant, seed, profile)
    spec = flatten(resolve(params, task, variant, seed, profile).to_dict())
    set_by = origins(params, task, variant, profile)
    set_by |= {"profile": "profile", "device": f"profiles.{profile}.device"}
    width = max(map(len, spec))
    lines = [f"# {task} {variant} seed {seed}, run profile {profile}"]
    for key, value in spec.items():
        leaf = ".".join(key.split(".")[:2])
        where = set_by.get(leaf)
        if where is None:
            where = "(the default)" if "." in key else "(the run)"
        elif sources is not None:  # the file that sets this key of the layer (leaf by leaf)
            where = f"{sources.of(f'{where}.{leaf}')}: {where}"
        lines.append(f"{key:<{width}}  {json.dumps(value)}  <- {where}")
    return lines


def check_seed(params: dict[str, Any], task: str, variant: str, seed: int, profile: str) -> None:
    """Refuse a seed the profile does not run for this task and variant (its studies' seeds,
    else the profile's), naming the seeds it runs."""
    runs = [r for r in trained_runs(params, profile) if (r.task, r.variant) == (task, variant)]
    seeds = sorted({r.seed for r in runs} or set(params["profiles"][profile].get("seeds", [])))
    if seed not in seeds:
        raise UnknownName(
            f"seed {seed}: the {profile} profile runs {task} {variant} with seeds "
            f"{', '.join(map(str, seeds))}; explain one of them"
        )


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every key whose value differs (absent: "unset")."""
    before, after = flatten(old), flatten(new)
    return [
        f"{key}: {json.dumps(before.get(key, 'unset'))} -> {json.dumps(after.get(key, 'unset'))}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def status(
    params: dict[str, Any], profile: str, root: Path = RUNS_DIR, sources: Sources | None = None
) -> list[str]:
    """One line per reason a run would be trained again: not trained, records not its own, or
    ``key: old -> new`` for its spec, its code (a source file's digest) and its data (the
    prepared folder's content hash); then how many runs that is. First, as the workflow says
    at parse time, each key of params.yaml that changes no run of the profile (shadowed by a
    later layer), with where to write it instead."""
    lines, stale, elsewhere, restorable = [], 0, 0, 0
    hashes: dict[str, str | None] = {}  # each task's data hashed once (kept_version)
    runs = trained_runs(params, profile)
    pairs = [(r.task, r.variant) for r in runs]
    if shadow := shadowed_warning(params, profile, pairs, sources, mine_only=True):
        lines += shadow.splitlines()
    today = environment.versions()
    data_stale = {t: data_status(params, profile, t) for t in sorted({r.task for r in runs})}
    lines += [f"data {t}: {r}" for t, reasons in data_stale.items() for r in reasons]
    for spec in runs:
        folder = run_dir(profile, spec.task, spec.variant, spec.seed, root)
        reasons = run_status(spec, folder)
        if data_stale[spec.task] and not reasons:
            reasons = ["its task's data job runs first (the workflow trains it again after)"]
        if reasons and (key := kept_version(spec, hashes)) is not None:
            reasons.append(f"restorable: kept version {key}, put back by its job, not trained")
            restorable += 1
        lines += [f"{spec.task} {spec.variant} seed {spec.seed}: {r}" for r in reasons]
        stale += bool(reasons)
        if not reasons:
            other = run_environment(folder, today)
            lines += [f"{spec.task} {spec.variant} seed {spec.seed}: kept, {o}" for o in other]
            elsewhere += bool(other)
    if elsewhere:
        lines.append(
            f"{elsewhere} of {len(runs)} runs were made in another environment than this one "
            "(kept: an environment change retrains nothing; `PDELAB_RETRAIN=1 snakemake -f "
            "<run.json>` retrains one)"
        )
    if stale:
        lines.append(f"{stale} of {len(runs)} runs would be trained again by `snakemake`")
    if restorable:
        lines.append(
            f"{restorable} of them trained before with this very spec, data and code: their "
            "jobs put the kept versions back (results/store), in seconds"
        )
    return lines


def kept_version(spec: RunSpec, hashes: dict[str, str | None]) -> str | None:
    """The store's version of the run as params, data and code now make it, where it is kept
    (pdelab.records.run_store): its job restores it rather than training. ``hashes``: the
    data folders hashed already in this listing."""
    key = history.current_key(spec, hashes)
    if key is None:
        return None
    found = run_store.find(spec.profile, spec.task, spec.variant, spec.seed, key)
    return None if found is None else key


def run_environment(folder: Path, today: dict[str, str]) -> list[str]:
    """``environment: key old -> new``, one line per key of the numerics environment
    (versions, CPU, the variables that change numbers, the GPU and its driver: ``today``,
    pdelab.records.environment.versions) a current run recorded otherwise than this machine
    has ("unrecorded" for a key its record lacks; nothing for records made before runs
    recorded an environment)."""
    made = read_run_json(folder).get("environment")
    if not made:
        return []
    return [f"environment: {d}" for d in environment.differences(made, today)]


def data_status(params: dict[str, Any], profile: str, task: str) -> list[str]:
    """Why a task's data job would run again, as the workflow decides it (its made record
    against its recipe: pdelab.runtime.dvc_stages.data_recipe); none when it would not, or when
    no workflow has run in this tree (no stamp to compare with)."""
    from pdelab.records import made
    from pdelab.runtime.dvc_stages import data_recipe

    stamp = made.stamp_path("data", task)
    if not stamp.exists():  # no workflow parsed here
        return []
    record, now = made.read_json(made.made_path(stamp)) or {}, data_recipe(params, profile, task)
    if made.is_current(stamp, now, {}, record):
        return []
    changed = changes(record["own"], now) if record.get("own") else []
    return changed or ["the data job runs again (never run here, or its output changed since)"]


def run_status(spec: RunSpec, folder: Path) -> list[str]:
    """Why one run's records are not those of its spec, code and data as they are now."""
    if not (folder / "run.json").exists():
        return ["not trained"]
    try:
        record = check_run(folder)
    except (ForeignRecord, ValueError, OSError) as err:
        return [f"records unusable: {err}"]
    ident = record["identity"]
    reasons = changes(record.get("spec") or {}, json.loads(spec.to_json()))
    now = code_files(spec)
    if "provenance" not in record:
        return [*reasons, f"code: not recorded -> {digest(now)}"]
    recorded = record["provenance"]["code"]
    reasons += [
        f"code: {path} {recorded.get(path, 'absent')[:12]} -> {now.get(path, 'absent')[:12]}"
        for path in changed_files(recorded, now)
    ]
    prepared = (Path(spec.data_dir) / MANIFEST).exists()
    try:
        data = verified_manifest(spec.data_dir)["content_hash"] if prepared else "absent"
    except CorruptDataError as err:
        return [*reasons, f"data: {err}"]
    if data != ident["data_hash"]:
        reasons.append(f"data: {spec.data_dir} {ident['data_hash'][:12]} -> {data[:12]}")
    return reasons


def listing(params: dict[str, Any], profile: str) -> list[str]:
    lines = [f"# run profile {profile}", "", "studies (study kind: tasks x variants x seeds):"]
    for name, study in studies_of(params, profile).items():
        tasks = sorted({r.task for r in study.runs})
        variants = list(dict.fromkeys(r.variant for r in study.runs))
        lines.append(
            f"  {name} ({study.kind}): {len(tasks)} x {len(variants)} x {len(study.seeds)}"
            f"  tasks {', '.join(tasks)}"
        )
    runs = trained_runs(params, profile)
    lines += ["", f"tasks: {', '.join(sorted({r.task for r in runs}))}"]
    lines += [f"variants: {len({r.variant for r in runs})}", f"runs trained: {len(runs)}"]
    return lines


class UnknownName(ValueError):
    """A name params.yaml does not have, with the closest ones it has."""


def closest(kind: str, name: str, known: list[str]) -> None:
    """Refuse ``name`` unless it is one of ``known``, suggesting the closest names."""
    if name in known:
        return
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    raise UnknownName(f"{kind}: unknown name {name!r}{hint} (`pdelab list` names them all)")


def check_run_names(params: dict[str, Any], task: str, variant: str) -> None:
    closest("task", task, sorted(params.get("tasks") or {}))
    closest("variant", variant, sorted(params.get("variants") or {}))


def built_profiles(results: Path) -> set[str] | None:
    """The run profiles whose runs the last build's tables show (results/summary.parquet's),
    or None where that summary is not there to say."""
    summary = results / "summary.parquet"
    if not summary.is_file():
        return None
    import pandas as pd

    return {str(p) for p in pd.read_parquet(summary, columns=["profile"])["profile"].unique()}


def show(
    params: dict[str, Any], profile: str, study: str, results: Path, csv: bool = False
) -> list[str]:
    """A study's table of the last build (results/tables/<study>.md) fitted to the terminal's
    width (pdelab.report.terminal), or its CSV as written (``csv``: for a pipe). A table the
    build made from another run profile's runs is not shown as this profile's."""
    import shutil

    from pdelab.report.terminal import fit

    closest("study", study, list(studies_of(params, profile)))
    table = results / "tables" / f"{study}.{'csv' if csv else 'md'}"
    built = built_profiles(results)
    if built is not None and profile not in built:
        raise FileNotFoundError(
            f"the {profile} profile has no table of {study} in {results}: its last build is the "
            f"{', '.join(sorted(built))} profile's (build it: `snakemake --cores all --config "
            f"profile={profile}`)"
        )
    if not table.is_file():
        what = "has no CSV" if csv and table.with_suffix(".md").is_file() else "is not built yet"
        raise FileNotFoundError(f"{table} {what}: run `snakemake --cores all` first")
    if csv:
        return [table.read_text().rstrip("\n")]
    return fit(table.read_text(), shutil.get_terminal_size().columns)


# the jobs a person runs by hand: `pdelab NAME ARGS` is `python -m MODULE ARGS`
FORWARDED = {
    "tracking": ("pdelab.tracking.__main__", "MLflow: sync, check, links, rebuild"),
    "rehearsal": ("pdelab.plan.rehearsal", "the GPU rehearsal of the paper path"),
    "report": ("pdelab.report.__main__", "the report's steps (aggregate, study, report, outputs)"),
}


def forward(name: str, args: list[str]) -> int:
    """Run a forwarded command's own command line."""
    import importlib

    module = importlib.import_module(FORWARDED[name][0])
    try:
        code = module.main(args)
    except SystemExit as done:  # argparse's --help and usage errors
        return int(done.code or 0)
    return int(code or 0)


# how `pdelab mlflow` ends the UI: the signals it passes on to all the UI's processes, and the
# seconds they have to end before they are killed
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
STOP_GRACE_S = 10.0
POLL_S = 0.2


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` still running: from /proc, zombies left out (an
    orphan's zombie runs nothing and holds no port, and not every container's init reaps it);
    without /proc, ``[pgid]`` while the group has any member."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").is_file():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while listed
            continue
        state, _parent, group = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of group ``pgid``, if it has any left."""
    import contextlib

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def serve_until_stopped(command: list[str], grace_s: float = STOP_GRACE_S) -> int:
    """Run ``command``, a server that starts workers, until it and every process it started have
    ended; its exit status. It runs in a session of its own, and SIGINT, SIGTERM and SIGHUP sent
    to this process end its whole process group: SIGTERM to each of them, then SIGKILL to those
    left after ``grace_s`` seconds. Ending only the server's first process would orphan its
    workers, still holding its port; and SIGTERM, not Ctrl-C's SIGINT, is what every process of
    ``mlflow ui`` ends on (its job runner starts its consumers again after a SIGINT, so they
    would end only when killed). What the server leaves behind when it ends by itself is ended
    the same way. A signal ignored when this starts (``nohup``) stays
    ignored. Ctrl-C is how the UI is ended: 0 after SIGINT; 128 + the signal's number after
    another, as a shell reports it."""
    import signal
    import subprocess
    import time

    stops: list[int] = []
    started: list[int] = []  # the server's first process, whose pid is its group's id

    def stop(signum: int, _frame: object) -> None:
        stops.append(signum)
        for pgid in started:
            signal_group(pgid, signal.SIGTERM)

    caught = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    caught = [signum for signum in caught if signal.getsignal(signum) is not signal.SIG_IGN]
    previous = {signum: signal.signal(signum, stop) for signum in caught}
    try:
        server = subprocess.Popen(command, start_new_session=True)
        started.append(server.pid)
        if stops:  # received while it started
            signal_group(server.pid, signal.SIGTERM)
        while not stops and server.poll() is None:
            time.sleep(POLL_S)
        if not stops:  # it ended by itself: what it leaves behind is ended too
            signal_group(server.pid, signal.SIGTERM)

        def ended(within_s: float) -> bool:
            deadline = time.monotonic() + within_s
            while server.poll() is None or group_members(server.pid):
                if time.monotonic() > deadline:
                    return False
                time.sleep(POLL_S)
            return True

        if not ended(grace_s):
            signal_group(server.pid, signal.SIGKILL)
            ended(grace_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stops:
        return 0 if stops[0] == signal.SIGINT else 128 + stops[0]
    code = server.wait()
    return code if code >= 0 else 128 - code


def mlflow_ui(params: dict[str, Any], profile: str, port: int, start: bool) -> int:
    """Print the links that open each study's and task's runs table (not MLflow 3's GenAI
    pages), then serve the project's store until interrupted (Ctrl-C, SIGTERM): the UI and
    its workers end with it."""
    from pdelab.records.run import tracking_uri
    from pdelab.tracking.__main__ import ui_links

    print("\n".join(ui_links(params, profile, f"http://127.0.0.1:{port}")), flush=True)
    if not start:
        return 0
    ui = ["mlflow", "ui", "--backend-store-uri", tracking_uri(), "--port", str(port)]
    return serve_until_stopped(ui)


DESCRIPTION = __doc__.split("\n\n")[0].replace("``", "")
EXAMPLES = "examples:\n" + __doc__.split("\n\n")[1]
OPTIONS = argparse.ArgumentParser(add_help=False)  # accepted after the subcommand too
OPTIONS.add_argument(
    "--params",
    type=Path,
    default=argparse.SUPPRESS,
    help=f"the project's parameter file (default: {PARAMS_FILE})",
)
OPTIONS.add_argument(
    "--profile",
    default=argparse.SUPPRESS,
    help="a run profile of params.yaml (default: the profile params.yaml names)",
)


def command(sub: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """A subcommand with the global options and an example."""
    return sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=f"example: {example}",
        parents=[OPTIONS],
    )


def this_trees_code(argv: list[str]) -> None:
    """Run the code of the tree ``pdelab`` is run in, as the workflow does (its Snakefile puts
    the tree's ``src`` first): in a second checkout or a copy, the installed package is another
    tree's code, whose digests would call that tree's runs current or stale wrongly. Starts
    this command again on the tree's ``src`` when the imported package is not the tree's."""
    tree = Path.cwd() / "src" / "pdelab"
    imported = Path(__file__).resolve().parent
    if not (tree / "__init__.py").is_file() or tree.resolve() == imported:
        return
    if os.environ.get("PDELAB_TREE_CODE"):  # started again and still another tree's: refuse
        raise SystemExit(f"pdelab: runs {imported}, not this tree's {tree}; check PYTHONPATH")
    path = os.pathsep.join(filter(None, [str(tree.parent), os.environ.get("PYTHONPATH")]))
    env = os.environ | {"PYTHONPATH": path, "PDELAB_TREE_CODE": "1"}
    os.execve(sys.executable, [sys.executable, "-m", "pdelab.cli", *argv], env)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as a program (not called by a test): this tree's code
        this_trees_code(sys.argv[1:])
    parser = argparse.ArgumentParser(
        prog="pdelab",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--params", type=Path, default=PARAMS_FILE, help=OPTIONS._actions[0].help)
    parser.add_argument("--profile", help=OPTIONS._actions[1].help)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command(sub, "list", "the run profile's studies, tasks and variants", "pdelab list")
    one = command(
        sub,
        "explain",
        "a run's resolved spec and the file and layer that set each key",
        "pdelab explain listops after_embedding 1 --profile paper",
    )
    one.add_argument("task", help="a task of the params (`pdelab list` names them)")
    one.add_argument("variant", help="a variant of the params")
    one.add_argument("seed", type=int, nargs="?", default=0, help="the seed (default 0)")
    command(
        sub,
        "status",
        "runs not trained, or trained from another spec, code or data than now",
        "pdelab status --profile smoke",
    )
    shown = command(
        sub,
        "show",
        "a study's table of the last build, fitted to the terminal (--csv: its numbers)",
        "pdelab show positions --csv | python -c 'import pandas, sys; pandas.read_csv(sys.stdin)'",
    )
    shown.add_argument("study", help="a study of the run profile (`pdelab list` names them)")
    shown.add_argument(
        "--results", type=Path, default=Path("results"), help="results folder (default: results)"
    )
    shown.add_argument("--csv", action="store_true", help="print the table's CSV, for a pipe")
    kept = command(
        sub,
        "history",
        "the kept versions of a variant's runs: what differs from today, and each one's score",
        "pdelab history listops baseline",
    )
    kept.add_argument("task", help="a task of the params")
    kept.add_argument("variant", help="a variant of the params")
    kept.add_argument("--ui", default=history.UI, help=f"the MLflow UI (default {history.UI})")
    against = command(
        sub,
        "compare",
        "two param sets (files or commits): per variant the keys that differ and each's score",
        "pdelab compare HEAD~1 params.yaml",
    )
    against.add_argument("old", help="a params file or a git commit")
    against.add_argument("new", help="a params file or a git commit")
    against.add_argument("--ui", default=history.UI, help=f"the MLflow UI (default {history.UI})")
    collect = command(
        sub,
        "gc",
        "remove kept runs no current params use (a dry run unless --yes)",
        "pdelab gc --yes",
    )
    collect.add_argument("--yes", action="store_true", help="remove them (default: only list)")
    ui = command(
        sub,
        "mlflow",
        "the MLflow UI on the project's store, after the links that open its runs tables",
        "pdelab mlflow --port 5001",
    )
    ui.add_argument("--port", type=int, default=5000, help="the UI's port (default 5000)")
    ui.add_argument("--no-ui", action="store_true", help="print the links only")
    for name, (module, what) in FORWARDED.items():
        forwarded = sub.add_parser(
            name,
            help=f"{what} (`pdelab {name} --help`)",
            add_help=False,
            epilog=f"example: pdelab {name} --help",
        )
        forwarded.add_argument("rest", nargs=argparse.REMAINDER, help=f"`{module}`'s arguments")
    data = sub.add_parser(
        "data",
        help="the data commands (`pdelab data --help`), e.g. `pdelab data status`",
        epilog="example: pdelab data status --profile paper",
    )
    data.add_argument("data_args", nargs=argparse.REMAINDER, help="a data command and its options")
    plan = command(
        sub,
        "plan",
        "what training will cost: FLOPs, peak memory, GPU-hours, CPU core-hours (pdelab.plan)",
        "pdelab plan --profile paper --format md",
    )
    plan.add_argument(
        "--format", choices=("text", "md"), default="text", help="text (default) or Markdown"
    )
    plan.add_argument("--out", type=Path, help="write the plan to this file instead")
    plan.add_argument(
        "--measured", type=Path, help="measured rates (default: results/plan/measured.json)"
    )
    plan.add_argument("--workers", type=int, help="processes counting steps (default: cores)")
    plan.add_argument("--no-cache", action="store_true", help="count every step afresh")
    plan.add_argument("--only", action="append", default=[], help='"task/variant" patterns')
    plan.add_argument(
        "--card",
        type=float,
        metavar="GB",
        help="the GPU memory each job's micro-batch is fitted to (default: the run profile's "
        "gpu_memory_gb, else the visible GPU's), e.g. --card 24",
    )
    plan.add_argument(
        "--gpus", type=int, default=1, metavar="N", help="GPUs booked: wall-clock on N of a kind"
    )
    plan.add_argument(
        "--budget",
        type=float,
        metavar="GPU_HOURS",
        help="the claims a budget of GPU-hours decides, and the runs to train first for them",
    )
    plan.add_argument(
        "--gpu-kind",
        help="the GPU kind claims and the budget are priced on (default: the most measured)",
    )
    args, extra = parser.parse_known_args(argv)
    if args.command not in FORWARDED and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not Path(args.params).is_file():
        print(
            f"pdelab: no {args.params} in {Path.cwd()}: run pdelab in a pdelab project folder "
            "(the one holding params.yaml), or name the file with --params FILE",
            file=sys.stderr,
        )
        return 2
    if args.command in FORWARDED:  # the global options given before it follow its own
        given = ["--profile", args.profile] if args.profile else []
        given += ["--params", str(args.params)] if args.params != PARAMS_FILE else []
        return forward(args.command, [*extra, *args.rest, *given])
    if args.command == "data":  # its own command line, given this one's options
        from pdelab.data.__main__ import main as data_main

        given = ["--profile", args.profile] if args.profile else []
        data_main([*args.data_args, "--params", str(args.params), *given])
        return 0
    sources = None
    try:
        params, sources = load_with_sources(args.params)
        profile = active_profile(params, args.profile)
        if args.command == "explain":
            check_run_names(params, args.task, args.variant)
            lines = explain(params, args.task, args.variant, args.seed, profile, sources)
        elif args.command == "mlflow":
            return mlflow_ui(params, profile, args.port, not args.no_ui)
        elif args.command == "show":
            lines = show(params, profile, args.study, args.results, args.csv)
        elif args.command == "status":
            lines = status(params, profile, sources=sources) or [
                "every run is trained from its current spec, code and data"
            ]
        elif args.command in ("history", "compare", "gc"):
            if args.command == "history":
                check_run_names(params, args.task, args.variant)
                lines = history.history(params, profile, args.task, args.variant, args.ui)
            elif args.command == "compare":
                lines = history.compare(profile, args.old, args.new, args.ui)
            else:
                lines = history.gc(params, profile, args.yes)
        elif args.command == "plan":
            from pdelab.plan.__main__ import command as plan_command  # torch: this alone

            options = {"measured": args.measured, "workers": args.workers, "only": args.only}
            options |= {"card_gib": args.card}
            options |= {"cache": None} if args.no_cache else {}
            from pdelab.plan.cost import NoMatch
            from pdelab.plan.hardware import GPUS
            from pdelab.report.claims_cost import section as claims_section

            kinds = [g.name for g in GPUS]
            if args.gpus < 1 or (args.gpu_kind and args.gpu_kind not in kinds):
                parser.error(f"plan: --gpus N >= 1 and --gpu-kind one of {', '.join(kinds)}")

            def claims(made: Any, fmt: str) -> str:
                return claims_section(params, made, fmt, args.budget, args.gpu_kind)

            options |= {"sections": [claims], "gpus": args.gpus}
            try:
                lines = plan_command(params, profile, args.format, args.out, **options)
            except NoMatch as err:  # an --only pattern that names nothing: a typo
                print(f"pdelab plan: {err}", file=sys.stderr)
                return 2
        else:
            lines = listing(params, profile)
    except (UnknownName, FileNotFoundError, history.NotParams) as err:
        print(f"pdelab: {err}", file=sys.stderr)
        return 2
    except ConfigError as err:
        print(f"invalid params: {sources.locate(str(err)) if sources else err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
