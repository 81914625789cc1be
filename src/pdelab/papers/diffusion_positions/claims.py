"""Each claim of where-to-add-pde-diffusion as a :class:`~pdelab.report.claims.Claim`.

Two kinds (pdelab.report.claims): *findings* hold in any profile (the paper's theory computed
with :mod:`.theory`, its tables checked against themselves and its text); *run verdicts* rest
on this profile's runs and come from :func:`~pdelab.report.claims.difference`, one setting at a
time, seeds never pooled, with the paper's claimed effect sizing the seeds needed.

The run claims are declared as data (:func:`declared`, :mod:`pdelab.report.declared`), so the
kit builds the comparison each makes: a claim of a best (Pred-1: after embedding is the best
position; multi-scale beats every single scale) is judged against every rival at once, after
embedding against each of the other six positions, multi-scale against each single scale,
never against one rival chosen from the paper's table.

A step-time overhead is judged only from a GPU timing at the paper profile (the paper's figures
are A100 figures at its own model scale): the 95% interval of the median paired ratio must lie
within OVERHEAD_TOLERANCE points of the paper's figure. A CPU timing, or one at another model
scale, needs the paper profile; ours is shown beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd

from pdelab.papers.diffusion_positions import theory
from pdelab.papers.diffusion_positions.tables import cost_frame, paper_table, read_timing
from pdelab.report.claims import (
    CONSISTENT,
    DECIDED,
    FAILS,
    HOLDS,
    INCONSISTENT,
    NEEDS_PAPER,
    NO_EXPERIMENT,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    Interval,
    Reading,
    agreed,
    finding,
    judge,
    judged_profile,
)
from pdelab.report.context import ReportContext
from pdelab.report.declared import Declared, Judgement, Kind, Runs, evaluate, judgement
from pdelab.spec.studies import Study

# Half the width of the paper's own "approximately 5-15%" (App. A.3.1): the precision the paper
# itself gives its overheads in words, so an overhead within 5 points of a Table 9 figure is as
# close as the paper's text is to its own table.
OVERHEAD_TOLERANCE = 5.0
TEXT_OVERHEAD = (5.0, 15.0)  # App. A.3.1: "approximately 5-15%"
INTERMEDIATE = ("after_mlp", "layer_diffusion", "before_layernorm")  # P2-P4 (Table 1)
CPU_REASON = "CPU timing of a small model; the paper's figure is an A100 figure"
SCALE_REASON = "GPU timing at this profile's model scale; the paper's figure is an A100 figure"
UNTIMED = "not timed: the cost_timing rule has not run"
# the paper's own names (Tables 1, 5 and 7) for the variants and scales a claim names
POSITION_NAMES = {
    "baseline": "Baseline",
    "after_embedding": "After Embedding (P1)",
    "after_mlp": "After MLP (P2)",
    "layer_diffusion": "Layer Diffusion (P3)",
    "before_layernorm": "Before LayerNorm (P4)",
    "in_attention": "In Attention (P5)",
    "head_diffusion": "Head Diffusion (P6)",
    "after_attention": "After Attention (P7)",
}
SCALE_NAMES = {"fast_h1": "Fast (h=1)", "medium_h2": "Medium (h=2)", "slow_h4": "Slow (h=4)"}
# Table 9's multi-scale rows: the multi-scale model at one position
MULTISCALE_NAMES = {
    "multiscale_after_embedding": "multi-scale After Embedding",
    "multiscale_after_mlp": "multi-scale After MLP",
    "multiscale_layer_diffusion": "multi-scale Layer Diffusion",
}
TASK_NAMES = {
    "listops": "ListOps",
    "imdb_bytes_lra": "Text Cls.",
    "retrieval": "Retrieval",
    "pathfinder": "PathFinder",
    "image": "Image Cls.",
}


def _name(variant: str) -> str:
    """The paper's name of a position, scale or task (the id itself where it has none)."""
    return {**POSITION_NAMES, **SCALE_NAMES, **MULTISCALE_NAMES, **TASK_NAMES}.get(variant, variant)


def overhead_verdict(
    ours: float, low: float, high: float, paper: float, tolerance: float = OVERHEAD_TOLERANCE
) -> str:
    """The verdict on an overhead claim (all in percent) from our 95% interval [low, high]:
    within ``tolerance`` points of the paper's figure is reproduced, wholly outside that band
    not reproduced; an interval wider than the effect, or one holding values of both outcomes,
    is not measurable here, never not reproduced."""
    if any(math.isnan(v) for v in (ours, low, high, paper)) or high - low > abs(ours):
        return NOT_MEASURABLE
    band_low, band_high = paper - tolerance, paper + tolerance
    if band_low <= low and high <= band_high:
        return REPRODUCED
    if high < band_low or low > band_high:
        return NOT_REPRODUCED
    return NOT_MEASURABLE


def _points(x: float) -> str:
    return f"{x:+.2f} points"


def _find(studies: Mapping[str, Study], kind: str) -> tuple[str, Study] | None:
    """The first study of a study kind (params.yaml order), as the report finds it."""
    return next(((n, s) for n, s in studies.items() if s.kind == kind), None)


OVER_TASKS = "mean over {n} task(s) per seed"


def position_declared(name: str, study: Study) -> dict[str, Declared]:
    """P1 and P7 against the baseline, Pred-1 against every other position, contribution 2,
    Pred-3 against the intermediate positions P2-P4: accuracy averaged over the study's tasks
    per seed, each pair's claimed effect the paper's own gap over those tasks."""
    tasks = tuple(study["tasks"])
    paper = paper_table(study["paper_table"])
    paper_avg = 100 * paper.loc[:, list(tasks)].mean(axis=1)  # the paper's average over our tasks
    where = "Abstract; Sec. 5.2, Table 2"

    def gap(a: str, b: str) -> float:
        return float(paper_avg[a] - paper_avg[b])

    def versus(a: str, b: str, sign: int, claim: str, where: str, quote: str) -> Declared:
        return Declared(
            claim, where, quote, _points(gap(a, b)), Kind.DIFFERENCE,
            Runs(tasks, (a, b)), sign=sign, effect=gap(a, b), study=name,
        )  # fmt: skip

    def best(rivals: list[str], claim: str, where: str, quote: str) -> Declared:
        """P1 against each rival at once: every pair, each claimed at the paper's gap."""
        theirs = ", ".join(f"{_name(v)} {_points(gap('after_embedding', v))}" for v in rivals)
        return Declared(
            claim, where, quote, f"P1 minus {theirs}", Kind.BEST,
            Runs(tasks, ("after_embedding", *rivals)),
            effects={v: gap("after_embedding", v) for v in rivals},
            names={v: f"P1 − {_name(v)}" for v in rivals}, study=name,
        )  # fmt: skip

    # a best of seven needs every pair: after embedding against each other position
    rivals = [v for v in POSITION_NAMES if v not in ("baseline", "after_embedding")]
    rivals = [v for v in rivals if v in paper.index]
    return {
        "p1": versus(
            "after_embedding", "baseline", +1,
            "P1 after embedding raises average accuracy over the baseline (Pred-1, Layer II)",
            where, "improving average accuracy by +4.1 points when applied after embedding",
        ),
        "p7": versus(
            "after_attention", "baseline", -1,
            "P7 after attention lowers average accuracy below the baseline (Pred-2, Layer III)",
            where, "post-attention diffusion degrades performance by −2.5 points",
        ),
        "pred1": best(
            rivals,
            "Pred-1: after embedding (P1) is the best of the seven positions (every pair)",
            "Sec. 5.2, Table 2", "early PDE diffusion yields the best performance",
        ),
        "early": versus(
            "after_embedding", "after_attention", +1,
            "Contribution 2: early insertion (P1) outperforms post-attention insertion (P7)",
            "Sec. 1 (contributions)",
            "predicting that early-stage insertion should systematically outperform "
            "post-attention insertion",
        ),
        "pred3": best(
            list(INTERMEDIATE),
            "Pred-3: intermediate positions P2-P4 gain less than P1 (every pair)",
            "Sec. 5.2, Table 5", "Intermediate insertion strategies (P2–P4) produce smaller gains",
        ),
    }  # fmt: skip


def position_claims(ctx: ReportContext) -> list[Claim]:
    """The position claims (:func:`position_declared`), judged on this profile's runs."""
    found = ctx.find("accuracy")
    if not found:
        return []
    name, study = found
    summary, tasks = ctx.own(name), list(study["tasks"])
    over = OVER_TASKS.format(n=len(tasks))

    def one(judged: Judgement) -> str:
        return f"{_points(judged.judged[0].estimate)} ({over})"

    def every(judged: Judgement) -> str:
        ours = ", ".join(f"{_name(v)} {_points(p[0].estimate)}" for v, p in judged.parts)
        return f"P1 minus {ours} ({over})"

    declared = position_declared(name, study)
    return [
        evaluate(declared[key], summary, ctx.profile, every if key.startswith("pred") else one)
        for key in ("p1", "p7", "pred1", "early", "pred3")
    ]


# -- Table 7: multi-scale ---------------------------------------------------------------------


MULTISCALE_QUOTE = (
    "The adaptive multi-scale configuration consistently outperforms all single-scale variants"
)


def multiscale_declared(name: str, study: Study) -> list[Declared]:
    """At each position, multi-scale against every single scale there (Fig. 2: it "outperforms
    all single-scale variants"; Sec. 5.3: the best single scale, which is whichever of them is
    best), and first the abstract's "consistent gains": every single scale at every position
    at once. Each pair's claimed effect is the paper's own gap in Table 7."""
    task = study["tasks"][0]
    paper = paper_table(study["paper_table"])
    per_position, papers = [], []
    for position, scales in study["grid"].items():
        singles = [c for c in scales if c != "multiscale" and c in paper]
        gaps = {
            c: 100 * float(paper.loc[position, "multiscale"] - paper.loc[position, c])
            for c in singles
        }
        here = ", ".join(f"{_name(c)} {_points(g)}" for c, g in gaps.items())
        papers.append(f"{_name(position)}: {here}")
        per_position.append(
            Declared(
                f"multi-scale beats every single scale at {_name(position)}",
                "Sec. 5.3, Table 7; Fig. 2",
                MULTISCALE_QUOTE,
                f"multi-scale minus {here}",
                Kind.BEST if len(singles) > 1 else Kind.DIFFERENCE,
                Runs((task,), (scales["multiscale"], *(scales[c] for c in singles))),
                effect=gaps[singles[0]] if len(singles) == 1 else math.nan,
                effects={scales[c]: g for c, g in gaps.items()} if len(singles) > 1 else {},
                names={
                    scales[c]: f"multi-scale − {_name(c)} at {_name(position)}" for c in singles
                },
                headline=False,
                study=name,
            )
        )
    if len(per_position) < 2:
        return per_position
    every = Declared(
        "multi-scale gains over every single scale at every position",
        "Abstract; Sec. 5.3, Table 7",
        "a multi-scale diffusion variant yields consistent gains under the same global "
        "stability budget",
        "multi-scale minus " + "; ".join(papers),
        Kind.ALL_OF,
        parts=tuple(per_position),
        study=name,
    )
    return [every, *per_position]


def one_task_study(ctx: ReportContext, kind: str) -> tuple[str, Study, pd.DataFrame, str] | None:
    """A study of one task (multiscale, seeds): its name, block, own runs and task."""
    found = ctx.find(kind)
    if not found:
        return None
    name, study = found
    return name, study, ctx.own(name), study["tasks"][0]


def multiscale_claims(ctx: ReportContext) -> list[Claim]:
    """The multi-scale claims (:func:`multiscale_declared`), judged on this profile's runs."""
    if (found := one_task_study(ctx, "multiscale")) is None:
        return []
    name, study, summary, task = found
    columns = {
        variant: column
        for scales in study["grid"].values()
        for column, variant in scales.items()
        if column != "multiscale"
    }
    positions = {scales["multiscale"]: p for p, scales in study["grid"].items()}

    def at_position(judged: Judgement) -> str:
        return ", ".join(f"{_name(columns[v])} {_points(p[0].estimate)}" for v, p in judged.parts)

    def ours(judged: Judgement) -> str:
        if judged.declared.kind != Kind.ALL_OF:
            return f"multi-scale minus {at_position(judged)} ({_name(task)})"
        each = [
            f"{_name(positions[part.runs.variants[0]])}: " + at_position(judgement(part, summary))
            for part in judged.declared.parts
        ]
        return "multi-scale minus " + "; ".join(each) + f" ({_name(task)})"

    return [evaluate(d, summary, ctx.profile, ours) for d in multiscale_declared(name, study)]


# -- Table 10: seeds --------------------------------------------------------------------------


def seeds_declared(name: str, study: Study) -> list[Declared]:
    """Each top position's gain over the baseline on ListOps, over the seeds study's seeds."""
    task = study["tasks"][0]
    baseline = study.get("baseline", "baseline")
    paper = 100 * paper_table(study["paper_table"])["mean"]
    return [
        Declared(
            f"{_name(variant)} improves on the baseline over seeds ({_name(task)})",
            "App. A.3.2, Table 10",
            "confirming the robustness of the observed improvements",
            _points(paper[variant] - paper[baseline]),
            Kind.DIFFERENCE,
            Runs((task,), (variant, baseline)),
            effect=float(paper[variant] - paper[baseline]),
            headline=False,
            study=name,
        )
        for variant in study["variants"]
        if variant != baseline and variant in paper.index
    ]


def seeds_claims(ctx: ReportContext) -> list[Claim]:
    """The seeds claims (:func:`seeds_declared`), judged on this profile's runs."""
    if (found := one_task_study(ctx, "seeds")) is None:
        return []
    name, study, summary, task = found

    def ours(judged: Judgement) -> str:
        return f"{_points(judged.judged[0].estimate)} ({task})"

    return [evaluate(d, summary, ctx.profile, ours) for d in seeds_declared(name, study)]


def declared(studies: Mapping[str, Study]) -> tuple[Declared, ...]:
    """Every run claim of the paper that compares trained runs, as data (no result read): the
    positions, multi-scale and seeds studies' claims, for the cost plan to price."""
    out: list[Declared] = []
    for kind, make in (
        ("accuracy", lambda n, s: list(position_declared(n, s).values())),
        ("multiscale", multiscale_declared),
        ("seeds", seeds_declared),
    ):
        found = _find(studies, kind)
        if found:
            out += make(*found)
    return tuple(out)


# -- Table 9: cost ----------------------------------------------------------------------------


def cost_claims(ctx: ReportContext) -> list[Claim]:
    """Step-time overheads (judged only from a GPU timing at the paper profile) and the memory
    overheads (one peak per variant: no interval, so never judged)."""
    found = ctx.find("cost")
    if not found:
        return []
    _, study = found
    try:
        timing = read_timing(ctx.results, study)
    except FileNotFoundError:  # the cost_timing rule has not run: every row says so
        timing = pd.DataFrame()
    frame = cost_frame(timing, study)
    on_gpu = bool(len(timing)) and bool((timing["device"] == "cuda").all())
    judged = on_gpu and judged_profile(ctx.profile)
    where = "App. A.3.1, Table 9"
    device = str(timing["device_name"].iloc[0]) if len(timing) else "no timing"
    claims = []
    rows = frame[frame["variant"] != study.get("baseline", "baseline")]
    for _, row in rows.iterrows():
        ours, paper = float(row["ours time %"]), float(row["paper time %"])
        low, high, repeats = float(row["95% CI low"]), float(row["95% CI high"]), row["repeats"]
        text = (
            "not timed"
            if math.isnan(ours)
            else f"{ours:+.1f}% [{low:+.1f}, {high:+.1f}] ({device}, {repeats} paired repeats)"
        )
        interval, reason = None, CPU_REASON if not on_gpu else SCALE_REASON
        verdict = NEEDS_PAPER
        if not len(timing):
            verdict = NOT_MEASURABLE if judged_profile(ctx.profile) else NEEDS_PAPER
            reason = UNTIMED
        if judged:
            interval = Interval(ours, low, high, (int(repeats),), "% step time", "paired repeats")
            verdict = overhead_verdict(ours, low, high, paper)
            reason = f"band: the paper's figure ±{OVERHEAD_TOLERANCE:g} points"
            if verdict in DECIDED and judge(low, high, +1, interval.n)[0] not in DECIDED:
                verdict, reason = NOT_MEASURABLE, "the interval reaches zero overhead"
        claims.append(
            Claim(
                f"step-time overhead of {_name(row['variant'])}",
                where,
                "Table 9 provides a detailed breakdown for key configurations on the ListOps task.",
                f"{paper:+.1f}%",
                text,
                verdict,
                ctx.profile,
                interval,
                reason,
                headline=False,
                judged=judged_profile(ctx.profile),
            )
        )
    memory = [
        f"{r['variant']} {r['ours memory %']:+.1f}%"
        for _, r in rows.iterrows()
        if not math.isnan(r["ours memory %"])
    ]
    claims.append(
        Claim(
            "memory overhead is negligible",
            where,
            "Memory overhead was negligible.",
            ", ".join(f"{r['variant']} {r['paper memory %']:+.1f}%" for _, r in rows.iterrows()),
            ", ".join(memory)
            if memory
            else "not measured (no CUDA peak on this device)"
            if len(timing)
            else "not timed",
            NOT_MEASURABLE if judged and memory else NEEDS_PAPER,
            ctx.profile,
            reason="one peak per variant: no interval"
            if judged and memory
            else "the paper's figures are A100 peaks at its model scale",
            headline=False,
        )
    )
    return claims


# -- findings: theory computed, the paper's tables read ---------------------------------------


# The paper leaves the strided Laplacian Delta_{N,h} undefined for h >= 2: two readings
GRAPH_READING = "pdelab's symmetric strided graph Laplacian"
REPLICATE_READING = "replicate padding of h copies per endpoint (App. B, Eq. 17; A.1.4)"
RANDOM_BUDGETS = 1500  # random budgets sum(alpha) < 1/2 searched under replicate padding


def energy_finding() -> Claim:
    """Cor. 4.5: every budget sum(alpha) < 1/2 makes the step spectrally non-expansive and
    dissipates the Dirichlet energy E. Under either reading of the strided operator one part
    fails: with the symmetric graph Laplacian ||S||_2 = 1 but E rises for a stride-4-heavy
    split and for h = 2 alone; with replicate padding E dissipates but ||S||_2 > 1."""
    lengths = (5, 8, 16, 64, 256)
    heavy = ((1, 2, 4), (0.04, 0.04, 0.40))
    gains = {n: theory.energy_gain(n, *heavy) for n in lengths}
    worst = max(gains, key=gains.get)
    stride2 = theory.energy_gain(64, (2,), (0.1,))
    even = max(theory.energy_gain(n, *theory.MULTISCALE) for n in lengths)
    named = {"h = 2, alpha = 0.1": ((2,), (0.1,)), "alpha = (0.04, 0.04, 0.40)": heavy}
    graph_norm = max(theory.spectral_norm(theory.step_matrix(64, *c)) for c in named.values())
    rep_norm = {
        k: theory.spectral_norm(theory.replicate_step_matrix(64, *c)) for k, c in named.items()
    }
    rep_gain = theory.replicate_energy_search(count=RANDOM_BUDGETS)
    graph = Reading(
        GRAPH_READING,
        f"||S||_2 = {graph_norm:.3f}, but worst-case E(Sx)/E(x) = {gains[64]:.3f} at L = 64 for "
        f"alpha = (0.04, 0.04, 0.40) on h = (1, 2, 4) ({gains[worst]:.2f} at L = {worst}); "
        f"{stride2:.3f} for h = 2 alone (alpha = 0.1, L = 64)",
        FAILS if max(gains[worst], stride2) > 1 + 1e-12 else HOLDS,
    )
    replicate = Reading(
        REPLICATE_READING,
        "E dissipates (largest worst-case gain over "
        f"{RANDOM_BUDGETS:,} random budgets on h = (1, 2, 4), L = 64: {rep_gain:.6f}), but "
        + ", ".join(f"||S||_2 = {v:.3f} for {k}" for k, v in rep_norm.items())
        + " (L = 64)",
        FAILS if max(rep_norm.values()) > 1 + 1e-12 or rep_gain > 1 + 1e-12 else HOLDS,
    )
    readings = [graph, replicate]
    return finding(
        "Cor. 4.5: a multi-scale step with sum(alpha) < 1/2 is spectrally non-expansive and "
        "dissipates E monotonically",
        "Abstract; Sec. 4.1, Cor. 4.5",
        "If $\\sum_{k=1}^K \\alpha_k < \\frac{1}{2}$, then \\mathcal{S}_α is spectrally "
        "non-expansive and dissipates $\\mathcal{E}(\\cdot)$ monotonically.",
        "both, for every budget sum(alpha) < 1/2",
        f"the paper's even split dissipates under the graph reading (at most {even:.3f}); the "
        "paper does not define the strided operator for h >= 2.",
        agreed(readings),
        "under each reading of the strided operator one of the two parts fails",
        readings=readings,
    )


def non_expansive_finding() -> Claim:
    """Thm 4.2, the single-alpha step of Layer I: ||S_alpha||_2 <= 1 and kappa < 1 for every
    alpha < 1/2. For h = 1 App. B's replicate padding (Eq. 17) is the Neumann Laplacian itself,
    so both readings of the strided operator are this one operator and the theorem holds; the
    strided (multi-scale) case is Cor. 4.5's row, charged there once."""
    cases = [(n, a) for n in theory.LENGTHS for a in theory.ALPHAS if a < 0.5]
    norm = max(theory.spectral_norm(theory.step_matrix(n, (1,), (a,))) for n, a in cases)
    same = max(
        float(
            (theory.replicate_step_matrix(n, (1,), (a,)) - theory.step_matrix(n, (1,), (a,)))
            .abs()
            .max()
        )
        for n, a in cases
    )
    checked = theory.contraction_check([a for a in theory.ALPHAS if a < 0.5], theory.LENGTHS)
    checked = checked[checked["L"] >= 2]
    kappa = float(checked["kappa"].max())
    holds = norm <= 1 + 1e-12 and kappa < 1
    return finding(
        "Thm 4.2: a single-scale step with alpha < 1/2 is spectrally non-expansive (Layer I)",
        "Abstract; Sec. 4.1, Thm 4.2",
        "provides unconditional guarantees for the diffusion subsystem (spectral "
        "non-expansiveness and monotone Dirichlet-energy dissipation under $\\alpha < 1/2$)",
        "||S_alpha||_2 <= 1 and kappa(alpha, L) < 1",
        f"max ||S_alpha||_2 = {norm:.6f} and max kappa = {kappa:.6f} over {len(cases)} "
        f"(alpha, L) cases, alpha up to {max(a for _, a in cases)}, L = "
        f"{min(theory.LENGTHS)}-{max(theory.LENGTHS)}; App. B's replicate padding (Eq. 17) and "
        f"the Neumann Laplacian are one operator for h = 1 (largest entry difference {same:.0e}), "
        "so no reading of the strided operator enters (the strided case is Cor. 4.5's row)",
        HOLDS if holds else FAILS,
    )


def eq27_finding() -> Claim:
    """App. B.3, Eq. 27: 0 <= 1 - 4 alpha <= mu_k for 0 <= alpha < 1/2. The lower bound is
    false for alpha > 1/4, and the smallest multiplier 1 - 4 alpha cos^2(pi / 2L) turns negative
    (the highest modes flip sign); |mu_k| <= 1 still holds, so the theorems it serves stand."""
    table = theory.contraction_check([a for a in theory.ALPHAS if a < 0.5], theory.LENGTHS)
    table = table[table["L"] >= 2]
    negative = table[table["min_mu"] < 0]
    low = table.loc[table["min_mu"].idxmin()]
    first = float(negative["alpha"].min()) if len(negative) else math.nan
    largest = float(np.abs(table["min_mu"]).max())
    return finding(
        "Eq. 27: every multiplier of S_alpha satisfies 0 <= 1 - 4 alpha <= mu_k for alpha < 1/2",
        "App. B.3, Eq. 27",
        "0 \\leq 1 - 4\\alpha \\leq \\mu_k \\leq 1",
        "0 <= 1 - 4 alpha <= mu_k <= 1 for 0 <= alpha < 1/2",
        f"1 - 4 alpha < 0 for every alpha in (1/4, 1/2), and the smallest multiplier "
        f"1 - 4 alpha cos^2(pi/2L) is negative in {len(negative)} of {len(table)} (alpha, L) "
        f"cases, from alpha = {first:g}, down to {low['min_mu']:.3f} (alpha = {low['alpha']:g}, "
        f"L = {int(low['L'])}); every mu_k stays >= -{largest:.3f} > -1, so |mu_k| <= 1: "
        "||S_alpha||_2 <= 1 and Thm B.4's (1 + alpha lambda_k)^2 <= 1 stand",
        FAILS if len(negative) else HOLDS,
        "the lower bound 0 <= 1 - 4 alpha holds only for alpha <= 1/4, not on the whole budget "
        "alpha < 1/2; the conclusions it is used for need only |mu_k| <= 1, which holds.",
    )


def dissipation_finding() -> Claim:
    """Theorem 4.4: one stride (h = 1, where App. B's replicate padding is the Neumann
    Laplacian itself) dissipates E for every alpha < 1/2: the exact worst-case gain."""
    cases = [(n, a) for n in (5, 16, 64, 256) for a in theory.ALPHAS if a < 0.5]
    worst = max(theory.energy_gain(n, (1,), (a,)) for n, a in cases)
    return finding(
        "Thm 4.4: a single-scale step with alpha < 1/2 dissipates E monotonically",
        "Sec. 4.1, Thm 4.4",
        "Theorem 4.4 (Monotone Energy Dissipation)",
        "E(S_alpha X) <= E(X)",
        f"worst-case E(Sx)/E(x) = {worst:.6f} over {len(cases)} (alpha, L) cases, alpha up to "
        f"{max(a for _, a in cases)}",
        HOLDS if worst <= 1 + 1e-12 else FAILS,
    )


def commutator_finding(length: int = 32, samples: int = 64, alpha: float = 0.1) -> Claim:
    """Sec. 1's central claim: diffusion and attention generally do not commute. Computed on
    row-stochastic softmax attention of random logits: ||S A - A S||_F / ||S A||_F, which is
    zero only for the attention Delta_N commutes with (uniform attention, for one)."""
    rng = np.random.default_rng(0)
    op = theory.step_matrix(length, (1,), (alpha,)).numpy()
    ratios = []
    for _ in range(samples):
        logits = rng.normal(size=(length, length))
        attn = np.exp(logits - logits.max(1, keepdims=True))
        attn /= attn.sum(1, keepdims=True)
        ratios.append(float(np.linalg.norm(op @ attn - attn @ op) / np.linalg.norm(op @ attn)))
    uniform = np.full((length, length), 1 / length)
    flat = float(np.linalg.norm(op @ uniform - uniform @ op))
    return finding(
        "Diffusion and attention generally do not commute",
        "Abstract; Sec. 1",
        "Our central claim is that diffusion and attention generally *do not commute*",
        "[S, A] != 0 in general",
        f"||SA − AS||_F / ||SA||_F over {samples} softmax attentions of random logits "
        f"(L = {length}, alpha = {alpha}): {min(ratios):.3f}-{max(ratios):.3f}; uniform "
        f"attention commutes ({flat:.1e}); the diagnostics below measure it in trained models "
        "as a pipeline check",
        HOLDS if min(ratios) > 1e-9 else FAILS,
    )


def identical_rows_finding() -> Claim:
    """Tables 5-6 print P2 (After MLP) and P4 (Before LayerNorm) identically to four decimals on
    four of five tasks. Table 1 gives their compositions, P2 X <- S(X + MLP(X)) and P4
    X <- LN(S(X)); these are two insertion points only if S stands alone. App. A.1.4, Eq. 16
    applies LayerNorm after each PDE update, which makes P2 LN(S(X + MLP(X))): P4 at the
    LayerNorm that follows the MLP residual of a post-LN block, one insertion point under two
    names. Which the paper means it does not say."""
    table = paper_table("diffusion_positions_lra.csv").astype(float)
    tasks = [c for c in table.columns if c != "average"]
    mlp, ln = table.loc["after_mlp", tasks], table.loc["before_layernorm", tasks]
    same = [t for t in tasks if mlp[t] == ln[t]]
    other = [t for t in tasks if t not in same]
    listed = ", ".join(f"{_name(t)} {mlp[t]:.4f}" for t in same)
    differs = "; ".join(f"{_name(t)}: {mlp[t]:.4f} vs {ln[t]:.4f}" for t in other)
    readings = [
        Reading(
            "Table 1's compositions as printed (S alone at P2: S(X + MLP(X)) vs LN(S(X)))",
            f"two different operators: {len(same)} of {len(tasks)} tasks identical to four "
            "decimals, which separately trained models do not give",
            INCONSISTENT if len(same) > 1 else CONSISTENT,
        ),
        Reading(
            "Table 1 with Eq. 16's LayerNorm after each update (P2: LN(S(X + MLP(X))))",
            "P2 is P4 at the LayerNorm after the MLP residual: one insertion point, so "
            "identical accuracies follow"
            + (f"; {differs} would then need a cause" if other else ""),
            CONSISTENT,
        ),
    ]
    return finding(
        "Tables 5-6: After MLP (P2) and Before LayerNorm (P4) are distinct results",
        "App. A.2, Tables 5-6; Table 1; App. A.1.4, Eq. 16",
        "Table 5 provides the complete performance breakdown for each model configuration on "
        "every LRA task.",
        f"identical: {listed}; differs: {differs or 'none'}",
        "Table 1 gives P2 as S(X + MLP(X)) and P4 as LN(S(X)); App. A.1.4, Eq. 16 follows every "
        "PDE update with LayerNorm, u <- LayerNorm(u + alpha lap u), which turns P2 into "
        "LN(S(X + MLP(X))), P4 at the LayerNorm after the MLP residual.",
        agreed(readings),
        "whether P2 and P4 are one insertion point turns on whether Eq. 16's LayerNorm belongs "
        "to every diffusion step, which the paper does not say.",
        readings=readings,
    )


def runs_per_position_finding() -> Claim:
    """Fig. 1's "five runs (n=5)" per position against App. A.3.2, where seeds were rerun only
    for the top positions on ListOps (Table 10) and Table 5 prints one number per cell."""
    readings = [
        Reading(
            "n = 5 training runs per position",
            "A.3.2 reruns seeds only for the top positions on ListOps, and Table 5 prints one "
            "accuracy per cell with no spread",
            INCONSISTENT,
        ),
        Reading(
            "the five LRA tasks as the five runs (error bars over tasks)",
            "one accuracy per task and position, as Table 5 prints, gives n = 5",
            CONSISTENT,
        ),
    ]
    return finding(
        "Fig. 1's error bars over five runs per position",
        "Fig. 1; App. A.3.2",
        "Error bars show standard deviation across five runs ($n=5$).",
        "n = 5 per position; seeds rerun for the top ListOps positions only (A.3.2)",
        "the paper does not say what the five runs are.",
        agreed(readings),
        readings=readings,
    )


def roughness_bound_finding() -> Claim:
    """Eq. 10 / 37: ||Delta_N z|| <= sqrt(2 E(z)); computed, the ratio tends to 2."""
    table = theory.roughness_bound_check().set_index("L")
    return finding(
        "Thm 4.7 / Eq. 37: ||Delta_N Z|| <= sqrt(2 E(Z))",
        "Sec. 4.2, Eq. 10; App. B.6, Eq. 37",
        "i.e., $\\|\\Delta_N Z_j\\|_F \\leq \\sqrt{2\\mathcal{E}(Z_j)}$",
        "sup ||Delta_N z|| / sqrt(2 E(z)) <= 1",
        f"sup ratio = 2 cos(pi/2L): {table.loc[16, 'sup_ratio']:.3f} at L = 16, "
        f"{table.loc[256, 'sup_ratio']:.3f} at L = 256 (tends to 2); the paper's own Eq. 39 "
        "gives sqrt(8 E)",
        FAILS,
        "off by a factor of 2",
    )


def band_energy_finding() -> Claim:
    """App. A.3.3's printed transfer function leaves out alpha, so |H| reaches 3 (at
    omega h = pi), where the step it describes multiplies cos(omega i) by
    1 - 4 alpha sin^2(omega h / 2), within [-1, 1] under the budget: a contradiction of the
    paper's own Layer I that needs no reading. Table 11's band energies rest on a definition
    the paper never gives; ours (mean |H|^2 over quarters of [0, pi]) is named as ours."""
    printed = paper_table("diffusion_band_energy.csv").astype(float)
    above = int((printed > 1).to_numpy().sum())
    omega = np.linspace(0, np.pi, 4097)
    as_printed = float(np.abs(1 - 4 * np.sin(omega / 2) ** 2).max())  # alpha left out, h = 1
    with_alpha = max(
        float(np.abs(theory.frequency_response_closed(omega, s, a)).max())
        for s, a in theory.FREQUENCY_CONFIGS.values()
    )
    ours = {
        name: theory.band_energy(strides, alphas)
        for name, (strides, alphas) in theory.FREQUENCY_CONFIGS.items()
    }
    top_name, top = max(
        ((f"{name} {band}", v) for name, bands in ours.items() for band, v in bands.items()),
        key=lambda x: x[1],
    )
    return finding(
        "App. A.3.3: the printed transfer function H(omega, h) and Table 11's band energies",
        "App. A.3.3, Table 11",
        "our multi-scale combination creates a more uniform response across the frequency "
        "spectrum, as shown in the energy distribution analysis in Table 11",
        f"H(omega, h) = 1 - 4 sin^2(omega h / 2); Table 11: {above} of {printed.size} band "
        f"energies above 1, up to {printed.max().max():.2f}",
        f"as printed H leaves out alpha: |H| reaches {as_printed:.2f} (omega h = pi), where "
        "the step multiplies cos(omega i) by 1 - 4 alpha sin^2(omega h / 2), of modulus at "
        f"most {with_alpha:.2f} at sum(alpha) = {theory.BUDGET}. The paper never defines band "
        "energy; under our reading (mean |H|^2 over quarters of [0, pi], alpha within the "
        f"budget) every band lies in [0, 1], at most {top:.2f} ({top_name}).",
        INCONSISTENT if as_printed > 1 else CONSISTENT,
        "the printed H leaves out alpha and exceeds the paper's own non-expansive bound; the "
        "band-energy reading is ours",
    )


def overhead_text_finding() -> Claim:
    """The text's "approximately 5-15%" against Table 9's own figures, with the tolerance our
    timings are judged by (OVERHEAD_TOLERANCE points either side): one tolerance for both."""
    table = paper_table("diffusion_cost_listops.csv")["time_overhead_pct"].dropna()
    low, high = TEXT_OVERHEAD[0] - OVERHEAD_TOLERANCE, TEXT_OVERHEAD[1] + OVERHEAD_TOLERANCE
    outside = table[(table < low) | (table > high)]
    beyond = table[(table < TEXT_OVERHEAD[0]) | (table > TEXT_OVERHEAD[1])]
    band = f"5-15% ± {OVERHEAD_TOLERANCE:g} points ({low:g}-{high:g}%)"
    return finding(
        "step-time overhead: the text's 5-15% against Table 9",
        "App. A.3.1, Table 9",
        "this added approximately 5-15% to the total training time depending on the configuration",
        ", ".join(f"{v} +{x:.1f}%" for v, x in table.items()),
        (
            ", ".join(f"{v} +{x:.1f}% lies outside {band}" for v, x in outside.items())
            if len(outside)
            else f"every figure lies within {band}"
            + (
                " (" + ", ".join(f"{v} +{x:.1f}%" for v, x in beyond.items()) + " outside 5-15% "
                "itself)"
                if len(beyond)
                else ""
            )
        )
        + f": 'approximately' read with the ±{OVERHEAD_TOLERANCE:g} points our timings are "
        "judged by against Table 9",
        INCONSISTENT if len(outside) else CONSISTENT,
    )


TOP_MODELS = ("after_embedding", "after_mlp", "layer_diffusion")  # Table 8's columns


def _table8() -> pd.DataFrame:
    return paper_table("diffusion_cross_task_correlation.csv").astype(float)


def delta_column_finding() -> Claim:
    """Table 8's Δ Correlation column against every difference of its own columns a reader
    could mean (each top model, their mean or their best, minus the baseline)."""
    table = _table8()
    base = table["baseline"]
    candidates = {
        **{f"{_name(m)} - Baseline": table[m] - base for m in TOP_MODELS},
        "mean of the three - Baseline": table[list(TOP_MODELS)].mean(axis=1) - base,
        "best of the three - Baseline": table[list(TOP_MODELS)].max(axis=1) - base,
    }
    matched = [k for k, d in candidates.items() if np.allclose(d, table["delta"], atol=0.006)]
    first = table.index[0]
    shown = ", ".join(f"{k} {d.loc[first]:+.2f}" for k, d in candidates.items())
    return finding(
        "Table 8: the Δ Correlation column",
        "App. A.2.4, Table 8",
        "Δ Correlation",
        f"Δ Correlation {table.loc[first, 'delta']:+.2f} for {first}, "
        f"{table['delta'].min():+.2f} to {table['delta'].max():+.2f} over its "
        f"{len(table)} task pairs",
        ("Δ matches " + ", ".join(matched))
        if matched
        else f"Δ matches no difference of the printed columns in all {len(table)} rows "
        f"(within 0.006); for {first}: {shown}",
        CONSISTENT if matched else INCONSISTENT,
        "" if matched else "the Δ column is not any difference of the table's own columns.",
    )


def cross_task_finding() -> Claim:
    """Table 8's text, "higher correlation values for our top models compared to the
    baseline", against its cells: which holds depends on whether it means every cell or each
    model as a whole, which the paper does not say."""
    table = _table8()
    base = table["baseline"]
    above = table[list(TOP_MODELS)].gt(base, axis=0)
    cells, held = above.size, int(above.to_numpy().sum())
    below = [
        f"{_name(m)} {pair} {table.loc[pair, m]:.2f} vs {base.loc[pair]:.2f}"
        for m in TOP_MODELS
        for pair in table.index
        if not above.loc[pair, m]
    ]
    means = table[list(TOP_MODELS)].mean()
    readings = [
        Reading(
            "higher in every cell",
            f"higher in {held} of {cells} cells",
            CONSISTENT if held == cells else INCONSISTENT,
        ),
        Reading(
            "higher for each top model over its task pairs (the model's mean)",
            ", ".join(f"{_name(m)} {v:.3f}" for m, v in means.items())
            + f" vs Baseline {base.mean():.3f}",
            CONSISTENT if (means > base.mean()).all() else INCONSISTENT,
        ),
    ]
    return finding(
        "Table 8: top positions correlate more across tasks than the baseline",
        "App. A.2.4, Table 8",
        "Higher correlation values for our top models compared to the baseline",
        f"{cells} cells: {len(TOP_MODELS)} top models × {len(table)} task pairs",
        f"holds in {held} of {cells} cells"
        + (f"; below the baseline: {'; '.join(below)}" if below else "")
        + ".",
        agreed(readings),
        f"the claim holds in {held} of {cells} cells; the paper does not say whether it means "
        "every cell.",
        readings=readings,
    )


def correlation_samples_finding() -> Claim:
    """Table 8's correlations are printed but never defined: the paper does not say over what
    samples each is taken. The one set its tables offer, Table 5's eight positions, gives one
    r per task pair, not one per model as Table 8 prints."""
    table8 = _table8()
    table5 = paper_table("diffusion_positions_lra.csv").astype(float)
    columns = {"ListOps": "listops", "Text": "imdb_bytes_lra", "Retrieval": "retrieval"}
    columns |= {"PathFinder": "pathfinder", "Image": "image"}
    over_rows = {
        pair: float(table5[columns[pair.split("-")[0]]].corr(table5[columns[pair.split("-")[1]]]))
        for pair in table8.index
    }
    first = table8.index[0]
    readings = [
        Reading(
            f"over Table 5's {len(table5)} rows (positions and baseline)",
            f"one r per task pair, not one per model: {first} r = {over_rows[first]:.2f} "
            f"(Table 8: {', '.join(f'{table8.loc[first, c]:.2f}' for c in table8.columns[:-1])})",
            INCONSISTENT,
        ),
        Reading(
            "over runs the paper does not print (seeds or checkpoints of each model)",
            "nothing printed to compute it from, nothing that contradicts it",
            CONSISTENT,
        ),
    ]
    return finding(
        "Table 8: the cross-task performance correlations",
        "App. A.2.4, Table 8",
        "we computed a cross-task performance correlation matrix",
        f"{table8[list(TOP_MODELS) + ['baseline']].min().min():.2f}-"
        f"{table8[list(TOP_MODELS) + ['baseline']].max().max():.2f}, one per model and task "
        "pair",
        "reported but undefined: the paper never states the samples each correlation is "
        "taken over (Table 5 prints one accuracy per model and task, which gives no pairs).",
        agreed(readings),
        "reported but undefined: its samples are never stated.",
        readings=readings,
    )


def pathfinder_finding() -> Claim:
    """Pred-2's −2.5 points for P7 (After Attention) against Table 6's tasks: the average's
    loss comes from PathFinder alone; on the other four tasks P7 is level or above on
    average."""
    table = paper_table("diffusion_positions_lra.csv").astype(float)
    tasks = [c for c in table.columns if c != "average"]
    gap = 100 * (table.loc["after_attention", tasks] - table.loc["baseline", tasks])
    worst = str(gap.idxmin())
    rest = float(gap.drop(worst).mean())
    lower = int((gap < 0).sum())
    readings = [
        Reading(
            "a degradation on every task (systematic across tasks)",
            f"P7 is below the baseline on {lower} of {len(tasks)} tasks, by more than one "
            f"point on {int((gap < -1).sum())}",
            CONSISTENT if lower == len(tasks) else INCONSISTENT,
        ),
        Reading(
            "a degradation of the average over tasks",
            f"average {gap.mean():+.2f} points, {rest:+.2f} without {_name(worst)}",
            CONSISTENT if gap.mean() < 0 else INCONSISTENT,
        ),
    ]
    return finding(
        "Pred-2: P7's degradation rests on PathFinder alone",
        "Sec. 5.4; Tables 5-6",
        "the systematic degradation observed at P7 is consistent with the Layer III "
        "non-commutativity analysis",
        "P7 minus baseline: "
        + ", ".join(f"{_name(t)} {v:+.2f}" for t, v in gap.items())
        + " points",
        f"the average's {gap.mean():+.2f} points come from {_name(worst)} ({gap[worst]:+.2f}); "
        f"without it P7 is {rest:+.2f} points on average over the other {len(tasks) - 1} tasks "
        f"(it gains {gap.max():+.2f} on {_name(str(gap.idxmax()))}).",
        agreed(readings),
        f"the claimed loss rests on {_name(worst)} alone: P7 is {rest:+.2f} points on the "
        "other tasks.",
        readings=readings,
    )


def untested_findings() -> list[Claim]:
    """Claims the paper states without an experiment one could rerun."""
    return [
        finding(
            "replicate padding beats zero padding",
            "App. A.3.2",
            "Using ‘replicate’ padding for boundary conditions was also found to be superior "
            "to zero padding",
            "no numbers",
            "no setup or numbers to rerun; no zero-padding variant is run here",
            NO_EXPERIMENT,
        ),
        finding(
            "alpha initialised at 0.1 balances convergence speed and stability",
            "App. A.3.2",
            "We also tested sensitivity to the initialization of α , finding that 0.1 provided "
            "a good balance between convergence speed and stability.",
            "no numbers",
            "no setup or numbers to rerun; every run here starts at 0.1",
            NO_EXPERIMENT,
        ),
        finding(
            "P7's degradation is the commutator's double-mixing conflict (Layer III)",
            "Sec. 5.4",
            "although we do not directly measure commutator norms in this work",
            "not measured",
            "the appendix's diagnostics measure the commutator, as a pipeline check only",
            NO_EXPERIMENT,
        ),
    ]


def findings() -> list[Claim]:
    """Every claim judged without a trained model: theory computed, tables read; those of the
    appendix only (Tables 8, 9, 11, App. A.3) are not headline claims."""
    claims = [
        commutator_finding(),
        non_expansive_finding(),
        eq27_finding(),
        dissipation_finding(),
        energy_finding(),
        roughness_bound_finding(),
        band_energy_finding(),
        overhead_text_finding(),
        delta_column_finding(),
        cross_task_finding(),
        correlation_samples_finding(),
        identical_rows_finding(),
        pathfinder_finding(),
        runs_per_position_finding(),
        *untested_findings(),
    ]
    return [replace(c, headline=not c.where.startswith("App.")) for c in claims]


def paper_claims(ctx: ReportContext) -> list[Claim]:
    """The findings, then this profile's run verdicts (positions, multi-scale, seeds, cost)."""
    return [
        *findings(),
        *position_claims(ctx),
        *multiscale_claims(ctx),
        *seeds_claims(ctx),
        *cost_claims(ctx),
    ]
