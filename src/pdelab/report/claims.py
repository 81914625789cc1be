"""Each headline claim of where-to-add-pde-diffusion beside our number and a verdict.

A verdict follows from a 95% Welch interval over seeds: "reproduced" when the interval lies
on the side of zero the paper claims, "not reproduced" when it lies on the other side, and
"inconclusive" when it contains zero or there are too few seeds. Averages over tasks are
taken per seed first, so the interval counts seeds, not tasks.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdelab.config import SITES as POSITIONS  # each position's variant bears its name
from pdelab.report.tables import cost_frame, paper_table, welch_interval

INTERMEDIATE = ("after_mlp", "layer_diffusion", "before_layernorm")


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


def _row(
    claim: str, paper: float, a: pd.Series, b: pd.Series, sign: int, unit: float = 100
) -> dict[str, Any]:
    diff, low, high = welch_interval(a, b)
    return {
        "claim": claim,
        "paper": paper,
        "ours": unit * diff,
        "95% CI": f"[{unit * low:+.2f}, {unit * high:+.2f}]" if not math.isnan(low) else "n/a",
        "seeds": f"{len(a.dropna())} vs {len(b.dropna())}",
        "verdict": verdict(low, high, sign),
    }


def claims_table(
    summary: pd.DataFrame, studies: dict[str, Any], runs: dict[str, set] | None = None
) -> pd.DataFrame:
    """Rows: claim, paper, ours (accuracy points or percent), 95% CI, seeds, verdict.

    runs maps a study to its (task, variant, seed) keys, so each claim uses exactly the runs
    of the study it comes from, as that study's table does; None uses every run.
    """
    rows: list[dict[str, Any]] = []

    def study_summary(name: str) -> pd.DataFrame:
        if runs is None:
            return all_runs
        keys = zip(all_runs["task"], all_runs["variant"], all_runs["seed"], strict=True)
        return all_runs[[k in runs[name] for k in keys]]

    all_runs = summary
    positions = studies.get("positions")
    if positions:
        summary = study_summary("positions")
        tasks = positions["tasks"]
        paper = paper_table(positions["paper_table"])
        paper_avg = paper.loc[:, tasks].mean(axis=1)  # the paper's average over our tasks
        base = accuracy_per_seed(summary, "baseline", tasks)
        for variant, name, sign in (
            ("after_embedding", "P1 after embedding", +1),
            ("after_attention", "P7 after attention", -1),
        ):
            rows.append(
                _row(
                    f"{name}: average gain over the baseline (points)",
                    100 * (paper_avg[variant] - paper_avg["baseline"]),
                    accuracy_per_seed(summary, variant, tasks),
                    base,
                    sign,
                )
            )
        ours_avg = {v: accuracy_per_seed(summary, v, tasks) for v in POSITIONS}
        best_other = max(
            (v for v in POSITIONS if v != "after_embedding"),
            key=lambda v: ours_avg[v].mean() if len(ours_avg[v]) else -1,
        )
        rows.append(
            _row(
                f"Pred-1: after embedding is the best position (vs our next best, "
                f"{best_other}; points)",
                100
                * (
                    paper_avg["after_embedding"]
                    - paper_avg.drop(["baseline", "after_embedding"]).max()
                ),
                ours_avg["after_embedding"],
                ours_avg[best_other],
                +1,
            )
        )
        rows.append(
            _row(
                "Pred-2: after attention is harmful (gain over baseline, points)",
                100 * (paper_avg["after_attention"] - paper_avg["baseline"]),
                ours_avg["after_attention"],
                base,
                -1,
            )
        )
        for variant in INTERMEDIATE:
            rows.append(
                _row(
                    f"Pred-3: after embedding beats intermediate {variant} (points)",
                    100 * (paper_avg["after_embedding"] - paper_avg[variant]),
                    ours_avg["after_embedding"],
                    ours_avg[variant],
                    +1,
                )
            )
    multiscale = studies.get("multiscale")
    if multiscale:
        summary = study_summary("multiscale")
        paper = paper_table(multiscale["paper_table"])
        task = multiscale["tasks"][0]
        for position, scales in multiscale["grid"].items():
            singles = {
                c: accuracy_per_seed(summary, v, [task])
                for c, v in scales.items()
                if c != "multiscale"
            }
            best = max(singles, key=lambda c: singles[c].mean() if len(singles[c]) else -1)
            rows.append(
                _row(
                    f"multi-scale beats the best single scale at {position} (ours: {best}; points)",
                    100 * float(paper.loc[position, "multiscale_gain"]),
                    accuracy_per_seed(summary, scales["multiscale"], [task]),
                    singles[best],
                    +1,
                )
            )
    cost = studies.get("cost")
    if cost:
        for _, row in cost_frame(study_summary("cost"), cost).iterrows():
            if row["variant"] == cost.get("baseline", "baseline"):
                continue
            ours, claimed = row["ours time %"], row["paper time %"]
            rows.append(
                {
                    "claim": f"step-time overhead of {row['variant']} (%)",
                    "paper": claimed,
                    "ours": ours,
                    "95% CI": "n/a",
                    "seeds": f"{row['runs']} runs",
                    "verdict": "inconclusive"
                    if math.isnan(ours)
                    else "reproduced"
                    if abs(ours - claimed) <= 5
                    else "not reproduced",
                }
            )
    return pd.DataFrame(rows)
