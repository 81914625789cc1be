"""Fractional Neural Attention's figures: bars of the paper's accuracy beside ours with the
training curves (Figs 6-7), accuracy against d (Fig 3), and the ablations."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from pdelab.report.figures import task_label  # noqa: E402

PAPER_COLOR, OURS_COLOR = "#9aa5b1", "#2f6fb0"


def _bars(ax, block: pd.DataFrame, title: str, profile: str, label: str) -> None:
    x = np.arange(len(block))
    ax.bar(x - 0.2, block["paper mean"], 0.4, label="paper", color=PAPER_COLOR)
    ax.bar(
        x + 0.2,
        block["ours mean"],
        0.4,
        yerr=block["ours std"].fillna(0),
        capsize=3,
        label=f"ours ({profile})",
        color=OURS_COLOR,
    )
    ax.set_xticks(x, block["label"], rotation=35, ha="right")
    ax.set(ylabel=label, title=title)
    if "%" in label:
        ax.set_ylim(0, 105)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize=8, loc="lower right")


def _curves(ax, curves: pd.DataFrame, frame: pd.DataFrame, task: str, column: str) -> None:
    """A validation score per epoch (accuracy, teacher-forced BLEU): the median over seeds
    with a +/- std shade (as the paper draws its curves, which show test accuracy)."""
    scale = 100 if column == "val_acc" else 1
    for _, row in frame[frame["task"] == task].iterrows():
        runs = curves[(curves["task"] == task) & (curves["variant"] == row["variant"])]
        if runs.empty:
            continue
        if column not in runs:
            continue
        by_epoch = runs.groupby("epoch")[column]
        median, std = by_epoch.median() * scale, by_epoch.std().fillna(0) * scale
        line = ax.plot(median.index, median, label=row["label"])[0]
        shade = {"alpha": 0.15, "color": line.get_color()}
        ax.fill_between(median.index, median - std, median + std, **shade)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="epoch",
        ylabel="validation accuracy (%)" if column == "val_acc" else f"validation {column[4:]}",
        title=f"{task}: median over seeds ± std",
    )
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=7)


def accuracy_figure(
    frame: pd.DataFrame,
    curves: pd.DataFrame,
    summary: pd.DataFrame,
    title: str,
    profile: str,
    out: Path,
    metric: dict[str, str] | None = None,
) -> None:
    """Per task: the paper's score beside ours (mean, std over seeds), and the curves."""
    metric = metric or {"label": "test accuracy (%)", "curve": "val_acc"}
    tasks = list(dict.fromkeys(frame["task"])) or ["(none)"]
    fig, axes = plt.subplots(len(tasks), 2, figsize=(12, 4.3 * len(tasks)), squeeze=False)
    for (bars, lines), task in zip(axes, tasks, strict=True):
        block = frame[frame["task"] == task]
        _bars(bars, block, task_label(summary, task), profile, metric["label"])
        _curves(lines, curves, frame, task, metric["curve"])
    fig.suptitle(f"{title}\n(ours: {profile} profile)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def shallow_figure(frame: pd.DataFrame, title: str, profile: str, out: Path) -> None:
    """Fig 3: accuracy against d per mechanism, one panel per (task, depth, Q = K or not)."""
    panels = list(dict.fromkeys(zip(frame["task"], frame["panel"], strict=True))) or [("", "")]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(8, 5 * len(panels)), 4.3), squeeze=False)
    colors = plt.get_cmap("viridis")
    for ax, (task, name) in zip(axes[0], panels, strict=True):
        block = frame[(frame["task"] == task) & (frame["panel"] == name)]
        for mech, cells in block.groupby("mechanism", sort=False):
            cells = cells.sort_values("dim")
            alpha = cells["alpha"].iloc[0]
            color = "black" if alpha > 2 else colors((alpha - 1.0) / 1.1)
            ax.errorbar(
                cells["dim"],
                cells["mean"],
                yerr=cells["std"].fillna(0),
                marker="o",
                capsize=3,
                label=mech,
                color=color,
            )
        ax.set_xscale("log", base=2)
        ax.set(xlabel="embedding dimension d", ylabel="test accuracy (%)", title=f"{task} {name}")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=7)
    fig.suptitle(f"{title}\n(ours: {profile} profile, mean ± std over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def ablation_figure(frame: pd.DataFrame, title: str, profile: str, out: Path) -> None:
    """Each ablation's difference (ablated - reference, points) with its 95% interval."""
    fig, ax = plt.subplots(figsize=(max(7.0, 1.8 + 1.4 * len(frame)), 4))
    if len(frame):
        x = np.arange(len(frame))
        low = (frame["diff"] - frame["low"]).fillna(0).clip(lower=0)
        high = (frame["high"] - frame["diff"]).fillna(0).clip(lower=0)
        ax.errorbar(x, frame["diff"], yerr=[low, high], fmt="o", capsize=4, color=OURS_COLOR)
        labels = [f"{r.task}\n{r.ablation}" for r in frame.itertuples()]
        ax.set_xticks(x, labels, fontsize=8)
    ax.axhline(0, color="black", lw=0.6)
    ax.set(
        ylabel="ablated − reference (points, 95% interval)",
        title=f"{textwrap.fill(title, 70)}\n(ours: {profile} profile)",
    )
    ax.title.set_fontsize(9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
