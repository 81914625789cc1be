"""Linear Diffusion Networks' figures: Table 2's bars (paper beside ours), Table 1's stand-in
(parameters, MACs and accuracy, LDN against ViT) and the ablations' differences."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pdelab.records.atomic import atomic_path  # noqa: E402

PAPER_COLORS, OURS_COLORS = ("#c7ccd1", "#8c96a0"), ("#9cc3e6", "#2f6fb0")


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _mean(values) -> float:
    return float(values.mean()) if values is not None and len(values) else math.nan


def _std(values) -> float:
    return float(values.std(ddof=1)) if values is not None and len(values) > 1 else 0.0


def lra_figure(
    frame: pd.DataFrame, labels: tuple[str, str], title: str, profile: str, path: Path
) -> None:
    """Per task: the paper's two rows and ours (mean ± std over seeds)."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = np.arange(len(frame))
    ref, other = labels
    bars = [
        ("paper reference", None, f"{ref} (paper)", PAPER_COLORS[0]),
        ("paper compared", None, f"{other} (paper)", PAPER_COLORS[1]),
        ("ours reference", True, f"{ref} (ours, {profile})", OURS_COLORS[0]),
        ("ours compared", True, f"{other} (ours, {profile})", OURS_COLORS[1]),
    ]
    for i, (column, ours, label, color) in enumerate(bars):
        values = [_mean(v) for v in frame[column]] if ours else frame[column]
        errors = [_std(v) for v in frame[column]] if ours else None
        ax.bar(x + (i - 1.5) * 0.2, values, 0.2, yerr=errors, capsize=2, label=label, color=color)
    ax.set_xticks(
        x,
        [f"{t}\n({c})" for t, c in zip(frame["task"], frame["paper column"], strict=True)],
        fontsize=8,
    )
    ax.set(ylabel="test accuracy (%)", ylim=(0, 105), title=title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize=7, ncol=2)
    _save(fig, path)


def image_figure(ratios: pd.DataFrame, title: str, profile: str, path: Path) -> None:
    """LDN / ViT ratios of parameters and MACs, and the top-1 difference, paper and ours."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if len(ratios):
        labels = [
            f"{s}\n{t} {sc}"
            for s, t, sc in zip(ratios["source"], ratios["task"], ratios["scale"], strict=True)
        ]
        x = np.arange(len(ratios))
        left.bar(x - 0.2, ratios["parameters ratio"], 0.4, label="parameters", color="#2f6fb0")
        left.bar(x + 0.2, ratios["MACs ratio"], 0.4, label="MACs", color="#e07b39")
        left.axhline(1.0, color="k", lw=0.8)
        left.set_xticks(x, labels, fontsize=6, rotation=30, ha="right")
        left.legend(frameon=False, fontsize=8)
        trained = ratios[ratios["Δ top-1"].notna()]
        xt = np.arange(len(trained))
        half = (trained["high"] - trained["Δ top-1"]).fillna(0).to_numpy()
        right.bar(xt, trained["Δ top-1"], yerr=half, capsize=3, color="#2f6fb0")
        right.axhline(0.0, color="k", lw=0.8)
        right.set_xticks(
            xt,
            [
                f"{s}\n{t} {sc}"
                for s, t, sc in zip(
                    trained["source"], trained["task"], trained["scale"], strict=True
                )
            ],
            fontsize=6,
            rotation=30,
            ha="right",
        )
    left.set(title="LDN / ViT", ylabel="ratio")
    right.set(title=f"top-1 LDN − ViT (points; ours {profile}: 95% CI)", ylabel="points")
    fig.suptitle(title, fontsize=10)
    _save(fig, path)


def ablation_figure(frame: pd.DataFrame, title: str, profile: str, path: Path) -> None:
    """Each ablation's difference from the full model with its 95% interval, per task."""
    shown = frame[frame["effect"] != "reference"]
    tasks = list(dict.fromkeys(shown["task"])) or ["(none run)"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        part = shown[shown["task"] == task]
        y = np.arange(len(part))
        lower = (part["Δ"] - part["low"]).fillna(0).to_numpy()
        upper = (part["high"] - part["Δ"]).fillna(0).to_numpy()
        ax.errorbar(part["Δ"], y, xerr=[lower, upper], fmt="o", capsize=3)
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_yticks(
            y,
            [f"{v}\n({t})" for v, t in zip(part["variant"], part["terms"], strict=True)],
            fontsize=7,
        )
        ax.set(xlabel="Δ accuracy vs the full LDN (points, 95% CI)", title=f"{task} ({profile})")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    _save(fig, path)
