"""The diagnostics' figure (roughness across depth, commutators across layers, both against
accuracy) and correlation table, written from measured rows and the runs' summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pdelab.papers.diffusion_positions.diagnostics_measures import REFERENCE_ALPHA
from pdelab.papers.diffusion_positions.diagnostics_stats import (
    FEATURES,
    accuracy_deltas,
    correlations,
    variant_features,
)
from pdelab.records.atomic import atomic_path
from pdelab.report import tidy
from pdelab.report.table_file import Grid, TableFile

STUDY = "diagnostics"  # the tidy CSV's study (pdelab.report.tidy)
# each feature of a model -> its metric in the tidy CSV
FEATURE_METRICS = {
    "roughness_mean": "roughness",
    "roughness_scalefree_mean": "roughness_scalefree",
    "commutator_exact_rel": "commutator_exact",
    "commutator_linear_rel": "commutator_linear",
    "site_roughness_baseline": "site_roughness_baseline",
}


def table_file(frame: pd.DataFrame, title: str = "", floatfmt: str = ".3f") -> TableFile:
    """A DataFrame (e.g. correlations) as a report table under its title; NaN reads n/a."""
    return TableFile([*([f"**{title}**"] if title else []), Grid(frame, floatfmt=floatfmt)])


def plot(
    diag: pd.DataFrame, summary: pd.DataFrame, out_png: Path, baseline: str = "baseline"
) -> None:
    """Per task: roughness across depth and the relative commutator (alpha = 0.1) across layers,
    one line per variant (seed mean; rings mark where the variant diffuses); bottom row: each
    variant's diagnostics against its test-accuracy change from the baseline, all tasks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(diag["task"].unique())
    variants = list(dict.fromkeys(diag["variant"]))
    colors = {v: plt.get_cmap("tab10")(i % 10) for i, v in enumerate(variants)}
    fig = plt.figure(figsize=(14, 3.6 * (len(tasks) + 1)))
    grid = fig.add_gridspec(len(tasks) + 1, 3)
    ref = "commutator_exact_ref_rel"
    for row, task in enumerate(tasks):
        ax_r, ax_c = fig.add_subplot(grid[row, :2]), fig.add_subplot(grid[row, 2])
        block = diag[diag["task"] == task]
        for variant in variants:
            v = block[block["variant"] == variant]
            if v.empty:
                continue
            r = v.groupby("depth").agg(
                roughness=("roughness", "mean"), active=("site_active", "any")
            )
            ax_r.plot(r.index, r["roughness"], "-o", ms=3, color=colors[variant], label=variant)
            hit = r[r["active"]]
            ax_r.scatter(
                hit.index, hit["roughness"], s=70, facecolors="none", edgecolors=[colors[variant]]
            )
            c = v.drop_duplicates(["seed", "layer"]).groupby("layer")[ref].mean()
            ax_c.plot(c.index, c.values, "-o", ms=3, color=colors[variant], label=variant)
        ticks = block.drop_duplicates("depth").sort_values("depth")
        ax_r.set_xticks(
            ticks["depth"],
            [
                p if p == "embedding" else f"L{j}.{p}"
                for j, p in zip(ticks["layer"], ticks["point"], strict=True)
            ],
            rotation=60,
            ha="right",
            fontsize=7,
        )
        ax_r.set_yscale("log")
        ax_r.set_ylabel("roughness E / (pairs x d)")
        ax_r.set_title(f"{task}: roughness across depth (before each site's diffusion)")
        ax_c.set_xticks(sorted(block["layer"].unique()))
        ax_c.set_xlabel("layer")
        ax_c.set_ylabel("||[S, A]X|| / ||A(X)||")
        ax_c.set_title(f"{task}: exact commutator, alpha = {REFERENCE_ALPHA}")
        for ax in (ax_r, ax_c):
            ax.grid(alpha=0.3)
        ax_r.legend(fontsize=7, ncol=2)
    feats = variant_features(diag, baseline).merge(
        accuracy_deltas(summary, baseline), on=["task", "variant"]
    )
    corr = correlations(diag, summary, baseline).query("scope == 'all'").set_index("feature")
    for col, feature in enumerate(
        ("roughness_mean", "commutator_exact_rel", "site_roughness_baseline")
    ):
        ax = fig.add_subplot(grid[len(tasks), col])
        for variant, v in feats.groupby("variant"):
            ax.scatter(v[feature], 100 * v["delta_acc"], color=colors.get(variant), label=variant)
        c = corr.loc[feature]
        ax.set_title(
            f"all tasks: Pearson {c['pearson']:.2f}, Spearman {c['spearman']:.2f} "
            f"(within-seed r, mean over {c['seeds']} seeds)",
            fontsize=9,
        )
        ax.set_xlabel(FEATURES[feature], fontsize=8)
        ax.set_ylabel("test acc - baseline (points)")
        ax.axhline(0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def diagnostics_data(
    diag: pd.DataFrame, summary: pd.DataFrame, baseline: str = "baseline"
) -> pd.DataFrame:
    """The table's numbers in long form (pdelab.report.tidy): each correlation (task: its
    scope, a task or all; variant: the feature) with its 95% interval and the seeds behind it,
    then each model's features and test-accuracy change from the baseline (points), their mean,
    interval and n over the seeds."""
    rows = []
    numbers = correlations(diag, summary, baseline, shown=False)
    for r in numbers.to_dict("records"):
        for name in ("pearson", "spearman"):
            low, high = r[f"{name}_low"], r[f"{name}_high"]
            rows.append(
                tidy.row(STUDY, r["scope"], r["feature"], name, r[name], low, high, r["seeds"])
            )
    models = variant_features(diag, baseline).merge(
        accuracy_deltas(summary, baseline), on=["task", "variant", "seed"], how="left"
    )
    models["delta_acc"] = models["delta_acc"] * 100  # points (pdelab.report.tidy.UNITS)
    metrics = FEATURE_METRICS | {"delta_acc": "accuracy_gain"}
    for (task, variant), block in models.groupby(["task", "variant"], sort=False):
        for column, metric in metrics.items():
            if block[column].notna().any():  # the baseline has no change from itself
                rows.append(tidy.over_seeds(STUDY, task, variant, metric, block[column]))
    return tidy.frame(rows)


def write_outputs(
    diag: pd.DataFrame,
    summary: pd.DataFrame,
    png: Path | None,
    table: Path | None,
    baseline: str = "baseline",
) -> None:
    """The figure and/or the correlation table, whichever has a path."""
    if png:
        plot(diag, summary, png, baseline)
    if table:
        profiles = sorted(summary["profile"].dropna().unique()) if "profile" in summary else []
        made = table_file(correlations(diag, summary, baseline), table_title(summary))
        made.data = diagnostics_data(diag, summary, baseline)  # the CSV beside the table
        made.write(table, None, ", ".join(profiles) or "unrecorded")  # the page: what it shows


def table_title(summary: pd.DataFrame) -> str:
    """The correlation table's title: which profile's models, what the points are, and that
    it checks the measurements rather than supporting the paper."""
    profiles = sorted(summary["profile"].dropna().unique()) if "profile" in summary else []
    made = f"{', '.join(profiles)} profile" if profiles else "profile not recorded"
    scope = (
        "Few models per task: a correlation here describes them, it does not test a cause."
        if profiles == ["paper"]
        else "A pipeline check: these models are not the paper's, and no correlation here "
        "supports or refutes its Layer III argument."
    )
    return (
        f"Diagnostics against test-accuracy change from the baseline ({made}; each r computed "
        "within one seed over that seed's models, its mean and 95% interval over the seeds). "
        f"{scope}"
    )
