"""Parent runs: the seeds of one setting side by side, as a researcher compares them.

One parent MLflow run per (task, variant, spec without the seed), the setting's
:func:`pdelab.tracking.log.spec_digest_without_seed` (tag ``pdelab.group``), tagged
``pdelab.parent`` = true; each seed's run is its child (MLflow's ``mlflow.parentRunId``, which
nests them in the runs table). The parent holds, for each final metric of its current children
(``pdelab.current`` = true) that finished, ``<metric>_mean``, ``<metric>_low`` and
``<metric>_high`` (the 95% t interval of the mean over the seeds,
:func:`pdelab.report.stats.welch_interval`, the report's; no bounds under two seeds or without
spread) and ``<metric>_n``: sorting parents by ``test_acc_mean`` ranks settings, not lucky
seeds. A leaking child's perplexity is ``test_ppl_leaking``, so its parent has
``test_ppl_leaking_mean``, never ``test_ppl_mean``, and the verdict tags of its children.

A parent is recomputed whenever a sync touches its setting (same values: nothing logged); one
whose children are all superseded (a params change makes a new setting) is kept, tagged
``pdelab.current`` = false, with the aggregates it last had. Parents are made by
:func:`pdelab.tracking.settle.settle`, so concurrent syncs of one setting leave one parent.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pdelab.tracking.log import (
    CAUSALITY_TAG,
    CURRENT_TAG,
    GROUP_TAG,
    LEAKS_TAG,
    PARENT_ID_TAG,
    PARENT_TAG,
    STUDIES_TAG,
    STUDY_TAG,
    MlflowRecord,
    log_entities,
    study_tags,
)

PARENT_SEAL = "pdelab.parent_sealed"  # set last: a parent that has it was made whole
LEVEL = 0.95
AGGREGATES = ("mean", "low", "high", "n")


def parent_filter(task: str, variant: str, group: str) -> str:
    """The search filter of one setting's parent runs."""
    return (
        f"tags.task = '{task}' and tags.variant = '{variant}' and "
        f"tags.`{GROUP_TAG}` = '{group}' and tags.`{PARENT_TAG}` = 'true'"
    )


def is_parent(run: Any) -> bool:
    return run.data.tags.get(PARENT_TAG) == "true"


def aggregate(values: Iterable[float], level: float = LEVEL) -> dict[str, float]:
    """Mean, t interval of the mean (low, high) and n of one metric over the seeds; a bound
    that is undefined (under two seeds, or seeds that agree exactly) is left out."""
    import pandas as pd

    from pdelab.report.stats import welch_interval

    series = pd.Series(list(values), dtype=float).dropna()
    mean, low, high = welch_interval(series, None, level)
    found = {"mean": mean, "low": low, "high": high, "n": float(len(series))}
    return {k: v for k, v in found.items() if not math.isnan(v)}


def parent_metrics(children: list[Any], keys: Iterable[str]) -> dict[str, float]:
    """``<metric>_<aggregate>`` of each final metric over the children that finished."""
    done = [run for run in children if run.info.status == "FINISHED"]
    out: dict[str, float] = {}
    for key in sorted(keys):
        values = [run.data.metrics[key] for run in done if key in run.data.metrics]
        if values:
            out |= {f"{key}_{name}": v for name, v in aggregate(values).items()}
    return out


def parent_tags(record: MlflowRecord, children: list[Any], current: bool) -> dict[str, str]:
    """The parent's tags: the setting's identity, whether it is current, the verdict of its
    children (leaking if any child leaks) and the union of their studies."""
    opening = record.opening.tags
    tags = {k: opening[k] for k in ("task", "variant", "profile", "precision", GROUP_TAG)}
    tags |= {PARENT_TAG: "true", CURRENT_TAG: "true" if current else "false"}
    probed = [run for run in children if CAUSALITY_TAG in run.data.tags]
    verdicts = {run.data.tags[CAUSALITY_TAG]: run for run in probed}
    leaking = [run for run in verdicts.values() if run.data.tags.get(LEAKS_TAG) == "true"]
    if verdicts:
        shown = leaking[0] if leaking else next(iter(verdicts.values()))
        tags |= {CAUSALITY_TAG: shown.data.tags[CAUSALITY_TAG]}
        tags |= {LEAKS_TAG: "true" if leaking else "false"}
    studies = {s for run in children for s in run.data.tags.get(STUDIES_TAG, "").split(",") if s}
    return tags | study_tags(studies)


def update_parents(
    client: Any, exp_id: str, records: list[MlflowRecord], runs: list[Any]
) -> dict[str, str]:
    """Make or update the parent of each setting among ``records`` (a sync's, just settled)
    and mark every other parent of their (task, variant) current or not; ``runs``: the
    experiment's active runs, searched after the sync. Returns group -> parent run id."""
    from pdelab.tracking.settle import retried

    children: dict[str, list[Any]] = defaultdict(list)
    parents: dict[str, list[Any]] = defaultdict(list)
    for run in runs:
        group = run.data.tags.get(GROUP_TAG)
        if group:
            (parents if is_parent(run) else children)[group].append(run)
    settings: dict[str, MlflowRecord] = {}
    keys: dict[str, set[str]] = defaultdict(set)
    for record in records:
        group = record.opening.tags[GROUP_TAG]
        settings.setdefault(group, record)
        keys[group] |= set(record.closing.metrics)
    made = {}
    for group, record in sorted(settings.items()):
        made[group] = retried(
            f"the parent of {record.opening.experiment}/{record.opening.tags['variant']}",
            lambda group=group, record=record: settle_parent(
                client, exp_id, record, children[group], keys[group]
            ),
        )
    touched = {(r.opening.tags["task"], r.opening.tags["variant"]) for r in records}
    for group, found in parents.items():
        for parent in found:
            tags = parent.data.tags
            if group in made or (tags.get("task"), tags.get("variant")) not in touched:
                continue
            current = any(c.data.tags.get(CURRENT_TAG) == "true" for c in children[group])
            want = "true" if current else "false"
            if tags.get(CURRENT_TAG) != want:  # a setting the params moved away from
                client.set_tag(parent.info.run_id, CURRENT_TAG, want)
    return made


def one_per_seed(children: list[Any]) -> list[Any]:
    """One run per seed, the first in (start time, run id) order: concurrent syncs may each
    have logged a copy of one seed's records that another is deleting; a seed counts once."""
    seeds: dict[str, Any] = {}
    for run in sorted(children, key=lambda r: (r.info.start_time, r.info.run_id)):
        seeds.setdefault(run.data.tags.get("seed", ""), run)
    return list(seeds.values())


def link(client: Any, child_id: str, parent_id: str) -> None:
    """Nest a seed's run under its parent; a copy another sync deleted meanwhile is left."""
    try:
        client.set_tag(child_id, PARENT_ID_TAG, parent_id)
    except Exception:  # noqa: BLE001 - raised again unless the run is gone
        if client.get_run(child_id).info.lifecycle_stage != "deleted":
            raise


def settle_parent(
    client: Any, exp_id: str, record: MlflowRecord, children: list[Any], keys: set[str]
) -> str:
    """One setting's parent: made once (:func:`pdelab.tracking.settle.settle`), its children
    linked to it, its tags and aggregates brought up to date (only what changed is logged).
    A parent another writer deleted meanwhile (it settled on another) is settled again."""
    from mlflow.entities import Metric, Param, RunTag

    from pdelab.tracking.settle import LEASE_TAG, lease, settle

    task, variant = record.opening.tags["task"], record.opening.tags["variant"]
    group = record.opening.tags[GROUP_TAG]
    current = one_per_seed([run for run in children if run.data.tags.get(CURRENT_TAG) == "true"])
    start = min([run.info.start_time for run in children] or [record.opening.start_ms])

    def log() -> str:
        tags = parent_tags(record, current, bool(current)) | {LEASE_TAG: lease()}
        run = client.create_run(exp_id, start_time=start, tags=tags, run_name=f"{task}/{variant}")
        run_id = run.info.run_id
        params = {k: v for k, v in record.opening.params.items() if k != "seed"}
        log_entities(client, run_id, params=[Param(k, v) for k, v in params.items()])
        client.set_terminated(run_id, "FINISHED", end_time=start)
        client.set_tag(run_id, PARENT_SEAL, "true")
        client.delete_tag(run_id, LEASE_TAG)
        return run_id

    def done(run: Any) -> bool:
        return PARENT_SEAL in run.data.tags

    where = parent_filter(task, variant, group)
    for _ in range(3):
        parent, _ = settle(client, exp_id, where, PARENT_SEAL, done, log)
        parent_id = parent.info.run_id
        for child in children:
            if child.data.tags.get(PARENT_ID_TAG) != parent_id:
                link(client, child.info.run_id, parent_id)
        if client.get_run(parent_id).info.lifecycle_stage == "active":
            break
    have = parent.data
    want_tags = parent_tags(record, current, bool(current))
    tags = [RunTag(k, v) for k, v in want_tags.items() if have.tags.get(k) != v]
    for key in have.tags.keys() - want_tags.keys():
        if key.startswith(STUDY_TAG) or key in (CAUSALITY_TAG, LEAKS_TAG):
            client.delete_tag(parent_id, key)  # a study the setting left
    metrics = parent_metrics(current, keys) if current else {}
    changed = {k: v for k, v in metrics.items() if have.metrics.get(k) != v}
    if changed:
        # stamped after the parent's last update, so the new value is the latest shown
        stamp = max([run.info.end_time or 0 for run in current] + [(parent.info.end_time or 0) + 1])
        entries = [Metric(k, v, stamp, 0) for k, v in changed.items()]
        log_entities(client, parent_id, metrics=entries, tags=tags)
        client.set_terminated(parent_id, "FINISHED", end_time=stamp)
    elif tags:
        log_entities(client, parent_id, tags=tags)
    return parent_id
