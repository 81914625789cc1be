"""The mechanisms table: per task and mechanism, parameters, accuracy, step time and memory,
each mean ± std over seeds, and each one's difference from the baseline with a 95% Welch
interval over seeds.

Step time is the training job's median step (seconds) and memory its peak (MB: CUDA
max-allocated on a GPU, the process's resident set on a CPU), as every run records them: on a
machine that runs several jobs at once they carry the load of the others, so read them as
ratios within one build.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdelab.report.stats import welch_interval
from pdelab.report.tables import PROFILE_NOTES, stand_ins, variant_runs

NOT_RUN = "not run in this profile"
# summary column -> (label, scale to the unit shown, digits)
METRICS = {
    "test_acc": ("accuracy (%)", 100.0, 2),
    "median_step_s": ("step (ms)", 1000.0, 1),
    "peak_memory_mb": ("memory (MB)", 1.0, 0),
}


def per_seed(summary: pd.DataFrame, task: str, variant: str, column: str) -> pd.Series:
    """One metric of a variant's finished runs, in the unit shown, indexed by seed."""
    runs = variant_runs(summary, task, variant)
    runs = runs[runs["status"] == "ok"]
    if column not in runs:
        return pd.Series(dtype=float)
    scale = METRICS[column][1]
    return (runs[column] * scale).set_axis(runs["seed"].to_numpy()).dropna().astype(float)


def mechanisms_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Long form: one row per (task run in this profile, mechanism) with its parameters, each
    metric's values over seeds, and each metric's difference from the baseline (diff, low,
    high)."""
    baseline = study.get("baseline", "baseline")
    present = set(summary["task"])
    rows = []
    for task in [t for t in study["tasks"] if t in present]:  # the caption names the others
        for label, variant in study["rows"].items():
            runs = variant_runs(summary, task, variant)
            params = runs["parameters"].dropna() if "parameters" in runs else pd.Series()
            row: dict[str, Any] = {
                "task": task,
                "mechanism": label,
                "variant": variant,
                "parameters": float(params.iloc[0]) if len(params) else math.nan,
                "seeds": int((runs["status"] == "ok").sum()) if len(runs) else 0,
            }
            for column in METRICS:
                values = per_seed(summary, task, variant, column)
                base = per_seed(summary, task, baseline, column)
                diff, low, high = welch_interval(values, base)
                row |= {column: values, f"{column} Δ": (diff, low, high)}
            rows.append(row)
    return pd.DataFrame(rows)


def _fmt(x: float, digits: int) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _mean_std(values: pd.Series, digits: int) -> str:
    if values.empty:
        return NOT_RUN
    spread = f" ± {_fmt(float(values.std(ddof=1)), digits)}" if len(values) > 1 else ""
    return f"{_fmt(float(values.mean()), digits)}{spread}"


def _delta(diff: float, low: float, high: float, digits: int) -> str:
    if math.isnan(diff):
        return ""
    ci = "" if math.isnan(low) else f" [{low:+.{digits}f}, {high:+.{digits}f}]"
    return f"{diff:+.{digits}f}{ci}"


def mechanisms_table(frame: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The frame as text: per metric, mean ± std and Δ from the baseline [95% CI]."""
    out = pd.DataFrame(
        {
            "task": frame["task"],
            "mechanism": frame["mechanism"],
            "variant": frame["variant"],
            "parameters": ["n/a" if math.isnan(p) else f"{int(p):,}" for p in frame["parameters"]],
            "n": frame["seeds"],
        }
    )
    for column, (label, _, digits) in METRICS.items():
        out[label] = [_mean_std(v, digits) for v in frame[column]]
        out[f"Δ {label} [95% CI]"] = [
            "" if v == baseline else _delta(*d, digits)
            for d, v in zip(frame[f"{column} Δ"], frame["variant"], strict=True)
        ]
    return out


def mechanisms_caption(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> str:
    not_run = [t for t in study["tasks"] if t not in set(summary["task"])]
    named = stand_ins(summary[summary["task"].isin(study["tasks"])])
    parts = [
        "Every mechanism trained with the task's model, optimiser, schedule, epochs and seeds "
        "(the only change is the mechanism; FNA and LA run without attention dropout, their "
        "kernels take none). Mean ± std over seeds (n); Δ = mechanism − "
        f"{study.get('baseline', 'baseline')} with a 95% Welch interval over seeds. The "
        "models are not matched in parameters: each keeps the task's width and depth, and "
        "the parameters column gives each one's count.",
        "Step time: the training job's median step; memory: its peak (CUDA max-allocated, or "
        "the process's resident set on a CPU, where jobs share the cores: compare within one "
        "build).",
        f"Tasks not run in this profile: {', '.join(not_run)}." if not_run else "",
        f"Ours: {PROFILE_NOTES.get(profile, f'profile {profile}')}.",
        (
            "Stand-ins (not the paper's data): "
            + " ".join(f"{t}: {s.rstrip('.')}." for t, s in named.items())
        )
        if named
        else "",
    ]
    return " ".join(p for p in parts if p)
