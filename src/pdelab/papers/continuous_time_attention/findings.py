"""Continuous-Time Attention's claims judged without training: the paper's own numbers checked
against each other (perplexity = exp(loss), printed ratios), its theorems computed on the
diffusion step it writes, and the claims of tasks it never ran. These hold in any profile.

The loss/perplexity checks allow for rounding: a printed loss of 0.25 stands for any loss in
[0.245, 0.255], so its perplexity lies in [exp(0.245), exp(0.255)], and that range must meet
the printed perplexity's own rounding range.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pdelab.papers.continuous_time_attention.tables import paper_table
from pdelab.report.claims import (
    CONSISTENT,
    FAILS,
    HOLDS,
    INCONSISTENT,
    NO_EXPERIMENT,
    Claim,
    Reading,
    agreed,
    finding,
)

ALPHA = 0.10  # Table 5 / Table 11: the diffusion coefficient
MAX_STEPS = 4  # Appendix D.0.5: "the N_t <= 4 light PDE steps"


# --------------------------------------------------------------------------------------------
# Arithmetic on the paper's printed numbers
# --------------------------------------------------------------------------------------------


def _half_unit(digits: int) -> float:
    """Half the last printed digit: the rounding error of a number printed to ``digits``."""
    return 0.5 * 10.0**-digits


def exp_agrees(loss: float, ppl: float, loss_digits: int = 2, ppl_digits: int = 2) -> bool:
    """Does a printed perplexity equal exp(printed loss), within both numbers' rounding?"""
    low = math.exp(loss - _half_unit(loss_digits))
    high = math.exp(loss + _half_unit(loss_digits))
    return low <= ppl + _half_unit(ppl_digits) and ppl - _half_unit(ppl_digits) <= high


def table3_pairs() -> pd.DataFrame:
    """Table 3's loss / perplexity pairs, each with exp(loss) and whether the pair agrees."""
    table = paper_table("pde_attention_longformer_wikitext.csv").reset_index()
    table["exp_loss"] = np.exp(table["loss"].astype(float))
    table["agrees"] = [
        exp_agrees(float(loss), float(ppl))
        for loss, ppl in zip(table["loss"], table["perplexity"], strict=True)
    ]
    return table


def table3_finding() -> Claim:
    """Table 3 prints loss / perplexity pairs without saying which split either column is, and
    Fig. 7 plots training and validation loss both. Read as one split (perplexity =
    exp(loss)), 4 of 6 pairs disagree; read as a training loss beside a validation perplexity,
    every perplexity lies at or above exp(loss), as a validation perplexity does: ambiguous
    as printed."""
    pairs = table3_pairs()
    bad = pairs[~pairs["agrees"]]
    listed = "; ".join(
        f"{r.model} epoch {r.epoch}: exp({r.loss:.2f}) = {r.exp_loss:.3f} vs {r.perplexity:.2f}"
        for r in bad.itertuples()
    )
    above = [
        float(r.perplexity) + 0.005 >= float(r.exp_loss) for r in pairs.itertuples()
    ]  # at or above exp(loss), within the perplexity's rounding
    one_split = Reading(
        "both columns one split (perplexity = exp(loss))",
        f"{len(bad)} of {len(pairs)} pairs disagree beyond rounding: {listed}"
        if len(bad)
        else "every pair agrees within rounding",
        INCONSISTENT if len(bad) else CONSISTENT,
    )
    two_splits = Reading(
        "a training loss beside a validation perplexity (Fig. 7 plots both)",
        f"{sum(above)} of {len(pairs)} perplexities at or above exp(loss), as a validation "
        "perplexity beside a training loss would be",
        CONSISTENT if all(above) else INCONSISTENT,
    )
    readings = [one_split, two_splits]
    return finding(
        "Table 3's losses and perplexities agree",
        "Table 3",
        "Loss / PPL",
        "; ".join(
            f"{r.model} epoch {r.epoch}: {r.loss:.2f} / {r.perplexity:.2f}"
            for r in pairs.itertuples()
        ),
        "the paper does not say which split the loss and the perplexity columns are.",
        agreed(readings),
        readings=readings,
    )


def table13_finding() -> Claim:
    """Table 13 prints a loss in percent that matches neither perplexity nor their order."""
    table = paper_table("pde_attention_corrected_wikitext.csv")
    std, pde = table.loc["standard_transformer"], table.loc["pde_1_step"]
    ln_std, ln_pde = math.log(float(std["perplexity"])), math.log(float(pde["perplexity"]))
    agrees = all(
        exp_agrees(float(row["loss_pct"]) / scale, float(row["perplexity"]), 3, 2)
        for row in (std, pde)
        for scale in (1.0, 100.0)
    )
    order = (float(std["loss_pct"]) < float(pde["loss_pct"])) != (
        float(std["perplexity"]) < float(pde["perplexity"])
    )
    ratio = float(std["perplexity"]) / float(pde["perplexity"])
    return finding(
        "Table 13's loss column matches its perplexities (perplexity = exp(loss))",
        "Table 13 (App. C.1)",
        "The corrected results are reported in Table 13.",
        f"standard: ppl {std['perplexity']:,}, loss {std['loss_pct']}%; PDE-1 step: ppl "
        f"{pde['perplexity']}, loss {pde['loss_pct']}%",
        f"ln ppl is {ln_std:.2f} (standard) and {ln_pde:.2f} (PDE), matching no reading of "
        f"the printed losses (as fractions or as numbers)"
        + (
            f"; the loss ranks the standard model better while its perplexity is "
            f"{ratio:,.0f}x worse"
            if order
            else ""
        ),
        CONSISTENT if agrees and not order else INCONSISTENT,
    )


def c6_finding() -> Claim:
    """C.6's final losses and perplexities agree with each other and with the printed ratio,
    but neither matches any table's configuration or number."""
    pde_loss, pde_ppl, std_loss, std_ppl = 0.61, 1.83, 9.95, 20990.31
    agrees = exp_agrees(pde_loss, pde_ppl) and exp_agrees(std_loss, std_ppl)
    ratio = std_ppl / pde_ppl
    steps = paper_table("pde_attention_steps_wikitext.csv")["perplexity"]
    types = paper_table("pde_attention_types_wikitext.csv")["perplexity"]
    seq = paper_table("pde_attention_seq_length_wikitext.csv")
    others = (
        f"standard elsewhere: {steps[0]:,} (Table 4), {types['standard']:,} (Table 5), "
        f"{seq.loc[256, 'standard_perplexity']:,}-{seq.loc[1024, 'standard_perplexity']:,} "
        "(B.4)"
    )
    return finding(
        "PDE-Transformer 1.83 vs standard Transformer 20,990.31 perplexity, an improvement "
        "exceeding 11,000 times",
        "App. C.6, Fig. 16",
        "PDE-Transformer achieves a final loss of 0.61 and a perplexity of 1.83",
        f"loss {pde_loss} / ppl {pde_ppl} vs loss {std_loss} / ppl {std_ppl:,}; > 11,000x",
        f"exp(loss) agrees with both perplexities within rounding; ratio {ratio:,.0f}x; no "
        f"configuration is given and the numbers match no table ({others})",
        CONSISTENT if agrees and ratio > 11000 else INCONSISTENT,
    )


def cost_findings() -> list[Claim]:
    """Tables 14-16: the printed ratios recomputed from the printed costs, and the FLOP count
    that is identical to the last digit although the PDE update adds arithmetic."""
    cost = paper_table("pde_attention_cost.csv")
    pde, std = cost.loc["pde_transformer"], cost.loc["standard_transformer"]
    printed = {  # Table 15-16's ratio columns
        "train_s_per_epoch": 1.04,
        "infer_s_per_epoch": 1.44,
        "train_mem_mb": 1.01,
        "infer_mem_mb": 0.99,
    }
    ratios = {name: float(pde[name]) / float(std[name]) for name in printed}
    agree = all(abs(ratios[n] - printed[n]) <= 0.005 + 1e-9 for n in printed)
    flops_same = int(pde["flops"]) == int(std["flops"])
    return [
        finding(
            "Tables 15-16's ratios follow from their times and memories",
            "Tables 15-16 (App. C.2)",
            "Training time is comparable",
            ", ".join(f"{n}: {printed[n]:.2f}x" for n in printed),
            ", ".join(f"{n}: {ratios[n]:.3f}x" for n in printed),
            CONSISTENT if agree else INCONSISTENT,
        ),
        finding(
            "PDE attention costs the same FLOPs as standard attention",
            "Table 14 (App. C.2)",
            "FLOPs are identical",
            f"{int(pde['flops']):,} vs {int(std['flops']):,} (1.00x)",
            "identical to the last digit, yet each PDE step adds at least one multiply-add "
            "per attention entry (T^2 per head, layer and step): the count cannot include the "
            "PDE update"
            if flops_same
            else "the counts differ",
            INCONSISTENT if flops_same else CONSISTENT,
        ),
    ]


# --------------------------------------------------------------------------------------------
# The theorems, computed on the diffusion step the paper writes (Eq. 22)
# --------------------------------------------------------------------------------------------


def diffuse(row: np.ndarray, alpha: float, steps: int, dt: float = 1.0) -> list[np.ndarray]:
    """Eq. 22's explicit steps A += dt alpha laplacian(A) on one row, zero-flux ends (ds = 1);
    the row after each step, the first being the input."""
    out = [row.astype(float)]
    for _ in range(steps):
        a = out[-1]
        padded = np.pad(a, 1, mode="edge")
        out.append(a + dt * alpha * (padded[2:] - 2 * a + padded[:-2]))
    return out


def reach(alpha: float = ALPHA, steps: int = MAX_STEPS, length: int = 65) -> tuple[int, float]:
    """How far N_t explicit steps move attention weight: (the farthest token that receives
    any weight from a one-hot, the standard deviation of the spread in tokens)."""
    centre = length // 2
    row = np.zeros(length)
    row[centre] = 1.0
    final = diffuse(row, alpha, steps)[-1]
    offsets = np.arange(length) - centre
    farthest = int(np.abs(offsets[final > 0]).max())
    return farthest, float(math.sqrt((final * offsets**2).sum()))


def smoothing(
    alpha: float = ALPHA, steps: int = MAX_STEPS, length: int = 64, rows: int = 200
) -> tuple[bool, float, float]:
    """Theorem 2 on softmax rows of random logits: (do the roughness ||lap A||^2 and the
    variance of A fall at every step, the mean share of roughness and of variance left after
    the steps)."""
    rng = np.random.default_rng(0)
    monotone, rough_left, var_left = True, [], []
    for _ in range(rows):
        logits = rng.normal(size=length)
        a0 = np.exp(logits) / np.exp(logits).sum()
        path = diffuse(a0, alpha, steps)
        rough = [float((np.diff(np.pad(a, 1, mode="edge"), 2) ** 2).sum()) for a in path]
        var = [float(a.var()) for a in path]
        monotone &= all(b <= a + 1e-15 for a, b in zip(rough, rough[1:], strict=False))
        monotone &= all(b <= a + 1e-15 for a, b in zip(var, var[1:], strict=False))
        rough_left.append(rough[-1] / rough[0])
        var_left.append(var[-1] / var[0])
    return monotone, float(np.mean(rough_left)), float(np.mean(var_left))


def theorem_findings() -> list[Claim]:
    farthest, spread = reach()
    monotone, rough_left, var_left = smoothing()
    return [
        finding(
            "Theorem 1: PDE attention propagates information across distant tokens; "
            "long-range dependencies decay only polynomially",
            "Sec. 4.0.1; Theorem D.1",
            "PDE-guided attention improves information propagation across distant sequence "
            "elements",
            "interaction range grows with sqrt(t); v_eff = Ω(t^1/2)",
            f"Eq. 22 at the paper's alpha = {ALPHA} and N_t = {MAX_STEPS} (dt = ds = 1; the "
            f"paper gives no dt): weight moves at most {farthest} tokens (exactly none "
            f"beyond) with a spread of {spread:.2f} tokens = sqrt(2 alpha N_t); the range grows "
            "as sqrt(t), so its speed falls as t^-1/2, and the heat kernel falls as "
            "exp(-d^2 / 4 alpha t) in distance d, faster than exponentially",
            FAILS,
            "the diffusion's own kernel, exp(-d^2 / 4 alpha t), falls faster than "
            "exponentially in distance d, at any dt",
        ),
        finding(
            "Theorem 2: over pseudo-time the attention becomes smoother and more consistent",
            "Sec. 4.0.2; Theorem D.2",
            "becomes smoother and more consistent, avoiding abrupt changes and isolated peaks",
            "S_h(t), C_h(t) bounded by decaying exponentials",
            f"Eq. 22 on 200 softmax rows of 64 random logits (alpha = {ALPHA}, zero-flux): "
            f"roughness ||lap A||^2 and variance {'fall' if monotone else 'do not all fall'} "
            f"at every step; after {MAX_STEPS} steps {100 * rough_left:.0f} % of the roughness "
            f"and {100 * var_left:.0f} % of the variance are left",
            HOLDS if monotone else FAILS,
            "diffusion only; the reaction term is not checked",
        ),
        finding(
            "Theorem 3: PDE constraints give faster convergence",
            "Sec. 4.0.3; Theorem D.3",
            "PDE constraints lead to better-conditioned optimization landscapes, resulting in "
            "faster and more stable convergence",
            "(1 - eta gamma)^t under a PL condition",
            "the proof's own step (ii) keeps the rate of plain gradient descent under PL, "
            '"leaving the rate (1 − ηγ) unchanged": it shows no faster convergence',
            INCONSISTENT,
            "the proof gives the same rate as without the PDE",
        ),
    ]


# --------------------------------------------------------------------------------------------
# Claims of tasks the paper never ran
# --------------------------------------------------------------------------------------------

NO_EXPERIMENT_CLAIMS = (
    (
        "PDE attention outperforms standard and long-sequence Transformers on machine translation",
        "Sec. 1.3",
        "including machine translation",
    ),
    (
        "PDE attention outperforms them on long-document question answering",
        "Sec. 1.3; Conclusion",
        "long-document question answering",
    ),
    (
        "PDE attention outperforms them on time-series forecasting",
        "Sec. 1.3; Conclusion",
        "time-series forecasting",
    ),
    (
        "PDE attention outperforms them especially on inputs over 10,000 tokens",
        "Sec. 1.3",
        "especially on ultra-long inputs exceeding 10,000 tokens",
    ),
)


def no_experiment_findings() -> list[Claim]:
    """Rows for the benchmarks the paper claims but never reports (its longest input is
    Table 2's 2,048 characters; its tasks are classification and WikiText-103)."""
    return [
        finding(
            claim,
            where,
            quote,
            "no table, figure or number",
            "the paper's experiments are text classification (Tables 1-2) and WikiText-103 "
            "language modelling (Tables 3-5, 13; App. B.4) at 2,048 tokens at most",
            NO_EXPERIMENT,
        )
        for claim, where, quote in NO_EXPERIMENT_CLAIMS
    ]


def gradient_bound_finding() -> Claim:
    """Theorem D.1 (3): a gradient bound independent of depth L and length N. The paper
    measures no gradient against L or N, and its sketch's step (v) argues from a reference
    our copy prints as "(??)"; pdelab does not compute a bound either."""
    return finding(
        "Theorem D.1 (3): the back-propagated gradient is bounded independently of L and N",
        "App. D.0.1, Theorem D.1 (3)",
        "for a constant  $C > 0$  independent of  $L$  and  $N$",
        "||∇L|| ≤ C",
        "no gradient is measured against depth or length in the paper, and none here; the "
        "sketch's step (v) points to a reference our copy of the text prints as '(??)'",
        NO_EXPERIMENT,
    )


def runtime_finding() -> Claim:
    """The conclusion's "near-linear runtime": near-linear for the sparse and kernel hybrids
    (App. D's count, O(N_t N) added to O(N) attention), not for the PDE-Transformer on
    standard attention, whose T x T matrix each PDE step touches entry by entry (O(N_t N^2)).
    Which models the sentence means it does not say: ambiguous as printed."""
    readings = [
        Reading(
            "every model, the PDE-Transformer on standard attention included",
            "each PDE step updates all N² attention entries per head and layer, on top of "
            "O(N²) attention: quadratic",
            INCONSISTENT,
        ),
        Reading(
            "the sparse and kernel hybrids (Longformer, Performer)",
            "O(N) attention plus N_t ≤ 4 steps of O(N) each (App. D's count): near-linear",
            CONSISTENT,
        ),
    ]
    return finding(
        "The PDE refinement preserves near-linear runtime",
        "Conclusion; App. D (Complexity)",
        "while preserving near-linear runtime",
        "near-linear (no timing against N)",
        "counted from the update as printed; no runtime against N is measured in the paper.",
        agreed(readings),
        readings=readings,
    )


def findings() -> list[Claim]:
    """Every finding of this paper, in the paper's order of sections."""
    return [
        *no_experiment_findings(),
        *theorem_findings(),
        gradient_bound_finding(),
        runtime_finding(),
        table3_finding(),
        table13_finding(),
        *cost_findings(),
        c6_finding(),
    ]
