"""Each headline claim of where-to-add-pde-diffusion beside our number and a verdict.

A verdict follows from a 95% Welch interval over seeds: "reproduced" when the interval lies
on the side of zero the paper claims, "not reproduced" when it lies on the other side, and
"inconclusive" when it contains zero or there are too few seeds. Averages over tasks are
taken per seed first, so the interval counts seeds, not tasks.

An overhead claim is judged from the interleaved step timing (pdelab.step_timing): its 95%
interval of the median paired ratio must lie within OVERHEAD_TOLERANCE points of the paper's figure
("reproduced") or outside that band ("not reproduced"); an interval wider than the measured
effect, or reaching both sides of a band's edge, says nothing either way: "not measurable here".
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pdelab.config import SITES as POSITIONS  # each position's variant bears its name
from pdelab.papers.diffusion_positions.tables import cost_frame, paper_table, read_timing
from pdelab.report.claims import judge
from pdelab.report.context import ReportContext
from pdelab.report.stats import accuracy_per_seed, welch_interval

INTERMEDIATE = ("after_mlp", "layer_diffusion", "before_layernorm")
OVERHEAD_TOLERANCE = 5.0  # points of overhead within which ours reproduces the paper's figure
NOT_MEASURABLE = "not measurable here"
GPU_NOTE = " (CPU; the paper's figure is a GPU figure)"


def overhead_verdict(
    ours: float, low: float, high: float, paper: float, tolerance: float = OVERHEAD_TOLERANCE
) -> str:
    """The verdict on an overhead claim (all in percent) from our 95% interval [low, high]:
    an interval wider than the effect, or one holding values that would reproduce the claim
    and values that would not, is "not measurable here", never "not reproduced"."""
    if any(math.isnan(v) for v in (ours, low, high, paper)) or high - low > abs(ours):
        return NOT_MEASURABLE
    band_low, band_high = paper - tolerance, paper + tolerance
    if band_low <= low and high <= band_high:
        return "reproduced"
    if high < band_low or low > band_high:
        return "not reproduced"
    return NOT_MEASURABLE


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
        "verdict": judge(low, high, sign, ())[0],
    }


def claims_table(ctx: ReportContext) -> pd.DataFrame:
    """Rows: claim, paper, ours (accuracy points or percent), 95% CI, seeds, verdict.

    Each claim uses exactly the runs of the study it comes from (found by kind), as that
    study's table does.
    """
    rows: list[dict[str, Any]] = []
    found = ctx.find("accuracy")
    if found:
        name, positions = found
        summary = ctx.own(name)
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
    found = ctx.find("multiscale")
    if found:
        name, multiscale = found
        summary = ctx.own(name)
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
    found = ctx.find("cost")
    if found:
        name, cost = found
        timing = read_timing(ctx.results, cost)
        on_cpu = bool(len(timing)) and bool((timing["device"] == "cpu").all())
        for _, row in cost_frame(timing, cost).iterrows():
            if row["variant"] == cost.get("baseline", "baseline"):
                continue
            ours, claimed = row["ours time %"], row["paper time %"]
            low, high = row["95% CI low"], row["95% CI high"]
            rows.append(
                {
                    "claim": f"step-time overhead of {row['variant']} (%)",
                    "paper": claimed,
                    "ours": ours,
                    "95% CI": f"[{low:+.2f}, {high:+.2f}]" if not math.isnan(low) else "n/a",
                    "seeds": f"{row['repeats']} repeats",
                    "verdict": overhead_verdict(ours, low, high, claimed)
                    + (GPU_NOTE if on_cpu else ""),
                }
            )
    return pd.DataFrame(rows)
