"""REPORT.md's audit of Fractional Neural Attention, as :class:`pdelab.report.claims.Claim`:
each headline claim with the paper's words and location, the paper's number, ours and a
verdict of the kit's one vocabulary.

Run verdicts come from :func:`pdelab.report.claims.difference` and
:func:`~pdelab.report.claims.correlation` over independent seeds, one model setting at a time
(Figs 4, 5d and 5e compare the Q = K models of one d, seed by seed: graph_probe_claims.py,
beside the probe); a correlation is taken within each seed over the model settings, its
interval over the seeds. An ordering (A > B > C, the paper's own means) is reproduced when
every adjacent pair is, not reproduced when one pair is reversed, else not measurable here
(:func:`pdelab.report.claims.ordering`). A claim whose study or analysis this profile did not
run needs the paper profile; one the paper has no experiment for says so. Findings without
training (Fig 2a, the theory in theorems.py, the paper's printed inconsistencies) hold in any
profile; an ordering the paper prints both ways (Fig 7's op-DP) is such a finding, ambiguous
as printed, with each reading's order, and no run verdict judges it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise, product
from pathlib import Path
from typing import Any

import pandas as pd

from pdelab.papers.fractional_attention import (
    CURVES_FILE,
    RUNS_FILE,
    TAIL_OUTPUTS,
    TAIL_SHARE,
    TAIL_Z,
    THEORY_OUTPUTS,
    TV_LAPLACE,
)
from pdelab.papers.fractional_attention.graph_probe_claims import (
    GRAPH_QUOTES,
    diffusion_map_claim,
    graph_claims,
)
from pdelab.papers.fractional_attention.tables import (
    METRICS,
    PAPER_ALPHA,
    STATS,
    metric_of,
    paper_rows,
    per_seed,
    row_label,
    tasks_run,
    trained_alpha,
)
from pdelab.papers.fractional_attention.theorems import theory_findings
from pdelab.report.claims import (
    AMBIGUOUS,
    FAILS,
    HOLDS,
    INCONSISTENT,
    NEEDS_PAPER,
    NOT_MEASURABLE,
    Claim,
    Reading,
    agreed,
    difference,
    finding,
    mean_text,
    measured,
    not_run_verdict,
    readings_of,
)
from pdelab.report.context import ReportContext
from pdelab.report.declared import Declared, Judgement, Kind, Runs, judgement
from pdelab.report.verdicts import fmt
from pdelab.spec.studies import Study

# The paper's words for each claim (copied from the paper; tests check each is verbatim).
QUOTES = {
    "table_i": "Best performance of each category is bold while the second best is underlined.",
    "table_ii": "The mean BLEU score and its standard deviation across 5 iterations for each "
    "model.",
    "table_iii": "Best performance of each category is bold.",
    "fig_7": "multiscale FNA ( $\\alpha = 1.2$ ) achieves a mean accuracy of 76.17%, "
    "surpassing its local counterpart (75.14%) and slightly outperforming the Transformer "
    "baseline (76.03%)",
    "fig_3": "a single-layer multiscale model with one head and  $d = 8$ , despite its small "
    "parameter budget, outperforms a full-size Transformer model with 6 DP layers",
    "d_512": "a full-size Transformer model with 6 DP layers with 8 attention heads and  $d = 512$",
    "d_256": "all models have 6 layers, 8 attention heads, an embedding dimension of 256",
    "fig_6": "its performance quickly plateaus after epoch 7, whereas the local attention (red "
    "curve) and multiscale FNA (blue curve) models continue to improve",
    "tail": "intrinsically realizing simultaneous short- and long-range dependencies across "
    "multiple scales",
    "fig_3_constant": "In contrast to local attention and DP, multiscale FNA exhibits "
    "near-constant performance at all dimensions  $d$",
    "fig_6b": "the test accuracy gap between op-FNA ( $\\alpha = 1.2$ ) and op-DP widens "
    "further (Fig. 6b)",
    "fig_7_op": "When orthogonality is enforced ( $\\mathbf{W}_{Q,K} \\in O(d)$ ), multiscale FNA "
    "exhibits a minor performance drop yet still exceeds the Transformer, whose mean accuracy "
    "remains nearly unchanged at 76.07%. In contrast, both LA and DP show more noticeable "
    "degradation, reaching 75.73% and 75.25%, respectively (Fig. 7b).",
    "table_i_caption": "Test accuracy on IMDB dataset acquired over 5 independent iterations.",
    "fig_2a": "We find that the scaling of empirical eigenvalues agree with theoretical "
    "predictions for the operator limits in both  $\\alpha < 2$  (blue curves) and  "
    "$\\alpha = 2$  (red curves) regimes (Fig. 2a)",
    "assumption_2": "Assume weight-tying between the queries and keys",
    **GRAPH_QUOTES,  # Figs 4, A3 and 5 (graph_probe_claims.py)
}
# The paper's tables: where each is and the quote for its ordering.
TABLES = {
    "fna_imdb.csv": ("Table I", "table_i"),
    "fna_multi30k_bleu.csv": ("Table II", "table_ii"),
    "fna_spherical_imdb.csv": ("Table III", "table_iii"),
    "fna_cifar10.csv": ("Fig. 7", "fig_7"),
}
# The paper's row whose number a table prints one way and the text another: the quote that
# prints both, and each reading's value (pdelab's table keeps the first).
TEXT_READINGS = {
    ("fna_cifar10.csv", "op_dp"): (
        "fig_7_op",
        (
            ("76.07, the text's Transformer that 'remains nearly unchanged' (our table)", 76.07),
            ("75.25, the text's DP 'reaching ... 75.25%'", 75.25),
        ),
    ),
}
# The quote of a table's own numbers, for a row that prints them inconsistently.
ROW_QUOTES = {"fna_imdb.csv": "table_i_caption", "fna_cifar10.csv": "fig_7_op"}
# Each task and group as the paper names it, for the claims' names (never our identifiers).
TASK_NAMES = {
    "imdb_wordpiece": "IMDb",
    "multi30k": "Multi30K",
    "fashion_mnist32": "CIFAR-10 stand-in",
    "image": "grayscale CIFAR-10",
}
GROUP_NAMES = {"general": "general", "op": "orthogonal"}
FULL_SIZE_LAYERS = 6  # the paper's full-size DP (Fig 3's text, Table I)
PLATEAU_EPOCH = 7  # Fig 6: DP "plateaus after epoch 7"


# --------------------------------------------------------------------------------------------
# The paper's tables: orderings of their rows
# --------------------------------------------------------------------------------------------


def task_name(task: str) -> str:
    """A task as the paper names it (TASK_NAMES; a task it does not name keeps ours)."""
    return TASK_NAMES.get(task, task)


def alpha_note(paper_row: str, alpha: float) -> tuple[str, bool]:
    """How the alpha our runs trained stands to the paper's for one row: (words, "" when they
    agree; whether the row is still the paper's kind of kernel, multiscale alpha < 2 or local
    alpha = 2). The paper holds its results robust across alpha < 2 (Sec. on Fig. 3, Fig.
    5a), so another multiscale alpha still tests its ordering, with the alpha named where the
    verdict is read; a multiscale row trained local, or the reverse, does not test it."""
    printed = PAPER_ALPHA.get(paper_row.removeprefix("op_"), math.nan)
    if math.isnan(printed) or math.isnan(alpha) or math.isclose(alpha, printed):
        return "", True
    words = f"{row_label(paper_row)} trained at alpha = {alpha:g}, the paper's {printed:g}"
    return words, (alpha < 2) == (printed < 2)


def ordering_readings(table: str, printed: dict[str, float]) -> list[Reading]:
    """The paper's ordering of these rows under each reading of a number it prints twice
    (TEXT_READINGS), or none when no row of them is printed twice."""
    found = [
        (row, *TEXT_READINGS[(table, row)]) for row in printed if (table, row) in TEXT_READINGS
    ]
    if not found:
        return []
    row, _, readings = found[0]  # one row printed twice per group (Fig 7's op-DP)
    out = []
    for name, value in readings:
        means = printed | {row: value}
        order = sorted(means, key=lambda r: -means[r])
        gaps = ", ".join(
            f"{row_label(a)} − {row_label(b)} {means[a] - means[b]:+.2f}"
            for a, b in zip(order, order[1:], strict=False)
        )
        same = order == sorted(printed, key=lambda r: -printed[r])
        words = f"{' > '.join(row_label(r) for r in order)} ({gaps})"
        out.append(Reading(f"{row_label(row)} {name}", words, HOLDS if same else FAILS))
    return out


def ambiguous_ordering(table: str, group: str, printed: dict[str, float]) -> Claim | None:
    """A finding for a group whose ordering the paper's two numbers for one row reverse: no
    ordering is printed to reproduce, so the runs judge none (None when the readings agree)."""
    readings = ordering_readings(table, printed)
    if not readings or agreed(readings) != AMBIGUOUS:
        return None
    where, _ = TABLES.get(table, (table, ""))
    row, key = next(
        (r, TEXT_READINGS[(table, r)][0]) for r in printed if (table, r) in TEXT_READINGS
    )
    order = sorted(printed, key=lambda r: -printed[r])
    values = " or ".join(f"{v:g}" for _, v in TEXT_READINGS[(table, row)][1])
    others = ", ".join(f"{row_label(r)} {fmt(printed[r])}" for r in order if r != row)
    return finding(
        f"{where} ({GROUP_NAMES[group]}): the paper's ordering "
        f"{' > '.join(row_label(r) for r in order)}",
        f"{where}; Sec. Image processing",
        QUOTES[key],
        f"{row_label(row)} {values}; {others}",
        f"The paper prints {row_label(row)}'s mean twice, and the two numbers order the rows "
        "oppositely.",
        AMBIGUOUS,
        f"{row_label(row)} is printed as {values}, which put it above and below "
        f"{others}: the paper prints no one ordering for the runs to reproduce, so none is "
        "judged on them.",
        readings=readings,
    )


def _group_means(table: str, op: bool) -> dict[str, float]:
    """The paper's printed means of one group (general or op) of a table."""
    paper = paper_rows(table)
    return {
        r: float(m)
        for r, m in paper["mean"].items()
        if r.startswith("op_") == op and not math.isnan(m)
    }


def ambiguous_orderings() -> list[Claim]:
    """Each group of the paper's tables whose ordering its two numbers for one row reverse."""
    found = (
        ambiguous_ordering(table, group, _group_means(table, op))
        for table in TABLES
        for group, op in (("general", False), ("op", True))
    )
    return [c for c in found if c is not None]


def _groups(study: Mapping[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """Each group of the study's paper rows (general, op) with the means the paper prints
    for them, where it prints two or more and orders them one way only (TEXT_READINGS)."""
    paper = paper_rows(study["paper_table"])
    rows = study.get("rows", {})
    out = []
    for group, prefix in (("general", False), ("op", True)):
        printed = {
            r: float(paper.loc[r, "mean"])
            for r in rows
            if r in paper.index
            and r.startswith("op_") == prefix
            and not math.isnan(paper.loc[r, "mean"])
        }
        if len(printed) >= 2 and not ambiguous_ordering(study["paper_table"], group, printed):
            out.append((group, printed))
    return out


def _metrics(study: Mapping[str, Any]) -> list[str]:
    """BLEU twice: under real decoding (the study's metric) and as the official code scores
    it; any other metric once."""
    return [metric_of(study)] + (["test_tf_bleu"] if metric_of(study) == "test_bleu" else [])


def accuracy_declared(
    name: str,
    study: Mapping[str, Any],
    tasks: Sequence[str] | None = None,
    alphas: Mapping[tuple[str, str], float] | None = None,
) -> list[Declared]:
    """The paper's ordering of each group of rows (highest printed mean first), on each task
    (``tasks``; None: the study's), per metric: every adjacent pair at once, each claimed at
    the paper's own gap. ``alphas``: (task, row) -> the alpha its runs trained, named in the
    claim where known."""
    where, key = TABLES.get(study["paper_table"], (study["paper_table"], ""))
    rows = study.get("rows", {})
    out = []
    for task, metric, (group, printed) in product(
        study["tasks"] if tasks is None else tasks, _metrics(study), _groups(study)
    ):
        order = sorted(printed, key=lambda r: -printed[r])
        alpha = {r: (alphas or {}).get((task, r), math.nan) for r in order}
        named = {
            r: row_label(r) + ("" if math.isnan(a) else f" (alpha = {a:g})")
            for r, a in alpha.items()
        }
        scored = "" if metric == "test_acc" else f", {METRICS[metric]['label']}"
        out.append(
            Declared(
                f"{where} ({task_name(task)}, {GROUP_NAMES[group]}{scored}): "
                f"{' > '.join(named[r] for r in order)}",
                where,
                QUOTES.get(key, ""),
                ", ".join(f"{row_label(r)} {fmt(printed[r])}" for r in order),
                Kind.ORDERING,
                Runs((task,), tuple(rows[r] for r in order), metric),
                effects={rows[b]: printed[a] - printed[b] for a, b in pairwise(order)},
                names={rows[b]: f"{row_label(a)} − {row_label(b)}" for a, b in pairwise(order)},
                unit="points" if metric == "test_acc" else "BLEU",
                scale=1.0,
                study=name,
            )
        )
    return out


def accuracy_claims(
    name: str, summary: pd.DataFrame, study: dict[str, Any], runs: pd.DataFrame, profile: str
) -> list[Claim]:
    """The orderings of :func:`accuracy_declared` on each task this profile ran; each FNA or
    LA row names the alpha its runs trained. A group whose ordering the paper prints both ways
    (TEXT_READINGS) is left to :func:`ambiguous_orderings`. Claims are named by the paper's
    table, not the study."""
    tasks = tasks_run(summary, study)
    rows = study.get("rows", {})
    variant_row = {v: r for r, v in rows.items()}
    alphas = {(t, r): trained_alpha(runs, t, rows[r]) for t in tasks for r in rows}
    out: list[Claim] = []
    for declared in accuracy_declared(name, study, tasks, alphas):
        task, metric = declared.runs.tasks[0], declared.runs.metric
        order = [variant_row[v] for v in declared.runs.variants]
        ours = {r: per_seed(summary, task, rows[r], metric) for r in order}
        shown = ", ".join(
            f"{row_label(r)}{_alpha_text(alphas[task, r])} {mean_text(ours[r])}" for r in order
        )
        if any(ours[r].empty for r in order):
            out.append(Judgement(declared, not_run_verdict(profile), ()).claim(profile, shown))
            continue

        def values(tasks: tuple[str, ...], variant: str, metric: str = metric) -> pd.Series:
            return per_seed(summary, tasks[0], variant, metric)

        judged = judgement(declared, values)
        pairs = "; ".join(f"{declared.name_of(k)} {j[0].text()}" for k, j in judged.parts)
        interval, verdict, reason = judged.judged
        notes = [alpha_note(r, alphas[task, r]) for r in order]
        if not all(same for _, same in notes):
            verdict, reason = NOT_MEASURABLE, "not the paper's kind of kernel"
        reason = "; ".join(x for x in (*(w for w, _ in notes if w), reason) if x)
        judged = Judgement(declared, (interval, verdict, reason), judged.parts)
        out.append(judged.claim(profile, f"{shown}; {pairs}"))
    return out


def _alpha_text(alpha: float) -> str:
    return "" if math.isnan(alpha) else f" (alpha = {alpha:g})"


def declared(studies: Mapping[str, Study]) -> tuple[Declared, ...]:
    """The paper's run claims that compare trained runs, as data (no result read): each
    table's ordering per task, and Fig 5a's correlations (graph_probe_claims.py)."""
    out: list[Declared] = []
    for name, study in studies.items():
        if study.kind == "fna_accuracy":
            out += accuracy_declared(name, study)
    return tuple(out)


def missing_tables(ctx: ReportContext) -> list[Claim]:
    """A paper table that no study of this profile reproduces still gets its row."""
    present = {s.get("paper_table") for s in ctx.of_kinds(("fna_accuracy",)).values()}
    return [
        measured(
            ctx.profile,
            f"{where}: the paper's ordering of its means",
            where,
            QUOTES[key],
            "see the paper table",
            "no study of this table",
            not_run_verdict(ctx.profile),
        )
        for table, (where, key) in TABLES.items()
        if table not in present
    ]


def printed_inconsistencies(name: str) -> list[Claim]:
    """Rows of a paper table whose best is below its worst or its mean (impossible for the
    max and min over seeds), and the rows its own note marks inconsistent."""
    paper = paper_rows(name)
    where = TABLES.get(name, (name, ""))[0]
    out = []
    for row, r in paper.iterrows():
        stats = {s: r[s] for s in STATS}
        flagged = not math.isnan(r["best"]) and (r["best"] < r["worst"] or r["best"] < r["mean"])
        if flagged or "inconsistent" in r["note"]:
            printed = ", ".join(f"{s} {fmt(v)}" for s, v in stats.items() if not math.isnan(v))
            out.append(
                finding(
                    f"{where}: the {row_label(row)} row is consistent",
                    where,
                    QUOTES[ROW_QUOTES.get(name, TABLES.get(name, ("", "table_i"))[1])],
                    f"{printed}; note: {r['note']}" if r["note"] else printed,
                    (
                        f"The best, {fmt(r['best'])}, is below the "
                        f"{'worst' if r['best'] < r['worst'] else 'mean'}: no maximum over "
                        "seeds can be."
                    )
                    if flagged
                    else f"The paper prints two numbers for this row: {r['note']}.",
                    INCONSISTENT,
                )
            )
    return out


def width_finding() -> Claim:
    """Fig 3's text sets the 1-layer model against a 6-layer DP with d = 512; the Methods'
    full-size models (Fig 6, Table I) have d = 256, and no d = 512 model is described."""
    return finding(
        "Fig 3's full-size DP (d = 512) is the Table I / Fig 6 model (d = 256)",
        "Sec. on Fig. 3; Methods",
        f"{QUOTES['d_512']} / {QUOTES['d_256']}",
        "d = 512 (text); d = 256 (Methods)",
        "two widths for the one full-size model; ours trains d = 256 as the Methods",
        INCONSISTENT,
    )


# --------------------------------------------------------------------------------------------
# One layer against six, the ablations, the tail, Fig 6
# --------------------------------------------------------------------------------------------


def _runs_file(ctx: ReportContext) -> pd.DataFrame:
    path = ctx.results / RUNS_FILE
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def depth_claim(ctx: ReportContext, runs: pd.DataFrame, table1: dict[str, Any] | None) -> Claim:
    """A single-layer, single-head FNA with d = 8 (Fig 3a) beats the 6-layer DP (Table I).
    Against a DP of fewer layers the comparison is not the paper's: it needs the paper
    profile, whatever our interval says (shown in ours)."""
    claim = "Fig 3: a 1-layer, 1-head FNA (alpha = 1.2) with d = 8 beats the 6-layer DP"
    where, quote = "Sec. on Fig. 3", QUOTES["fig_3"]
    found = ctx.find("fna_shallow")
    if table1 is None or found is None or runs.empty or "dp" not in table1.get("rows", {}):
        return measured(
            ctx.profile,
            claim,
            where,
            quote,
            "",
            "no fna_shallow or Table I study",
            not_run_verdict(ctx.profile),
        )
    paper_dp = paper_rows(table1["paper_table"]).loc["dp", "mean"]
    paper = f"no number printed; Table I DP {fmt(paper_dp)}"
    name, shallow = found
    cell = runs[
        (runs["attention"] == "fna")
        & (runs["layers"] == 1)
        & (runs["dim"] == 8)
        & (runs["alpha"] == 1.2)
        & ~runs["tied"]
        & runs["variant"].isin(shallow["variants"])
    ]
    dp = table1["rows"]["dp"]
    common = [t for t in table1["tasks"] if t in set(cell["task"])]
    if cell.empty or not common:
        return measured(
            ctx.profile,
            claim,
            where,
            quote,
            paper,
            "the cell is not trained here",
            not_run_verdict(ctx.profile),
        )
    task, small = common[0], cell["variant"].iloc[0]
    a, b = per_seed(ctx.own(name), task, small), per_seed(ctx.summary, task, dp)
    interval, verdict, reason = difference(a, b, +1, math.nan, scale=1.0)
    depth = runs[(runs["variant"] == dp) & (runs["task"] == task)]["layers"]
    layers = int(depth.iloc[0]) if len(depth) else 0
    ours = (
        f"{task}: {small} {mean_text(a)} vs {dp} ({layers} layer{'' if layers == 1 else 's'}) "
        f"{mean_text(b)}: {interval.text()}"
    )
    if layers < FULL_SIZE_LAYERS:  # the claim sets one layer against the full-size model
        return measured(
            ctx.profile,
            claim,
            where,
            quote,
            paper,
            ours,
            (
                None,
                NEEDS_PAPER,
                f"here the DP has {layers} layer{'' if layers == 1 else 's'}, "
                f"not the paper's {FULL_SIZE_LAYERS}: not like for like",
            ),
        )
    return measured(ctx.profile, claim, where, quote, paper, ours, (interval, verdict, reason))


def ablation_pairs(study: dict[str, Any], runs: pd.DataFrame, option: str) -> list[tuple[str, str]]:
    """(reference, ablated) pairs of a study whose trained specs differ in this option."""
    flags = runs.drop_duplicates("variant").set_index("variant")[option] if len(runs) else {}
    return [
        (p["reference"], p["ablated"])
        for p in study.get("ablations", {}).values()
        if p["ablated"] in flags
        and p["reference"] in flags
        and bool(flags[p["ablated"]]) != bool(flags[p["reference"]])
    ]


def ablation_claims(ctx: ReportContext, runs: pd.DataFrame) -> list[Claim]:
    """The Q = K diagonal (the official code zeroes it for FNA, not DP; the paper is silent,
    so its claim is that the mask changes nothing: judged by the kit as a null claim, shown by
    equivalence to zero, refuted off it) and the Laplace kernel (is FNA's gain its tail?)."""
    diagonal = (
        "Q = K: the official code's zeroed diagonal (FNA only; the paper describes no such "
        "mask) leaves FNA's accuracy as the paper's model has it"
    )
    laplace = (
        "FNA's gain is its power-law tail: the Laplace kernel exp(-(d_H + alpha) z) on the "
        "same distances does worse"
    )
    specs = (
        (
            diagonal,
            "zero_diagonal",
            0,
            "Assumption 2; released code (att_rdfns.py:88-89)",
            QUOTES["assumption_2"],
            "not stated (spec: att_rdfns.py:88-89)",
        ),
        (
            laplace,
            "laplace",
            -1,
            "Abstract",
            QUOTES["tail"],
            "not measured; the paper attributes FNA's gains to its tail",
        ),
    )
    found = ctx.find("fna_ablation")
    if found is None:
        return [
            measured(
                ctx.profile,
                c,
                w,
                q,
                p,
                "no fna_ablation study",
                not_run_verdict(ctx.profile),
                headline=False,
            )
            for c, _, _, w, q, p in specs
        ]
    name, study = found
    own = ctx.own(name)
    out = []
    for claim, option, sign, where, quote, paper in specs:
        pairs = ablation_pairs(study, runs, option)
        if not pairs:
            out.append(
                measured(
                    ctx.profile,
                    claim,
                    where,
                    quote,
                    paper,
                    "no such pair trained",
                    not_run_verdict(ctx.profile),
                    headline=False,
                )
            )
        for task, (reference, ablated) in product(tasks_run(own, study), pairs):
            ref, abl = per_seed(own, task, reference), per_seed(own, task, ablated)
            # sign 0, a claim of no change: the kit's equivalence to zero shows or refutes it
            interval, verdict, reason = difference(abl, ref, sign, math.nan, scale=1.0)
            ours = (
                f"{task}: {reference} {mean_text(ref)}, {ablated} {mean_text(abl)}; Δ {ablated} − "
                f"{reference}"
            )
            out.append(
                measured(
                    ctx.profile,
                    claim,
                    where,
                    quote,
                    paper,
                    ours,
                    (interval, verdict, reason),
                    headline=False,
                )
            )
    return out


# The tail rows' measure: the share of pairs beyond TAIL_Z, in percent, read against the
# TAIL_SHARE a layer needs to use the tail (a threshold claim on the share itself).
TAIL_UNIT = f"% of pairs beyond z = {TAIL_Z:g}"


def model_name(ctx: ReportContext, variant: str) -> str:
    """A trained variant as the paper's row names it (FNA, LA, DP, op-FNA, ...), from the
    rows of the accuracy studies; a variant no row holds keeps its own name."""
    for study in ctx.of_kinds(("fna_accuracy",)).values():
        for row, held in study.get("rows", {}).items():
            if held == variant:
                return row_label(row)
    return variant


def tail_claims(ctx: ReportContext) -> list[Claim]:
    """Per probed variant: the share of (query, key) pairs beyond z = TAIL_Z, per seed,
    against the TAIL_SHARE a layer needs to use the tail; and how far the rows are from the
    Laplace kernel's (shown in ours)."""
    claim = (
        "FNA attends with a power-law tail (alpha < 2): trained distances reach z = dist / kappa "
        f">~ {TAIL_Z:g}, where (1 + z)^-(d_H + alpha) departs from exp(-(d_H + alpha) z)"
    )
    where, paper = "Abstract; Eq. 10", "implied by Eq. 10 and Fig 2"
    path = ctx.results / TAIL_OUTPUTS["stats"]
    if not path.exists():
        return [
            measured(
                ctx.profile,
                claim,
                where,
                QUOTES["tail"],
                paper,
                "no tail probe",
                not_run_verdict(ctx.profile),
                headline=False,
            )
        ]
    stats = pd.read_parquet(path)
    out = []
    for (task, variant), block in stats.groupby(["task", "variant"], sort=False):
        named = f"{claim} ({model_name(ctx, variant)}, {task_name(task)})"
        weighted = block.assign(beyond=block["share_above_1"] * block["pairs"])
        seeds = weighted.groupby("seed")[["beyond", "pairs"]].sum()
        share = seeds["beyond"] / seeds["pairs"]
        tv = float(block["tv_laplace"].mean())
        interval, verdict, reason = difference(
            share, None, +1, math.nan, TAIL_UNIT, 100.0, threshold=100 * TAIL_SHARE
        )
        if tv < TV_LAPLACE and verdict == NOT_MEASURABLE:
            reason = f"{reason}; the rows are the Laplace kernel's within TV {tv:.3g}"
        ours = (
            f"{task} {variant}: kappa {block['kappa'].iloc[0]:.4g} (d_H "
            f"{int(block['head_dim'].iloc[0])}), median z {block['z_median'].median():.3g}, "
            f"max z {block['z_max'].max():.3g}, pairs beyond z = {TAIL_Z:g}: "
            f"{share.mean():.2%} (a layer uses the tail from {TAIL_SHARE:.0%}), mean TV to the "
            f"Laplace rows {tv:.3g}"
        )
        out.append(
            measured(
                ctx.profile,
                named,
                where,
                QUOTES["tail"],
                paper,
                ours,
                (interval, verdict, reason),
                headline=False,
            )
        )
    return out


def curve_claim(ctx: ReportContext, table1: dict[str, Any] | None) -> Claim:
    """Fig 6a: DP plateaus after epoch 7 while FNA keeps improving: per seed, FNA's gain in
    validation accuracy from epoch 7 to the last against DP's (needs more than 7 epochs)."""
    claim = "Fig 6a: after epoch 7 FNA keeps improving while DP plateaus"
    where, quote, paper = "Fig. 6a", QUOTES["fig_6"], "curves only; DP ~81% early"
    path = ctx.results / CURVES_FILE
    if table1 is None or not path.exists() or not {"fna", "dp"} <= set(table1.get("rows", {})):
        return measured(
            ctx.profile,
            claim,
            where,
            quote,
            paper,
            "no Table I curves",
            not_run_verdict(ctx.profile),
        )
    curves = pd.read_parquet(path)
    task = table1["tasks"][0]
    gains = {}
    for label in ("fna", "dp"):
        own = curves[(curves["task"] == task) & (curves["variant"] == table1["rows"][label])]
        per = own.pivot_table(index="seed", columns="epoch", values="val_acc")
        last = int(per.columns.max()) if len(per.columns) else 0
        if last <= PLATEAU_EPOCH:
            return measured(
                ctx.profile,
                claim,
                where,
                quote,
                paper,
                f"{task}: {last} epochs trained",
                (
                    None,
                    NEEDS_PAPER,
                    f"the {ctx.profile} profile trains {last} epochs; the claim "
                    f"is about epochs {PLATEAU_EPOCH} to 20",
                ),
            )
        gains[label] = per[last] - per[PLATEAU_EPOCH]
    judged = difference(gains["fna"], gains["dp"], +1, math.nan)
    ours = (
        f"{task}: validation accuracy gained from epoch {PLATEAU_EPOCH} to the last, FNA "
        f"{fmt(gains['fna'].mean() * 100)} vs DP {fmt(gains['dp'].mean() * 100)} points"
    )
    return measured(ctx.profile, claim, where, quote, paper, ours, judged)


def constant_in_d_claims(ctx: ReportContext, runs: pd.DataFrame) -> list[Claim]:
    """Fig 3: unlike DP's, FNA's one-layer accuracy is near-constant in d. Per (task, Q = K or
    not): each mechanism's accuracy at the largest d minus the smallest, per seed; DP's change
    above FNA's (alpha = 1.2) reproduces the contrast."""
    claim = "Fig 3: FNA's one-layer accuracy is near-constant in d, DP's is not"
    where, quote = "Sec. on Fig. 3", QUOTES["fig_3_constant"]

    def not_measured(why: str) -> list[Claim]:
        verdict = not_run_verdict(ctx.profile)
        return [measured(ctx.profile, claim, where, quote, "figure only", why, verdict)]

    found = ctx.find("fna_shallow")
    if found is None or runs.empty:
        return not_measured("no fna_shallow study")
    name, shallow = found
    one = runs[(runs["layers"] == 1) & runs["variant"].isin(shallow["variants"])]
    one = one[
        (one["attention"] == "fna_dp") | ((one["attention"] == "fna") & (one["alpha"] == 1.2))
    ]
    out = []
    for (task, tied), block in one.groupby(["task", "tied"], sort=True):
        change = {}
        for attention, cells in block.groupby("attention"):
            mechanism = "dp" if attention == "fna_dp" else "fna"
            by_dim = cells.drop_duplicates("dim").set_index("dim")["variant"].sort_index()
            if len(by_dim) < 2:
                continue
            small = per_seed(ctx.own(name), task, by_dim.iloc[0])
            large = per_seed(ctx.own(name), task, by_dim.iloc[-1])
            change[mechanism] = ((large - small).dropna(), int(by_dim.index[0]),
                                 int(by_dim.index[-1]))  # fmt: skip
        if not {"fna", "dp"} <= set(change):
            continue
        (fna, low, high), (dp, _, _) = change["fna"], change["dp"]
        out.append(
            measured(
                ctx.profile,
                f"{claim} (Q {'=' if tied else '≠'} K)",
                where,
                quote,
                "figure only",
                f"{task}: accuracy at d = {high} minus d = {low}: FNA {mean_text(fna)}, DP "
                f"{mean_text(dp)} points",
                difference(dp, fna, +1, math.nan, scale=1.0),
                headline=False,
            )
        )
    return out or not_measured("no one-layer FNA and DP at two or more d")


def op_gap_claim(ctx: ReportContext, table1: dict[str, Any] | None) -> Claim:
    """Fig 6b: with orthogonal W_Q, W_K the gap between FNA and DP widens: per seed, the op gap
    (op-FNA minus op-DP) minus the general one (FNA minus DP), sized on Table I's own means."""
    claim = "Fig 6b: the FNA − DP accuracy gap widens with orthogonal projections"
    where, quote = "Fig. 6b", QUOTES["fig_6b"]
    rows = ("fna", "dp", "op_fna", "op_dp")
    if table1 is None or not set(rows) <= set(table1.get("rows", {})):
        return measured(
            ctx.profile, claim, where, quote, "figure only", "no Table I study with op rows",
            not_run_verdict(ctx.profile),
        )  # fmt: skip
    paper = paper_rows(table1["paper_table"])["mean"]
    printed = (paper["op_fna"] - paper["op_dp"]) - (paper["fna"] - paper["dp"])
    task = table1["tasks"][0]
    acc = {r: per_seed(ctx.summary, task, table1["rows"][r]) for r in rows}
    op_gap, gap = (acc["op_fna"] - acc["op_dp"]).dropna(), (acc["fna"] - acc["dp"]).dropna()
    paper_text = (
        f"Table I: op gap {paper['op_fna'] - paper['op_dp']:+.2f} vs "
        f"{paper['fna'] - paper['dp']:+.2f} ({printed:+.2f})"
    )
    if op_gap.empty or gap.empty:
        return measured(
            ctx.profile, claim, where, quote, paper_text, f"{task}: no runs",
            not_run_verdict(ctx.profile),
        )  # fmt: skip
    return measured(
        ctx.profile,
        claim,
        where,
        quote,
        paper_text,
        f"{task}: op gap {mean_text(op_gap)} vs {mean_text(gap)} points",
        difference(op_gap, gap, +1, printed, scale=1.0),
        headline=False,
    )


def op_fna_claims(ctx: ReportContext, runs: pd.DataFrame) -> list[Claim]:
    """Fig 7b: with orthogonal W_Q, W_K, FNA "still exceeds the Transformer": per task, op-FNA
    minus op-DP per seed. "The Transformer" of that sentence is read as the orthogonal one,
    whose mean "remains nearly unchanged at 76.07%" (our reading); op-FNA's own mean is not
    printed, so no effect sizes the seeds needed."""
    claim = "Fig. 7b: with orthogonal projections FNA (alpha = 1.2) still beats the Transformer"
    where, quote = "Fig. 7b; Sec. Image processing", QUOTES["fig_7_op"]
    paper = "op-FNA not printed ('a minor performance drop' from 76.17); the Transformer 76.07"
    reading = "'the Transformer' read as the orthogonal one, the text's 76.07 (our reading)"
    vit = next(
        (
            s
            for s in ctx.of_kinds(("fna_accuracy",)).values()
            if s.get("paper_table") == "fna_cifar10.csv"
        ),
        None,
    )
    rows = (vit or {}).get("rows", {})
    if vit is None or not {"op_fna", "op_dp"} <= set(rows):
        return [measured(ctx.profile, claim, where, quote, paper, "no Fig 7 study",
                         not_run_verdict(ctx.profile))]  # fmt: skip
    out = []
    for task in vit["tasks"]:
        fna, dp = (per_seed(ctx.summary, task, rows[r]) for r in ("op_fna", "op_dp"))
        if fna.empty or dp.empty:
            out.append(measured(ctx.profile, f"{claim} ({task_name(task)})", where, quote, paper,
                                f"{task}: no runs", not_run_verdict(ctx.profile)))  # fmt: skip
            continue
        interval, verdict, reason = difference(fna, dp, +1, math.nan, scale=1.0)
        words, same = alpha_note("op_fna", trained_alpha(runs, task, rows["op_fna"]))
        if not same:
            verdict, reason = NOT_MEASURABLE, "not the paper's kind of kernel"
        reason = "; ".join(x for x in (words, reason, reading) if x)
        out.append(
            measured(
                ctx.profile,
                f"{claim} ({task_name(task)})",
                where,
                quote,
                paper,
                f"{task}: op-FNA {mean_text(fna)}, op-DP {mean_text(dp)}; Δ op-FNA − op-DP",
                (interval, verdict, reason),
            )
        )
    return out


# Fig 2a's words (theory_report.py) in the kit's vocabulary, with what a "partly" means.
THEORY_VERDICTS = {
    "agrees": (HOLDS, ""),
    "partly": (FAILS, "off alpha, though nearer j^alpha than j^2"),
    "disagrees": (FAILS, ""),
    AMBIGUOUS: (AMBIGUOUS, "the fit range decides: the readings disagree"),
}


def theory_verdict(word: str) -> tuple[str, str]:
    """(verdict, reason) of one of theory_report.py's words; a word it never writes is refused,
    so a new one cannot pass as a failure."""
    if word not in THEORY_VERDICTS:
        raise ValueError(
            f"Fig 2a verdict {word!r} is none of {', '.join(THEORY_VERDICTS)}: rerun the "
            "fna_theory rule, or map the new word in audit.THEORY_VERDICTS"
        )
    return THEORY_VERDICTS[word]


def theory_readings(cell: object) -> tuple[Reading, ...]:
    """The fit ranges' readings of one claims row, each verdict in the kit's words."""
    return tuple(Reading(r.name, r.result, theory_verdict(r.verdict)[0]) for r in readings_of(cell))


def theory_claims(results: Path, profile: str) -> list[Claim]:
    """Fig 2a's j^alpha scaling, from the fna_theory rule's claims (no training): its "agrees"
    holds; "partly" (off alpha, though nearer j^alpha than j^2) and "disagrees" fail; where
    the fit ranges disagree, each range is a reading and the finding is the one they agree on,
    or ambiguous as printed."""
    path = results / THEORY_OUTPUTS["claims"]
    if not path.exists():  # every profile runs the rule: here it has not yet
        return [
            Claim("Fig 2a: the S^1 spectrum scales as j^alpha", "Fig. 2a", QUOTES["fig_2a"],
                  "lambda_j ~ j^alpha", "no spectrum computed", NOT_MEASURABLE, profile,
                  reason="the fna_theory rule has not run")
        ]  # fmt: skip
    claims = pd.read_csv(path)
    out = []
    for r in claims[claims["figure"].astype(str) == "2a"].itertuples():
        verdict, reason = theory_verdict(str(r.verdict).split(":")[0])
        readings = theory_readings(getattr(r, "readings", ""))
        if readings and agreed(readings) != verdict:  # the kit's verdict is the readings'
            verdict = agreed(readings)
            reason = THEORY_VERDICTS[AMBIGUOUS][1] if verdict == AMBIGUOUS else ""
        out.append(
            finding(
                r.claim,
                "Fig. 2a",
                QUOTES["fig_2a"],
                r.paper,
                f"{r.ours} ({r.criterion})",
                verdict,
                reason,
                readings=readings,
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------


def audit_claims(ctx: ReportContext) -> list[Claim]:
    """Every claim, from the studies found by kind (any name in params.yaml); empty unless a
    study of this paper runs in the profile."""
    if not ctx.of_kinds(("fna_accuracy", "fna_shallow", "fna_ablation")):
        return []
    runs = _runs_file(ctx)
    out: list[Claim] = []
    accuracy = ctx.of_kinds(("fna_accuracy",))
    for name, study in accuracy.items():
        out += accuracy_claims(name, ctx.own(name), study, runs, ctx.profile)
    out += missing_tables(ctx)
    table1 = next((s for s in accuracy.values() if s.get("paper_table") == "fna_imdb.csv"), None)
    out.append(depth_claim(ctx, runs, table1))
    out += constant_in_d_claims(ctx, runs)
    out.append(curve_claim(ctx, table1))
    out.append(op_gap_claim(ctx, table1))
    out += graph_claims(ctx.results, ctx.profile)
    out.append(diffusion_map_claim(ctx.results, ctx.profile))
    out += ablation_claims(ctx, runs)
    out += tail_claims(ctx)
    out += op_fna_claims(ctx, runs)
    out += theory_claims(ctx.results, ctx.profile)
    out += theory_findings()
    out.append(width_finding())
    out += ambiguous_orderings()
    for name in dict.fromkeys(TABLES):
        out += printed_inconsistencies(name)
    return out
