"""The kept versions of a variant's runs, side by side: ``pdelab history``, ``pdelab compare``
and ``pdelab gc`` (pdelab.records.run_store keeps every finished run under its version).

A version of a variant is what its seeds share: a spec (less the seed), a data hash and a code
digest. ``history`` lists each with the keys that differ from today's params (as ``pdelab
status`` prints them: ``train.lr: 0.01 -> 0.003``), its seeds and the mean of its score with
the 95% t interval over them (pdelab.report.stats.seed_interval), and links that open the
MLflow runs behind it (the setting's parent run and its seeds side by side). ``compare`` does
the same for two params files or commits. ``gc`` removes the versions no current params use
(a dry run unless ``--yes``), saying how much space that frees: a file the run folder shares
(a hard link) frees nothing.
"""

from __future__ import annotations

import json
import math
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pdelab.data.store import verified_manifest
from pdelab.records import provenance, run_store
from pdelab.records.run import spec_sha256
from pdelab.spec.config import RunSpec, load_params, resolve
from pdelab.spec.run_sheet import trained_runs
from pdelab.tracking.log import PARENT_ID_TAG

UI = "http://127.0.0.1:5000"  # where `pdelab mlflow` serves by default


class NotParams(ValueError):
    """A name ``pdelab compare`` reads neither as a params file nor as a commit."""


def flat(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``a.b.c -> value`` of a nested spec."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each key that differs (absent: "unset"), seed left out."""
    before, after = flat(old), flat(new)
    keys = sorted((set(before) | set(after)) - {"seed"})
    return [
        f"{k}: {json.dumps(before.get(k, 'unset'))} -> {json.dumps(after.get(k, 'unset'))}"
        for k in keys
        if before.get(k) != after.get(k)
    ]


def unseeded(spec: dict[str, Any]) -> str:
    """The digest of a spec less its seed: what a variant's seeds share."""
    return spec_sha256({k: v for k, v in spec.items() if k != "seed"})


def current_key(run: RunSpec, hashes: dict[str, str | None] | None = None) -> str | None:
    """The store's version of ``run`` as params, data and code make it now; None where its
    data is not prepared. ``hashes``: the data folders hashed already (every file is read to
    hash one, so a caller asking of many runs hashes each task's data once)."""
    hashes = {} if hashes is None else hashes
    if run.data_dir not in hashes:
        try:
            hashes[run.data_dir] = verified_manifest(run.data_dir)["content_hash"]
        except (OSError, ValueError):
            hashes[run.data_dir] = None
    data = hashes[run.data_dir]
    if data is None:
        return None
    code = provenance.code_digest(run)
    return run_store.version_key(spec_sha256(run.to_dict()), data, code)


def score_of(result: dict[str, Any]) -> tuple[str, float]:
    """The metric a version is summarised by: test perplexity where the run has one, else
    test accuracy (x 100); NaN for a diverged run."""
    ppl = result.get("test_ppl")
    if isinstance(ppl, float) and math.isfinite(ppl):
        return "test_ppl", ppl
    return "test_acc", 100 * float(result.get("test_acc", math.nan))


@dataclass
class Group:
    """One version of a variant: the kept runs of its seeds."""

    spec: dict[str, Any]
    data_hash: str
    code_digest: str
    runs: list[run_store.Version]

    def summary(self) -> str:
        import pandas as pd

        from pdelab.report.stats import seed_interval

        scores = {v.seed: score_of(v.result) for v in self.runs}
        metric = next(iter(scores.values()))[0]
        values = pd.Series({s: x for s, (_, x) in scores.items()}).dropna()
        values.index.name = "seed"
        seeds = ", ".join(str(s) for s in sorted(scores))
        if values.empty:
            return f"seeds {seeds}: no finished score"
        mean, low, high, _ = seed_interval(values, None)
        interval = f" [{low:.2f}, {high:.2f}]" if math.isfinite(low) else ""
        return f"seeds {seeds}: {metric} {mean:.2f}{interval} (n={len(values)})"

    def mlflow_lines(self, ui: str, logged: list[Any]) -> list[str]:
        """Links into the MLflow UI at ``ui``: the parent run of this version's seeds and the
        seeds compared, found among the variant's ``logged`` runs (:func:`logged_runs`) by
        their records' sha256 (the tag a sync seals a run with); none where it holds none."""
        from pdelab.records.run import records_sha256
        from pdelab.tracking.log import RECORDS_TAG

        wanted = {records_sha256(v.path) for v in self.runs}
        found = [r for r in logged if r.data.tags.get(RECORDS_TAG) in wanted]
        if not found:
            return []
        base = ui.rstrip("/")
        experiment = found[0].info.experiment_id
        lines = []
        parents = {r.data.tags.get(PARENT_ID_TAG) for r in found} - {None}
        if len(parents) == 1:
            lines.append(f"  MLflow: {base}/#/experiments/{experiment}/runs/{parents.pop()}")
        ids = sorted(r.info.run_id for r in found)
        query = urlencode({"runs": json.dumps(ids), "experiments": json.dumps([experiment])})
        lines.append(f"  MLflow seeds ({len(ids)}): {base}/#/compare-runs?{query}")
        return lines


def logged_runs(profile: str, task: str, variant: str) -> list[Any]:
    """Every MLflow run of a variant in its task's experiment, searched once for all its
    versions; [] where the tracking store is not there or out of reach."""
    from pdelab.tracking.log import experiment_name
    from pdelab.tracking.store import local_db
    from pdelab.tracking.sync import client_for

    if (db := local_db()) is not None and not db.exists():
        return []
    try:
        client = client_for()
        experiment = client.get_experiment_by_name(experiment_name(task, profile))
        if experiment is None:
            return []
        return client.search_runs(
            [experiment.experiment_id], f"tags.variant = '{variant}'", max_results=5000
        )
    except Exception:  # a server out of reach: the history stands without its links
        return []


def groups(kept: Iterable[run_store.Version]) -> list[Group]:
    """Versions grouped by what their seeds share, oldest first."""
    found: dict[tuple[str, str, str], Group] = {}
    for v in kept:
        key = (unseeded(v.spec), v.record["identity"]["data_hash"], code_of(v))
        group = found.setdefault(key, Group(v.spec, key[1], key[2], []))
        group.runs.append(v)
    return list(found.values())


def code_of(version: run_store.Version) -> str:
    return str(version.record.get("provenance", {}).get("code_digest", "unrecorded"))


def history(
    params: dict[str, Any], profile: str, task: str, variant: str, ui: str = UI
) -> list[str]:
    """``pdelab history TASK VARIANT``: each kept version, newest last, against today's."""
    today = resolve(params, task, variant, 0, profile)
    mine = [s for s in trained_runs(params, profile) if (s.task, s.variant) == (task, variant)]
    hashes: dict[str, str | None] = {}
    current = {current_key(s, hashes) for s in mine}
    kept = list(run_store.versions(profile, task, variant))
    if not kept:
        return [f"{task} {variant}: no kept version (results/store/{profile}/{task}/{variant})"]
    lines = [f"{task} {variant} ({profile}): {len(kept)} kept runs"]
    logged = logged_runs(profile, task, variant)
    for n, group in enumerate(groups(kept), 1):
        is_current = any(v.key in current for v in group.runs)
        lines.append(f"version {n}{' (current)' if is_current else ''}: {group.summary()}")
        changed = differences(group.spec, today.to_dict())
        lines += [f"  differs from today: {c}" for c in changed] or ["  spec as today's"]
        if group.code_digest != provenance.code_digest(today):
            lines.append(f"  code: {group.code_digest} -> {provenance.code_digest(today)}")
        lines += group.mlflow_lines(ui, logged)
    return lines


def params_paths(commit: str) -> list[str]:
    """The params files a commit holds: params.yaml, tasks.yaml where it has one, and the
    papers' config files (a commit that does not know the name gives an empty list)."""
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "params.yaml", "tasks.yaml"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return [*listed, "src/pdelab/papers"] if listed else ["params.yaml"]


def params_at(where: str) -> dict[str, Any]:
    """The params of a params file, or of a commit (its params.yaml, tasks.yaml and the
    papers' config files, read with ``git archive``)."""
    path = Path(where)
    if path.is_file():
        return load_params(path)
    try:
        archive = subprocess.run(
            ["git", "archive", where, *params_paths(where)],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        raise NotParams(f"{where!r} is neither a params file nor a commit git knows") from None
    with tempfile.TemporaryDirectory(prefix="pdelab-compare-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        return load_params(Path(folder) / "params.yaml")


def compare(profile: str, old: str, new: str, ui: str = UI) -> list[str]:
    """``pdelab compare OLD NEW``: per variant the two param sets run differently, each side's
    kept version (by spec) summarised, and the keys that differ."""
    a, b = params_at(old), params_at(new)
    lines = [f"{old} -> {new} ({profile})"]
    runs_a = {(r.task, r.variant, r.seed) for r in trained_runs(a, profile)}
    runs_b = {(r.task, r.variant, r.seed) for r in trained_runs(b, profile)}
    pairs = sorted({(t, v) for t, v, _ in runs_a & runs_b})
    for task, variant in pairs:
        spec_a = resolve(a, task, variant, 0, profile).to_dict()
        spec_b = resolve(b, task, variant, 0, profile).to_dict()
        changed = differences(spec_a, spec_b)
        if not changed:
            continue
        kept = list(run_store.versions(profile, task, variant))
        logged = logged_runs(profile, task, variant) if kept else []
        lines.append(f"{task} {variant}: {'; '.join(changed)}")
        for name, spec in ((old, spec_a), (new, spec_b)):
            mine = [v for v in kept if unseeded(v.spec) == unseeded(spec)]
            if not mine:
                lines.append(f"  {name}: not trained")
                continue
            group = groups(mine)[-1]
            lines += [f"  {name}: {group.summary()}", *group.mlflow_lines(ui, logged)]
    if len(lines) == 1:
        lines.append("no run differs")
    return lines


def gc(params: dict[str, Any], profile: str, delete: bool) -> list[str]:
    """``pdelab gc``: the kept versions no current run is, and the space removing them frees
    (only files the run folders do not share); removed with ``delete``."""
    hashes: dict[str, str | None] = {}
    runs = trained_runs(params, profile)
    current = {(r.task, r.variant, r.seed, current_key(r, hashes)) for r in runs}
    unused = [
        v for v in run_store.versions(profile) if (v.task, v.variant, v.seed, v.key) not in current
    ]
    unfinished = [
        (task, variant, seed, key, folder)
        for task, variant, seed, key, folder in run_store.interrupted(profile)
        if (task, variant, seed, key) not in current
    ]
    folders = [v.path for v in unused] + [u[-1] for u in unfinished]
    freed = sum(
        p.stat().st_size
        for folder in folders
        for p in folder.rglob("*")
        if p.is_file() and p.stat().st_nlink == 1
    )
    verb = "removed" if delete else "would remove"
    lines = [f"{v.task} {v.variant} seed {v.seed}: {verb} version {v.key}" for v in unused]
    lines += [f"{t} {v} seed {s}: {verb} unfinished version {k}" for t, v, s, k, _ in unfinished]
    lines.append(
        f"{len(unused)} kept runs and {len(unfinished)} unfinished ones no current params use; "
        f"{verb} them, freeing {freed / 2**20:.1f} MiB"
        + ("" if delete else " (pdelab gc --yes removes them)")
    )
    if delete:
        import shutil

        for folder in folders:
            shutil.rmtree(folder)
    return lines
