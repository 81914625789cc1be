"""Where to Add PDE Diffusion's own tables: multi-scale (Table 7), seeds (Table 10), cost
(Table 9); the positions table (Tables 5-6) is the generic accuracy table."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdelab.report import tables
from pdelab.report.stats import welch_interval
from pdelab.report.tables import seed_stats, variant_runs


def paper_table(name: str) -> pd.DataFrame:
    """One of this paper's tables (paper_tables/ beside this file)."""
    return tables.paper_table(__package__, name)


def _stats(summary: pd.DataFrame, task: str, variant: str) -> dict[str, Any]:
    return seed_stats(variant_runs(summary, task, variant))


def multiscale_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 7: each scale per position, the best single scale, the multi-scale
    gain over it; paper and ours side by side (ours: mean over seeds)."""
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
            row[f"{column} paper"] = float(paper.loc[position, column])
            row[f"{column} ours"] = stats["mean"]
            row["n"] = stats["n"]
            if column != "multiscale":
                singles.append(stats["mean"])
        best = max((s for s in singles if not math.isnan(s)), default=math.nan)
        row["best_single paper"] = float(paper.loc[position, "best_single"])
        row["best_single ours"] = best
        row["multiscale_gain paper"] = float(paper.loc[position, "multiscale_gain"])
        row["multiscale_gain ours"] = row.get("multiscale ours", math.nan) - best
        rows.append(row)
    return pd.DataFrame(rows)


def seeds_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 10 (mean +/- std over seeds) plus what it lacks: each variant's
    difference from the baseline with a 95% Welch interval, and the seeds behind it."""
    paper = paper_table(study["paper_table"])
    task, baseline = study["tasks"][0], study.get("baseline", "baseline")
    ok = summary[(summary["task"] == task) & (summary["status"] == "ok")]
    base = ok[ok["variant"] == baseline]["test_acc"]
    rows = []
    for variant in study["variants"]:
        stats = _stats(summary, task, variant)
        diff, lo, hi = welch_interval(ok[ok["variant"] == variant]["test_acc"], base)
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
            }
        )
    return pd.DataFrame(rows)


def cost_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 9: time and memory overhead over the baseline, measured from the
    same training runs (median step time; peak memory), as ratios of medians over seeds."""
    paper = paper_table(study["paper_table"])
    task, baseline = study["tasks"][0], study.get("baseline", "baseline")
    runs = summary[(summary["task"] == task) & (summary["status"] == "ok")]
    med = runs.groupby("variant")[["median_step_s", "peak_memory_mb"]].median()
    counts = runs.groupby("variant").size()
    kinds = ", ".join(sorted(runs["memory_kind"].unique())) if len(runs) else "n/a"
    rows = []
    for variant in study["variants"]:
        have = variant in med.index and baseline in med.index
        time_ratio = (
            med.loc[variant, "median_step_s"] / med.loc[baseline, "median_step_s"]
            if have
            else math.nan
        )
        mem_ratio = (
            med.loc[variant, "peak_memory_mb"] / med.loc[baseline, "peak_memory_mb"]
            if have
            else math.nan
        )
        rows.append(
            {
                "variant": variant,
                "paper time %": float(paper.loc[variant, "time_overhead_pct"]),
                "ours time %": 100 * (time_ratio - 1),
                "paper memory %": float(paper.loc[variant, "memory_overhead_pct"]),
                "ours memory %": 100 * (mem_ratio - 1),
                "runs": int(counts.get(variant, 0)),
                "memory measured as": kinds,
            }
        )
    return pd.DataFrame(rows)
