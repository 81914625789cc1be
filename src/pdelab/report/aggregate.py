"""Collect every run's one-row result.parquet into results/summary.parquet.

A variant whose resolved spec repeats another's in this profile was not trained on its own
(pdelab.run_sheet.same_runs): it gets a copy of that run's row under its own name, with
``same_run_as`` naming the variant that was trained, so every table finds its rows and says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from pdelab.records import write_parquet

RunKey = tuple[str, str, int]  # (task, variant, seed)


def aggregate(
    result_files: Iterable[Path | str],
    out: Path | str,
    same_run: Mapping[RunKey, str] | None = None,
) -> pd.DataFrame:
    """One row per run; ``same_run`` maps (task, variant, seed) of a shared run to the variant
    that was trained for it."""
    frames = [pd.read_parquet(p) for p in result_files]
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
