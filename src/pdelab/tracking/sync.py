"""Sync: log finished runs to MLflow from their records, and check MLflow is whole.

:func:`sync` logs each run folder's :func:`read_record` (built by the same functions live
tracking uses) unless MLflow already holds a complete run of that (task, variant, seed) with
the same records' sha256: a rerun skips those, and a run whose records changed, or whose
logging was cut short or lost, is logged again from its records (an older MLflow run is
deleted: MLflow keeps it in its trash until ``mlflow gc``), so an experiment holds one active
run per run folder and MLflow is never the only copy of a run. The run a live training job
logged (result.parquet's mlflow_run_id) is never deleted: kept, or completed in place if its
logging was cut short, so the id in the records names an active run of the store it was
logged to. Any number of syncs of the same runs may write at once, on any nodes: each key
converges to one run (:func:`settle`). The workflow runs it in both tracking modes; it also
sets each run's study tags from params.yaml (:func:`memberships`).
:func:`log_report` logs each study's tables and figures once, as one run per study in the
profile's report experiment. :func:`check` compares MLflow with the run sheet. :func:`rebuild`
makes the project's store afresh from the records alone (``python -m pdelab.tracking
rebuild``): what the workflow's store, sync and report rules would log into an empty one.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pdelab.records.run import RECORD_FILES, RUNS_DIR, check_run, now_ms, run_dir
from pdelab.tracking.log import (
    PROVENANCE_TAG,
    RECORDS_TAG,
    STUDIES_TAG,
    STUDY_TAG,
    MlflowRecord,
    closing,
    closing_entries,
    create_experiments,
    epoch_entries,
    epoch_metrics,
    experiment_name,
    final_metrics,
    init_store,
    log_entities,
    log_readable,
    log_record,
    opening,
    report_experiment,
    seal,
    study_tags,
)
from pdelab.tracking.store import (
    DB,
    STORE_FILE,
    create_db,
    local_db,
    new_id,
    open_store,
    prune_artifacts,
    read_id,
)

if TYPE_CHECKING:
    from pdelab.spec.config import RunSpec

T = TypeVar("T")
Key = tuple[str, str, str]  # (task, variant, seed) as tagged
LEASE_TAG = "sync_lease"  # "<host> <pid> <ms>" on a run a sync is logging; removed once sealed
LEASE_MS = 10 * 60_000  # a lease this old is abandoned (its sync died on another node)
FILES_TAG = "files_sha256"  # a report run's seal


def read_record(out: Path) -> MlflowRecord:
    """A finished run's MLflow record from its record files alone, after checking they are all
    the run's whose folder holds them (pdelab.records.run.check_run). Records written before
    run.json kept wall-clock stamps are stamped with metrics.parquet's modification time."""
    import pyarrow.parquet as pq

    doc = check_run(out)
    result = pq.read_table(out / "result.parquet").to_pylist()[0]
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    kept = doc.get("tracking") or {}
    end_ms = kept.get("end_ms") or int((out / "metrics.parquet").stat().st_mtime * 1000)
    stamps = kept.get("epoch_end_ms") or []
    epochs = tuple(
        epoch_metrics(row, stamps[i] if i < len(stamps) else end_ms) for i, row in enumerate(rows)
    )
    commit = kept.get("git_commit") or "unknown"
    start_ms = kept.get("start_ms") or end_ms
    return MlflowRecord(
        opening(doc["spec"], str(result["data_hash"]), commit, start_ms),
        epochs,
        closing(result, out, end_ms, doc.get("provenance"), doc.get("environment")),
        str(result.get("mlflow_run_id") or ""),
    )


def retried(what: str, fn: Callable[[], T], attempts: int = 4) -> T:
    """fn, retried with back-off: parallel sync jobs share one SQLite store, which may be
    locked for a moment."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - retried, then raised with context
            if attempt + 1 == attempts:
                raise RuntimeError(f"MLflow {what} failed {attempts} times: {err}") from err
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def client_for(uri: str | None = None) -> Any:
    """A client of ``uri`` (the project's store by default), made by
    :func:`pdelab.tracking.store.open_store`."""
    return open_store(uri)


def key_filter(key: Key) -> str:
    """The search filter of one (task, variant, seed)'s runs."""
    names = ("task", "variant", "seed")
    return " and ".join(f"tags.{t} = '{v}'" for t, v in zip(names, key, strict=True))


def find_runs(client: Any, experiment_id: str, where: str = "") -> list[Any]:
    """The experiment's active (not deleted) runs that match the search filter, every page."""
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], where, max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def active_runs(client: Any, experiment_id: str, key: Key | None = None) -> dict[Key, list[Any]]:
    """The experiment's active (not deleted) runs by (task, variant, seed) tag; only those of
    ``key`` if given."""
    runs: dict[Key, list[Any]] = defaultdict(list)
    for run in find_runs(client, experiment_id, key_filter(key) if key else ""):
        tags = run.data.tags
        runs[(tags.get("task", ""), tags.get("variant", ""), tags.get("seed", ""))].append(run)
    return runs


def lease() -> str:
    """This process's lease on a run it is logging: host, pid and the time."""
    return f"{socket.gethostname()} {os.getpid()} {now_ms()}"


def busy(run: Any, seal_tag: str) -> bool:
    """Another sync is logging this run now: it is not sealed yet, and its lease is recent
    and, when taken on this host, held by a live process other than this one. A run cut short
    (a killed sync's, a failed attempt of this one, a live job's) is not busy."""
    tags = run.data.tags
    if seal_tag in tags or LEASE_TAG not in tags:
        return False
    host, pid, ms = tags[LEASE_TAG].rsplit(" ", 2)
    if now_ms() - int(ms) >= LEASE_MS:
        return False
    if mine(run):
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def mine(run: Any) -> bool:
    """This process began the run (an attempt of its own, cut short and retried)."""
    held = run.data.tags.get(LEASE_TAG, "").rsplit(" ", 2)
    return len(held) == 3 and held[:2] == [socket.gethostname(), str(os.getpid())]


def choose(runs: list[Any], done: Callable[[Any], bool], prefer: str = "") -> Any | None:
    """The run a key keeps: ``prefer`` (a live training job's run) if active, else the
    complete run first in (start time, run id) order; None if none is complete."""
    for run in runs:
        if prefer and run.info.run_id == prefer:
            return run
    complete = [run for run in runs if done(run)]
    return min(complete, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def settle(
    client: Any,
    experiment_id: str,
    where: str,
    seal_tag: str,
    done: Callable[[Any], bool],
    log: Callable[[], object],
    prefer: str = "",
    found: list[Any] | None = None,
) -> tuple[Any, str]:
    """One key's run (the runs ``where`` selects): (the run kept, action). MLflow has no
    unique key and nodes share no disk for a lock, so any number of writers may settle one
    key at once; each searches the key's runs (``found``: a search made already); if none
    is complete (``done``), logs one (``log``, sealed last) and searches again; then keeps
    :func:`choose`'s run and deletes the others, except runs another writer is logging now
    (:func:`busy`), which it seals or leaves to a later sync. Why one complete run remains:
    every writer orders complete runs the same way (``prefer``, logged by a live training job
    before any sync, first), and deletes a complete run only when it sees one before it, so
    the first complete run is never deleted; and of two complete runs, the writer of the one
    sealed later searched after both were sealed, so it deleted one."""
    runs = found if found is not None else find_runs(client, experiment_id, where)
    chosen, action = choose(runs, done, prefer), "kept"
    if chosen is None:
        older = [run for run in runs if not busy(run, seal_tag) and not mine(run)]
        action = "replaced" if older else "logged"  # this sync's own retry replaces nothing
        log()
        runs = find_runs(client, experiment_id, where)
        chosen = choose(runs, done, prefer)
        if chosen is None:
            raise RuntimeError(f"the run just logged ({where}) is not among the active runs")
    for run in runs:
        if run.info.run_id != chosen.info.run_id and not busy(run, seal_tag):
            client.delete_run(run.info.run_id)  # deleting a deleted run is a no-op
    return chosen, action


def holds(run: Any, record: MlflowRecord) -> bool:
    """The MLflow run was logged whole from exactly these records."""
    c = record.closing
    return run.data.tags.get(RECORDS_TAG) == c.records_sha256 and run.info.status == c.status


def logged_keys(record: MlflowRecord) -> set[str]:
    """Every metric a run of this record has: its epochs' and its final values."""
    return {k for e in record.epochs for k in e.metrics} | set(record.closing.metrics)


def current(run: Any, record: MlflowRecord) -> bool:
    """The run is as this version logs the record: timed as its training (start and end from
    run.json), and no metric the record lacks (an older version logged a classifier's NaN
    perplexity). MLflow can neither move a run's start nor delete a metric, so a sync logs a
    run that is not current anew, in its place."""
    times = (run.info.start_time, run.info.end_time)
    if times != (record.opening.start_ms, record.closing.stamp_ms):
        return False
    return set(run.data.metrics) <= logged_keys(record)


def experiment_id(client: Any, name: str) -> str:
    """The experiment's id; created (as init_store would) when missing."""
    exp = client.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else init_store([name], client)[name]


def memberships(
    params: dict[str, Any], profile: str | None = None, specs: list[RunSpec] | None = None
) -> dict[Key, list[str]]:
    """(task, variant, seed) of each trained run -> the studies that view it. A study that
    names a variant another one repeats (pdelab.spec.run_sheet.same_runs) views the trained run.
    ``specs``: the validated run sheet, when the caller has it."""
    from pdelab.spec.run_sheet import same_runs, validate
    from pdelab.spec.studies import studies_of

    same = same_runs(specs if specs is not None else validate(params, profile))
    studies: dict[Key, set[str]] = defaultdict(set)
    for study in studies_of(params, profile).values():
        for key in study.runs:
            trained = same.get(key, key)
            studies[(trained.task, trained.variant, str(trained.seed))].add(study.name)
    return {key: sorted(names) for key, names in studies.items()}


def relabel(client: Any, run: Any, record: MlflowRecord, studies: list[str] | None) -> bool:
    """Bring a kept run up to date with what is not in its records: its study tags (exactly
    ``studies``; params.yaml may have changed since it was logged), and what an older version
    of this package logged otherwise: its name, its dataset input and provenance tags, and
    its final values as params with the readable records, and as metrics. True if anything
    changed."""
    from mlflow.entities import Param

    added = False
    if run.info.run_name != record.opening.name:
        client.update_run(run.info.run_id, name=record.opening.name)
        added = True
    missing = [m for m in final_metrics(record.closing) if m.key not in run.data.metrics]
    if missing:  # logged when final values were params only
        log_entities(client, run.info.run_id, metrics=missing)
        added = True
    final = {k: v for k, v in record.closing.final.items() if k not in run.data.params}
    if final:  # logged when final values were metrics, and Parquet the only records
        log_entities(client, run.info.run_id, params=[Param(k, v) for k, v in final.items()])
        log_readable(client, run.info.run_id, record.closing.artifacts)
        added = True
    if not run.inputs.dataset_inputs:
        client.log_inputs(run.info.run_id, datasets=[record.opening.data.entity()])
        added = True
    tags = run.data.tags
    for key, value in record.closing.tags.items():
        if key.startswith(PROVENANCE_TAG) and tags.get(key) != value:
            client.set_tag(run.info.run_id, key, value)
            added = True
    if studies is None:
        return added
    have = {k: v for k, v in run.data.tags.items() if k.startswith(STUDY_TAG) or k == STUDIES_TAG}
    want = study_tags(studies)
    for key in have.keys() - want.keys():
        client.delete_tag(run.info.run_id, key)
    changed = {k: v for k, v in want.items() if have.get(k) != v}
    for key, value in changed.items():
        client.set_tag(run.info.run_id, key, value)
    return added or bool(changed) or bool(have.keys() - want.keys())


def sync(
    run_dirs: Iterable[Path],
    client: Any = None,
    studies: dict[Key, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Log every run folder's record to MLflow once; returns one row per folder: task,
    variant, seed, run_id and action (kept, logged, replaced, relabelled: kept, with its study
    tags moved or its missing dataset input added; or completed: a live run cut short, logged
    whole in place). ``studies`` (:func:`memberships`) sets each run's study tags."""
    client = client or client_for()
    records = [(Path(d), read_record(Path(d))) for d in run_dirs]
    if studies is not None:
        records = [(f, with_studies(r, studies.get(r.key, []))) for f, r in records]
    by_experiment: dict[str, list[tuple[Path, MlflowRecord]]] = defaultdict(list)
    for folder, record in records:
        by_experiment[record.opening.experiment].append((folder, record))
    rows = []
    for name, group in by_experiment.items():
        exp_id = retried("experiment", lambda name=name: experiment_id(client, name))
        existing = retried("search", lambda exp_id=exp_id: active_runs(client, exp_id))
        for folder, record in group:
            wanted = None if studies is None else studies.get(record.key, [])
            run_id, action = settle_run(client, exp_id, record, wanted, existing[record.key])
            task, variant, seed = record.key
            rows.append(
                {
                    "experiment": name,
                    "task": task,
                    "variant": variant,
                    "seed": int(seed),
                    "run_id": run_id,
                    "action": action,
                    "run_dir": str(folder),
                    "studies": record.opening.tags.get(STUDIES_TAG, ""),
                }
            )
    return rows


def with_studies(record: MlflowRecord, studies: list[str]) -> MlflowRecord:
    """The record with its study tags among the opening's tags (a new run is created with
    them; an existing one is relabelled)."""
    from dataclasses import replace as swap

    tags = record.opening.tags | study_tags(studies)
    return swap(record, opening=swap(record.opening, tags=tags))


def settle_run(
    client: Any,
    exp_id: str,
    record: MlflowRecord,
    studies: list[str] | None,
    found: list[Any],
) -> tuple[str, str]:
    """The key's one run (:func:`settle`), relabelled (:func:`relabel`) if kept: (run id,
    action). A live run cut short is completed in place. ``found``: the key's runs as the
    sync's first search found them; a retry searches again (a run it chose may have been
    deleted meanwhile by another writer, which chose another)."""
    first = [found]

    def log() -> str:
        run_id = log_record(client, exp_id, record, {LEASE_TAG: lease()})
        client.delete_tag(run_id, LEASE_TAG)  # sealed: the lease is done with
        return run_id

    def attempt() -> tuple[str, str]:
        where = key_filter(record.key)

        def done(run: Any) -> bool:  # a live job's run is completed in place, never replaced
            live = run.info.run_id == record.live_id
            return holds(run, record) and (live or current(run, record))

        found = first.pop() if first else None
        run, action = settle(client, exp_id, where, RECORDS_TAG, done, log, record.live_id, found)
        if not holds(run, record):
            complete(client, run.info.run_id, record)
            run, action = client.get_run(run.info.run_id), "completed"
        if action in ("kept", "completed") and relabel(client, run, record, studies):
            action = "relabelled" if action == "kept" else action
        return run.info.run_id, action

    return retried(f"logging {record.opening.experiment}/{record.opening.name}", attempt)


def complete(client: Any, run_id: str, record: MlflowRecord) -> None:
    """Log the record whole into a run it was begun in (a live run whose logging stopped):
    what MLflow holds already is logged again unchanged, which MLflow takes as a no-op."""
    from mlflow.entities import Param, RunTag

    final, closing_tags = closing_entries(record.closing)
    params = [Param(k, v) for k, v in record.opening.params.items()] + final
    tags = [RunTag(k, v) for k, v in record.opening.tags.items()] + closing_tags
    metrics = epoch_entries(record.epochs) + final_metrics(record.closing)
    log_entities(client, run_id, params, metrics, tags)
    seal(client, run_id, record.closing)


def files_sha256(root: Path, files: Iterable[str]) -> str:
    """One digest of a report group's files (names and bytes)."""
    import hashlib

    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()


def log_report(
    params: dict[str, Any],
    profile: str | None = None,
    root: Path = Path("results"),
    client: Any = None,
) -> list[dict[str, Any]]:
    """Log each study's tables and figures (and each paper's own outputs) once: one run per
    study in the profile's report experiment, tagged like the training runs of that study, its
    files as artifacts under tables/ and figures/. A run holding the same files is kept; one
    of other files is replaced. Returns one row per group: name, run_id, action."""
    from pdelab.spec.config import active_profile
    from pdelab.spec.studies import report_groups

    profile = active_profile(params, profile)
    client = client or client_for()
    name = report_experiment(profile)
    exp_id = retried("experiment", lambda: experiment_id(client, name))
    rows = []
    for group in report_groups(params):
        missing = [f for f in group.files if not (root / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{group.name}: {', '.join(str(root / f) for f in missing)} not built yet; "
                "run `snakemake --cores all` (or the rule that writes it) first"
            )
        digest = files_sha256(root, group.files)

        def log(group: Any = group, digest: str = digest) -> str:
            tags = {"report_group": group.name, "paper": group.paper, "title": group.title}
            tags |= study_tags([group.study] if group.study else []) | {LEASE_TAG: lease()}
            run_id = client.create_run(
                exp_id, start_time=now_ms(), tags=tags, run_name=group.name
            ).info.run_id
            for f in group.files:
                client.log_artifact(run_id, str(root / f), artifact_path=str(Path(f).parent))
            client.set_terminated(run_id, "FINISHED")
            client.set_tag(run_id, FILES_TAG, digest)  # sealed, last
            client.delete_tag(run_id, LEASE_TAG)
            return run_id

        def done(run: Any, digest: str = digest) -> bool:
            return run.data.tags.get(FILES_TAG) == digest and run.info.status == "FINISHED"

        where = f"tags.report_group = '{group.name}'"
        run, action = retried(
            f"logging the report of {group.name}",
            lambda where=where, done=done, log=log: settle(
                client, exp_id, where, FILES_TAG, done, log
            ),
        )
        rows.append({"name": group.name, "run_id": run.info.run_id, "action": action})
    return rows


def check(
    params: dict[str, Any],
    profile: str | None = None,
    root: Path = RUNS_DIR,
    client: Any = None,
) -> tuple[list[str], list[str]]:
    """(problems, summary lines): every run the profile trains must be in MLflow as a complete
    run of its current records, with one metric step per metrics.parquet row."""
    from pdelab.spec.config import active_profile
    from pdelab.spec.run_sheet import trained_runs

    profile = active_profile(params, profile)
    client = client or client_for()
    problems: list[str] = []
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # experiment -> [runs, found]
    indexes: dict[str, dict[Key, list[Any]]] = {}
    for spec in trained_runs(params, profile):
        name = experiment_name(spec.task, profile)
        counts[name][0] += 1
        where = f"{name}: {spec.variant} seed {spec.seed}"
        folder = run_dir(profile, spec.task, spec.variant, spec.seed, root)
        if not all((folder / f).exists() for f in RECORD_FILES):
            problems.append(f"{where}: no records in {folder} (not trained yet)")
            continue
        if name not in indexes:
            exp = client.get_experiment_by_name(name)
            indexes[name] = active_runs(client, exp.experiment_id) if exp else {}
        record = read_record(folder)
        problem = run_problem(client, indexes[name].get(record.key, []), record, folder)
        if problem:
            problems.append(f"{where}: {problem}")
        else:
            counts[name][1] += 1
    summary = [f"{name}: {found}/{runs} runs in MLflow" for name, (runs, found) in counts.items()]
    return problems, summary


def run_problem(client: Any, runs: list[Any], record: MlflowRecord, folder: Path) -> str | None:
    """What is wrong with MLflow's copy of one run folder, or None. The run is found by its
    records' sha256 (or, for a live run, by result.parquet's mlflow_run_id)."""
    import pyarrow.parquet as pq

    match = [run for run in runs if holds(run, record)]
    if not match:
        live_id = pq.read_table(folder / "result.parquet").column("mlflow_run_id")[0].as_py()
        match = [run for run in runs if live_id and run.info.run_id == live_id]
    if not match:
        return f"no complete MLflow run of the records in {folder}" + (
            f" ({len(runs)} run(s) of older or partial records)" if runs else ""
        )
    run_id = match[0].info.run_id
    lacking = sorted(set(record.closing.metrics) - set(match[0].data.metrics))
    if lacking:
        return f"MLflow run {run_id} lacks the final metrics {', '.join(lacking)}"
    expected: dict[str, set[int]] = defaultdict(set)
    for epoch in record.epochs:
        for key in epoch.metrics:
            expected[key].add(epoch.step)
    for key, steps in expected.items():
        logged = {m.step for m in client.get_metric_history(run_id, key)}
        if logged != steps:
            return (
                f"MLflow run {run_id} has {key} at steps {sorted(logged)}, metrics.parquet at "
                f"{sorted(steps)}"
            )
    return None


@dataclass
class Rebuilt:
    """What :func:`rebuild` logged: per experiment, the sync's rows; the report's rows (None
    when the report is not built yet); and the run folders that have no records yet."""

    store_id: int
    experiments: dict[str, str]  # the active run profile's experiments: name -> id
    synced: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    report: list[dict[str, Any]] | None = None
    missing: list[str] = field(default_factory=list)


def rebuild(
    params: dict[str, Any],
    profiles: Iterable[str] = (),
    runs: Path = RUNS_DIR,
    results: Path = Path("results"),
) -> Rebuilt:
    """Make the project's SQLite store afresh from the records alone: every trained run of
    params.yaml's run profile (and of each of ``profiles``) that has its records, with its
    study tags, and the report's tables and figures if built. The new store is built beside
    the old one and put in its place when complete (keeping the old one's id, so the workflow
    sees the store it made), then the old store's artifacts are deleted. Another store
    (``MLFLOW_TRACKING_URI``) is refused: ``sync`` fills that one."""
    from pdelab.spec.config import active_profile
    from pdelab.spec.run_sheet import trained_runs

    if local_db() != DB.resolve():
        raise ValueError(
            "rebuild makes the project's own store, results/mlflow; MLFLOW_TRACKING_URI names "
            "another one: run `python -m pdelab.tracking sync RUN_DIR...`, which logs every "
            "run that store lacks"
        )
    active = active_profile(params, None)
    store_id = read_id(DB) or recorded_id() or new_id()
    tmp = DB.with_name(f".{DB.stem}.rebuild.{os.getpid()}{DB.suffix}")
    tmp.unlink(missing_ok=True)
    try:
        create_db(tmp, store_id)
        client = open_store(f"sqlite:///{tmp.resolve()}")
        done = Rebuilt(store_id, {})
        for profile in dict.fromkeys([active, *profiles]):
            specs = trained_runs(params, profile)
            studies = memberships(params, profile)
            names = [experiment_name(t, profile) for t in sorted({s.task for s in specs})]
            ids = create_experiments(client, names)  # each task's, as the store rule makes
            if profile == active:
                done.experiments = ids
            folders: dict[str, list[Path]] = defaultdict(list)
            for spec in specs:
                folder = run_dir(profile, spec.task, spec.variant, spec.seed, runs)
                if all((folder / f).exists() for f in RECORD_FILES):
                    folders[experiment_name(spec.task, profile)].append(folder)
                else:
                    done.missing.append(str(folder))
            for name in names:
                done.synced[name] = sync(folders[name], client, studies)
        if (results / "REPORT.md").exists():
            done.report = log_report(params, active, results, client)
        os.replace(tmp, DB)
    finally:
        tmp.unlink(missing_ok=True)
    prune_artifacts(DB)
    return done


def recorded_id(path: Path = STORE_FILE) -> int:
    """The store id experiments.json records (the store rule's output), or 0."""
    try:
        return int(json.loads(path.read_text()).get("store_id") or 0)
    except (OSError, ValueError, AttributeError):
        return 0
