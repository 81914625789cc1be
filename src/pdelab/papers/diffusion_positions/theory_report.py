"""The Layer I checks as the report shows them: a six-panel figure, a Markdown table, a CLI.

``python -m pdelab.papers.diffusion_positions.theory_report --out FIG.png --table TABLE.md``
writes both; the numbers come from :mod:`pdelab.papers.diffusion_positions.theory`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pdelab.models.diffusion import laplacian_matrix
from pdelab.papers.diffusion_positions.theory import (
    BUDGET,
    ENERGY_CONFIGS,
    FREQUENCY_CONFIGS,
    band_energy,
    contraction_check,
    energy_decay,
    energy_dissipation_check,
    energy_gain_table,
    frequency_response,
    frequency_response_closed,
    kappa_closed_form,
    neumann_eigenvalues,
    replicate_padding_check,
    replicate_padding_summary,
    roughness_bound_check,
    spectrum_check,
)
from pdelab.records.atomic import atomic_path
from pdelab.report import tidy
from pdelab.report.table_file import Grid, TableFile


def plot_theory(path: str | Path) -> Path:
    """Six panels: spectrum, kappa, energy decay, frequency response, replicate padding,
    worst-case stride-1 energy gain. Numeric values as markers, closed forms as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes[0, 0]
    n = 32
    ax.plot(neumann_eigenvalues(n), "-", label=r"$-4\sin^2(\pi k/2L)$")
    ax.plot(torch.linalg.eigvalsh(laplacian_matrix(n, 1)).numpy(), "o", ms=3, label="eig")
    ax.set(title=f"(a) spectrum of $\\Delta_N$, L={n}", xlabel="k", ylabel=r"$\lambda_k$")
    ax.legend()

    ax = axes[0, 1]
    grid = np.linspace(0.0, 0.5, 101)
    table = contraction_check(np.linspace(0.05, 0.5, 10), (4, 16, 64))
    for n in (4, 16, 64):
        closed = [1 - kappa_closed_form(a, n) for a in grid]
        (line,) = ax.semilogy(grid[1:], closed[1:], label=f"L={n}")
        part = table[table["L"] == n]
        ax.semilogy(part["alpha"], 1 - part["kappa"], "o", ms=3, color=line.get_color())
    ax.set(
        title=r"(b) contraction gap $1-\kappa(\alpha, L)$ off the mean",
        xlabel=r"$\alpha$",
        ylabel=r"$1-\max_{k\geq1}|1-4\alpha\sin^2(\pi k/2L)|$",
    )
    ax.legend()

    ax = axes[0, 2]
    decay = energy_decay()
    for name, part in decay.groupby("config", sort=False):
        ax.semilogy(part["step"], part["mean_ratio"], label=name)
    ax.set(title=r"(c) energy decay $E(S^t x)/E(x)$, L=64", xlabel="step t")
    ax.legend(fontsize=8)

    ax = axes[1, 0]
    for name, (strides, alphas) in FREQUENCY_CONFIGS.items():
        resp = frequency_response(strides, alphas, np.linspace(0, np.pi, 33))
        dense = np.linspace(0, np.pi, 400)
        (line,) = ax.plot(dense, frequency_response_closed(dense, strides, alphas), label=name)
        ax.plot(resp["omega"], resp["numeric"], "o", ms=3, color=line.get_color())
    ax.set(
        title=rf"(d) frequency response, $\sum\alpha={BUDGET}$",
        xlabel=r"$\omega$",
        ylabel=r"$1-4\sum\alpha_k\sin^2(\omega h_k/2)$",
    )
    ax.legend(fontsize=8)

    ax = axes[1, 1]
    rep = replicate_padding_check((2, 3, 4), np.linspace(0.01, 0.499, 20), (16,), powers=1)
    for h, part in rep.groupby("h"):
        ax.plot(part["alpha"], part["replicate_norm"], "o-", ms=3, label=f"replicate, h={h}")
    ax.plot(rep["alpha"], rep["graph_norm"], "k--", label="graph Laplacian, h=2,3,4")
    ax.set(title=r"(e) $\|I+\alpha R_h\|_2$, L=16", xlabel=r"$\alpha$")
    ax.legend(fontsize=8)

    ax = axes[1, 2]
    lengths = (5, 8, 12, 16, 24, 32, 64, 128)
    gains = energy_gain_table(ENERGY_CONFIGS, lengths)
    for name, row in gains.iterrows():
        ax.plot(lengths, row.values, "o-", ms=3, label=name)
    ax.axhline(1, color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set(title=r"(f) worst case $E(Sx)/E(x)$ (stride-1 energy)", xlabel="L")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def theory_tables() -> dict[str, pd.DataFrame]:
    """The key numbers, one DataFrame per check."""
    spectrum = spectrum_check()
    contraction = contraction_check()
    subset = contraction[
        contraction["alpha"].isin([0.1, 0.25, 0.49, 0.5]) & contraction["L"].isin([2, 16, 256])
    ]
    energy = energy_dissipation_check()
    decay = energy_decay()
    last = decay[decay["step"] == decay["step"].max()].set_index("config")
    energy = energy.set_index("config")
    energy["E after 50 steps / E0 (mean)"] = last["mean_ratio"]
    energy["monotone over 50 steps"] = last["monotone"]
    freq_rows = []
    for name, (strides, alphas) in FREQUENCY_CONFIGS.items():
        resp = frequency_response(strides, alphas)
        freq_rows.append(
            {
                "config": name,
                "alphas": str(alphas),
                "max |numeric - closed|": float(resp["abs_error"].max()),
                "max interior residual": float(resp["residual"].max()),
                "H(pi)": float(frequency_response_closed(np.pi, strides, alphas)),
                "min H": float(resp["closed"].min()),
                **{f"band {b} mean H^2": v for b, v in band_energy(strides, alphas).items()},
            }
        )
    return {
        "Spectrum of the Neumann Laplacian vs -4 sin^2(pi k / 2L)": spectrum,
        "Non-expansiveness and contraction off the mean (subset; full grid max error "
        f"{contraction['abs_error'].max():.1e}, max ||S||_2 - 1 "
        f"{contraction['norm'].max() - 1:.1e})": subset,
        "Dirichlet energy E (stride 1), L=64, random x": energy.reset_index(),
        "Worst-case stride-1 energy gain sup E(Sx)/E(x)": energy_gain_table().reset_index(),
        "Frequency response, numeric (interior of L=512) vs closed form": pd.DataFrame(freq_rows),
        "Replicate-padded strided Laplacian R_h vs pdelab's graph Laplacian (alpha < 1/2)": (
            replicate_padding_summary(replicate_padding_check())
        ),
        "Eq. 37: sup ||Delta_N z|| / sqrt(2 E(z)) (paper: <= 1)": roughness_bound_check(),
    }


def theory_data(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The checks' numbers in long form (pdelab.report.tidy): task = the check (its title up
    to the first comma or colon), variant = the row's labels and the column, metric "value"
    (dimensionless, as every quantity here is); booleans as 1 or 0."""
    rows = []
    for title, frame in tables.items():
        check = re.split(r"[,:(]", title, maxsplit=1)[0].strip()
        labels = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
        keys = [c for c in frame.columns if c in ("L", "alpha", "config", "stride", "h")]
        for r in frame.to_dict("records"):  # each column's own type: L=2, not L=2.0
            label = ", ".join(f"{k}={r[k]}" for k in dict.fromkeys([*keys, *labels]))
            for column in frame.columns:
                value = r[column]
                if column in keys or column in labels:
                    continue
                where = f"{label}: {column}" if label else str(column)
                rows.append(tidy.row("theory", check, where, "value", float(value)))
    return tidy.frame(rows)


def write_table(path: str | Path, tables: dict[str, pd.DataFrame] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tables = theory_tables() if tables is None else tables
    table = TableFile(
        ["# Layer I theory checks (python -m pdelab.papers.diffusion_positions.theory_report)"],
        theory_data(tables),
    )
    for title, frame in tables.items():
        table.add(f"## {title}", Grid(frame, floatfmt=".4g", dialect="pipe"))
    table.write(path, None, None)  # no trained model; the page is what the report shows
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Layer I checks of the PDE diffusion step.")
    p.add_argument("--out", default="results/figures/theory.png", help="figure (PNG)")
    p.add_argument("--table", default="results/tables/theory.md", help="Markdown table")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # small dense problems: threads only add overhead
    print(plot_theory(args.out))
    print(write_table(args.table))


if __name__ == "__main__":
    main()
