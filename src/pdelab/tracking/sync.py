"""Sync: log finished runs to MLflow from their records, and check MLflow is whole.

:func:`sync` logs each run folder's :func:`read_record` (built by the same functions live
tracking uses) unless MLflow already holds a complete run of that (task, variant, seed) with
the same records' sha256: a rerun skips those, and a run whose records changed (other params,
data or code: another identity; or retrained), or whose logging was lost, is logged again
from its records as a new run tagged ``pdelab.current`` = true (:func:`mark_current`); the
runs logged before for that folder are kept, tagged false, never deleted, so an experiment
keeps its history and MLflow is never the only copy of a run. Only copies of the same
records (concurrent syncs) and a sync's own unsealed attempts are deleted. The run a live
training job logged (result.parquet's mlflow_run_id) is never deleted: kept, or completed in
place if its logging was cut short, so the id in the records names an active run of the store
it was logged to. After each experiment's runs, each setting's parent run is brought up to
date (:mod:`pdelab.tracking.parents`). Any number of syncs of the same runs may write at
once, on any nodes: each key converges to one run of its records (:func:`settle`). The
workflow runs it in both tracking modes; it also sets each run's study tags from params.yaml
(:func:`memberships`).
:func:`log_report` logs each study's tables and figures once, as one run per study in the
profile's report experiment. :func:`check` compares MLflow with the run sheet and, value by
value, with the records (:func:`differences`): every metric (each epoch's and the final
values), param and tag MLflow holds that comes from them; a sync repairs a run whose values
differ in place (:func:`repair`), in the same run. :func:`rebuild`
makes the project's store afresh from the records alone (``python -m pdelab.tracking
rebuild``): what the workflow's store, sync and report rules would log into an empty one.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdelab.records.run import RECORD_FILES, RUNS_DIR, check_run, now_ms, run_dir
from pdelab.tracking.log import (
    CURRENT_TAG,
    PARENT_TAG,
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
    log_record,
    opening,
    report_experiment,
    seal,
    study_filter,
    study_tags,
)
from pdelab.tracking.parents import update_parents
from pdelab.tracking.settle import (
    LEASE_TAG,
    find_runs,
    lease,
    retried,
    settle,
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

Key = tuple[str, str, str]  # (task, variant, seed) as tagged
FILES_TAG = "files_sha256"  # a report run's seal
VIEW_TAG = "pdelab.view"  # a study's report run: the search filter that shows the study's runs
NOTE_TAG = "mlflow.note.content"  # the run's description in the UI
# MLflow never overwrites a param: where a run holds another value than its records, the sync
# tags the records' value as `records_param.<key>`, which the check reads in its place.
PARAM_TAG = "records_param."
BULK_RUNS = 500  # run ids per bulk metric-history query (an SQL `IN` list)


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


def client_for(uri: str | None = None) -> Any:
    """A client of ``uri`` (the project's store by default), made by
    :func:`pdelab.tracking.store.open_store`."""
    return open_store(uri)


def key_filter(key: Key) -> str:
    """The search filter of one (task, variant, seed)'s runs."""
    names = ("task", "variant", "seed")
    return " and ".join(f"tags.{t} = '{v}'" for t, v in zip(names, key, strict=True))


def active_runs(client: Any, experiment_id: str, key: Key | None = None) -> dict[Key, list[Any]]:
    """The experiment's active (not deleted) runs by (task, variant, seed) tag, parents left
    out; only those of ``key`` if given."""
    runs: dict[Key, list[Any]] = defaultdict(list)
    for run in find_runs(client, experiment_id, key_filter(key) if key else ""):
        tags = run.data.tags
        if tags.get(PARENT_TAG) == "true":
            continue  # a setting's parent (pdelab.tracking.parents): no run folder's
        runs[(tags.get("task", ""), tags.get("variant", ""), tags.get("seed", ""))].append(run)
    return runs


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
    its final values as metrics. True if anything changed."""
    added = False
    if run.info.run_name != record.opening.name:
        client.update_run(run.info.run_id, name=record.opening.name)
        added = True
    missing = [m for m in final_metrics(record.closing) if m.key not in run.data.metrics]
    if missing:  # logged when final values were params only
        log_entities(client, run.info.run_id, metrics=missing)
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
    tags moved or its missing dataset input added; completed: a live run cut short, logged
    whole in place; or repaired: kept, its values that differed from the records logged
    again in the same run). ``studies`` (:func:`memberships`) sets each run's study tags."""
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
        keys = set().union(*(logged_keys(r) for _, r in group))
        found = [run for runs in existing.values() for run in runs]
        histories = retried(
            "metric history",
            lambda found=found, keys=keys: metric_histories(client, found, keys),
        )
        for folder, record in group:
            wanted = None if studies is None else studies.get(record.key, [])
            run_id, action = settle_run(
                client, exp_id, record, wanted, existing[record.key], histories
            )
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
        settled = [record for _, record in group]
        runs = retried("search", lambda exp_id=exp_id: find_runs(client, exp_id))
        update_parents(client, exp_id, settled, runs)
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
    histories: dict[str, dict[str, list[Any]]] | None = None,
) -> tuple[str, str]:
    """The key's one run (:func:`settle`), relabelled (:func:`relabel`) if kept, and any value
    that differs from the records repaired in place (:func:`repair`): (run id, action). A
    live run cut short is completed in place. ``found``: the key's runs as the sync's first
    search found them; a retry searches again (a run it chose may have been deleted meanwhile
    by another writer, which chose another). ``histories``: their metric histories
    (:func:`metric_histories`), read once for the experiment."""
    known = histories or {}
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

        def keep(run: Any) -> bool:  # history: all but duplicates and abandoned attempts
            tags = run.data.tags
            abandoned = LEASE_TAG in tags and RECORDS_TAG not in tags
            return not done(run) and not abandoned

        found = first.pop() if first else None
        run, action = settle(
            client, exp_id, where, RECORDS_TAG, done, log, record.live_id, found, keep
        )
        if not holds(run, record):
            complete(client, run.info.run_id, record)
            run, action = client.get_run(run.info.run_id), "completed"
        if action in ("kept", "completed") and relabel(client, run, record, studies):
            action = "relabelled" if action == "kept" else action
            run, history = client.get_run(run.info.run_id), None
        else:
            history = known.get(run.info.run_id)
        fresh = action in ("logged", "replaced")  # just logged whole from the records
        if not fresh and repair(client, run, record, history):
            action = "repaired" if action in ("kept", "relabelled") else action
        if fresh or run.data.tags.get(CURRENT_TAG) != "true":
            mark_current(client, exp_id, where, run.info.run_id)
        return run.info.run_id, action

    return retried(f"logging {record.opening.experiment}/{record.opening.name}", attempt)


def mark_current(client: Any, exp_id: str, where: str, run_id: str) -> None:
    """Tag the run a folder's present records are logged in ``pdelab.current`` = true and
    every other run of its key (``where``) false: an older training's run, a run of other
    params, code or data, an older version's copy. They are kept, never deleted, so an
    experiment keeps its history; the filter ``tags.`pdelab.current` = 'true'`` hides it."""
    for run in find_runs(client, exp_id, where):
        want = "true" if run.info.run_id == run_id else "false"
        if run.data.tags.get(CURRENT_TAG) != want:
            client.set_tag(run.info.run_id, CURRENT_TAG, want)


def complete(client: Any, run_id: str, record: MlflowRecord) -> None:
    """Log the record whole into a run it was begun in (a live run whose logging stopped):
    what MLflow holds already is logged again unchanged, which MLflow takes as a no-op."""
    from mlflow.entities import Param, RunTag

    counts, closing_tags = closing_entries(record.closing)
    params = [Param(k, v) for k, v in record.opening.params.items()] + counts
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
        if group.study:
            save_view(client, run, group.study)
        rows.append({"name": group.name, "run_id": run.info.run_id, "action": action})
    return rows


def save_view(client: Any, run: Any, study: str) -> None:
    """The closest MLflow has to a saved view of a study (it has no saved-view API): the
    study's report run carries the search filter that shows its runs
    (:func:`pdelab.tracking.log.study_filter`) as the tag ``pdelab.view`` and in its
    description (the run page's note), to paste into any experiment's search box."""
    where = study_filter(study)
    note = (
        f"Study `{study}`: its runs are those of the search filter\n\n    {where}\n\n"
        f"(and `tags.`{CURRENT_TAG}` = 'true'` for the present runs only). "
        "`python -m pdelab.tracking links` prints links that open it."
    )
    want = {VIEW_TAG: where, NOTE_TAG: note}
    for key, value in want.items():
        if run.data.tags.get(key) != value:
            client.set_tag(run.info.run_id, key, value)


def check(
    params: dict[str, Any],
    profile: str | None = None,
    root: Path = RUNS_DIR,
    client: Any = None,
) -> tuple[list[str], list[str]]:
    """(problems, summary lines): every run the profile trains must be in MLflow as a complete
    run of its current records, with one metric step per metrics.parquet row, and every
    value MLflow holds of it that comes from the records equal to the records'
    (:func:`differences`). Each experiment's runs are read with one search and their metric
    histories with one bulk query per metric (:func:`metric_histories`)."""
    from pdelab.spec.config import active_profile
    from pdelab.spec.run_sheet import trained_runs

    profile = active_profile(params, profile)
    client = client or client_for()
    problems: list[str] = []
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # experiment -> [runs, found]
    found: dict[str, list[tuple[str, Path, MlflowRecord]]] = defaultdict(list)
    for spec in trained_runs(params, profile):
        name = experiment_name(spec.task, profile)
        counts[name][0] += 1
        where = f"{name}: {spec.variant} seed {spec.seed}"
        folder = run_dir(profile, spec.task, spec.variant, spec.seed, root)
        if not all((folder / f).exists() for f in RECORD_FILES):
            problems.append(f"{where}: no records in {folder} (not trained yet)")
            continue
        found[name].append((where, folder, read_record(folder)))
    for name, runs in found.items():
        exp = client.get_experiment_by_name(name)
        index = active_runs(client, exp.experiment_id) if exp else {}
        everything = [run for key_runs in index.values() for run in key_runs]
        keys = set().union(*(logged_keys(record) for _, _, record in runs))
        histories = metric_histories(client, everything, keys)
        for where, folder, record in runs:
            problem = run_problem(client, index.get(record.key, []), record, folder, histories)
            if problem:
                problems.append(f"{where}: {problem}")
            else:
                counts[name][1] += 1
    summary = [f"{name}: {found}/{runs} runs in MLflow" for name, (runs, found) in counts.items()]
    return problems, summary


def sync_fix(folder: Path) -> str:
    """The commands that bring MLflow's copy of a run folder back to its records."""
    return (
        f"fix: `python -m pdelab.tracking sync {folder}` (or `snakemake --cores all "
        "--forcerun mlflow_sync`)"
    )


def run_problem(
    client: Any,
    runs: list[Any],
    record: MlflowRecord,
    folder: Path,
    histories: dict[str, dict[str, list[Any]]] | None = None,
) -> str | None:
    """What is wrong with MLflow's copy of one run folder, or None. The run is found by its
    records' sha256 (or, for a live run, by result.parquet's mlflow_run_id); then each value
    it holds that comes from the records is compared with them (:func:`differences`).
    ``histories``: the runs' metric histories (:func:`metric_histories`), read here if not
    given."""
    import pyarrow.parquet as pq

    match = [run for run in runs if holds(run, record)]
    if not match:
        live_id = pq.read_table(folder / "result.parquet").column("mlflow_run_id")[0].as_py()
        match = [run for run in runs if live_id and run.info.run_id == live_id]
    if not match:
        return (
            f"no complete MLflow run of the records in {folder}"
            + (f" ({len(runs)} run(s) of older or partial records)" if runs else "")
            + f"; {sync_fix(folder)}"
        )
    run = match[0]
    run_id = run.info.run_id
    if histories is None or run_id not in histories:
        histories = metric_histories(client, [run], logged_keys(record))
    found = differences(run, record, histories[run_id])
    if not found:
        return None
    fix = sync_fix(folder)
    if any(d.record is None for d in found):  # a step the records lack: MLflow keeps it
        fix += (
            "; a metric step the records lack stays in MLflow's history: rebuild the store "
            "from the records (`python -m pdelab.tracking rebuild`), or delete the run and sync"
        )
    listed = "; ".join(str(d) for d in found)
    return f"MLflow run {run_id} differs from the records in {folder}: {listed}; {fix}"


@dataclass(frozen=True)
class Difference:
    """One value MLflow holds of a run that is not its records' value. ``kind``: metric,
    param, tag or status; ``step``: an epoch's metric step (None: a final value, compared as
    the metric's latest value); ``store``/``record``: the values (None: absent there)."""

    kind: str
    key: str
    store: Any
    record: Any
    step: int | None = None

    def __str__(self) -> str:
        where = f"{self.kind} {self.key}" + ("" if self.step is None else f" at step {self.step}")
        store = "absent" if self.store is None else repr(self.store)
        record = "absent" if self.record is None else repr(self.record)
        return f"{where}: MLflow {store}, records {record}"


def metric_histories(
    client: Any, runs: Iterable[Any], keys: Iterable[str] = ()
) -> dict[str, dict[str, list[Any]]]:
    """run id -> metric key -> every value MLflow holds (its history), for each of ``keys``
    and each metric the runs have. An SQL store answers one query per metric for all the runs
    (``get_metric_history_bulk``); another (a tracking server) one request per run and
    metric."""
    from mlflow.entities import Metric

    runs = list(runs)
    wanted = sorted(set(keys) | {k for run in runs for k in run.data.metrics})
    found = {run.info.run_id: {key: [] for key in wanted} for run in runs}
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    bulk = getattr(store, "get_metric_history_bulk", None)
    ids = list(found)
    for key in wanted:
        if bulk is None:
            for run_id in ids:
                found[run_id][key] = list(client.get_metric_history(run_id, key))
            continue
        for start in range(0, len(ids), BULK_RUNS):
            for entry in bulk(ids[start : start + BULK_RUNS], key, max_results=2**31 - 1):
                found[entry.run_id][key].append(
                    Metric(entry.key, entry.value, entry.timestamp, entry.step)
                )
    return found


def latest(entries: Iterable[Any]) -> Any | None:
    """The entry MLflow shows as a metric's value: the greatest (step, timestamp, value)."""
    return max(entries, key=lambda m: (m.step, m.timestamp, m.value), default=None)


def at_steps(entries: Iterable[Any]) -> dict[int, Any]:
    """Each step's value as logged last: the greatest (timestamp, value) at that step."""
    last: dict[int, Any] = {}
    for m in entries:
        seen = last.get(m.step)
        if seen is None or (m.timestamp, m.value) > (seen.timestamp, seen.value):
            last[m.step] = m
    return last


def differences(run: Any, record: MlflowRecord, history: dict[str, list[Any]]) -> list[Difference]:
    """Every value MLflow holds of ``run`` that comes from the records and differs from them:
    each epoch's metrics (the value logged last at each step of metrics.parquet, and no step
    it lacks), the final metrics (the latest value, in the history and in the runs table),
    the params (a param MLflow holds otherwise counts as the records' if tagged so, see
    PARAM_TAG), the tags and the status. ``history``: :func:`metric_histories` of the run."""
    found: list[Difference] = []
    final = record.closing.metrics
    epochs: dict[str, dict[int, float]] = defaultdict(dict)
    for epoch in record.epochs:
        for key, value in epoch.metrics.items():
            epochs[key][epoch.step] = value
    for key, steps in sorted(epochs.items()):
        logged = at_steps(history.get(key, []))
        for step in sorted(steps.keys() | logged.keys()):
            if key in final and step == record.closing.step:
                continue  # the final value's step: compared as the final value
            want = steps.get(step)
            have = logged[step].value if step in logged else None
            if have != want:
                found.append(Difference("metric", key, have, want, step))
    for key, want in sorted(final.items()):
        last = latest(history.get(key, []))
        for have in (None if last is None else last.value, run.data.metrics.get(key)):
            if have != want:
                found.append(Difference("metric", key, have, want))
                break
    data = run.data
    params = record.opening.params | record.closing.params
    for key, want in sorted(params.items()):
        have = data.params.get(key)
        if have != want and data.tags.get(f"{PARAM_TAG}{key}") != want:
            found.append(Difference("param", key, have, want))
    tags = {k: v for k, v in record.opening.tags.items() if not in_studies(k)}
    for key, want in sorted((tags | record.closing.tags).items()):
        if data.tags.get(key) != want:
            found.append(Difference("tag", key, data.tags.get(key), want))
    if run.info.status != record.closing.status:
        found.append(Difference("status", "status", run.info.status, record.closing.status))
    return found


def in_studies(tag: str) -> bool:
    """A study tag: set from params.yaml (:func:`relabel`), not from the records."""
    return tag.startswith(STUDY_TAG) or tag == STUDIES_TAG


def repair(
    client: Any,
    run: Any,
    record: MlflowRecord,
    history: dict[str, list[Any]] | None = None,
) -> list[Difference]:
    """Log again, in the same run, each value that differs from the records
    (:func:`differences`); returns those it repaired. MLflow keeps a metric's history, so
    the records' value is logged at the step it belongs to (a final value at the latest step
    logged) stamped after every value of that metric: it is then the value logged last at its
    step and, for a final value, the latest. A param MLflow holds otherwise cannot be
    overwritten: the records' value is tagged (PARAM_TAG). A metric step the records lack
    cannot be removed; the check names it. The records' digest tag, if it differs, is set
    last, as a seal."""
    from mlflow.entities import Metric, Param, RunTag

    run_id = run.info.run_id
    if history is None:
        history = metric_histories(client, [run], logged_keys(record))[run_id]
    found = [d for d in differences(run, record, history) if d.record is not None]
    metrics, params, tags = [], [], []
    for d in found:
        if d.kind == "metric":
            logged = history.get(d.key, [])
            stamp = max([m.timestamp + 1 for m in logged] + [record.closing.stamp_ms])
            step = d.step
            if step is None:
                step = max([m.step for m in logged] + [record.closing.step])
            metrics.append(Metric(d.key, d.record, stamp, step))
        elif d.kind == "param" and d.store is None:
            params.append(Param(d.key, d.record))
        elif d.kind == "param":
            tags.append(RunTag(f"{PARAM_TAG}{d.key}", d.record))
        elif d.kind == "tag" and d.key != RECORDS_TAG:
            tags.append(RunTag(d.key, d.record))
    log_entities(client, run_id, params, metrics, tags)
    if any(d.kind == "status" for d in found):
        client.set_terminated(run_id, record.closing.status, end_time=record.closing.stamp_ms)
    if any(d.key == RECORDS_TAG and d.kind == "tag" for d in found):
        client.set_tag(run_id, RECORDS_TAG, record.closing.records_sha256)
    return found


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
