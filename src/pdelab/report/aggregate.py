"""Collect every run's one-row result.parquet into results/summary.parquet.

Each run folder is checked first (pdelab.records.run.check_run): its records must all be the run's
whose folder holds them and hold the bytes it wrote, and its spec the one params.yaml resolves
for it now, so a copied, edited or stale record stops the summary, naming the file; so does one
trained on other data than the task's prepared data today (hashed afresh). The summary adds
each run's code provenance (run.json's ``provenance``): its code digest, the digests of its
source files (JSON, so a table can say when its runs ran different code), the commit and
whether the tree was dirty.

A variant whose resolved spec repeats another's in this profile was not trained on its own
(pdelab.spec.run_sheet.same_runs): it gets a copy of that run's row under its own name, with
``same_run_as`` naming the variant that was trained, so every table finds its rows and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.records.environment import COMPARED
from pdelab.records.run import (
    ForeignRecord,
    check_identity,
    check_run,
    identity,
    repair,
    write_parquet,
)

RunKey = tuple[str, str, int]  # (task, variant, seed)


def with_provenance(
    result_file: Path,
    expected_specs: Mapping[RunKey, Mapping[str, Any]] | None,
    data_hashes: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One run's result row, after the checks above, with its provenance columns."""
    folder = result_file.parent
    record = check_run(folder)
    ident = record["identity"]
    key = (ident["task"], ident["variant"], int(ident["seed"]))
    if expected_specs is not None and key in expected_specs:  # trained from today's spec
        now = identity(expected_specs[key], ident["data_hash"])
        check_identity(folder / "run.json", ident, now)
    today = (data_hashes or {}).get(ident["task"])
    if today is not None and ident["data_hash"] != today:  # trained on today's data
        raise ForeignRecord(
            f"{folder / 'run.json'}: the run was trained on data {ident['data_hash'][:12]}, and "
            f"{ident['task']}'s prepared data today are {today[:12]}; its numbers are not of "
            f"today's data: {repair(folder)}"
        )
    made = record.get("provenance", {})
    return pd.read_parquet(result_file).assign(
        code_digest=made.get("code_digest", ""),
        code=json.dumps(made.get("code", {}), sort_keys=True),
        git_commit=made.get("git_commit", ""),
        git_dirty=str(made.get("git_dirty", "")),
        environment=json.dumps(
            {k: v for k, v in (record.get("environment") or {}).items() if k in COMPARED},
            sort_keys=True,
        ),
    )


def aggregate(
    result_files: Iterable[Path | str],
    out: Path | str,
    same_run: Mapping[RunKey, str] | None = None,
    expected_specs: Mapping[RunKey, Mapping[str, Any]] | None = None,
    data_hashes: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row per run; ``same_run`` maps (task, variant, seed) of a shared run to the variant
    that was trained for it; ``expected_specs``: each run's spec as params.yaml resolves it
    now (its dict form), which its record must hold; ``data_hashes``: each task's prepared
    data today (its verified content hash), which its records' data hash must be."""
    frames = [with_provenance(Path(p), expected_specs, data_hashes) for p in result_files]
    if not frames:
        raise ValueError("no run results to aggregate")
    summary = pd.concat(frames, ignore_index=True)
    summary["same_run_as"] = ""
    by_key = summary.set_index(["task", "variant", "seed"])
    copies = []
    for (task, variant, seed), trained in (same_run or {}).items():
        if (task, trained, seed) not in by_key.index:
            raise ValueError(f"{task}/{variant}/seed{seed} repeats {trained}, which has no result")
        row = by_key.loc[[(task, trained, seed)]].reset_index()
        copies.append(row.assign(variant=variant, same_run_as=trained))
    summary = pd.concat([summary, *copies], ignore_index=True)
    summary = summary.sort_values(["task", "variant", "seed"], ignore_index=True)
    write_parquet(summary, Path(out))
    return summary
