"""REPORT.md's audit of Linear Diffusion Networks: every headline claim as a
:class:`~pdelab.report.claims.Claim`, in the claims kit's vocabulary.

* Verdicts of this profile's runs: Table 2 per task and on average (LDN above the Transformer),
  Table 1's trade-off (LDN about 0.5 top-1 below the ViT), each from per-seed accuracies in
  percent by :func:`pdelab.report.claims.difference`; a task this profile did not train needs
  the paper profile; stability at length 4k (Sec. 4.1).
* Findings that hold in any profile: the theory checks (results/tables/ldn_theory.csv, written
  by theory_report.py; before it exists, the two that need no search, Theorem 1's
  counterexample and A.4's sharp bound, are computed here), what the paper prints against
  itself (its tables against its text, Sec. 3.3 against the appendix), and the claims it has
  no experiment for.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.papers.linear_diffusion import THEORY_OUTPUTS
from pdelab.papers.linear_diffusion.tables import compared, lra_average, lra_frame, paper_table
from pdelab.papers.linear_diffusion.tables import per_seed as accuracy_per_seed
from pdelab.report.claims import (
    CONSISTENT,
    FAILS,
    HOLDS,
    INCONSISTENT,
    NEEDS_PAPER,
    NO_EXPERIMENT,
    NOT_MEASURABLE,
    Claim,
    agreed,
    difference,
    finding,
    mean_text,
    measured,
    not_run,
    not_run_verdict,
    readings_of,
)
from pdelab.report.context import ReportContext
from pdelab.report.verdicts import fmt, stand_in_text

# The paper's Table 2 columns -> the LRA paper's columns (lra_transformer.csv) they name.
LRA_COLUMNS = {
    "listops": "listops",
    "byte_level": "text",
    "cifar10": "image",
    "pathfinder": "pathfinder",
}
COLUMN_NAMES = {
    "listops": "ListOps",
    "imdb": "IMDB",
    "byte_level": "Byte-level",
    "cifar10": "CIFAR-10",
    "pathfinder": "Pathfinder",
}
LONG_TASKS = ("imdb_bytes_lra", "retrieval")  # LRA's 4k-token tasks (Sec. 4.1: "up to 4k")
PAPER_PROFILE = "paper"
THEORY_COLUMNS = ("check", "where", "quote", "paper", "ours", "verdict", "reason")
# The paper's words, verbatim from its text
QUOTES = {
    "lra": "LDN achieves strong performance across all LRA tasks",
    "average": "LDN yields a gain of over 2% on average compared to the baseline Transformer",
    "image": "it offers a favorable trade-off between performance, model size, and FLOPs",
    "stable": "allowed stable training on sequences up to length 4k",
    "outperforms": "LDN outperforms competitive baselines such as ViT",
    "rnn": "it outperforms traditional RNNs and recent transformer-based models",
    "imdb": "particularly large improvements on tasks requiring structured reasoning (ListOps) "
    "or global semantic understanding (IMDB)",
    "row_sum": "We design a row-sum-zero kernel",
    "a_lin": "setting aside the local update F and the linear attention module",
    "tasks": "which consists of tasks designed to test long-context sequence modeling",
    "baseline": "Baseline values are from the Transformer row.",
    "parallel": "allowing full parallelization across time steps",
}


# Sec. 3.2's update equation ends, in our copy of the text, in unbalanced LaTeX: a note on the
# copy, not a finding on the paper
TRUNCATED_NOTE = (
    "Our copy of the text is truncated in Sec. 3.2's update equation (after "
    "'+ A_diff(H) − A_diff', in unbalanced LaTeX); the layer implements the sum of the three "
    "terms that Sec. 3.6 and 3.8 write out."
)

# the kit's finding; LDN's findings are not headline claims unless a call says so
_finding = partial(finding, headline=False)


# --------------------------------------------------------------------------------------------
# Verdicts of this profile's runs
# --------------------------------------------------------------------------------------------


def lra_claims(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> list[Claim]:
    """Table 2: LDN above the Transformer on each of the paper's columns, and on average over
    the columns this profile ran (per seed first: seeds, not tasks, are counted)."""
    frame = lra_frame(summary, study)
    ref_row, _, row, _ = compared(study)
    out = []
    for _, r in frame.iterrows():
        column = r["paper column"]
        if column not in COLUMN_NAMES:
            continue  # a task of ours with no paper column: no claim of the paper
        name = COLUMN_NAMES[column]
        paper = (
            f"{row} {fmt(r['paper compared'], 1)} vs {ref_row} {fmt(r['paper reference'], 1)} "
            f"({r['paper Δ']:+.1f})"
        )
        claim = f"LDN above the Transformer on {name}"
        if r["task"] not in set(summary["task"]) or r["ours compared"].empty:
            no_task = r["task"] == "no task of ours"
            out.append(
                measured(
                    profile,
                    claim,
                    "Table 2",
                    QUOTES["lra"],
                    paper,
                    "no task of ours: LRA has one Text task, run as Byte-level"
                    if no_task
                    else f"{r['task']}: no runs",
                    (None, NOT_MEASURABLE, "no task of ours")
                    if no_task
                    else not_run_verdict(profile),
                )
            )
            continue
        interval, verdict, reason = difference(
            r["ours compared"], r["ours reference"], +1, r["paper Δ"], scale=1.0
        )
        out.append(
            measured(
                profile,
                claim,
                "Table 2",
                QUOTES["lra"],
                paper,
                f"{r['task']}: {mean_text(r['ours compared'])} vs {mean_text(r['ours reference'])}",
                (interval, verdict, reason),
            )
        )
    avg = lra_average(summary, study)
    paper = (
        f"{avg['paper printed Δ']:+.1f} over its five columns; "
        f"{avg['paper compared'] - avg['paper reference']:+.1f} over "
        + (", ".join(COLUMN_NAMES[c] for c in avg["columns"]) or "none")
    )
    if len(avg["ours compared"]) and len(avg["ours reference"]):
        interval, verdict, reason = difference(
            avg["ours compared"],
            avg["ours reference"],
            +1,
            avg["paper compared"] - avg["paper reference"],
            scale=1.0,
        )
        ours = (
            f"{mean_text(avg['ours compared'])} vs {mean_text(avg['ours reference'])} "
            f"(mean per seed over {len(avg['columns'])} tasks)"
        )
    else:
        interval, verdict, reason, ours = None, NEEDS_PAPER, not_run(profile), "no runs"
    out.append(
        measured(
            profile,
            "LDN above the Transformer on average (over 2 points)",
            "Sec. 4.3",
            QUOTES["average"],
            paper,
            ours,
            (interval, verdict, reason),
        )
    )
    return out


def image_claims(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> list[Claim]:
    """Table 1's trade-off: LDN about 0.5 top-1 below the ViT (Base, Large and Huge), with
    fewer parameters and FLOPs; ours at matched parameters, one claim per task."""
    paper = paper_table(study["paper_table"])
    ref, other = list(study["rows"])
    ref_variant, variant = study["rows"][ref], study["rows"][other]
    gaps = {
        scale: float(block.set_index("architecture").loc[other, "top1"])
        - float(block.set_index("architecture").loc[ref, "top1"])
        for scale, block in paper.groupby(level=0, sort=False)
    }
    printed = ", ".join(f"{s.capitalize()} {g:+.1f}" for s, g in gaps.items())
    claimed = float(gaps.get("base", -0.5))
    out = []
    for task in study["tasks"]:
        a = accuracy_per_seed(summary, task, variant)
        b = accuracy_per_seed(summary, task, ref_variant)
        claim = f"LDN trails ViT by about 0.5 top-1, with fewer parameters and FLOPs ({task})"
        if a.empty or b.empty:
            out.append(
                measured(
                    profile,
                    claim,
                    "Table 1",
                    QUOTES["image"],
                    f"top-1 LDN − ViT: {printed}",
                    "no runs",
                    not_run_verdict(profile),
                )
            )
            continue
        interval, verdict, reason = difference(a, b, -1, claimed, scale=1.0)
        out.append(
            measured(
                profile,
                claim,
                "Table 1",
                QUOTES["image"],
                f"top-1 LDN − ViT: {printed}",
                f"matched parameters: {mean_text(a)} vs {mean_text(b)} (table ldn_image: the "
                "parameters and FLOPs)",
                (interval, verdict, reason),
            )
        )
    return out


def stability_claim(summary: pd.DataFrame, profile: str) -> Claim:
    """Sec. 4.1: stable training up to length 4k. Only the paper profile trains the LRA text
    tasks at 4,000 tokens; there, the LDN runs that diverged are counted (a count, not an
    interval: never decided)."""
    claim = "LDN trains stably on sequences up to length 4k"
    if profile != PAPER_PROFILE:
        return measured(
            profile, claim, "Sec. 4.1", QUOTES["stable"],
            "stable at up to 4k tokens (LRA's text tasks)", "its LRA stand-ins are short",
            not_run_verdict(profile), headline=False,
        )  # fmt: skip
    runs = summary[summary["task"].isin(LONG_TASKS) & summary["variant"].str.startswith("ldn")]
    diverged = int((runs["status"] == "diverged").sum())
    return measured(
        profile,
        claim,
        "Sec. 4.1",
        QUOTES["stable"],
        "stable at up to 4k tokens (LRA's text tasks)",
        f"{len(runs) - diverged} of {len(runs)} LDN runs on {', '.join(LONG_TASKS)} "
        "(4,000 tokens) finished without diverging",
        (None, NOT_MEASURABLE, "a count of runs, not an interval"),
        headline=False,
    )


# --------------------------------------------------------------------------------------------
# Findings that hold in any profile
# --------------------------------------------------------------------------------------------


def theory_claims(results: Path) -> list[Claim]:
    """The theory checks' findings on the paper's statements (theory_report.py's CSV; rows
    without a location are checks of ours, no claim of the paper's). Before the CSV exists:
    Theorem 1's counterexample and A.4's sharp bound, which need no search."""
    table = theory_table(results)
    if table is not None:
        return [
            _finding(
                r.check,
                r.where,
                r.quote,
                r.paper,
                r.ours,
                r.verdict,
                r.reason,
                headline=r.check.startswith(("Theorem 1:", "A.4")),
                readings=readings_of(getattr(r, "readings", "")),
            )  # fmt: skip
            for r in table.itertuples()
            if r.where
        ]
    from pdelab.papers.linear_diffusion.theory import sharp_norm, theorem_1_counterexample
    from pdelab.papers.linear_diffusion.theory_report import a4_readings

    counter = theorem_1_counterexample()
    norm, bound = sharp_norm(64)
    readings = a4_readings(norm, 1.0)  # A at the construction is row-stochastic: ‖A‖_∞ = 1
    return [
        _finding(
            "Theorem 1: some power of A = I + δt K is entrywise positive",
            "Sec. A.2",
            "there exists a positive integer L (dependent on the structure of K)",
            "an L exists under K_ts ≥ 0 and strong connectivity",
            f"T = 2, K = {counter['K']} (every K_ts ≥ 0), δt = 1: A = {counter['A']}, the "
            f"swap; no power up to {counter['powers']} is positive",
            FAILS,
            "false as stated; it needs a positive diagonal, δt below A.4's bound",
            headline=True,
        ),
        _finding(
            "A.4: ‖H⁽ˡ⁾‖₂ ≤ ‖H⁽ˡ⁻¹⁾‖₂, the diffusion step never grows the states",
            "Sec. A.4",
            "the update is a convex combination of the hidden states from the previous layer",
            "‖H⁽ˡ⁾‖₂ ≤ ‖H⁽ˡ⁻¹⁾‖₂",
            f"every row weighting one column: ‖I + δt K‖₂ = {norm:.3f} at T = 64, the sharp "
            f"bound √T = {bound:.2f} for a row-stochastic A; ≤ 1 iff A is doubly stochastic "
            "(the other theory checks: results/tables/ldn_theory.csv, not built yet)",
            agreed(readings),
            "the paper does not say which norm ‖H‖ is",
            headline=True,
            readings=readings,
        ),
    ]


def table_findings() -> list[Claim]:
    """What the paper's tables say against its own text, and the claims it has no experiment
    for."""
    table1 = paper_table("ldn_imagenet.csv")
    table2 = paper_table("ldn_lra.csv")
    cols = [c for c in table2.columns if c not in ("average", "unit")]
    gaps = {
        scale: (float(b.set_index("architecture").loc["ldn", "top1"]),
                float(b.set_index("architecture").loc["vit", "top1"]))
        for scale, b in table1.groupby(level=0, sort=False)
    }  # fmt: skip
    behind = all(ldn < vit for ldn, vit in gaps.values())
    gains = {c: float(table2.loc["ldn", c]) - float(table2.loc["transformer", c]) for c in cols}
    order = sorted(gains, key=gains.get, reverse=True)
    rank = {c: order.index(c) + 1 for c in order}
    printed_avg = {r: float(table2.loc[r, "average"]) for r in table2.index}
    recomputed = {r: float(table2.loc[r, cols].astype(float).mean()) for r in table2.index}
    worst = max(abs(printed_avg[r] - recomputed[r]) for r in table2.index)
    return [
        _finding(
            "LDN outperforms ViT, BERT and RoBERTa",
            "Conclusion",
            QUOTES["outperforms"],
            "outperforms ViT, BERT and RoBERTa on ImageNet, CIFAR-10 and LRA",
            "Table 1: LDN − ViT top-1 "
            + ", ".join(
                f"{s.capitalize()} {ldn:.1f} − {vit:.1f} = {ldn - vit:+.1f}"
                for s, (ldn, vit) in gaps.items()
            )  # fmt: skip
            + "; BERT and RoBERTa appear in no table",
            INCONSISTENT if behind else CONSISTENT,
            "the paper's own Table 1 has LDN below ViT at every scale" if behind else "",
            headline=True,
        ),
        _finding(
            "LDN allows full parallelization across time steps",
            "Abstract; Sec. 3.8",
            QUOTES["parallel"],
            "every token updated in one pass per layer",
            "Sec. 3.8's update, δt (K H − diag(K1) H) and its D term, is a product of T × T "
            "matrices with the previous layer's states: no token of a layer waits on another "
            "token of the same layer; the layer computes it as one batched product per kernel "
            "(no loop over time). Read from the update, not timed",
            HOLDS,
            "recurrence runs over layers only, not over time steps",
        ),
        _finding(
            "LDN outperforms traditional RNNs",
            "Sec. 1",
            QUOTES["rnn"],
            "outperforms RNNs in efficiency and performance",
            "no RNN in Table 1 or Table 2, and no timing of any model",
            NO_EXPERIMENT,
            headline=True,
        ),
        _finding(
            "The gains are particularly large on ListOps and IMDB",
            "Sec. 4.3",
            QUOTES["imdb"],
            "LDN − Transformer, Table 2",
            "gains "
            + ", ".join(f"{COLUMN_NAMES[c]} {gains[c]:+.1f}" for c in order)
            + f": ListOps ranks {rank['listops']} of {len(order)}, IMDB {rank['imdb']}",
            INCONSISTENT if rank["imdb"] > 2 else CONSISTENT,
            f"IMDB's gain is the {_ordinal(len(order) - rank['imdb'] + 1)} smallest"
            if rank["imdb"] > 2
            else "",
        ),
        _finding(
            "Table 2's averages are the means of its columns",
            "Table 2",
            "",
            "printed averages",
            f"largest absolute difference, printed − recomputed: {worst:.2f} over {len(table2)} "
            "rows",
            CONSISTENT if worst < 0.06 else INCONSISTENT,
        ),
    ]


def _ordinal(n: int) -> str:
    return {1: "", 2: "second", 3: "third"}.get(n, f"{n}th")


def text_findings() -> list[Claim]:
    """What the paper's text says against itself, and the baseline it does not source."""
    table2 = paper_table("ldn_lra.csv")
    lra = paper_table("lra_transformer.csv")
    cols = [c for c in table2.columns if c not in ("average", "unit")]
    gaps = {c: float(table2.loc["transformer", c]) - float(lra.loc["transformer", lra_col])
            for c, lra_col in LRA_COLUMNS.items()}  # fmt: skip
    largest = max(gaps, key=lambda c: abs(gaps[c]))
    baseline = "; ".join(
        f"{COLUMN_NAMES[c]} {fmt(float(table2.loc['transformer', c]), 1)} vs LRA's {lra_col} "
        f"{fmt(float(lra.loc['transformer', lra_col]), 2)}"
        for c, lra_col in LRA_COLUMNS.items()
    )
    return [
        _finding(
            "Sec. 3.3's row-sum-zero K vs A.4's K_ts ≥ 0",
            "Sec. 3.3, A.4",
            QUOTES["row_sum"],
            "A.4: δt ≤ 1 / Σ_s K_ts with K_ts ≥ 0",
            "with Sec. 3.3's K every row sum is 0: the bound divides by zero; read on the "
            "off-diagonal part (δt max_t (−K_tt) ≤ 1, enforced), the step is row-stochastic, "
            "which bounds the ∞-norm, not the 2-norm (the A.4 row: ‖I + δt K‖₂ reaches √T)",
            INCONSISTENT,
        ),
        _finding(
            "A_diff (Sec. 3.5, Fig. 2) vs A_lin (A.1, A.3)",
            "Sec. A.1",
            QUOTES["a_lin"],
            "a 'linear attention module A_lin', defined nowhere",
            "A_diff implemented; A_lin read as an old name for it",
            INCONSISTENT,
        ),
        _finding(
            "Table 2's task set is LRA's",
            "Sec. 4.1",
            QUOTES["tasks"],
            "ListOps, IMDB, Byte-level, CIFAR-10, Pathfinder",
            "LRA has ListOps, Text (byte-level IMDb), Retrieval, Image, Pathfinder: IMDB and "
            "Byte-level both name its Text task, and Retrieval is missing",
            INCONSISTENT,
        ),
        _finding(
            "Table 2's Transformer baseline: its source",
            "Table 2",
            QUOTES["baseline"],
            "Transformer "
            + ", ".join(fmt(float(table2.loc["transformer", c]), 1) for c in cols)
            + "; no source given (LRA, Tay et al., is cited for the benchmark only)",
            "we compared it with the LRA paper's Transformer: "
            + baseline
            + f" ({COLUMN_NAMES[largest]} {gaps[largest]:+.1f} points; IMDB 86.5 is no LRA "
            "number): not LRA's published row, so Table 2's gains are over the authors' own "
            "baseline",
            CONSISTENT,
            "the paper does not say the row is LRA's",
        ),
    ]


def theory_table(results: Path) -> pd.DataFrame | None:
    """theory_report.py's claims (CSV), or None before it is written in this form (an older
    file without the paper's locations counts as not written)."""
    path = results / THEORY_OUTPUTS["claims"]
    if not path.exists():
        return None
    table = pd.read_csv(path, keep_default_na=False)
    return table if set(THEORY_COLUMNS) <= set(table.columns) else None


# --------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------


def audit_claims(ctx: ReportContext, kinds: tuple[str, ...]) -> list[Claim]:
    """Every claim of the paper this report covers: the runs' verdicts, then the findings;
    nothing without an LDN study."""
    studies = ctx.of_kinds(kinds)
    if not studies:
        return []
    out: list[Claim] = []
    long_runs = []
    for name, study in studies.items():
        runs = ctx.own(name)
        if study.kind == "ldn_lra":
            out += lra_claims(runs, study, ctx.profile)
            long_runs.append(runs)
        elif study.kind == "ldn_image":
            out += image_claims(runs, study, ctx.profile)
    summary = pd.concat(long_runs) if long_runs else ctx.summary.iloc[:0]
    out.append(stability_claim(summary, ctx.profile))
    out += theory_claims(ctx.results)
    out += table_findings()
    out += text_findings()
    return out


def audit_notes(ctx: ReportContext, kinds: tuple[str, ...]) -> list[str]:
    """The paragraphs after the tables: which runs made the numbers, the stand-ins."""
    studies = ctx.of_kinds(kinds)
    if not studies:
        return []
    tasks = sorted({t for s in studies.values() for t in s["tasks"]})
    summary = pd.concat([ctx.own(n) for n in studies]) if studies else ctx.summary
    return [
        f"Run verdicts: the {ctx.profile} profile's runs, test accuracy in percent at each "
        "run's best-validation epoch, differences in points over seeds (one task and one "
        "setting at a time). " + stand_in_text(summary, tasks),
        "The theory findings (verdicts on random and constructed kernels; this profile's "
        "trained models quoted beside them, never judged) are detailed in the theory checks "
        "below.",
        TRUNCATED_NOTE,
    ]
