"""Figures: accuracy by variant, the paper's bars beside ours (error bars: std over seeds);
tasks and variants by their display names, as in the LaTeX tables."""

from __future__ import annotations

from pathlib import Path

import matplotlib

from pdelab.records.atomic import atomic_path
from pdelab.spec.display_names import display_name

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def task_label(frame: pd.DataFrame, task: str) -> str:
    """The task's name, marked when a stand-in replaced the paper's data."""
    runs = frame[frame["task"] == task]
    stand_in = "stand_in" in runs and runs["stand_in"].fillna("").astype(bool).any()
    name = display_name(task)  # the paper's name for it (pdelab.spec.display_names)
    return f"{name} (stand-in)" if stand_in else name


def accuracy_by_variant(
    frame: pd.DataFrame, title: str, profile: str, out: Path, ylabel: str = "test accuracy"
) -> None:
    tasks = list(dict.fromkeys(frame["task"]))
    cols = min(3, len(tasks))  # the paper's Figure 4: one panel per task, three to a row
    rows = -(-len(tasks) // cols)
    width = 1.2 + 0.9 * frame["variant"].nunique()
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(tasks) :]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks, strict=False):
        block = frame[frame["task"] == task]
        x = np.arange(len(block))
        ax.bar(x - 0.2, block["paper"], 0.4, label="paper", color="#9aa5b1")
        ax.bar(
            x + 0.2,
            block["mean"],
            0.4,
            yerr=block["std"].fillna(0),
            capsize=3,
            label=f"ours ({profile})",
            color="#2f6fb0",
        )
        ax.set_xticks(x, [display_name(v) for v in block["variant"]], rotation=35, ha="right")
        ax.set_title(task_label(frame, task))
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(
            0,
            1.25
            * np.nanmax(
                [block["paper"].max(), (block["mean"] + block["std"].fillna(0)).max(), 0.1]
            ),
        )
    axes[0][0].legend(loc="upper center", ncol=2, frameon=False)
    fig.suptitle(f"{title}\n(ours: {profile} profile, mean ± std over seeds)", fontsize=10)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def heatmap(frame: pd.DataFrame, title: str, profile: str, out: Path) -> None:
    """Variants x tasks, the paper's accuracies beside ours (the paper's Figure 5)."""
    variants = list(dict.fromkeys(frame["variant"]))
    tasks = list(dict.fromkeys(frame["task"]))
    fig, axes = plt.subplots(1, 2, figsize=(2.5 + 2.2 * len(tasks), 1.2 + 0.45 * len(variants)))
    for ax, column, name in zip(
        axes, ["paper", "mean"], ["paper", f"ours ({profile})"], strict=True
    ):
        grid = frame.pivot(index="variant", columns="task", values=column).loc[variants, tasks]
        image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto")
        ax.set_xticks(
            range(len(tasks)), [task_label(frame, t) for t in tasks], rotation=30, ha="right"
        )
        ax.set_yticks(range(len(variants)), [display_name(v) for v in variants])
        for (i, j), value in np.ndenumerate(grid.to_numpy(dtype=float)):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.3f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_title(name)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def paired_bars(
    labels: list[str],
    paper: list[float],
    ours: list[float],
    ylabel: str,
    title: str,
    profile: str,
    out: Path,
    errors: list[float] | None = None,
) -> None:
    """One bar pair (paper, ours) per label: the simple figure of the multiscale, seeds and
    cost studies."""
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(labels), 4.2))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, paper, 0.4, label="paper", color="#9aa5b1")
    ax.bar(x + 0.2, ours, 0.4, yerr=errors, capsize=3, label=f"ours ({profile})", color="#2f6fb0")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(x, labels, rotation=35, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False)
    ax.set_title(f"{title}\n(ours: {profile} profile)", fontsize=10)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
