"""Statistics over seeds: mean/std/count of a metric, Welch intervals and verdicts from them."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def value_stats(runs: pd.DataFrame, name: str, scale: float = 1.0) -> dict[str, Any]:
    """Mean, sample std and count of a metric over the runs that finished; diverged counted.
    A metric an older summary lacks counts as missing."""
    ok = runs[runs["status"] == "ok"]
    values = (ok[name] if name in ok else pd.Series(dtype=float)).dropna() * scale
    n = len(values)
    return {
        "mean": float(values.mean()) if n else math.nan,
        "std": float(values.std(ddof=1)) if n > 1 else math.nan,
        "n": n,
        "diverged": int((runs["status"] == "diverged").sum()),
        "runs": len(runs),
    }


def welch_interval(a: pd.Series, b: pd.Series, level: float = 0.95) -> tuple[float, float, float]:
    """(difference of means a - b, lower, upper): Welch's t interval; NaN bounds when either
    side has fewer than two values."""
    from scipy import stats

    a, b = a.dropna(), b.dropna()
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff, diff - half, diff + half


def accuracy_per_seed(summary: pd.DataFrame, variant: str, tasks: list[str]) -> pd.Series:
    """Test accuracy per seed, averaged over the tasks (seeds that have every task)."""
    runs = summary[
        (summary["variant"] == variant) & summary["task"].isin(tasks) & (summary["status"] == "ok")
    ]
    per = runs.pivot_table(index="seed", columns="task", values="test_acc")
    return per.reindex(columns=tasks).dropna().mean(axis=1)


def verdict(low: float, high: float, sign: int) -> str:
    """sign: +1 if the paper claims a positive difference, -1 if negative."""
    if math.isnan(low) or math.isnan(high):
        return "inconclusive (too few seeds)"
    if (low > 0 and sign > 0) or (high < 0 and sign < 0):
        return "reproduced"
    if (low > 0 and sign < 0) or (high < 0 and sign > 0):
        return "not reproduced"
    return "inconclusive"


def own_runs(summary: pd.DataFrame, keys: set | None) -> pd.DataFrame:
    """The rows of summary whose (task, variant, seed) is in keys; every row when keys is None."""
    if keys is None:
        return summary
    rows = zip(summary["task"], summary["variant"], summary["seed"], strict=True)
    return summary[[k in keys for k in rows]]
