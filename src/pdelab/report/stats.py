"""Statistics over seeds for the study tables: mean/std/count of a metric and the interval of a
difference by the claims' rule (:func:`seed_interval`: paired where both arms share their
seeds, Welch's otherwise; the tests and seed counts are pdelab.report.decide's)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pandas as pd

LEVEL = 0.95


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


def welch_interval(
    a: pd.Series, b: pd.Series | None, level: float = LEVEL
) -> tuple[float, float, float]:
    """(mean a - mean b, low, high): Welch's t interval (scipy's ``ttest_ind`` with unequal
    variances), for arms that share no seeds (where they do, :func:`seed_interval` pairs
    them); b None: the one-sample t interval of a (``ttest_1samp``). NaN bounds when a
    side has fewer than two values or both have zero spread (an interval of width zero would
    claim certainty that two or three seeds cannot give)."""
    from scipy import stats

    a = a.dropna()
    b = None if b is None else b.dropna()
    if not len(a) or (b is not None and not len(b)):
        return math.nan, math.nan, math.nan
    diff = float(a.mean() - (0.0 if b is None else b.mean()))
    if len(a) < 2 or (b is not None and len(b) < 2):
        return diff, math.nan, math.nan
    if a.nunique() == 1 and (b is None or b.nunique() == 1):  # float var() may not be 0
        return diff, math.nan, math.nan
    x = a.to_numpy(dtype=float)
    with warnings.catch_warnings():
        # one side without spread (seeds that agree, checked above for both sides) is a
        # sample scipy flags as "nearly identical"; its variance is zero, as it should be
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        test = (
            stats.ttest_1samp(x, 0.0)
            if b is None
            else stats.ttest_ind(x, b.to_numpy(dtype=float), equal_var=False)
        )
        low, high = test.confidence_interval(level)
    return diff, float(low), float(high)


def seed_interval(
    a: pd.Series, b: pd.Series | None, level: float = LEVEL
) -> tuple[float, float, float, str]:
    """(mean a - mean b, low, high, test) from per-seed values indexed by ``seed``, by the rule
    the claims use (:func:`pdelab.report.decide.estimate`): a paired t interval where both
    sides hold the same seeds (a seed shares the data order and initialisation across
    variants), Welch's otherwise; b None: the one-sample t interval of a. NaN bounds where a
    side has fewer than two values or no spread. A study table showing a difference takes its
    interval from here, so the table and the claims never test one comparison two ways."""
    from pdelab.report.decide import estimate

    sides = [a] if b is None else [a, b]
    for side in sides:
        if side.index.name != "seed":
            raise ValueError(
                f"seed_interval: values indexed by {side.index.name!r}; index each side by "
                "seed (frame.set_index('seed')[metric]) so that shared seeds are paired"
            )
        repeated = side.dropna().index.duplicated()
        if repeated.any():
            raise ValueError(
                f"seed_interval: seed(s) {sorted(set(side.dropna().index[repeated]))} appear "
                "more than once: model settings pooled as seeds; compare one setting at a time"
            )
    est = estimate(a, b)
    low, high = est.interval(1 - level)
    return est.shown(), low, high, est.test


def accuracy_per_seed(summary: pd.DataFrame, variant: str, tasks: list[str]) -> pd.Series:
    """Test accuracy per seed, averaged over the tasks (seeds that have every task)."""
    runs = summary[
        (summary["variant"] == variant) & summary["task"].isin(tasks) & (summary["status"] == "ok")
    ]
    per = runs.pivot_table(index="seed", columns="task", values="test_acc")
    return per.reindex(columns=tasks).dropna().mean(axis=1)


def own_runs(summary: pd.DataFrame, keys: set | None) -> pd.DataFrame:
    """The rows of summary whose (task, variant, seed) is in keys; every row when keys is None."""
    if keys is None:
        return summary
    rows = zip(summary["task"], summary["variant"], summary["seed"], strict=True)
    return summary[[k in keys for k in rows]]
