"""Figs 2a-c of Fractional Neural Attention as the report shows them: the claims with verdicts,
the tables behind them (Markdown, LaTeX, CSV) and two figures. No trained model is involved.

``python -m pdelab.papers.fractional_attention.theory_report --out-dir results`` writes the
files named in OUTPUTS under the out dir; the numbers come from spectrum.py and toy_graph.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pdelab.papers.fractional_attention import THEORY_OUTPUTS
from pdelab.papers.fractional_attention.spectrum import (
    EPS,
    FIT_RANGE,
    N_POINTS,
    TOLERANCE,
    fit_slope,
    laplacian_eigenvalues,
    local_slopes,
)
from pdelab.papers.fractional_attention.toy_graph import (
    THRESHOLD,
    ClusterLinks,
    cluster_links,
    toy_attention,
    toy_tokens,
)
from pdelab.report import tidy
from pdelab.report.claims import AMBIGUOUS, Reading, agreed, readings_cell
from pdelab.report.table_file import Grid, TableFile

OUTPUTS = THEORY_OUTPUTS  # the package declares them, torch-free, for the workflow
STUDY = "fna_theory"  # the tidy CSV's study (pdelab.report.tidy)
SPECTRUM = "Fig 2a: S^1 spectrum"  # the tidy rows' settings
TOY = "Fig 2b/c: toy graph"
ALPHAS = (1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
PAPER_ALPHA = 1.2  # the alpha < 2 of Figs 2a-c
SENSITIVITY_RANGES = ((2, 20), (10, 50), (2, 100))
# The fit ranges Fig 2a's verdict is read under: the paper fits no range (it draws the guides
# j^alpha, j^2 over the whole index), so each range this report lists is a reading, and the
# verdict is the one they agree on, or ambiguous naming which range gives which.
FIT_RANGES = (FIT_RANGE, *SENSITIVITY_RANGES)
REFINE = 4  # the convergence check: n x 4 points, sqrt(eps) / 4 (the kernel/grid ratio kept)


def exponent(alpha: float) -> float:
    """The exponent the paper predicts for lambda_j: alpha below 2, 2 (Weyl's law) at 2."""
    return alpha if alpha < 2 else 2.0


def slope_word(slope: float, alpha: float, tolerance: float = TOLERANCE) -> str:
    """agrees within the tolerance; "partly" for an alpha < 2 slope off alpha but still nearer
    j^alpha than j^2 (the contrast Fig 2a draws); disagrees otherwise."""
    if abs(slope - exponent(alpha)) <= tolerance:
        return "agrees"
    if alpha < 2 and abs(slope - alpha) < abs(slope - 2.0):
        return "partly"
    return "disagrees"


def slope_verdict(slope: float, alpha: float, tolerance: float = TOLERANCE) -> str:
    """:func:`slope_word`, a "partly" with how far the slope is from alpha."""
    word = slope_word(slope, alpha, tolerance)
    if word == "partly":
        return f"partly: nearer j^{alpha:g} than j^2, off by {slope - alpha:+.2f}"
    return word


def range_name(lo: int, hi: int) -> str:
    return f"even j={lo}-{hi}"


def slope_readings(slopes: dict[tuple[int, int], float], alpha: float) -> list[Reading]:
    """One reading per fit range (:data:`FIT_RANGES`): the slope over it and its verdict."""
    return [
        Reading(range_name(lo, hi), f"slope {slope:.3f}", slope_word(slope, alpha))
        for (lo, hi), slope in slopes.items()
    ]


def which_reading(readings: list[Reading]) -> str:
    """Which fit ranges give which verdict: ``agrees over even j=2-50, 2-20; partly over ...``."""
    by_verdict: dict[str, list[str]] = {}
    for r in readings:
        by_verdict.setdefault(r.verdict, []).append(r.name.removeprefix("even j="))
    return "; ".join(f"{v} over even j={', '.join(names)}" for v, names in by_verdict.items())


def robust_verdict(readings: list[Reading], slope: float, alpha: float) -> str:
    """The sweep's verdict: the stated range's (with how far a "partly" is off) where every fit
    range agrees; where they disagree, ambiguous, naming which range gives which."""
    if agreed(readings) == AMBIGUOUS:
        return f"{AMBIGUOUS}: {which_reading(readings)}"
    return slope_verdict(slope, alpha)


def range_slopes(row: pd.Series | dict) -> dict[tuple[int, int], float]:
    """A sweep row's slope over each fit range of :data:`FIT_RANGES`."""
    lo, hi = FIT_RANGE
    found = {FIT_RANGE: float(row[f"slope j={lo}-{hi}"])}
    return found | {(a, b): float(row[f"j={a}-{b}"]) for a, b in SENSITIVITY_RANGES}


def spectrum_table(alphas: Sequence[float] = ALPHAS, refine: int = REFINE) -> pd.DataFrame:
    """Per alpha: the slope over FIT_RANGE on the paper's grid, how it moves with the fit range,
    the verdict every fit range agrees on (or ambiguous, naming which), and the slope with
    every j fitted, without the duplicated endpoint and on a grid refined `refine` times
    (refine <= 1 leaves that column out)."""
    lo, hi = FIT_RANGE
    rows = []
    for alpha in alphas:
        lam = laplacian_eigenvalues(alpha)
        slope = fit_slope(lam).slope
        row = {
            "alpha": alpha,
            "law": f"j^{exponent(alpha):g}",
            f"slope j={lo}-{hi}": slope,
            "slope - exponent": slope - exponent(alpha),
        }
        for a, b in SENSITIVITY_RANGES:
            row[f"j={a}-{b}"] = fit_slope(lam, a, b).slope
        row["verdict"] = robust_verdict(slope_readings(range_slopes(row), alpha), slope, alpha)
        row["every j"] = fit_slope(lam, pairs_only=False).slope
        row["no endpoint"] = fit_slope(laplacian_eigenvalues(alpha, endpoint=False)).slope
        if refine > 1:
            fine = laplacian_eigenvalues(alpha, N_POINTS * refine, EPS / refine**2)
            row[f"n={N_POINTS * refine}, eps={EPS / refine**2:.3g}"] = fit_slope(fine).slope
        rows.append(row)
    return pd.DataFrame(rows)


def spectrum_display(spectrum: pd.DataFrame) -> pd.DataFrame:
    """The sweep as the tables print it: slopes to 3 decimals, the offset signed."""
    shown = spectrum.copy()
    for col in shown.columns:
        if col == "alpha":
            shown[col] = [f"{a:g}" for a in shown[col]]
        elif col == "slope - exponent":
            shown[col] = [f"{x:+.3f}" for x in shown[col]]
        elif shown[col].dtype.kind == "f":
            shown[col] = [f"{x:.3f}" for x in shown[col]]
    return shown


def spectrum_finding(spectrum: pd.DataFrame) -> str:
    """One sentence on the sweep: how far the alpha < 2 slopes fall from alpha, on the paper's
    grid and, when it was computed, on the refined one."""
    col = next(c for c in spectrum.columns if c.startswith("slope j="))
    fine = next((c for c in spectrum.columns if c.startswith("n=")), None)
    frac = spectrum[spectrum["alpha"] < 2]
    if frac.empty:
        return ""
    parts = [
        f"{r['alpha']:g}: {r[col]:.3f}" + (f" -> {r[fine]:.3f}" if fine else "")
        for _, r in frac.iterrows()
    ]
    where = f" (paper's grid -> {fine})" if fine else ""
    return f"Slopes at alpha < 2{where}: " + "; ".join(parts) + "."


def toy_links() -> list[ClusterLinks]:
    """The edges of Fig 2b (alpha = 1.2) and Fig 2c (alpha = 2) on the same 18 tokens."""
    points, labels = toy_tokens()
    return [
        cluster_links(toy_attention(points, alpha), labels, alpha) for alpha in (PAPER_ALPHA, 2.0)
    ]


def toy_table(links: list[ClusterLinks]) -> pd.DataFrame:
    """Edges as counts out of the possible pairs, so 'all' and 'none' read at a glance."""
    return pd.DataFrame(
        {
            "alpha": [f"{x.alpha:g}" for x in links],
            "intra-cluster edges": [f"{x.intra_edges}/{x.intra_pairs}" for x in links],
            "inter-cluster edges": [f"{x.inter_edges}/{x.inter_pairs}" for x in links],
            "intra mass": [f"{x.intra_mass:.3g}" for x in links],
            "inter mass": [f"{x.inter_mass:.3g}" for x in links],
            "self mass": [f"{x.self_mass:.3g}" for x in links],
        }
    )


def claims(spectrum: pd.DataFrame, links: list[ClusterLinks]) -> pd.DataFrame:
    """One row per claim of Figs 2a-c: the paper's statement, ours, the criterion, a verdict."""
    lo, hi = FIT_RANGE
    col = f"slope j={lo}-{hi}"
    rows = []
    for alpha in (PAPER_ALPHA, 2.0):
        row = spectrum[np.isclose(spectrum["alpha"], alpha)].iloc[0]
        readings = slope_readings(range_slopes(row), alpha)
        verdict = agreed(readings)
        ranges = ", ".join(f"{a}-{b}" for a, b in FIT_RANGES)
        criterion = f"slope within {TOLERANCE:g} of {exponent(alpha):g} over each fit range "
        criterion += f"(even j={ranges})"
        if verdict == AMBIGUOUS:
            criterion += f": the fit range decides ({which_reading(readings)})"
        rows.append(
            {
                "figure": "2a",
                "claim": f"S^1 spectrum of FNA at alpha={alpha:g} scales as j^{exponent(alpha):g}",
                "paper": f"lambda_j ~ j^{exponent(alpha):g}",
                "ours": f"slope {row[col]:.3f} (even j={lo}..{hi})",
                "value": row[col],
                "criterion": criterion,
                "verdict": verdict,
                "readings": readings_cell(readings),
            }
        )
    points, _ = toy_tokens()
    smallest = float(toy_attention(points, PAPER_ALPHA).min())
    rows.append(
        {
            "figure": "2b",
            "claim": "the threshold is the smallest alpha=1.2 weight (same 18 points as the paper)",
            "paper": f"{THRESHOLD:.3g}",
            "ours": f"{smallest:.5g}",
            "value": smallest,
            "criterion": "equal to the 3 digits printed",
            "verdict": "agrees" if f"{smallest:.3g}" == f"{THRESHOLD:.3g}" else "disagrees",
        }
    )
    fna, local = links
    rows.append(
        {
            "figure": "2b",
            "claim": "alpha=1.2 links tokens within and across clusters",
            "paper": "inter- and intra-cluster edges",
            "ours": f"{fna.inter_edges}/{fna.inter_pairs} inter, "
            f"{fna.intra_edges}/{fna.intra_pairs} intra",
            "value": fna.inter_edges,
            "criterion": f"inter- and intra-cluster edges above {THRESHOLD:.3g}",
            "verdict": "agrees" if fna.inter_edges > 0 and fna.intra_edges > 0 else "disagrees",
        }
    )
    rows.append(
        {
            "figure": "2c",
            "claim": "alpha=2 links tokens within clusters only",
            "paper": "intra-cluster edges only",
            "ours": f"{local.inter_edges}/{local.inter_pairs} inter, "
            f"{local.intra_edges}/{local.intra_pairs} intra",
            "value": local.inter_edges,
            "criterion": f"no inter-cluster edge above {THRESHOLD:.3g}, some intra",
            "verdict": "agrees"
            if local.inter_edges == 0 and local.intra_edges > 0
            else "disagrees",
        }
    )
    return pd.DataFrame(rows).assign(readings=lambda t: t["readings"].fillna(""))


def plot_spectrum(path: Path, alphas: Sequence[float] = ALPHAS) -> Path:
    """(a) lambda_j against j in log-log with the paper's guides j^alpha and j^2 (no prefactor,
    as in the paper); (b) the local slope against j beside each alpha: where the power law holds
    and where the finite grid bends it. The fit range is shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(alphas)))
    j = np.arange(1, N_POINTS + 1)
    for alpha, color in zip(alphas, colors, strict=True):
        lam = laplacian_eigenvalues(alpha)  # from j = 2: lambda_1 = 0 up to rounding
        axes[0].loglog(j[1:], lam[1:], color=color, label=rf"$\alpha={alpha:g}$")
        axes[0].loglog(j, j ** exponent(alpha), color=color, ls="--", lw=0.8, alpha=0.7)
        mid, slope = local_slopes(lam)
        axes[1].semilogx(mid, slope, color=color, label=rf"$\alpha={alpha:g}$")
        axes[1].axhline(exponent(alpha), color=color, ls=":", lw=0.8)
    for ax in axes:  # the official x range: the last index is the duplicated endpoint's 0
        ax.axvspan(*FIT_RANGE, color="0.9", zorder=0)
        ax.set(xlabel="index j", xlim=(1, N_POINTS - 30))
    axes[0].set(
        ylim=(0.1, 1e5),
        ylabel=r"$\lambda_j=-\log\eta_j/\varepsilon^{\alpha/2}$",
        title=f"(a) FNA on $S^1$, n={N_POINTS}, "
        + rf"$\varepsilon$={EPS:g}; dashed: $j^\alpha$, $j^2$",
    )
    axes[1].set(
        ylim=(0, 2.3),
        ylabel=r"local slope $d\log\lambda/d\log j$ (even j)",
        title="(b) local slope; dotted: the predicted exponent",
    )
    axes[0].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_toy_graph(path: Path) -> Path:
    """The 18 tokens with an edge i -> j (i != j) of width 10.8 M_ij wherever M_ij exceeds the
    threshold, at alpha = 1.2 and 2, as Fig 2b/c draws them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, _ = toy_tokens()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, alpha, color, tag in zip(
        axes, (PAPER_ALPHA, 2.0), ("#2E63A6", "#A4292F"), "bc", strict=True
    ):
        m = toy_attention(points, alpha)
        for i, k in zip(*np.nonzero(m > THRESHOLD), strict=True):
            if i != k:
                ax.plot(*points[[i, k]].T, color=color, lw=0.6 * len(points) * m[i, k], zorder=1)
        ax.scatter(*points.T, s=18, c="grey", edgecolors="k", lw=0.4, zorder=2)
        ax.set_title(f"({tag}) alpha = {alpha:g}: edges with weight > {THRESHOLD:.3g}")
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


SPECTRUM_NOTE = (
    f"FNA attention on n={N_POINTS} points of S^1 (W_Q = W_K = I, H = 1, kappa = sqrt(eps), "
    f"eps = {EPS:g}, d = 1), lambda_j = -log(eta_j) / eps^(alpha/2). Slopes are least-squares "
    "fits of log lambda_j on log j over the even j of the range (one eigenvalue per cos/sin "
    f"pair); a slope agrees within {TOLERANCE:g} of the exponent. The paper fits no range: the "
    "verdict is the one every listed fit range gives, else ambiguous naming which. Sensitivity: "
    "other ranges, "
    "every j (the pairs' staircase bends the slope up), n distinct points instead of the "
    "official duplicated endpoint, and a grid refined with the kernel/grid ratio kept."
)
TOY_NOTE = (
    "18 tokens, six from each of N((3,0), I/4), N((-3,0), I/4), N((0,sqrt 3), I/4) "
    "(np.random.seed(2)); Q = K = X, eps = 0.1, d = 2. Edges: i != j with weight above "
    f"{THRESHOLD:.3g}; mass: mean per row of the weight on those edges; self mass: the mean "
    "diagonal weight (kept, not drawn)."
)


def theory_data(
    spectrum: pd.DataFrame, links: list[ClusterLinks], claim_rows: pd.DataFrame
) -> pd.DataFrame:
    """The tables' numbers in long form (pdelab.report.tidy): each slope of the sweep (task:
    the spectrum and how it was fitted, variant: alpha) beside the exponent the paper predicts,
    the toy graph's edges and masses per alpha, and each claim's value and verdict (1 agrees,
    0 disagrees, empty otherwise)."""
    rows = []
    fits = [
        c for c in spectrum.columns if c.startswith(("slope j=", "j=", "every j", "no end", "n="))
    ]
    for record in spectrum.to_dict("records"):
        alpha = f"alpha={record['alpha']:g}"
        predicted = exponent(record["alpha"])
        for fit in fits:
            setting = f"{SPECTRUM}, {fit.removeprefix('slope ')}"
            rows.append(tidy.row(STUDY, setting, alpha, "slope", record[fit], paper=predicted))
    for x in links:
        alpha = f"alpha={x.alpha:g}"
        counts = {
            "intra-cluster edges": x.intra_edges,
            "inter-cluster edges": x.inter_edges,
            "intra-cluster pairs": x.intra_pairs,
            "inter-cluster pairs": x.inter_pairs,
        }
        masses = {"intra mass": x.intra_mass, "inter mass": x.inter_mass, "self mass": x.self_mass}
        for name, value in counts.items():
            rows.append(tidy.row(STUDY, f"{TOY}, {name}", alpha, "count", value))
        for name, value in masses.items():
            rows.append(tidy.row(STUDY, f"{TOY}, {name}", alpha, "value", value))
    for claim in claim_rows.to_dict("records"):
        setting, item = f"claims, Fig {claim['figure']}", claim["claim"]
        rows.append(tidy.row(STUDY, setting, item, "value", claim["value"]))
        rows.append(tidy.row(STUDY, setting, item, "holds", tidy.verdict_number(claim["verdict"])))
    return tidy.frame(rows)


def write_tables(
    out_dir: Path, spectrum: pd.DataFrame, links: list[ClusterLinks], claim_rows: pd.DataFrame
) -> list[Path]:
    """The claims, the spectrum sweep and the toy graph, as Markdown and LaTeX, their numbers
    as a tidy CSV; the claims with their verdicts also as the CSV the audit reads."""
    shown = claim_rows.drop(columns=["value", "readings"])
    sections = [
        ("Fractional Neural Attention, Figs 2a-c: claims", "", shown),
        (
            "Fig 2a: log-log slope of the S^1 spectrum",
            f"{SPECTRUM_NOTE} {spectrum_finding(spectrum)}",
            spectrum_display(spectrum),
        ),
        ("Fig 2b/c: the three-cluster toy graph", TOY_NOTE, toy_table(links)),
    ]
    table = TableFile(data=theory_data(spectrum, links, claim_rows))
    for i, (title, note, frame) in enumerate(sections):  # cells are formatted text already
        caption = f"{title}. {note}" if note else f"{title}."
        grid = Grid(frame, caption, str(i) if i else "", numparse=False)
        table.add(f"**{title}**", *([note] if note else []), grid)
    paths = [out_dir / OUTPUTS[k] for k in ("table", "tex", "claims")]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    # no trained model: the page beside the Markdown, what Snakemake's report shows, says so
    table.write(paths[0], paths[1], None)
    claim_rows.to_csv(paths[2], index=False)
    return paths


def build(out_dir: Path, alphas: Sequence[float] = ALPHAS, refine: int = REFINE) -> list[Path]:
    """Every output of OUTPUTS under out_dir."""
    if PAPER_ALPHA not in alphas or 2.0 not in alphas:
        raise ValueError(f"alphas must include {PAPER_ALPHA} and 2 (the paper's), got {alphas}")
    spectrum = spectrum_table(alphas, refine)
    links = toy_links()
    paths = write_tables(out_dir, spectrum, links, claims(spectrum, links))
    paths.append(plot_spectrum(out_dir / OUTPUTS["spectrum"], alphas))
    paths.append(plot_toy_graph(out_dir / OUTPUTS["toy_graph"]))
    return paths


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Figs 2a-c of Fractional Neural Attention.")
    p.add_argument("--out-dir", type=Path, default=Path("results"), help="results folder")
    p.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS))
    p.add_argument(
        "--refine", type=int, default=REFINE, help="grid refinement of the check (1: none)"
    )
    args = p.parse_args(argv)
    for path in build(args.out_dir, args.alphas, args.refine):
        print(path)


if __name__ == "__main__":
    main()
