"""The numbers behind a report table, in long form, so that a reader's pandas or R reads them
without parsing a display string: one row per (study, task, variant, metric, source) with
the estimate (``mean``), its 95% interval (``low``, ``high``), the runs behind it (``n``),
its ``unit`` and the paper's value of the same quantity (``paper``).

``source`` says whose number ``mean`` is: ``ours`` (measured or computed here) or ``paper``
(a number the paper reports that we do not measure, then ``mean`` and ``paper`` agree).
Each metric has one unit across every table (:data:`UNITS`): accuracy is always in percent,
never a fraction in one table and percent in another. A table with no tasks or variants (a
theory check, a probe) names what it measures in ``task`` (the setting) and ``variant`` (the
item); an empty field is written empty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

COLUMNS = (
    "study",
    "task",
    "variant",
    "metric",
    "source",
    "mean",
    "low",
    "high",
    "n",
    "unit",
    "paper",
)
NUMERIC = ("mean", "low", "high", "n", "paper")
KEY = ("study", "task", "variant", "metric", "source")
SOURCES = frozenset({"ours", "paper"})

# metric -> its unit, the same in every table (a metric not here is refused)
UNITS: dict[str, str] = {
    "accuracy": "%",
    "accuracy_diff": "points",  # a difference of accuracies, in percentage points
    "accuracy_gain": "points",
    "accuracy_gain_relative": "%",
    "accuracy_median": "%",
    "accuracy_best": "%",
    "accuracy_worst": "%",
    "accuracy_std": "points",
    "perplexity": "ppl",
    "bleu": "BLEU",
    "step_time": "ms",
    "step_time_overhead": "%",
    "step_time_ratio": "ratio",
    "memory": "MB",
    "memory_overhead": "%",
    "parameters": "count",
    "macs": "count",
    "alpha": "dimensionless",
    "value": "dimensionless",  # a computed quantity of a theory check or probe, dimensionless
    "slope": "dimensionless",
    "correlation": "dimensionless",
    "holds": "dimensionless",  # a check's verdict: 1 holds (agrees), 0 fails (disagrees)
    "pearson": "dimensionless",
    "spearman": "dimensionless",
    "count": "count",  # things counted: edges, cases, lengths in tokens
    "share": "%",  # a share of pairs, cases or tokens
    # the probes' measures of trained models (dimensionless ratios of norms and distances)
    "roughness": "dimensionless",
    "roughness_scalefree": "dimensionless",
    "commutator_exact": "dimensionless",
    "commutator_linear": "dimensionless",
    "site_roughness_baseline": "dimensionless",
    "kappa": "dimensionless",
    "z_median": "dimensionless",
    "z_p99": "dimensionless",
    "z_max": "dimensionless",
    "tv_laplace": "dimensionless",
    "spectral_gap": "dimensionless",
    "hops_max": "count",
    "hops_mean": "count",
    "norm": "dimensionless",
    "row_sum": "dimensionless",
}
METRIC_OF = {"test_acc": "accuracy", "test_ppl": "perplexity", "test_bleu": "bleu"}
SCALE_OF = {"test_acc": 100.0}  # a run's accuracy is a fraction; tables show percent


def row(
    study: str,
    task: str,
    variant: str,
    metric: str,
    mean: float,
    low: float = math.nan,
    high: float = math.nan,
    n: float = math.nan,
    paper: float = math.nan,
    source: str = "ours",
) -> dict[str, Any]:
    """One tidy row; its unit from :data:`UNITS` (an unknown metric or source is an error, so
    that no table can bring a second unit for a metric)."""
    if metric not in UNITS:
        raise KeyError(f"metric {metric!r} has no unit in pdelab.report.tidy.UNITS")
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: one of {sorted(SOURCES)}")
    return {
        "study": study,
        "task": task,
        "variant": variant,
        "metric": metric,
        "source": source,
        "mean": _number(mean),
        "low": _number(low),
        "high": _number(high),
        "n": _number(n),
        "unit": UNITS[metric],
        "paper": _number(paper),
    }


def paper_row(task: str, variant: str, metric: str, value: float) -> dict[str, Any]:
    """A number the paper prints, as a row of its own (``source`` paper, ``mean`` = ``paper``;
    the study is filled in by the study step)."""
    return row("", task, variant, metric, value, paper=value, source="paper")


def _number(value: Any) -> float:
    """A number, NaN for anything that is not one (a table's "—" or "not printed")."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Tidy rows as a frame with :data:`COLUMNS`, one row per key (the last one given wins)."""
    out = pd.DataFrame(list(rows), columns=list(COLUMNS))
    out = out.drop_duplicates(subset=list(KEY), keep="last").reset_index(drop=True)
    for column in NUMERIC:
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    return out


def check(data: pd.DataFrame) -> None:
    """Refuse a CSV that is not tidy: other columns, a non-numeric number, a unit not the
    metric's."""
    if tuple(data.columns) != COLUMNS:
        raise ValueError(f"a table's CSV has the columns {COLUMNS}, not {tuple(data.columns)}")
    for column in NUMERIC:
        if not pd.api.types.is_numeric_dtype(data[column]):
            raise ValueError(f"the CSV's {column} column holds non-numbers")
    wrong = data[data["unit"] != data["metric"].map(UNITS)]
    if len(wrong):
        raise ValueError(f"units not those of pdelab.report.tidy.UNITS: {wrong.head()}")


def interval(values: pd.Series) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t interval of the mean (NaN bounds under two values or no
    spread, as the tables' intervals)."""
    from pdelab.report.stats import welch_interval

    return welch_interval(values, None)


def over_seeds(
    study: str,
    task: str,
    variant: str,
    metric: str,
    values: pd.Series,
    paper: float = math.nan,
) -> dict[str, Any]:
    """A probe's per-run measure as one row: its mean over the runs given (one value per
    seed), the 95% t interval and n."""
    values = pd.to_numeric(values, errors="coerce").dropna()
    mean, low, high = interval(values)
    return row(study, task, variant, metric, mean, low, high, len(values), paper)


def verdict_number(verdict: str) -> float:
    """A verdict as :data:`UNITS`' ``holds``: 1 where it holds or agrees, 0 where it fails or
    disagrees, NaN for any other (ambiguous, partly, not measured)."""
    word = str(verdict).split(" ", 1)[0].split(":", 1)[0].strip().lower()
    return {"holds": 1.0, "agrees": 1.0, "fails": 0.0, "disagrees": 0.0}.get(word, math.nan)


def from_std(mean: float, std: float, n: int) -> tuple[float, float]:
    """(low, high): the 95% t interval of a mean from its seeds' std and count (NaN under
    two seeds or no spread)."""
    from scipy import stats

    if n < 2 or not std > 0:
        return math.nan, math.nan
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return mean - half, mean + half


def runs_rows(
    study: str,
    summary: pd.DataFrame,
    pairs: Iterable[tuple[str, str]],
    paper: dict[tuple[str, str, str], float] | None = None,
) -> list[dict[str, Any]]:
    """Our rows of a study: per (task, variant) its headline test metric over the seeds that
    finished (accuracy in percent), ``paper`` keyed by (task, variant, metric)."""
    paper = paper or {}
    out = []
    for task, variant in pairs:
        runs = summary[(summary["task"] == task) & (summary["variant"] == variant)]
        ok = runs[runs["status"] == "ok"] if "status" in runs else runs
        name = next((m for m in METRIC_OF if m in ok and ok[m].notna().any()), None)
        if name is None:
            continue
        values = ok[name].dropna() * SCALE_OF.get(name, 1.0)
        mean, low, high = interval(values)
        metric = METRIC_OF[name]
        value = paper.get((task, variant, metric), math.nan)
        out.append(row(study, task, variant, metric, mean, low, high, len(values), value))
    return out


def merged(generic: list[dict[str, Any]], own: pd.DataFrame | None, study: str) -> pd.DataFrame:
    """A study's CSV: the rows its table's builder gave (``own``: tidy, its study filled in
    here), and our run rows for every (task, variant, metric) it did not give."""
    rows = list(generic)
    if own is not None and len(own):
        given = own.assign(study=study)
        rows += given.to_dict("records")
    return frame(rows)
