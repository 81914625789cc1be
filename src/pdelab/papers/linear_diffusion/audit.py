"""REPORT.md's audit of Linear Diffusion Networks: each headline claim, the paper's number,
ours, the seeds, a 95% interval and a verdict; then the paper's inconsistencies.

Accuracy differences are judged by a 95% Welch interval over seeds
(:func:`pdelab.report.verdicts.difference_verdict`): reproduced (on the claimed side of zero), not
reproduced (on the other side), not measurable (it contains zero, or too few seeds). The theory
claims (A.4's norm, "linear" cost) carry the verdicts of the theory rule
(results/tables/ldn_theory.csv). The paper's numbers come from its tables (paper_tables/), the LRA
paper's Transformer row from lra_transformer.csv.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from pdelab.papers.linear_diffusion import MODELS_FILE, THEORY_OUTPUTS
from pdelab.papers.linear_diffusion.tables import (
    NO_TASK,
    NOT_RUN,
    compared,
    image_frame,
    image_ratios,
    lra_average,
    lra_frame,
    paper_table,
)
from pdelab.report.context import ReportContext
from pdelab.report.tables import PROFILE_NOTES
from pdelab.report.verdicts import (
    difference_verdict,
    fmt,
    interval_text,
)

COLUMNS = ["claim", "paper", "ours", "seeds", "95% interval", "verdict"]
INCONSISTENT = "inconsistent as printed"
NOT_YET_RUN = "not yet run"
# The paper's Table 2 columns -> the LRA paper's columns (lra_transformer.csv) they name.
LRA_COLUMNS = {
    "listops": "listops",
    "byte_level": "text",
    "cifar10": "image",
    "pathfinder": "pathfinder",
}


def _row(claim: str, paper: str, ours: str, seeds: str, interval: str, result: str) -> dict:
    return dict(zip(COLUMNS, [claim, paper, ours, seeds, interval, result], strict=True))


def _mean(values: pd.Series) -> str:
    return fmt(float(values.mean())) if len(values) else "no runs"


def lra_claims(summary: pd.DataFrame, name: str, study: dict[str, Any]) -> list[dict]:
    """LDN beats the Transformer on every task of Table 2 this profile ran, and on average."""
    frame = lra_frame(summary, study)
    ref_row, _, row, _ = compared(study)
    out = []
    for _, r in frame.iterrows():
        if r["task"] == NO_TASK or r["verdict"] == NOT_RUN:
            continue
        delta = r["paper Δ"]
        column = "no paper column" if math.isnan(delta) else r["paper column"]
        paper = (
            f"{row} {fmt(r['paper compared'], 1)} vs {ref_row} {fmt(r['paper reference'], 1)} "
            f"({delta:+.1f})"
            if not math.isnan(delta)
            else "no column (ours only)"
        )
        ours, ref = r["ours compared"], r["ours reference"]
        out.append(
            _row(
                f"{name}: {row} > {ref_row} on {r['task']} ({column})",
                paper,
                f"{_mean(ours)} vs {_mean(ref)}",
                f"{len(ours)} vs {len(ref)}",
                interval_text(r["Δ"], r["low"], r["high"]),
                r["verdict"],
            )
        )
    avg = lra_average(summary, study)
    if len(avg["ours compared"]):
        out.append(
            _row(
                f"{name}: {row} − {ref_row} on average (+2.0 in the paper)",
                f"{avg['paper printed Δ']:+.1f} over its five columns; "
                f"{avg['paper compared'] - avg['paper reference']:+.1f} over "
                f"{', '.join(avg['columns'])}",
                f"{_mean(avg['ours compared'])} vs {_mean(avg['ours reference'])}",
                f"{len(avg['ours compared'])} vs {len(avg['ours reference'])}",
                interval_text(avg["Δ"], avg["low"], avg["high"]),
                difference_verdict(avg["low"], avg["high"], +1),
            )
        )
    return out


def image_claims(
    summary: pd.DataFrame, models: pd.DataFrame, name: str, study: dict[str, Any]
) -> list[dict]:
    """Table 1's trade-off: fewer parameters and FLOPs than ViT for about -0.5 top-1 (Base)."""
    ratios = image_ratios(image_frame(summary, models, study), study)
    paper = ratios[ratios["source"].str.startswith("paper")]
    base = paper[paper["scale"] == "base"]
    printed = (
        f"Base: parameters ×{base['parameters ratio'].iloc[0]:.2f}, MACs "
        f"×{base['MACs ratio'].iloc[0]:.2f}, top-1 {base['Δ top-1'].iloc[0]:+.1f}"
        if len(base)
        else "n/a"
    )
    out = []
    for _, r in ratios[ratios["source"] == "ours"].iterrows():
        counted = ratios[
            (ratios["source"] == "ours (counted, untrained)") & (ratios["task"] == r["task"])
        ]
        width = (
            f"; at the ViT's width: parameters ×{counted['parameters ratio'].iloc[0]:.2f}, "
            f"MACs ×{counted['MACs ratio'].iloc[0]:.2f} (counted)"
            if len(counted)
            else ""
        )
        runs = summary[(summary["task"] == r["task"]) & (summary["status"] == "ok")]
        n = runs.groupby("variant")["seed"].nunique()
        ref, other = study["rows"].values()
        out.append(
            _row(
                f"{name}: LDN trails ViT by about 0.5 top-1 with fewer parameters and FLOPs "
                f"({r['task']})",
                printed,
                f"matched parameters (×{r['parameters ratio']:.2f}): MACs "
                f"×{r['MACs ratio']:.2f}, top-1 {r['Δ top-1']:+.2f}" + width,
                f"{n.get(other, 0)} vs {n.get(ref, 0)}",
                interval_text(r["Δ top-1"], r["low"], r["high"]),
                difference_verdict(r["low"], r["high"], -1),
            )
        )
    return out


def theory_claims(results: Path) -> list[dict]:
    """The theory rule's verdicts on A.4's norm claim and the "linear" cost."""
    path = results / THEORY_OUTPUTS["claims"]
    if not path.exists():
        return [_row("A.4 and the cost in T", "", "", "", "", NOT_YET_RUN)]
    table = pd.read_csv(path)
    picked = table[table["check"].str.startswith(("A.4", "'Linear'"))]
    return [_row(r.check, r.paper, r.ours, "", "", r.verdict) for r in picked.itertuples()]


def inconsistencies(results: Path) -> list[dict]:
    """What the paper prints inconsistently, each measured or quoted."""
    table2 = paper_table("ldn_lra.csv")
    lra = paper_table("lra_transformer.csv")
    cols = [c for c in table2.columns if c not in ("average", "unit")]
    printed_avg = {r: float(table2.loc[r, "average"]) for r in table2.index}
    recomputed = {r: float(table2.loc[r, cols].astype(float).mean()) for r in table2.index}
    worst = max(abs(printed_avg[r] - recomputed[r]) for r in table2.index)
    baseline = "; ".join(
        f"{c} {fmt(float(table2.loc['transformer', c]), 1)} vs LRA's {lra_col} "
        f"{fmt(float(lra.loc['transformer', lra_col]), 2)}"
        for c, lra_col in LRA_COLUMNS.items()
    )
    theory = results / THEORY_OUTPUTS["claims"]
    norm = "see the theory table"
    if theory.exists():
        a4 = pd.read_csv(theory)
        a4 = a4[a4["check"].str.startswith("A.4")]
        norm = a4["ours"].iloc[0] if len(a4) else norm
    return [
        _row(
            "Sec. 3.3's row-sum-zero K vs A.4's K_ts >= 0",
            "A.4: δt <= 1 / Σ_s K_ts with K_ts >= 0",
            "with Sec. 3.3's K every row sum is 0: the bound divides by zero; read on the "
            "off-diagonal part (δt max_t (−K_tt) <= 1, enforced), the step is row-stochastic, "
            "which bounds the ∞-norm, not the 2-norm: " + norm,
            "",
            "",
            INCONSISTENT,
        ),
        _row(
            "A_diff (Sec. 3.5, Fig. 2) vs A_lin (A.1, A.3)",
            "a 'linear attention module A_lin', defined nowhere",
            "A_diff implemented; A_lin read as an old name for it",
            "",
            "",
            INCONSISTENT,
        ),
        _row(
            "The update equation of Sec. 3.2",
            "breaks off after '+ A_diff(H) − A_diff'",
            "Sec. 3.6 and 3.8's sum of the three terms implemented",
            "",
            "",
            INCONSISTENT,
        ),
        _row(
            "Table 2's task set is LRA's",
            "ListOps, IMDB, Byte-level, CIFAR-10, Pathfinder",
            "LRA has ListOps, Text (byte-level IMDb), Retrieval, Image, Pathfinder: IMDB and "
            "Byte-level both name its Text task, and Retrieval is missing",
            "",
            "",
            INCONSISTENT,
        ),
        _row(
            "Table 2's Transformer row is LRA's",
            "Transformer " + ", ".join(fmt(float(table2.loc["transformer", c]), 1) for c in cols),
            baseline + " (CIFAR-10 17 points above LRA's; IMDB 86.5 is no LRA number)",
            "",
            "",
            INCONSISTENT,
        ),
        _row(
            "Table 2's averages are the means of its columns",
            "printed averages",
            f"largest absolute difference, printed − recomputed: {worst:.2f} over {len(table2)} "
            "rows",
            "",
            "",
            "consistent" if worst < 0.06 else INCONSISTENT,
        ),
    ]


def audit_frame(ctx: ReportContext, kinds: tuple[str, ...]) -> pd.DataFrame:
    rows: list[dict] = []
    models_path = ctx.results / MODELS_FILE
    models = pd.read_parquet(models_path) if models_path.exists() else pd.DataFrame()
    for name, study in ctx.of_kinds(kinds).items():
        runs = ctx.own(name)
        kind = study.kind
        if kind == "ldn_lra":
            rows += lra_claims(runs, name, study)
        elif kind == "ldn_image" and len(models):
            rows += image_claims(runs, models, name, study)
    rows += theory_claims(ctx.results)
    rows += inconsistencies(ctx.results)
    return pd.DataFrame(rows, columns=COLUMNS)


def audit_section(ctx: ReportContext, kinds: tuple[str, ...]) -> list[str]:
    """REPORT.md lines: the audit table, or nothing without an LDN study."""
    if not ctx.of_kinds(kinds):
        return []
    frame = audit_frame(ctx, kinds)
    note = PROFILE_NOTES.get(ctx.profile, ctx.profile)
    return [
        "## Linear Diffusion Networks: the claims audited",
        "",
        "Each claim of the paper with its number, ours (accuracy in percent, mean over "
        "seeds), the seeds (compared vs reference), the difference with a 95% Welch interval "
        f"over seeds, and a verdict ({note}). The theory rows come from the theory checks "
        "(below); the inconsistencies are the paper's own.",
        "",
        tabulate(frame, headers="keys", tablefmt="github", showindex=False),
        "",
    ]
