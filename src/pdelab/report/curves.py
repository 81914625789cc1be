"""Learning curves: did each variant train at all? Per study, the validation metric against
epoch, per task a panel, per variant the mean over seeds with a band from the lowest to the
highest seed.

The aggregate step collects every run's metrics.parquet into results/curves.parquet (one row
per run and epoch, a variant that shares another's trained run given a copy under its own
name, as in the summary); each study's figure is figures/<study>_curves.png, drawn by the
study's job and shown in REPORT.md under the study's table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from pdelab.records.run import write_parquet  # noqa: E402

RunKey = tuple[str, str, int]  # (task, variant, seed)
# the validation metric a task's curve shows: perplexity where the task has one (language
# models, translation), else accuracy
METRICS = (("val_ppl", "validation perplexity"), ("val_acc", "validation accuracy"))


def collect(
    run_dirs: Iterable[Path | str], out: Path, same_run: Mapping[RunKey, str] | None = None
) -> pd.DataFrame:
    """Every run's epochs (metrics.parquet) in one frame, written to ``out``; ``same_run``:
    (task, variant, seed) of a repeated variant -> the variant trained for it."""
    frames = [pd.read_parquet(Path(d) / "metrics.parquet") for d in run_dirs]
    curves = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    copies = []
    for (task, variant, seed), trained in (same_run or {}).items():
        rows = curves[
            (curves["task"] == task) & (curves["variant"] == trained) & (curves["seed"] == seed)
        ]
        copies.append(rows.assign(variant=variant))
    curves = pd.concat([curves, *copies], ignore_index=True) if copies else curves
    write_parquet(curves, out)
    return curves


def metric_of(curves: pd.DataFrame) -> tuple[str, str] | None:
    """The (column, label) a task's curves show, or None when its runs have neither."""
    for column, label in METRICS:
        if column in curves and curves[column].notna().any():
            return column, label
    return None


def band(curves: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per epoch: mean, lowest and highest over seeds, and how many seeds reached it."""
    grouped = curves.dropna(subset=[column]).groupby("epoch")[column]
    return pd.DataFrame(
        {"mean": grouped.mean(), "low": grouped.min(), "high": grouped.max(), "n": grouped.size()}
    )


def curves_figure(
    curves: pd.DataFrame,
    tasks: list[str],
    variants: list[str],
    title: str,
    profile: str,
    out: Path,
) -> None:
    """One panel per task: each variant's validation metric against epoch, mean over seeds
    with the seeds' range as a band."""
    tasks = [t for t in tasks if (curves["task"] == t).any()] if len(curves) else []
    fig, axes = plt.subplots(
        1, max(len(tasks), 1), figsize=(max(6.0, 4.6 * len(tasks)), 4.0), squeeze=False
    )
    if not tasks:
        axes[0][0].text(0.5, 0.5, "no trained runs", ha="center", va="center")
        axes[0][0].set_axis_off()
    colors = plt.get_cmap("tab10")
    for ax, task in zip(axes[0], tasks, strict=False):
        block = curves[curves["task"] == task]
        found = metric_of(block)
        if found is None:
            ax.text(0.5, 0.5, f"{task}: no validation metric", ha="center", va="center")
            continue
        column, label = found
        for i, variant in enumerate(v for v in variants if (block["variant"] == v).any()):
            line = band(block[block["variant"] == variant], column)
            if line.empty:
                continue
            n = int(line["n"].max())
            color = colors(i % 10)
            label_n = f"{variant} (n={n})"
            ax.plot(line.index, line["mean"], marker="o", ms=3, color=color, label=label_n)
            ax.fill_between(line.index, line["low"], line["high"], color=color, alpha=0.15)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"{title}: learning curves (mean over seeds, band: lowest to highest seed; "
        f"{profile} profile)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
