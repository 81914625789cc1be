"""Sync: log finished runs to MLflow from their records, and check MLflow is whole.

:func:`sync` logs each run folder's :func:`read_record` (built by the same functions live
tracking uses) unless MLflow already holds a complete run of that (task, variant, seed) with
the same records' sha256: a rerun skips those, and a run whose records changed, or whose live
logging was cut short or lost, is logged again from its records (an older MLflow run is
deleted: MLflow keeps it in its trash until ``mlflow gc``), so an experiment holds one active
run per run folder and MLflow is never the only copy of a run. The workflow runs it in both
tracking modes; it also sets each run's study tags from params.yaml (:func:`memberships`).
:func:`log_report` logs each study's tables and figures once, as one run per study in the
profile's report experiment. :func:`check` compares MLflow with the run sheet. :func:`rebuild`
makes the project's store afresh from the records alone (``python -m pdelab.tracking
rebuild``): what the workflow's store, sync and report rules would log into an empty one.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pdelab.records import RECORD_FILES, RUNS_DIR, check_run, now_ms, run_dir
from pdelab.tracking import (
    PROVENANCE_TAG,
    REPORT_EXPERIMENT,
    STUDIES_TAG,
    STUDY_TAG,
    MlflowRecord,
    closing,
    create_experiments,
    epoch_metrics,
    experiment_name,
    init_store,
    log_record,
    opening,
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
    from pdelab.config import RunSpec

T = TypeVar("T")
Key = tuple[str, str, str]  # (task, variant, seed) as tagged


def read_record(out: Path) -> MlflowRecord:
    """A finished run's MLflow record from its record files alone, after checking they are all
    the run's whose folder holds them (pdelab.records.check_run). Records written before
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
        closing(result, out, end_ms, doc.get("provenance")),
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


def active_runs(client: Any, experiment_id: str, key: Key | None = None) -> dict[Key, list[Any]]:
    """The experiment's active (not deleted) runs by (task, variant, seed) tag; only those of
    ``key`` if given."""
    where = ""
    if key is not None:
        names = ("task", "variant", "seed")
        where = " and ".join(f"tags.{t} = '{v}'" for t, v in zip(names, key, strict=True))
    runs: dict[Key, list[Any]] = defaultdict(list)
    token = None
    while True:
        page = client.search_runs([experiment_id], where, max_results=1000, page_token=token)
        for run in page:
            tags = run.data.tags
            runs[(tags.get("task", ""), tags.get("variant", ""), tags.get("seed", ""))].append(run)
        token = page.token
        if not token:
            return runs


def holds(run: Any, record: MlflowRecord) -> bool:
    """The MLflow run was logged whole from exactly these records."""
    c = record.closing
    return run.data.tags.get("records_sha256") == c.records_sha256 and run.info.status == c.status


def experiment_id(client: Any, name: str) -> str:
    """The experiment's id; created (as init_store would) when missing."""
    exp = client.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else init_store([name], client)[name]


def memberships(
    params: dict[str, Any], profile: str | None = None, specs: list[RunSpec] | None = None
) -> dict[Key, list[str]]:
    """(task, variant, seed) of each trained run -> the studies that view it. A study that
    names a variant another one repeats (pdelab.run_sheet.same_runs) views the trained run.
    ``specs``: the validated run sheet, when the caller has it."""
    from pdelab.run_sheet import same_runs, validate
    from pdelab.studies import studies_of

    same = same_runs(specs if specs is not None else validate(params, profile))
    studies: dict[Key, set[str]] = defaultdict(set)
    for study in studies_of(params, profile).values():
        for key in study.runs:
            trained = same.get(key, key)
            studies[(trained.task, trained.variant, str(trained.seed))].add(study.name)
    return {key: sorted(names) for key, names in studies.items()}


def relabel(client: Any, run: Any, record: MlflowRecord, studies: list[str] | None) -> bool:
    """Bring a kept run up to date with what is not in its records: its study tags (exactly
    ``studies``; params.yaml may have changed since it was logged), and its dataset input and
    provenance tags if it was logged without them. True if anything changed."""
    added = False
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
    variant, seed, run_id and action (kept, logged, replaced, or relabelled: kept, with its
    study tags moved or its missing dataset input added). ``studies`` (:func:`memberships`)
    sets each run's study tags."""
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
            old = existing.get(record.key, [])
            if len(old) == 1 and holds(old[0], record):
                run_id, action = old[0].info.run_id, "kept"
                wanted = None if studies is None else studies.get(record.key, [])
                if retried(
                    "relabel", lambda r=old[0], rec=record, w=wanted: relabel(client, r, rec, w)
                ):
                    action = "relabelled"
            else:
                run_id = replace(client, exp_id, record, old)
                action = "replaced" if old else "logged"
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


def replace(client: Any, exp_id: str, record: MlflowRecord, found: list[Any]) -> str:
    """Delete the key's active runs (older records), then log the record: the key never ends
    with two runs. ``found``: its runs as the sync's search found them; a retry searches
    again, since the attempt before it may have left a run cut short."""
    first = [found]

    def attempt() -> str:
        runs = first.pop() if first else active_runs(client, exp_id, record.key).get(record.key, [])
        for run in runs:
            client.delete_run(run.info.run_id)
        return log_record(client, exp_id, record)

    return retried(f"logging {record.opening.experiment}/{record.opening.name}", attempt)


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
    from pdelab.config import active_profile
    from pdelab.studies import report_groups

    profile = active_profile(params, profile)
    client = client or client_for()
    name = REPORT_EXPERIMENT.format(profile=profile)
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
        where = f"tags.report_group = '{group.name}'"
        old = retried("search", lambda w=where: client.search_runs([exp_id], w))
        done = [r for r in old if r.data.tags.get("files_sha256") == digest]
        if len(old) == 1 and done and done[0].info.status == "FINISHED":
            rows.append({"name": group.name, "run_id": old[0].info.run_id, "action": "kept"})
            continue

        def attempt(group: Any = group, digest: str = digest) -> str:
            for run in client.search_runs([exp_id], f"tags.report_group = '{group.name}'"):
                client.delete_run(run.info.run_id)
            tags = {"report_group": group.name, "paper": group.paper, "title": group.title}
            tags |= study_tags([group.study] if group.study else [])
            run_id = client.create_run(
                exp_id, start_time=now_ms(), tags=tags, run_name=group.name
            ).info.run_id
            for f in group.files:
                client.log_artifact(run_id, str(root / f), artifact_path=str(Path(f).parent))
            client.set_tag(run_id, "files_sha256", digest)
            client.set_terminated(run_id, "FINISHED")
            return run_id

        run_id = retried(f"logging the report of {group.name}", attempt)
        action = "replaced" if old else "logged"
        rows.append({"name": group.name, "run_id": run_id, "action": action})
    return rows


def check(
    params: dict[str, Any],
    profile: str | None = None,
    root: Path = RUNS_DIR,
    client: Any = None,
) -> tuple[list[str], list[str]]:
    """(problems, summary lines): every run the profile trains must be in MLflow as a complete
    run of its current records, with one metric step per metrics.parquet row."""
    from pdelab.config import active_profile
    from pdelab.run_sheet import trained_runs

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
    from pdelab.config import active_profile
    from pdelab.run_sheet import trained_runs

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
