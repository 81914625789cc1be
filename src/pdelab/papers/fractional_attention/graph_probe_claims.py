"""Fractional Neural Attention's claims on the attention graphs of its trained shallow models
(Figs 4, A3 and 5), read from what the graph probe (graph_probe.py) writes under results/:
edge ablation, spectral gaps, hop counts and the diffusion map. The audit (audit.py) takes them
in order with the rest.

One model setting (d, Q = K or not) is compared at a time, seed by seed: two models under one
seed are settings, never seeds. This module reads Parquet only, so the report's job does not
import the probe's torch code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from pdelab.papers.fractional_attention import GRAPH_OUTPUTS
from pdelab.papers.fractional_attention.tables import paper_table
from pdelab.report.claims import (
    NEEDS_PAPER,
    NOT_MEASURABLE,
    Claim,
    SettingsPooled,
    all_pairs,
    difference,
    mean_text,
    measured,
    not_run,
    not_run_verdict,
    ordering,
)
from pdelab.report.declared import Declared, Kind, Runs, judgement
from pdelab.report.verdicts import fmt
from pdelab.spec.studies import Study

# The paper's words for each claim here (copied from the paper; tests check each is verbatim).
GRAPH_QUOTES = {
    "fig_4_dp": "their accuracies remain well above chance level even at  $p = 1$",
    "fig_4_fna": "without it, performance collapses to chance-level",
    "fig_a3": "We observe qualitatively similar trends in models without weight-tying, although "
    "less pronounced",
    "fig_5a": "We observe a strong correlation between the spectral gap and testing accuracy "
    "for both multiscale FNA and local attention, whereas this relationship is absent for DP",
    "gaps": "the resulting attention networks exhibit larger spectral gaps and shorter path "
    "lengths",
    "fig_5d": "the maximum shortest path lengths are 2, 6 and 14 for  $\\alpha = 1.2$ ,  "
    "$\\alpha = 2$  and DP, respectively",
    "fig_5e": "In contrast, local attention and DP require additional iterations, growing "
    "substantially with sequence length.",
    "fig_5b": "the diffusion map algorithm from geometric harmonics enables dimensionality "
    "reduction of FNA weights while preserving the intrinsic structure of embeddings and "
    "hidden states",
}
# Sec. 4's "strong correlation" prints no r: the seeds needed are sized on r = 0.5, the usual
# floor of a strong correlation
STRONG_R = 0.5


def _graph_frame(results: Path, name: str) -> pd.DataFrame:
    path = results / GRAPH_OUTPUTS[name]
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def _model(frame: pd.DataFrame, mechanism: str) -> pd.Series:
    """Rows of one mechanism as the paper draws it: FNA at its representative alpha = 1.2."""
    keep = frame["mechanism"] == mechanism
    return keep & (frame["alpha"] == 1.2) if mechanism == "fna" else keep


def _settings(frame: pd.DataFrame, tied: bool) -> list[tuple[str, int]]:
    """(task, d) of the probed models with Q = K (tied) or not, in order."""
    block = frame[frame["tied"] == tied]
    return sorted(set(zip(block["task"], block["dim"], strict=True)))


def _per_seed(frame: pd.DataFrame, column: str) -> pd.Series:
    """One model's values, one per seed (rows of one seed, e.g. its sequences, averaged); two
    models under one seed are settings, not seeds, and are refused."""
    if len(frame) and frame.groupby("seed")["variant"].nunique().max() > 1:
        raise SettingsPooled(f"{sorted(set(frame['variant']))} are settings, not seeds")
    return frame.groupby("seed")[column].mean()


def removal_claims(ablation: pd.DataFrame, profile: str) -> list[Claim]:
    """Fig 4 (Q = K) at p = 1, per d: DP above the majority rate (official null; same null for
    both), FNA at it (a null claim: the kit's equivalence to zero); Fig A3 (Q != K): DP above FNA,
    the same trend. Points over the majority rate, per seed."""
    fig4 = "Fig 4 (Q = K): at p = 1"
    if ablation.empty:
        return [
            measured(
                profile,
                f"{fig4} DP stays above chance, FNA falls to it",
                "Fig. 4",
                GRAPH_QUOTES["fig_4_dp"],
                "figure only",
                "no graph probe",
                not_run_verdict(profile),
            ),
            measured(
                profile,
                "Fig A3 (Q ≠ K): at p = 1 DP stays above FNA",
                "Fig. A3",
                GRAPH_QUOTES["fig_a3"],
                "figure only",
                "no graph probe",
                not_run_verdict(profile),
                headline=False,
            ),
        ]
    last = ablation[ablation["p"] == 1.0].assign(gain=lambda f: f["acc"] - f["majority"])
    out = []
    for task, dim in _settings(last, True):
        setting = last[(last["task"] == task) & (last["dim"] == dim) & last["tied"]]
        for mech, null, sign, text, key in (
            ("dp", "published", +1, "DP stays above chance (the official null)", "fig_4_dp"),
            (
                "dp",
                "same_null",
                +1,
                "DP stays above chance with no attention at all (same null)",
                "fig_4_dp",
            ),
            ("fna", "published", 0, "FNA (alpha = 1.2) falls to chance", "fig_4_fna"),
        ):
            block = setting[_model(setting, mech) & (setting["null"] == null)]
            gain = _per_seed(block, "gain")
            # at chance (sign 0): shown by equivalence to the majority rate, refuted off it
            interval, verdict, reason = difference(gain, None, sign, math.nan)
            out.append(
                measured(
                    profile,
                    f"{fig4} {text}, d = {dim}",
                    "Fig. 4",
                    GRAPH_QUOTES[key],
                    "figure only",
                    f"{task}: {fmt(gain.mean() * 100)} points over the majority rate",
                    (interval, verdict, reason),
                )
            )
    for task, dim in _settings(last, False):
        setting = last[(last["task"] == task) & (last["dim"] == dim) & ~last["tied"]]
        published = setting[setting["null"] == "published"]
        dp = _per_seed(published[_model(published, "dp")], "gain")
        fna = _per_seed(published[_model(published, "fna")], "gain")
        out.append(
            measured(
                profile,
                f"Fig A3 (Q ≠ K): at p = 1 DP stays above FNA (alpha = 1.2), d = {dim}",
                "Fig. A3",
                GRAPH_QUOTES["fig_a3"],
                "figure only",
                f"{task}: DP {fmt(dp.mean() * 100)}, FNA {fmt(fna.mean() * 100)} points "
                "over the majority rate",
                difference(dp, fna, +1, math.nan),
                headline=False,
            )
        )
    return out


def gap_claims(gaps: pd.DataFrame, ablation: pd.DataFrame, profile: str) -> list[Claim]:
    """Fig 5a: across trained models, the spectral gap correlates with test accuracy for FNA
    and for LA (one r per family, both must hold), and not for DP (a claim an interval
    holding zero cannot show); r within each seed over the family's settings, its interval
    over the seeds, as the kit's correlation takes it. And
    the abstract's larger gaps: FNA's gap above DP's, per setting and seed."""
    if gaps.empty:
        return [
            measured(
                profile,
                "Fig 5a: the spectral gap predicts FNA's and LA's accuracy, not DP's",
                "Fig. 5a",
                GRAPH_QUOTES["fig_5a"],
                "figure only",
                "no graph probe",
                not_run_verdict(profile),
            ),
            measured(
                profile,
                "FNA's attention graphs have larger spectral gaps than DP's",
                "Abstract",
                GRAPH_QUOTES["gaps"],
                "figure only",
                "no graph probe",
                not_run_verdict(profile),
            ),
        ]
    acc = ablation[(ablation["p"] == 0) & (ablation["null"] == "published")]
    points = gaps.merge(acc[["task", "variant", "seed", "acc"]], on=["task", "variant", "seed"])
    runs = (tuple(dict.fromkeys(points["task"])), tuple(dict.fromkeys(points["variant"])))
    out = []
    for declared in gap_declared(*runs):

        def family_points(tasks: tuple[str, ...], family: str) -> tuple[pd.Series, pd.Series]:
            block = points[points["mechanism"] == family].set_index(["task", "variant", "seed"])
            return block["gap"], block["acc"]

        judged = judgement(declared, family_points)
        words = []
        for family, (interval, _, _) in judged.parts:
            block = points[points["mechanism"] == family].set_index(["task", "variant", "seed"])
            models = int(block.groupby(level="seed").size().max()) if len(block) else 0
            words.append(
                f"{family.upper()}: mean r over seeds {fmt(interval.estimate)}, "
                f"{interval.text()} (each seed's r over its {models} models)"
            )
        sign = declared.sign
        sizing = f"; seeds needed sized on a strong r = {STRONG_R:g}" if sign else ""
        ours = "; ".join(words) + (f" (each family must hold{sizing})" if sign else "")
        out.append(judged.claim(profile, ours))
    for (task, dim, tied), setting in gaps.groupby(["task", "dim", "tied"], sort=True):
        fna = _per_seed(setting[_model(setting, "fna")], "gap")
        dp = _per_seed(setting[_model(setting, "dp")], "gap")
        if fna.empty or dp.empty:
            continue
        out.append(
            measured(
                profile,
                f"FNA (alpha = 1.2) has a larger spectral gap than DP, d = {dim}, "
                f"Q {'=' if tied else '≠'} K",
                "Abstract",
                GRAPH_QUOTES["gaps"],
                "figure only",
                f"{task}: gap FNA {fmt(fna.mean())}, DP {fmt(dp.mean())}",
                difference(fna, dp, +1, math.nan, "gap", 1.0),
            )
        )
    return out


GAP_FAMILIES = (  # Fig 5a: one correlation per family, each family its own claim's part
    (("fna", "la"), +1, "correlates with accuracy for FNA and LA"),
    (("dp",), 0, "does not correlate with accuracy for DP"),
)


def gap_declared(tasks: tuple[str, ...], variants: tuple[str, ...]) -> list[Declared]:
    """Fig 5a as declarations on the probed models (these tasks and variants): the spectral
    gap correlates with test accuracy for FNA and for LA, one r per family (pooling their
    models would read the gap between the families, FNA's larger gaps and accuracies, as a
    correlation within each), and not for DP (a null claim)."""
    return [
        Declared(
            f"Fig 5a: the spectral gap {text}",
            "Fig. 5a",
            GRAPH_QUOTES["fig_5a"],
            "figure only (a strong correlation)" if sign else "figure only (none)",
            Kind.PER_FAMILY,
            Runs(tasks, variants, "gap,acc", tuple((f, ()) for f in families)),
            sign=sign,
            effect=STRONG_R,
            settings="models",
            names={f: f.upper() for f in families},
        )
        for families, sign, text in GAP_FAMILIES
    ]


def declared(studies: Mapping[str, Study]) -> tuple[Declared, ...]:
    """Fig 5a's claims, as data: on the shallow study's runs (the models the graph probe
    reads; which family each is, the probe finds)."""
    out: list[Declared] = []
    for name, study in studies.items():
        if study.kind == "fna_shallow":
            out += [replace(d, study=name) for d in gap_declared(study.tasks, study.variants)]
    return tuple(out)


def _longest(hops: pd.DataFrame) -> pd.DataFrame:
    """Each model's rows at its longest probed sequence."""
    return hops[hops["length"] == hops.groupby("variant")["length"].transform("max")]


def _slope(frame: pd.DataFrame) -> float:
    """Mean hops gained per 100 tokens of sequence length (least squares)."""
    if frame["length"].nunique() < 2:
        return math.nan
    return float(np.polyfit(frame["length"], frame["mean_hops"], 1)[0]) * 100


def hop_claims(hops: pd.DataFrame, profile: str) -> list[Claim]:
    """Fig 5d: the maximum hop count of a sequence ordered DP > LA > FNA as printed, ours per
    seed on each Q = K model's longest probed sequence, one d at a time. Fig 5e: LA's and DP's
    hops grow with the sequence length faster than FNA's (slope per 100 tokens, per seed)."""
    paths = paper_table("fna_shortest_paths.csv")["max_shortest_path"]
    printed = {
        "DP": float(paths["dp"]),
        "LA": float(paths["la_alpha_2"]),
        "FNA": float(paths["fna_alpha_1.2"]),
    }
    paper = ", ".join(f"{k} {v:g}" for k, v in printed.items())
    where5d = "Fig 5d (Q = K): maximum shortest-path hops of a sequence, DP > LA > FNA"
    where5e = "Fig 5e (Q = K): LA's and DP's hops grow with sequence length faster than FNA's"
    if hops.empty:
        return [
            measured(
                profile,
                where5d,
                "Fig. 5d",
                GRAPH_QUOTES["fig_5d"],
                paper,
                "no graph probe",
                not_run_verdict(profile),
            ),
            measured(
                profile,
                where5e,
                "Fig. 5e",
                GRAPH_QUOTES["fig_5e"],
                "figure only",
                "no graph probe",
                not_run_verdict(profile),
            ),
        ]
    mechs = (("FNA", "fna"), ("LA", "la"), ("DP", "dp"))
    out = []
    for task, dim in _settings(hops, True):
        setting = hops[(hops["task"] == task) & (hops["dim"] == dim) & hops["tied"]]
        longest = _longest(setting)
        ours = {label: _per_seed(longest[_model(longest, m)], "max_hops") for label, m in mechs}
        interval, verdict, reason, pairs = ordering(printed, ours, "hops")
        shown = ", ".join(f"{k} {mean_text(v)}" for k, v in ours.items())
        out.append(
            measured(
                profile,
                f"{where5d}, d = {dim}",
                "Fig. 5d",
                GRAPH_QUOTES["fig_5d"],
                paper,
                f"{task}: {shown}; {pairs}",
                (interval, verdict, reason),
            )
        )
        slopes = {
            label: setting[_model(setting, m)].groupby("seed").apply(_slope).dropna()
            for label, m in mechs
        }
        judged = all_pairs(
            [
                difference(slopes[x], slopes["FNA"], +1, math.nan, "hops per 100 tokens", 1.0)
                for x in ("LA", "DP")
            ]
        )
        shown = ", ".join(f"{k} {mean_text(v)}" for k, v in slopes.items())
        out.append(
            measured(
                profile,
                f"{where5e}, d = {dim}",
                "Fig. 5e",
                GRAPH_QUOTES["fig_5e"],
                "figure only",
                f"{task}: mean hops per 100 tokens {shown}",
                judged,
            )
        )
    return out


def graph_claims(results: Path, profile: str) -> list[Claim]:
    """Figs 4, A3 and 5 from the graph probe of the trained one-layer models (graph_probe.py)."""
    ablation = _graph_frame(results, "ablation")
    return (
        removal_claims(ablation, profile)
        + gap_claims(_graph_frame(results, "gaps"), ablation, profile)
        + hop_claims(_graph_frame(results, "hops"), profile)
    )


def diffusion_map_claim(results: Path, profile: str) -> Claim:
    """The abstract's diffusion map "preserving the intrinsic structure": Fig 5b draws one map
    and the paper names no measure of the structure kept, so the map is drawn (the Fig 5
    panel), never judged."""
    drawn = (results / GRAPH_OUTPUTS["diffusion"]).exists()
    return measured(
        profile,
        "Abstract, Fig 5b: the diffusion map reduces FNA's dimension, preserving the "
        "intrinsic structure",
        "Abstract; Fig. 5b",
        GRAPH_QUOTES["fig_5b"],
        "a picture (m = 2), no measure",
        "drawn in the Fig 5 panel (b)" if drawn else "no graph probe",
        (
            None,
            NOT_MEASURABLE if drawn else NEEDS_PAPER,
            "the paper names no measure of the structure preserved" if drawn else not_run(profile),
        ),
        headline=False,
    )
