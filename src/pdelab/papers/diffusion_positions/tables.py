"""Where to Add PDE Diffusion's own tables: multi-scale (Table 7), seeds (Table 10), cost
(Table 9); the positions table (Tables 5-6) is the generic accuracy table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.report import tables, tidy
from pdelab.report.stats import seed_interval
from pdelab.report.tables import seed_stats, variant_runs


def paper_table(name: str) -> pd.DataFrame:
    """One of this paper's tables (paper_tables/ beside this file)."""
    return tables.paper_table(__package__, name)


def paper_value(paper: pd.DataFrame, row: str, column: str) -> float:
    """The paper's number in a cell, NaN (shown as —) where its table has none: a grid may
    name columns or positions of ours only."""
    return float(paper.loc[row, column]) if row in paper.index and column in paper else math.nan


def _stats(summary: pd.DataFrame, task: str, variant: str) -> dict[str, Any]:
    return seed_stats(variant_runs(summary, task, variant))


def multiscale_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 7: each scale per position, the best single scale, the multi-scale
    gain over it; paper and ours side by side (ours: mean over seeds). Two comparisons, named
    apart: ``multiscale_gain`` is over each source's own best single scale (ours picked after
    the runs), ``vs paper's best ours`` over our run of the single scale the paper found best,
    the comparator the claims judge, fixed before any run is read."""
    paper = paper_table(study["paper_table"])
    task = study["tasks"][0]
    base = _stats(summary, task, study.get("baseline", "baseline"))
    rows = [
        {
            "position": "baseline",
            "fast_h1 paper": float(paper.loc["baseline", "fast_h1"]),
            "fast_h1 ours": base["mean"],
            "n": base["n"],
        }
    ]
    for position, scales in study["grid"].items():
        row: dict[str, Any] = {"position": position}
        singles = []
        for column, variant in scales.items():
            stats = _stats(summary, task, variant)
            row[f"{column} paper"] = paper_value(paper, position, column)
            row[f"{column} ours"] = stats["mean"]
            row["n"] = stats["n"]
            if column != "multiscale":
                singles.append(stats["mean"])
        best = max((s for s in singles if not math.isnan(s)), default=math.nan)
        row["best_single paper"] = paper_value(paper, position, "best_single")
        row["best_single ours"] = best
        row["multiscale_gain paper"] = paper_value(paper, position, "multiscale_gain")
        row["multiscale_gain ours"] = row.get("multiscale ours", math.nan) - best
        named = [c for c in scales if c != "multiscale" and c in paper]
        comparator = str(paper.loc[position, named].astype(float).idxmax()) if named else ""
        row["paper's best"] = comparator
        row["vs paper's best ours"] = (
            row.get("multiscale ours", math.nan) - row[f"{comparator} ours"]
            if comparator
            else math.nan
        )
        rows.append(row)
    return pd.DataFrame(rows)


def seeds_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 10 (mean +/- std over seeds) plus what it lacks: each variant's
    difference from the baseline with its 95% interval (paired t where both share their
    seeds, since a seed fixes the data order and initialisation of both; Welch's otherwise),
    the test that gave it, and the seeds behind it."""
    paper = paper_table(study["paper_table"])
    task, baseline = study["tasks"][0], study.get("baseline", "baseline")
    ok = summary[(summary["task"] == task) & (summary["status"] == "ok")]

    def accuracy(variant: str) -> pd.Series:
        return ok[ok["variant"] == variant].set_index("seed")["test_acc"]

    base = accuracy(baseline)
    rows = []
    for variant in study["variants"]:
        stats = _stats(summary, task, variant)
        diff, lo, hi, test = seed_interval(accuracy(variant), base)
        rows.append(
            {
                "variant": variant,
                "paper mean": float(paper.loc[variant, "mean"])
                if variant in paper.index
                else math.nan,
                "paper std": float(paper.loc[variant, "std"])
                if variant in paper.index
                else math.nan,
                "ours mean": stats["mean"],
                "ours std": stats["std"],
                "n": stats["n"],
                "Δ vs baseline": diff if variant != baseline else math.nan,
                "95% CI low": lo if variant != baseline else math.nan,
                "95% CI high": hi if variant != baseline else math.nan,
                "test": test if variant != baseline and not math.isnan(lo) else "",
            }
        )
    return pd.DataFrame(rows)


def timing_path(results: Path, task: str) -> Path:
    """Where the cost_timing rule writes a task's interleaved step timing
    (pdelab.plan.step_timing)."""
    return results / "cost" / f"{task}.parquet"


def read_timing(results: Path, study: dict[str, Any]) -> pd.DataFrame:
    """A cost study's timing file (its first task's, as its table shows one task)."""
    path = timing_path(results, study["tasks"][0])
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the cost_timing rule writes it (python -m pdelab.plan.step_timing)"
        )
    return pd.read_parquet(path)


def timing_note(timing: pd.DataFrame) -> str:
    """Where a cost table's numbers come from, in one line."""
    if not len(timing):
        return "Step time: not measured."
    head = timing.iloc[0]
    return (
        f"Step time: interleaved in one process on {head['device_name']}, {head['threads']} "
        f"thread(s), {head['repeats']} repeats, 95% interval ({head['interval']}). "
        f"Memory: {head['memory_measured_as']}."
    )


def cost_frame(timing: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 9: time and memory overhead over the baseline in percent, from the
    interleaved step timing (pdelab.plan.step_timing), never from the training jobs' step times,
    which shared the machine. Time: the median paired ratio with its 95% interval; memory: the
    ratio of peaks, NaN where not measured."""
    paper = paper_table(study["paper_table"])
    baseline = study.get("baseline", "baseline")
    rows = timing.set_index("variant") if len(timing) else pd.DataFrame()
    out = []
    for variant in study["variants"]:
        have = variant in rows.index
        row = rows.loc[variant] if have else {}
        reference = variant == baseline
        out.append(
            {
                "variant": variant,
                "paper time %": paper_value(paper, variant, "time_overhead_pct"),
                "ours time %": 100 * (row["time_ratio"] - 1) if have else math.nan,
                "95% CI low": 100 * (row["time_ratio_low"] - 1)
                if have and not reference
                else math.nan,
                "95% CI high": 100 * (row["time_ratio_high"] - 1)
                if have and not reference
                else math.nan,
                "step ms": 1e3 * row["median_step_s"] if have else math.nan,
                "paper memory %": paper_value(paper, variant, "memory_overhead_pct"),
                "ours memory %": 100 * (row["memory_ratio"] - 1) if have else math.nan,
                "repeats": int(row["repeats"]) if have else 0,
            }
        )
    return pd.DataFrame(out)


ACCURACY_COLUMNS = (
    "paper mean",
    "paper std",
    "ours mean",
    "ours std",
    "Δ vs baseline",
    "95% CI low",
    "95% CI high",
)


def in_percent(frame: pd.DataFrame, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """A table's accuracies (fractions in the runs) in percent, as every table shows them
    (pdelab.report.tidy.UNITS); ``columns`` None: every column of accuracies (paper/ours)."""
    names = columns or tuple(
        c for c in frame.columns if c.endswith((" paper", " ours")) and c != "n"
    )
    return frame.assign(**{c: 100 * frame[c] for c in names if c in frame})


def seeds_data(frame: pd.DataFrame, task: str, baseline: str) -> pd.DataFrame:
    """Table 10's tidy CSV: per variant our accuracy (%) with its 95% interval and the
    paper's mean, then its difference from the baseline (points) with the table's interval."""
    base = frame[frame["variant"] == baseline]
    paper_base = float(base["paper mean"].iloc[0]) if len(base) else math.nan
    rows = []
    for _, r in frame.iterrows():
        mean, std, n = 100 * r["ours mean"], 100 * r["ours std"], int(r["n"])
        low, high = tidy.from_std(mean, std, n)
        paper = 100 * r["paper mean"]
        rows.append(tidy.row("", task, r["variant"], "accuracy", mean, low, high, n, paper))
        if r["variant"] != baseline:
            diff = [100 * r[c] for c in ("Δ vs baseline", "95% CI low", "95% CI high")]
            paper_diff = paper - 100 * paper_base
            rows.append(tidy.row("", task, r["variant"], "accuracy_diff", *diff, n, paper_diff))
    return tidy.frame(rows)


def multiscale_data(
    frame: pd.DataFrame, summary: pd.DataFrame, study: dict[str, Any]
) -> pd.DataFrame:
    """Table 7's tidy CSV: each (position, scale) run's accuracy (%) with its 95% interval
    and the paper's, then per position the multi-scale gains (points)."""
    task = study["tasks"][0]
    baseline = study.get("baseline", "baseline")
    rows = [_accuracy_row(summary, task, baseline, frame.iloc[0]["fast_h1 paper"])]
    for _, values in frame[frame["position"] != "baseline"].iterrows():
        for column, variant in study["grid"][values["position"]].items():
            rows.append(_accuracy_row(summary, task, variant, values[f"{column} paper"]))
        for gain, label in (
            ("multiscale_gain", "best single"),
            ("vs paper's best", "paper's best"),
        ):
            paper = values.get(f"{gain} paper", math.nan)
            rows.append(
                tidy.row(
                    "",
                    task,
                    f"{values['position']} multi-scale vs {label}",
                    "accuracy_gain",
                    100 * values[f"{gain} ours"],
                    paper=100 * paper,
                )
            )
    return tidy.frame(rows)


def _accuracy_row(summary: pd.DataFrame, task: str, variant: str, paper: float) -> dict[str, Any]:
    ok = variant_runs(summary, task, variant)
    ok = ok[ok["status"] == "ok"]["test_acc"].dropna() * 100
    mean, low, high = tidy.interval(ok)
    return tidy.row("", task, variant, "accuracy", mean, low, high, len(ok), 100 * paper)


def cost_data(frame: pd.DataFrame, task: str) -> pd.DataFrame:
    """Table 9's tidy CSV: per variant the step-time overhead (%) with its 95% interval, the
    median step (ms) and the memory overhead (%), the paper's beside each; n: repeats."""
    rows = []
    for _, r in frame.iterrows():
        n = r["repeats"]
        rows += [
            tidy.row(
                "",
                task,
                r["variant"],
                "step_time_overhead",
                r["ours time %"],
                r["95% CI low"],
                r["95% CI high"],
                n,
                r["paper time %"],
            ),
            tidy.row("", task, r["variant"], "step_time", r["step ms"], n=n),
            tidy.row(
                "",
                task,
                r["variant"],
                "memory_overhead",
                r["ours memory %"],
                n=n,
                paper=r["paper memory %"],
            ),
        ]
    return tidy.frame(rows)
