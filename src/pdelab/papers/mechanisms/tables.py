"""The mechanisms table: per task and mechanism, parameters, accuracy, step time and memory,
each mean ± std over seeds, and each one's difference from the baseline with a 95% t interval
over seeds: paired t where both share their seeds (a seed fixes the data order and the
initialisation of every mechanism alike), Welch's otherwise.

Step time and memory come from the study's timing rule, not from the training jobs (which
share the machine, so their step times measure the load they met): every mechanism of a task
runs training steps in one process, interleaved on the same batches, and its step time is
reported with the median paired ratio over the baseline and that median's 95% interval; peak
memory is measured on CUDA only (torch keeps no allocator statistics on a CPU).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdelab.report.claims import NOT_RUN
from pdelab.report.stats import seed_interval
from pdelab.report.tables import PROFILE_NOTES, stand_ins, variant_runs

# summary column -> (label, scale to the unit shown, digits)
METRICS = {"test_acc": ("accuracy (%)", 100.0, 2)}


def per_seed(summary: pd.DataFrame, task: str, variant: str, column: str) -> pd.Series:
    """One metric of a variant's finished runs, in the unit shown, indexed by seed."""
    runs = variant_runs(summary, task, variant)
    runs = runs[runs["status"] == "ok"]
    seeds = pd.Index(runs["seed"], name="seed")
    if column not in runs:
        return pd.Series(dtype=float, index=seeds[:0])
    scale = METRICS[column][1]
    return (runs[column] * scale).set_axis(seeds).dropna().astype(float)


def timing_row(timing: pd.DataFrame, task: str, variant: str) -> dict[str, float]:
    """A mechanism's timed step (ms), its ratio over the baseline with the interval, and its
    peak memory and ratio (NaN where not timed or not measured)."""
    found = (
        timing[(timing["task"] == task) & (timing["variant"] == variant)] if len(timing) else timing
    )
    if not len(found):
        return dict.fromkeys(TIMING_COLUMNS, math.nan)
    row = found.iloc[0]
    return {
        "step_ms": float(row["median_step_s"]) * 1000,
        "time_ratio": float(row["time_ratio"]),
        "time_ratio_low": float(row["time_ratio_low"]),
        "time_ratio_high": float(row["time_ratio_high"]),
        "memory_mb": float(row["peak_memory_mb"]),
        "memory_ratio": float(row["memory_ratio"]),
    }


TIMING_COLUMNS = ("step_ms", "time_ratio", "time_ratio_low", "time_ratio_high", "memory_mb",
                  "memory_ratio")  # fmt: skip


def mechanisms_frame(
    summary: pd.DataFrame, study: dict[str, Any], timing: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Long form: one row per (task run in this profile, mechanism) with its parameters, the
    accuracy over seeds and its difference from the baseline (diff, low, high, test), and the
    timed step and memory (``timing``: the timing rule's rows of the study's tasks)."""
    timing = pd.DataFrame() if timing is None else timing
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
                diff, low, high, test = seed_interval(values, base)
                row |= {column: values, f"{column} Δ": (diff, low, high), f"{column} test": test}
            rows.append(row | timing_row(timing, task, variant))
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
        out[f"Δ {label} test"] = [
            "" if v == baseline or math.isnan(d[1]) else test
            for d, test, v in zip(
                frame[f"{column} Δ"], frame[f"{column} test"], frame["variant"], strict=True
            )
        ]
    out["step (ms)"] = [_fmt(x, 2) if not math.isnan(x) else "not timed" for x in frame["step_ms"]]
    out["step / baseline [95% CI]"] = [
        "" if v == baseline or math.isnan(r.time_ratio)
        else f"{r.time_ratio:.2f} [{r.time_ratio_low:.2f}, {r.time_ratio_high:.2f}]"
        for r, v in zip(frame.itertuples(), frame["variant"], strict=True)
    ]  # fmt: skip
    out["memory (MB)"] = [
        "not measured" if math.isnan(x) else _fmt(x, 0) for x in frame["memory_mb"]
    ]
    return out


def mechanisms_caption(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> str:
    not_run = [t for t in study["tasks"] if t not in set(summary["task"])]
    named = stand_ins(summary[summary["task"].isin(study["tasks"])])
    parts = [
        "Every mechanism trained with the task's model, optimiser, schedule, epochs and seeds "
        "(the only change is the mechanism; FNA and LA run without attention dropout, their "
        "kernels take none). Mean ± std over seeds (n); Δ = mechanism − "
        f"{study.get('baseline', 'baseline')} with a 95% t interval over seeds: paired t over "
        "shared seeds, Welch's otherwise (the test column says which). The "
        "models are not matched in parameters: each keeps the task's width and depth, and "
        "the parameters column gives each one's count.",
        "Step time: every mechanism of a task timed in one process, interleaved on the same "
        "batches (the timing rule, not the training jobs, which share the machine); its ratio "
        "over the baseline is the median paired ratio with that median's 95% interval. Peak "
        "memory is measured on CUDA only (on a CPU torch keeps no allocator statistics).",
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
