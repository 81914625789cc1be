"""The mechanisms figure: accuracy against step time, one panel per task run, each mechanism a
point at its means with ± std bars over seeds."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pdelab.records.atomic import atomic_path  # noqa: E402


def _std(values: pd.Series) -> float:
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def accuracy_vs_step(frame: pd.DataFrame, title: str, profile: str, path: Path) -> None:
    """Per task: accuracy (%) against the step time (ms) timed interleaved in one process."""
    run = frame[frame["seeds"] > 0]
    tasks = list(dict.fromkeys(run["task"])) or ["(none run)"]
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(max(7.5, 5.2 * len(tasks)), 4.4), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        for r in run[run["task"] == task].itertuples():
            acc = r.test_acc
            ax.errorbar(
                r.step_ms,
                acc.mean(),
                yerr=_std(acc),
                fmt="o",
                capsize=3,
                label=r.mechanism,
            )
        ax.set(
            xlabel="training step (ms, timed interleaved in one process)",
            ylabel="test accuracy (%)",
            title=f"{task} ({profile})",
        )
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
