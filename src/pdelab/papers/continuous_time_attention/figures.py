"""Continuous-Time Attention's perplexity figures (Tables 3-5, App. B.4).

Input: tables.lm_frame (one row per paper row and role). Ours is drawn only where the probe
found the variant causal; a leaky variant is marked "leaks" (or drawn hatched, labelled as not
a result), never as a plain result.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from pdelab.records.atomic import atomic_path
from pdelab.report.claims import judged_profile
from pdelab.report.figures import plt

PAPER_COLOR, OURS_COLOR, LEAK_FREE_COLOR, LEAK_COLOR = "#9aa5b1", "#2f6fb0", "#2a9d5c", "#c0392b"


def profile_line(profile: str) -> str:
    """The figure's line naming the profile behind ours (one not judged: a pipeline check)."""
    if not judged_profile(profile):
        return f"ours: {profile} profile, a pipeline check, not a reproduction"
    return f"ours: {profile} profile, mean ± std over seeds"


def _result(row: pd.Series) -> bool:
    """Whether ours may be drawn as a result: finished runs, probed, and causal."""
    return bool(row["n"] > 0 and row["probed"] > 0 and row["leaky"] == 0)


def _why_not(row: pd.Series) -> str:
    if row["n"] == 0:
        return "diverged" if row["diverged"] else "no runs"
    return "leaks" if row["leaky"] else "not probed"


def _mark(ax: plt.Axes, x: float, text: str, color: str, level: int) -> None:
    """A label at data x near the bottom of the axes (level stacks several series)."""
    ax.text(
        x,
        0.02 + 0.09 * level,
        text,
        transform=ax.get_xaxis_transform(),
        ha="center",
        va="bottom",
        fontsize=6.5,
        color=color,
        fontweight="bold",
    )


def _ours_series(
    ax: plt.Axes, x: np.ndarray, rows: pd.DataFrame, label: str, color: str, style: str, level: int
) -> bool:
    """Ours as a line with error bars over the causal points; the rest marked. True if drawn."""
    ok = np.array([_result(r) for _, r in rows.iterrows()], dtype=bool)
    if ok.any():
        ax.errorbar(
            x[ok],
            rows["mean"].to_numpy()[ok],
            yerr=rows["std"].fillna(0).to_numpy()[ok],
            fmt=style,
            color=color,
            capsize=3,
            label=label,
        )
    for xi, (_, row) in zip(x[~ok], rows[~ok].iterrows(), strict=True):
        why = _why_not(row)
        name = label.removeprefix("ours ")
        _mark(ax, xi, f"{name}:\n{why}", LEAK_COLOR if why == "leaks" else color, level)
    return bool(ok.any())


def _finish_ppl(
    ax: plt.Axes,
    fig: plt.Figure,
    drawn: bool,
    title: str,
    profile: str,
    out: Path,
    leaks: str = "leaky variants marked, not plotted",
) -> None:
    """Log axis (when anything was drawn), legend, the title naming the profile; save."""
    if drawn:
        ax.set_yscale("log")
    ax.set_ylabel("test perplexity (log scale)" if drawn else "test perplexity")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    heading = textwrap.fill(title, 100)
    fig.suptitle(f"{heading}\n({profile_line(profile)}; {leaks})", fontsize=9)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def ppl_by_steps(frame: pd.DataFrame, title: str, profile: str, out: Path) -> None:
    """Table 4: perplexity against PDE steps; paper, ours as described (only if causal), ours
    leak-free; the 0-step standard Transformer as horizontal lines."""
    rows = frame[~frame["standard_row"].astype(bool)]
    keys = list(dict.fromkeys(rows["key"]))
    x = np.arange(len(keys), dtype=float)
    described = rows[rows["role"] == "as_described"].set_index("key").loc[keys]
    leak_free = rows[rows["role"] == "leak_free"].set_index("key").loc[keys]
    fig, ax = plt.subplots(figsize=(8.4, 4.4))
    paper = described["paper"].to_numpy(dtype=float)
    drawn = bool(np.isfinite(paper).any())
    ax.plot(x, paper, "o-", color=PAPER_COLOR, label="paper (PDE)")
    for xi, value, note in zip(x, paper, described["paper_note"], strict=True):
        if np.isnan(value):
            _mark(ax, xi, f"paper:\n{note.split(':')[-1].strip() or 'n/a'}", "black", 2)
    drawn |= _ours_series(ax, x - 0.05, described, "ours as described", OURS_COLOR, "s-", 0)
    drawn |= _ours_series(ax, x + 0.05, leak_free, "ours leak-free", LEAK_FREE_COLOR, "^-", 1)
    for _, row in frame[frame["standard_row"].astype(bool)].drop_duplicates("key").iterrows():
        if not np.isnan(row["paper"]):
            ax.axhline(row["paper"], color=PAPER_COLOR, ls="--", label="paper standard (0 steps)")
            drawn = True
        if _result(row):
            ax.axhline(row["mean"], color=OURS_COLOR, ls="--", label="ours standard (0 steps)")
            drawn = True
    ax.set_xticks(x, keys)
    ax.set_xlabel("PDE steps")
    _finish_ppl(ax, fig, drawn, title, profile, out)


def ppl_bars(frame: pd.DataFrame, xlabel: str, title: str, profile: str, out: Path) -> None:
    """Tables 3 and 5: grouped bars per row (paper, ours as described, ours leak-free) on a log
    axis. A leaky variant's bar is hatched and labelled "leaks": evidence, not a result."""
    keys = list(dict.fromkeys(frame["key"]))
    x = np.arange(len(keys), dtype=float)
    fig, ax = plt.subplots(figsize=(4.5 + 1.3 * len(keys), 4.4))
    block = frame.set_index(["key", "role"])
    paper = np.array([block.loc[(k, "as_described"), "paper"] for k in keys], dtype=float)
    ax.bar(x - 0.27, paper, 0.27, color=PAPER_COLOR, label="paper")
    drawn = bool(np.isfinite(paper).any())
    leak_label = "ours as described: leaks future tokens (not a result)"
    for offset, role, color, name in (
        (0.0, "as_described", OURS_COLOR, "ours as described"),
        (0.27, "leak_free", LEAK_FREE_COLOR, "ours leak-free"),
    ):
        for xi, key in zip(x + offset, keys, strict=True):
            row = block.loc[(key, role)]
            if _result(row):
                ax.bar(
                    xi,
                    row["mean"],
                    0.27,
                    yerr=np.nan_to_num(row["std"]),
                    capsize=3,
                    color=color,
                    label=name,
                )
                name = "_nolegend_"
                drawn = True
            elif row["leaky"] and row["n"] > 0:
                ax.bar(
                    xi,
                    row["mean"],
                    0.27,
                    color="white",
                    edgecolor=LEAK_COLOR,
                    hatch="//",
                    label=leak_label,
                )
                ax.text(
                    xi,
                    row["mean"],
                    "leaks",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color=LEAK_COLOR,
                    fontweight="bold",
                )
                leak_label = "_nolegend_"
                drawn = True
            else:
                _mark(ax, xi, _why_not(row), color, 0)
    ax.set_xticks(x, keys, rotation=20, ha="right")
    ax.set_xlabel(xlabel)
    _finish_ppl(ax, fig, drawn, title, profile, out, "leaky variants hatched: not results")


def ppl_by_seq_len(frame: pd.DataFrame, title: str, profile: str, out: Path) -> None:
    """Appendix B.4: perplexity against sequence length, the paper's standard and PDE lines
    beside ours (standard, as described only if causal, leak-free); log-log axes."""
    keys = sorted(dict.fromkeys(frame["key"]), key=int)
    x = np.array([int(k) for k in keys], dtype=float)
    block = frame.set_index(["key", "role"])
    fig, ax = plt.subplots(figsize=(8.4, 4.4))
    drawn = False
    for role, style, name in (
        ("standard", "o--", "paper standard"),
        ("as_described", "o-", "paper PDE"),
    ):
        paper = np.array([block.loc[(k, role), "paper"] for k in keys], dtype=float)
        have = np.isfinite(paper)
        ax.plot(x[have], paper[have], style, color=PAPER_COLOR, label=name)
        drawn |= bool(have.any())
    for level, (role, color, style, name) in enumerate(
        (
            ("standard", OURS_COLOR, "s--", "ours standard"),
            ("as_described", OURS_COLOR, "s-", "ours as described"),
            ("leak_free", LEAK_FREE_COLOR, "^-", "ours leak-free"),
        )
    ):
        rows = pd.DataFrame([block.loc[(k, role)] for k in keys])
        drawn |= _ours_series(ax, x * (1 + 0.03 * (level - 1)), rows, name, color, style, level)
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, keys)
    ax.set_xlabel("sequence length (tokens)")
    _finish_ppl(ax, fig, drawn, title, profile, out)
