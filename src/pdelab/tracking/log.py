"""What MLflow holds for a run, defined once, and the live logging of a training job.

:func:`opening` (experiment, name, tags, params, the prepared data as a dataset input),
:func:`epoch_metrics` and :func:`closing` (final values as metrics named as in
result.parquet, ``test_acc``, ``test_ppl``, ..., so the runs table has a column per value that
sorts and filters; counts such as ``parameters`` as params; a GPU run's peak memory as a
system metric; status, the causality verdict, artifacts, and the records' sha256 that makes a
batch sync idempotent), each logged by one function, each value once. A value a task kind does
not have (a classifier's perplexity: NaN in the records) is not logged at all. A model whose
causality probe found a leak has its perplexity logged as ``test_ppl_leaking``, never as
``test_ppl``: sorting the runs table by test_ppl cannot put a model that saw the future on
top (:func:`final_values`). A run's start and end
are its training's (run.json's stamps), so the runs table's Duration is the training time.
Live logging (:class:`Tracker`, a profile's ``tracking: live``) and the batch sync
(:mod:`pdelab.tracking.sync`) both go through them, so the two cannot drift. The studies a
run belongs to (:func:`study_tags`) depend on params.yaml, not on the run, so the sync sets
them in both modes, and moves them when studies change.

The MLflow UI (3.x) opens an experiment on its GenAI pages unless the URL (or the browser's
stored choice) says ``workflowType=machine_learning``; :func:`runs_url` builds the links that
open the runs table directly, which ``python -m pdelab.tracking links`` prints.

Experiments are named ``<project>-<task>-<profile>`` (:func:`experiment_name`): the project
is ``pdelab`` unless ``PDELAB_MLFLOW_PROJECT`` names another, so that checkouts sharing one
tracking server keep to their own experiments. Runs are named ``task/variant/seedN``, as
their record folders and as a cross-experiment view needs them.

The store's experiments are created by :func:`init_store` (the workflow's store rule), or by
whichever job needs them first: training never waits for the store, and a store that cannot
be written only stops the logging. Nothing here imports mlflow or pandas at module level: the
training job imports this module.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdelab.records import environment
from pdelab.records.causal_verdict import Causality
from pdelab.records.run import (
    MLFLOW_DIR,
    RECORD_FILES,
    read_run_json,
    records_sha256,
    spec_sha256,
    tracking_uri,
)
from pdelab.spec.display_names import display_name
from pdelab.tracking.store import local_db, open_store, relocate

if TYPE_CHECKING:
    from pdelab.spec.config import RunSpec

IDENTITY = ("task", "variant", "seed")  # metrics.parquet columns that name the run
BATCH_SIZE = 1000  # MLflow's limit on entities per log_batch call (params, tags: 100)
# A run's studies: one tag per study, `study.<name>` = "1", so the UI filter
# tags.`study.<name>` = '1' selects exactly one study (a substring filter on a list would also
# match a study whose name contains another's), and `studies`, the sorted comma list, for
# reading in the runs table's tag column.
STUDY_TAG = "study."
STUDIES_TAG = "studies"
RECORDS_TAG = "records_sha256"  # a run's seal: tagged last, so a run that has it is whole
PROJECT_ENV = "PDELAB_MLFLOW_PROJECT"  # the experiments' prefix on a shared tracking server
DEFAULT_PROJECT = "pdelab"
DIGEST_CHARS = 36  # MLflow's limit on a dataset digest: the content hash's first 36 hex digits
PROVENANCE_TAG = "pdelab."  # run.json's provenance block, each scalar entry as pdelab.<key>
# git_commit is tagged by the opening already (the same commit): tagged once
PROVENANCE_SKIPPED = ("git_commit",)
SPEC_TAG = "pdelab.spec_sha256"  # the resolved spec's digest: part of a run's identity
# the spec's digest without the seed: the seeds of one setting share it, and their parent run
GROUP_TAG = "pdelab.group"
DISPLAY_TAG = "pdelab.display_name"  # "ListOps: after embedding" (pdelab.spec.display_names)
CURRENT_TAG = "pdelab.current"  # "true": the run of its folder's present records; "false": kept
PARENT_TAG = "pdelab.parent"  # "true" on a setting's parent run (its seeds are its children)
PARENT_ID_TAG = "mlflow.parentRunId"  # MLflow's own link, which nests children in the UI
CAUSALITY_TAG = "pdelab.causality"  # the causality probe's verdict word, where probed
LEAKS_TAG = "pdelab.leaks"  # "true" where the verdict is a leak, "false" where it is causal
LEAKING_SUFFIX = "_leaking"  # a leaking model's perplexity: test_ppl_leaking, not test_ppl
PERPLEXITIES = ("test_ppl",)
# result.parquet's counts: params (a setting of the run, not a measurement to plot or average)
COUNT_COLUMNS = ("parameters", "micro_batch", "accumulation_steps", "processes")
# an epoch's GPU usage, under MLflow's own system-metric names (its System metrics tab)
SYSTEM_METRICS = {
    "gpu_utilization_pct": "system/gpu_utilization_percentage",
    "gpu_memory_mb": "system/gpu_memory_usage_megabytes",
}
GPU_MEMORY_METRIC = "system/gpu_peak_memory_megabytes"  # MLflow's System metrics tab: system/*


def project_name() -> str:
    """The experiments' prefix: ``PDELAB_MLFLOW_PROJECT``, or ``pdelab``. It names files too
    (results/mlflow/synced/<experiment>.json), so it is kept to letters, digits, ``.``,
    ``_`` and ``-``."""
    name = os.environ.get(PROJECT_ENV) or DEFAULT_PROJECT
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        raise ValueError(
            f"{PROJECT_ENV}={name!r} is not a project name: use up to 64 letters, digits, '.', "
            f"'_' or '-', starting with a letter or digit (e.g. `export {PROJECT_ENV}=lab-alice`)"
        )
    return name


def experiment_name(task: str, profile: str) -> str:
    """A task's experiment in a run profile, in this checkout's project (:func:`project_name`)."""
    return f"{project_name()}-{task}-{profile}"


def report_experiment(profile: str) -> str:
    """The run profile's report experiment: one run per study (and per paper), its files."""
    return f"{project_name()}-report-{profile}"


def run_name(task: str, variant: str, seed: str | int) -> str:
    """``task/variant/seedN``: as the run's record folder, and unique across experiments."""
    return f"{task}/{variant}/seed{seed}"


def serves_artifacts(uri: str) -> bool:
    """A tracking server (http[s]://): it stores the artifacts it is sent (``mlflow server
    --serve-artifacts``, as ``mlflow-artifacts:`` URIs), so the nodes logging to it need no
    shared disk. Any other store is given a folder under results/mlflow/artifacts."""
    return uri.startswith(("http://", "https://"))


def study_tags(studies: Iterable[str]) -> dict[str, str]:
    """The tags that place a run in its studies (see STUDY_TAG)."""
    names = sorted(set(studies))
    return {STUDIES_TAG: ",".join(names)} | {f"{STUDY_TAG}{name}": "1" for name in names}


def study_filter(study: str) -> str:
    """The MLflow search filter (UI or API) that selects one study's runs."""
    return f"tags.`{STUDY_TAG}{study}` = '1'"


def runs_url(
    ui: str, experiment_ids: list[str], search_filter: str | None = None, order_by: str = ""
) -> str:
    """A link into the MLflow UI at ``ui`` that opens the runs table of one experiment, or of
    several side by side, optionally filtered and sorted (``order_by``, highest first: e.g.
    ``metrics.`test_acc```). ``workflowType=machine_learning`` is what
    makes MLflow 3's UI show training runs instead of its GenAI overview (the experiment tag
    ``mlflow.experimentKind`` alone does not: the UI derives the kind from the workflow type)."""
    from urllib.parse import urlencode

    query: dict[str, str] = {"workflowType": "machine_learning"}
    if search_filter:
        query["searchFilter"] = search_filter
    if order_by:
        query |= {"orderByKey": order_by, "orderByAsc": "false"}
    if len(experiment_ids) == 1:
        route = f"/experiments/{experiment_ids[0]}/runs"
    else:
        route = "/compare-experiments/s"
        query = {"experiments": json.dumps(sorted(experiment_ids))} | query
    return f"{ui.rstrip('/')}/#{route}?{urlencode(query)}"


def init_store(names: list[str], client: Any = None, store_id: int | None = None) -> dict[str, str]:
    """Create the tracking store (or use ``client``'s) and the named experiments (idempotent);
    name -> id. The project's own SQLite store is made safely by any number of processes at
    once (:func:`pdelab.tracking.store.create_db`) and given ``store_id`` if asked."""
    return create_experiments(client or open_store(store_id=store_id), names)


def create_experiments(client: Any, names: list[str]) -> dict[str, str]:
    """The named experiments, created where missing (each creation is one transaction) and
    marked as model training, not GenAI development (what the UI's kind selector records).
    A tracking server chooses their artifact location itself (:func:`serves_artifacts`);
    any other store gets results/mlflow/artifacts/<experiment>, which a SQLite store keeps
    relative to the project (:func:`pdelab.tracking.store.relocate`), so a copied tree
    writes into its own."""
    ids = {}
    created = False
    client_uri = getattr(client, "tracking_uri", None)
    uri = client_uri if isinstance(client_uri, str) else tracking_uri()
    for name in names:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            location = None
            if not serves_artifacts(uri):
                location = (MLFLOW_DIR / "artifacts" / name).resolve().as_uri()
            try:
                client.create_experiment(
                    name,
                    artifact_location=location,
                    tags={"mlflow.experimentKind": "custom_model_development"},
                )
            except Exception:  # noqa: BLE001 - another process created it first
                if client.get_experiment_by_name(name) is None:
                    raise
            exp = client.get_experiment_by_name(name)
            created = True
        ids[name] = exp.experiment_id
    db = local_db(client_uri) if isinstance(client_uri, str) else None
    if created and db is not None:
        relocate(db)  # before any run is created in it: runs copy their experiment's location
    return ids


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = (
                json.dumps(value) if isinstance(value, list | tuple) else str(value)
            )
    return flat


# --------------------------------------------------------------------------------------------
# What MLflow holds for a run: built here only, logged by the functions below only
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataInput:
    """A run's prepared data as MLflow's dataset input (the runs table's Datasets column):
    name = task, digest = the manifest's content hash (cut to MLflow's 36 characters; the
    whole hash is in the source and the run's data_hash tag), source = the DVC-tracked folder
    and the stage that builds it."""

    name: str
    digest: str
    source: str  # JSON: {"uri": data dir, "dvc_stage": ..., "content_hash": ...}

    def entity(self) -> Any:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(self.name, self.digest, "dvc", self.source)
        return DatasetInput(dataset, [InputTag("mlflow.data.context", "train")])


def data_input(spec: Mapping[str, Any], data_hash: str) -> DataInput:
    source = {
        "uri": str(spec["data_dir"]),
        "dvc_stage": f"prepare@{spec['task']}",
        "content_hash": data_hash,
    }
    return DataInput(str(spec["task"]), data_hash[:DIGEST_CHARS], json.dumps(source))


@dataclass(frozen=True)
class Opening:
    """What a run's MLflow run is created with."""

    experiment: str
    name: str
    tags: dict[str, str]
    params: dict[str, str]
    start_ms: int
    data: DataInput


@dataclass(frozen=True)
class Epoch:
    """One epoch's metrics, logged at step = epoch with the epoch's end as timestamp."""

    step: int
    stamp_ms: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class Closing:
    """What a finished run adds: result.parquet's numbers as metrics (``metrics``: one value
    each, at step = the last epoch, so the runs table sorts by them) or, for its counts, as
    params (``params``), tags (status, causality, run.json's provenance), artifacts and the
    terminal status. ``records_sha256`` is tagged last, so a run that has it was logged
    whole."""

    params: dict[str, str]
    stamp_ms: int
    tags: dict[str, str]
    artifacts: tuple[Path, ...]
    status: str  # MLflow's FINISHED or FAILED
    metrics: dict[str, float] = field(default_factory=dict)
    step: int = 0  # the last epoch: where the final metrics are logged

    @property
    def records_sha256(self) -> str:
        return self.tags[RECORDS_TAG]


@dataclass(frozen=True)
class MlflowRecord:
    """One run as MLflow holds it. ``live_id``: the run a live training job logged it as
    (result.parquet's mlflow_run_id, "" in batch mode), which a sync keeps."""

    opening: Opening
    epochs: tuple[Epoch, ...]
    closing: Closing
    live_id: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """(task, variant, seed) as tagged: one MLflow run per key and experiment."""
        tags = self.opening.tags
        return tags["task"], tags["variant"], tags["seed"]


def opening(spec: Mapping[str, Any], data_hash: str, commit: str, start_ms: int) -> Opening:
    """Experiment, run name, identity tags and params (the flattened spec) of a run."""
    tags = {
        "task": str(spec["task"]),
        "variant": str(spec["variant"]),
        "seed": str(spec["seed"]),
        "profile": str(spec["profile"]),
        "git_commit": commit,
        "data_hash": data_hash,
        # bf16 autocast or fp32 (pdelab.training.precision): one filter separates them in the runs
        # table
        "precision": str(spec.get("train", {}).get("precision", "fp32")),
        SPEC_TAG: spec_sha256(spec),
        GROUP_TAG: spec_digest_without_seed(spec),
        # the paper's names for the task and variant, as the tables and figures print them
        DISPLAY_TAG: f"{display_name(str(spec['task']))}: {display_name(str(spec['variant']))}",
    }
    params = flatten(spec) | {"seed": str(int(spec["seed"]))}  # an integer, as the folder's
    return Opening(
        experiment=experiment_name(tags["task"], tags["profile"]),
        name=run_name(tags["task"], tags["variant"], tags["seed"]),
        tags=tags,
        params=params,
        start_ms=start_ms,
        data=data_input(spec, data_hash),
    )


def spec_digest_without_seed(spec: Mapping[str, Any]) -> str:
    """The digest of the spec with its seed left out: what the seeds of one setting share,
    the key of their parent run."""
    return spec_sha256({k: v for k, v in spec.items() if k != "seed"})


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_value(value: Any) -> bool:
    """A number the run has: NaN marks a value its task kind does not have (val_ppl of a
    classifier), which is left out rather than logged as NaN."""
    return is_number(value) and not math.isnan(value)


def epoch_metrics(row: Mapping[str, Any], stamp_ms: int) -> Epoch:
    """An epoch's row of metrics.parquet as logged: every number but the run's identity, a
    GPU run's usage (pdelab.training.gpu_usage) as system metrics."""
    metrics = {
        SYSTEM_METRICS.get(k, k): float(v)
        for k, v in row.items()
        if k != "epoch" and k not in IDENTITY and is_value(v)
    }
    return Epoch(int(row["epoch"]), stamp_ms, metrics)


def provenance_tags(provenance: Mapping[str, Any] | None) -> dict[str, str]:
    """run.json's ``provenance`` block (the code a run executed: its digest, the git commit,
    whether the tree was dirty) as tags ``pdelab.<key>``, its scalar entries only (the
    per-file digests stay in run.json, an artifact), but the commit, which the opening tags
    (``git_commit``). Records without the block have none."""
    tags = {}
    for key, value in (provenance or {}).items():
        if key in PROVENANCE_SKIPPED:
            continue
        if isinstance(value, str):
            tags[f"{PROVENANCE_TAG}{key}"] = value
        elif value is None or isinstance(value, bool | int | float):
            tags[f"{PROVENANCE_TAG}{key}"] = json.dumps(value)  # true, false, null, 3
    return tags


def closing(
    result: Mapping[str, Any],
    out: Path,
    stamp_ms: int,
    provenance: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
) -> Closing:
    """result.parquet's numbers but the seed (a param already) as metrics (:func:`final_values`)
    or params (its counts), those it lacks (NaN) left out; the status, causality, provenance
    and environment tags, the records as artifacts and their digest; a run that did not end
    "ok" is FAILED."""
    status = str(result["status"])
    tags = {"status": status} | causality_tags(result)
    tags |= provenance_tags(provenance) | environment.tags(env)
    values = {k: v for k, v in result.items() if is_value(v) and k != "seed"}
    return Closing(
        params={k: str(int(values[k])) for k in COUNT_COLUMNS if k in values},
        stamp_ms=stamp_ms,
        tags=tags | {RECORDS_TAG: records_sha256(out)},
        artifacts=tuple(out / name for name in RECORD_FILES),
        status="FINISHED" if status == "ok" else "FAILED",
        metrics=final_values(result, values),
        step=int(values.get("epochs_run", 0)),
    )


def leaks(result: Mapping[str, Any]) -> bool:
    """The causality probe found a later token seen by an earlier output."""
    return Causality.parse(result.get("causality")) is Causality.LEAKS


def causality_tags(result: Mapping[str, Any]) -> dict[str, str]:
    """The probe's verdict word (``pdelab.causality``) and ``pdelab.leaks`` (true/false), so
    one filter finds the leaking models; none for a run that was not probed."""
    verdict = Causality.parse(result.get("causality"))
    if verdict is None:
        return {}
    return {CAUSALITY_TAG: verdict.value, LEAKS_TAG: json.dumps(verdict.leaks)}


def final_values(result: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, float]:
    """The final metrics, each value once: the counts are params; a GPU run's peak memory is
    a system metric (MLflow's System metrics tab shows ``system/*``); a leaking model's
    perplexity is ``test_ppl_leaking``, so sorting by ``test_ppl`` never puts it on top
    unmarked (the runs table sorts a run without the metric last)."""
    metrics = {k: float(v) for k, v in values.items() if k not in COUNT_COLUMNS}
    if str(result.get("device", "")) == "cuda" and "peak_memory_mb" in metrics:
        metrics[GPU_MEMORY_METRIC] = metrics.pop("peak_memory_mb")
    if leaks(result):
        for key in PERPLEXITIES:
            if key in metrics:
                metrics[f"{key}{LEAKING_SUFFIX}"] = metrics.pop(key)
    return metrics


def log_opening(
    client: Any,
    experiment_id: str,
    o: Opening,
    metrics: Iterable = (),
    tags: Iterable = (),
    params: Iterable = (),
) -> str:
    """Create the run with its tags, params and dataset input; returns its id. ``metrics``,
    ``tags`` and ``params``: what is known already goes in the same log_batch calls (the
    batch sync logs a whole record so; each call is an SQL transaction)."""
    from mlflow.entities import Param

    run = client.create_run(experiment_id, start_time=o.start_ms, tags=o.tags, run_name=o.name)
    params = [Param(k, v) for k, v in o.params.items()] + list(params)
    log_entities(client, run.info.run_id, params, list(metrics), list(tags))
    client.log_inputs(run.info.run_id, datasets=[o.data.entity()])
    return run.info.run_id


def epoch_entries(epochs: Iterable[Epoch]) -> list[Any]:
    """Each epoch's metrics at step = epoch, stamped with the epoch's end."""
    from mlflow.entities import Metric

    return [Metric(k, v, e.stamp_ms, e.step) for e in epochs for k, v in e.metrics.items()]


def final_metrics(c: Closing) -> list[Any]:
    """The final values as metrics, at the last epoch, stamped with the run's end."""
    from mlflow.entities import Metric

    return [Metric(k, v, c.stamp_ms, c.step) for k, v in c.metrics.items()]


def closing_entries(c: Closing) -> tuple[list[Any], list[Any]]:
    """The counts as params and the tags but the digest (:func:`seal` sets it)."""
    from mlflow.entities import Param, RunTag

    counts = [Param(k, v) for k, v in c.params.items()]
    return counts, [RunTag(k, v) for k, v in c.tags.items() if k != RECORDS_TAG]


def log_epochs(client: Any, run_id: str, epochs: Iterable[Epoch]) -> None:
    log_entities(client, run_id, metrics=epoch_entries(epochs))


def log_closing(client: Any, run_id: str, c: Closing) -> None:
    """Count params, final metrics and status tag, then :func:`seal`."""
    params, tags = closing_entries(c)
    log_entities(client, run_id, params=params, metrics=final_metrics(c), tags=tags)
    seal(client, run_id, c)


def seal(client: Any, run_id: str, c: Closing) -> None:
    """Artifacts (the records and their readable copies), the terminal status, then the
    digest tag: a run cut short here has no digest, so a sync logs it again."""
    for path in c.artifacts:
        client.log_artifact(run_id, str(path))
    log_readable(client, run_id, c.artifacts)
    client.set_terminated(run_id, c.status, end_time=c.stamp_ms)
    client.set_tag(run_id, RECORDS_TAG, c.records_sha256)


def log_readable(client: Any, run_id: str, artifacts: Iterable[Path]) -> None:
    """The Parquet records' :func:`readable_copies`, logged beside them."""
    with tempfile.TemporaryDirectory(prefix="pdelab-mlflow-") as tmp:
        for path in readable_copies(artifacts, Path(tmp)):
            client.log_artifact(run_id, str(path))


def readable_copies(artifacts: Iterable[Path], folder: Path) -> list[Path]:
    """Each Parquet record as a file the MLflow UI shows (it cannot preview Parquet):
    metrics.parquet as metrics.csv (one row per epoch), result.parquet as result.json (its
    one row; NaN as null). Written into ``folder``; returns their paths."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    made = []
    for path in artifacts:
        if path.suffix != ".parquet":
            continue
        table = pq.read_table(path)
        if path.stem == "result":
            rows = [{k: none_if_nan(v) for k, v in row.items()} for row in table.to_pylist()]
            made.append(folder / f"{path.stem}.json")
            made[-1].write_text(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2) + "\n")
        else:
            made.append(folder / f"{path.stem}.csv")
            pacsv.write_csv(table, made[-1])
    return made


def none_if_nan(value: Any) -> Any:
    return None if isinstance(value, float) and value != value else value


def log_record(
    client: Any, experiment_id: str, record: MlflowRecord, tags: Mapping[str, str] | None = None
) -> str:
    """Log a finished run whole (the batch sync): what the live calls log, with params, every
    epoch's metrics, the count params and the status tag in one log_batch; returns its id.
    ``tags``: more tags to create the run with (the sync's lease)."""
    from dataclasses import replace

    final, closing_tags = closing_entries(record.closing)
    metrics = epoch_entries(record.epochs) + final_metrics(record.closing)
    o = replace(record.opening, tags=record.opening.tags | dict(tags or {}))
    run_id = log_opening(client, experiment_id, o, metrics, closing_tags, final)
    seal(client, run_id, record.closing)
    return run_id


def log_entities(client: Any, run_id: str, params=(), metrics=(), tags=()) -> None:
    """log_batch calls within its limits (:func:`batch_calls`)."""
    for chunk in batch_calls(list(params), list(metrics), list(tags)):
        client.log_batch(run_id, **chunk)


def batch_calls(params: list, metrics: list, tags: list) -> Iterator[dict[str, list]]:
    """log_batch's arguments in calls within its limits: 100 params, 100 tags and 1000
    entities in all per call."""
    while params or metrics or tags:
        chunk = {"params": params[:100], "tags": tags[:100]}
        room = BATCH_SIZE - len(chunk["params"]) - len(chunk["tags"])
        chunk["metrics"], metrics = metrics[:room], metrics[room:]
        params, tags = params[100:], tags[100:]
        yield chunk


# --------------------------------------------------------------------------------------------
# Live tracking: the training job logs as it goes
# --------------------------------------------------------------------------------------------


class Tracker:
    """Best-effort live MLflow logging for one run; ``enabled=False`` makes every call a no-op
    (and mlflow is then never imported)."""

    def __init__(self, run: RunSpec, data_hash: str, enabled: bool = True) -> None:
        self.run, self.data_hash = run, data_hash
        self.enabled = enabled
        self.client: Any = None
        self.run_id: str | None = None

    def _safe(self, what: str, fn: Callable[[], Any], attempts: int = 3) -> Any:
        """Call fn; retry briefly (SQLite may be busy); on failure warn and stop logging."""
        if not self.enabled:
            return None
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as err:  # noqa: BLE001 - logging must never end a run
                if attempt + 1 == attempts:
                    warnings.warn(
                        f"MLflow {what} failed ({err}); the run continues without MLflow logging",
                        stacklevel=2,
                    )
                    self.enabled = False
                else:
                    time.sleep(0.5 * (attempt + 1))
        return None

    def start(self, run_id: str | None, commit: str, start_ms: int) -> str | None:
        """Open the MLflow run (or reopen ``run_id`` when resuming); returns its id."""

        def open_run() -> str:
            # the store and the experiment are made here if the store rule has not made them
            # yet: training never waits for that rule (and goes on if it failed)
            self.client = open_store()
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                return run_id
            o = opening(self.run.to_dict(), self.data_hash, commit, start_ms)
            exp_id = create_experiments(self.client, [o.experiment])[o.experiment]
            return log_opening(self.client, exp_id, o)

        self.run_id = self._safe("start", open_run)
        return self.run_id

    def log_epoch(self, row: Mapping[str, Any], stamp_ms: int) -> None:
        if self.run_id:
            self._safe(
                "log_epoch",
                lambda: log_epochs(self.client, self.run_id, [epoch_metrics(row, stamp_ms)]),
            )

    def finish(self, result: Mapping[str, Any], out: Path, stamp_ms: int) -> None:
        """Close the run once its records are written (they are its artifacts)."""

        def close() -> None:
            doc = read_run_json(out)
            made = closing(result, out, stamp_ms, doc.get("provenance"), doc.get("environment"))
            log_closing(self.client, self.run_id, made)

        if self.run_id:
            self._safe("finish", close)
