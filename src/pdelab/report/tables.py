"""A study's table: the paper's number beside ours (mean +/- std over seeds, n) per task.

Diverged runs are counted and shown, never silently averaged in. Markdown and LaTeX come
from the same DataFrame through tabulate.
"""

from __future__ import annotations

import math
from importlib import resources
from typing import Any

import pandas as pd
from tabulate import tabulate

PROFILE_NOTES = {
    "smoke": "smoke profile: a small CPU run that checks the pipeline; its numbers are not a "
    "reproduction of the paper",
    "paper": "paper profile: the paper's configurations on the full data",
}


def paper_table(name: str) -> pd.DataFrame:
    """A table of the papers' numbers shipped with pdelab (first column: the row name)."""
    with resources.files("pdelab.paper_tables").joinpath(name).open() as f:
        frame = pd.read_csv(f)
    return frame.set_index(frame.columns[0])


def value_stats(runs: pd.DataFrame, name: str, scale: float = 1.0) -> dict[str, Any]:
    """Mean, sample std and count of a metric over the runs that finished; diverged counted.
    A metric an older summary lacks counts as missing."""
    ok = runs[runs["status"] == "ok"]
    values = (ok[name] if name in ok else pd.Series(dtype=float)).dropna() * scale
    n = len(values)
    return {
        "mean": float(values.mean()) if n else math.nan,
        "std": float(values.std(ddof=1)) if n > 1 else math.nan,
        "n": n,
        "diverged": int((runs["status"] == "diverged").sum()),
        "runs": len(runs),
    }


def variant_runs(summary: pd.DataFrame, task: str, variant: str) -> pd.DataFrame:
    return summary[(summary["task"] == task) & (summary["variant"] == variant)]


def stand_ins(summary: pd.DataFrame) -> dict[str, str]:
    """task -> the sentence naming what stands in for the paper's data (real data: absent)."""
    if "stand_in" not in summary:
        return {}
    named = summary[summary["stand_in"].fillna("").astype(str) != ""]
    return {
        str(t): str(s) for t, s in named.groupby("task", sort=False)["stand_in"].first().items()
    }


def seed_stats(runs: pd.DataFrame) -> dict[str, Any]:
    """Test accuracy over the seeds that finished."""
    return value_stats(runs, "test_acc")


def study_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Long form: one row per (task, variant) with the paper's value and ours."""
    paper = paper_table(study["paper_table"]) if study.get("paper_table") else None
    rows = []
    for task in study["tasks"]:
        for variant in study["variants"]:
            runs = summary[(summary["task"] == task) & (summary["variant"] == variant)]
            stats = seed_stats(runs)
            value = math.nan
            if paper is not None and variant in paper.index and task in paper.columns:
                value = float(paper.loc[variant, task])
            rows.append(
                {
                    "task": task,
                    "variant": variant,
                    "paper": value,
                    **stats,
                    "diff": stats["mean"] - value,
                    "stand_in": runs["stand_in"].iloc[0]
                    if "stand_in" in runs and len(runs)
                    else "",
                }
            )
    return pd.DataFrame(rows)


def _fmt(x: float, digits: int = 4) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _ours(row: pd.Series) -> str:
    if row["n"] == 0:
        return "diverged" if row["diverged"] else "n/a"
    text = _fmt(row["mean"]) + ("" if math.isnan(row["std"]) else f" ± {_fmt(row['std'])}")
    text += f" (n={row['n']})"
    return text + (f", {row['diverged']} diverged" if row["diverged"] else "")


def render(frame: pd.DataFrame, profile: str) -> pd.DataFrame:
    """Wide, human form: a row per variant; per task the paper, ours and the difference.

    With several tasks an Average column (mean over tasks, as the paper's Table 5) follows.
    """
    out = pd.DataFrame({"variant": list(dict.fromkeys(frame["variant"]))})
    for task, block in frame.groupby("task", sort=False):
        block = block.set_index("variant").loc[out["variant"]]
        out[f"{task} paper"] = [_fmt(v) for v in block["paper"]]
        out[f"{task} ours"] = [_ours(r) for _, r in block.iterrows()]
        out[f"{task} Δ"] = ["n/a" if math.isnan(d) else f"{d:+.4f}" for d in block["diff"]]
    if frame["task"].nunique() > 1:
        avg = frame.groupby("variant", sort=False)[["paper", "mean"]].mean(numeric_only=True)
        avg = avg.loc[out["variant"]]
        out["average paper"] = [_fmt(v) for v in avg["paper"]]
        out["average ours"] = [_fmt(v) for v in avg["mean"]]
    out["profile"] = profile
    return out


def gains(frame: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Table 6 of the paper: absolute and relative gain of each variant over the baseline,
    per task, for the paper's numbers and ours."""
    rows = []
    for task, block in frame.groupby("task", sort=False):
        block = block.set_index("variant")
        if baseline not in block.index:
            continue
        base = block.loc[baseline]
        for variant, row in block.drop(index=baseline).iterrows():
            rows.append(
                {
                    "task": task,
                    "variant": variant,
                    "paper Δ": row["paper"] - base["paper"],
                    "paper %": 100 * (row["paper"] - base["paper"]) / base["paper"],
                    "ours Δ": row["mean"] - base["mean"],
                    "ours %": 100 * (row["mean"] - base["mean"]) / base["mean"],
                }
            )
    return pd.DataFrame(rows, columns=["task", "variant", "paper Δ", "paper %", "ours Δ", "ours %"])


def stand_in_note(frame: pd.DataFrame) -> str:
    """Name every stand-in dataset behind the table's numbers."""
    lines = [f"- **{t}** is a stand-in: {s}." for t, s in stand_ins(frame).items()]
    return ("\nStand-ins (not the paper's data):\n\n" + "\n".join(lines) + "\n") if lines else ""


def write_tables(frame: pd.DataFrame, title: str, profile: str, md_path, tex_path) -> None:
    """The accuracy table, then (when the study has a baseline) the gains over it."""
    wide = render(frame, profile)
    note = PROFILE_NOTES.get(profile, f"profile {profile}")
    md = tabulate(wide, headers="keys", tablefmt="github", showindex=False)
    tex = tabulate(wide, headers="keys", tablefmt="latex_booktabs", showindex=False)
    header = f"Test accuracy (fraction). Ours: {note}. Δ = ours − paper."
    md_text, tex_text = f"**{title}**\n\n{header}\n\n{md}\n", f"% {title}\n% {header}\n{tex}\n"
    md_text += stand_in_note(frame)
    gain = gains(frame)
    if len(gain):
        fmt = {
            "floatfmt": ("", "", "+.4f", "+.1f", "+.4f", "+.1f"),
            "showindex": False,
            "headers": "keys",
        }
        md_text += (
            f"\nGain over the baseline (Δ absolute, % relative; paper Table 6 beside "
            f"ours):\n\n{tabulate(gain, tablefmt='github', **fmt)}\n"
        )
        tex_text += f"\n{tabulate(gain, tablefmt='latex_booktabs', **fmt)}\n"
    md_path.write_text(md_text)
    tex_path.write_text(tex_text)


def _stats(summary: pd.DataFrame, task: str, variant: str) -> dict[str, Any]:
    return seed_stats(variant_runs(summary, task, variant))


def multiscale_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 7: each scale per position, the best single scale, the multi-scale
    gain over it; paper and ours side by side (ours: mean over seeds)."""
    paper = paper_table(study["paper_table"])
    task = study["tasks"][0]
    base = _stats(summary, task, study.get("baseline", "baseline"))
    rows = [
        {
            "position": "baseline",
            "fast_h1 paper": float(paper.loc["baseline", "fast_h1"]),
            "fast_h1 ours": base["mean"],
            "n": base["n"],
        }
    ]
    for position, scales in study["grid"].items():
        row: dict[str, Any] = {"position": position}
        singles = []
        for column, variant in scales.items():
            stats = _stats(summary, task, variant)
            row[f"{column} paper"] = float(paper.loc[position, column])
            row[f"{column} ours"] = stats["mean"]
            row["n"] = stats["n"]
            if column != "multiscale":
                singles.append(stats["mean"])
        best = max((s for s in singles if not math.isnan(s)), default=math.nan)
        row["best_single paper"] = float(paper.loc[position, "best_single"])
        row["best_single ours"] = best
        row["multiscale_gain paper"] = float(paper.loc[position, "multiscale_gain"])
        row["multiscale_gain ours"] = row.get("multiscale ours", math.nan) - best
        rows.append(row)
    return pd.DataFrame(rows)


def welch_interval(a: pd.Series, b: pd.Series, level: float = 0.95) -> tuple[float, float, float]:
    """(difference of means a - b, lower, upper): Welch's t interval; NaN bounds when either
    side has fewer than two values."""
    from scipy import stats

    a, b = a.dropna(), b.dropna()
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff, diff - half, diff + half


def seeds_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 10 (mean +/- std over seeds) plus what it lacks: each variant's
    difference from the baseline with a 95% Welch interval, and the seeds behind it."""
    paper = paper_table(study["paper_table"])
    task, baseline = study["tasks"][0], study.get("baseline", "baseline")
    ok = summary[(summary["task"] == task) & (summary["status"] == "ok")]
    base = ok[ok["variant"] == baseline]["test_acc"]
    rows = []
    for variant in study["variants"]:
        stats = _stats(summary, task, variant)
        diff, lo, hi = welch_interval(ok[ok["variant"] == variant]["test_acc"], base)
        rows.append(
            {
                "variant": variant,
                "paper mean": float(paper.loc[variant, "mean"])
                if variant in paper.index
                else math.nan,
                "paper std": float(paper.loc[variant, "std"])
                if variant in paper.index
                else math.nan,
                "ours mean": stats["mean"],
                "ours std": stats["std"],
                "n": stats["n"],
                "Δ vs baseline": diff if variant != baseline else math.nan,
                "95% CI low": lo if variant != baseline else math.nan,
                "95% CI high": hi if variant != baseline else math.nan,
            }
        )
    return pd.DataFrame(rows)


def cost_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The paper's Table 9: time and memory overhead over the baseline, measured from the
    same training runs (median step time; peak memory), as ratios of medians over seeds."""
    paper = paper_table(study["paper_table"])
    task, baseline = study["tasks"][0], study.get("baseline", "baseline")
    runs = summary[(summary["task"] == task) & (summary["status"] == "ok")]
    med = runs.groupby("variant")[["median_step_s", "peak_memory_mb"]].median()
    counts = runs.groupby("variant").size()
    kinds = ", ".join(sorted(runs["memory_kind"].unique())) if len(runs) else "n/a"
    rows = []
    for variant in study["variants"]:
        have = variant in med.index and baseline in med.index
        time_ratio = (
            med.loc[variant, "median_step_s"] / med.loc[baseline, "median_step_s"]
            if have
            else math.nan
        )
        mem_ratio = (
            med.loc[variant, "peak_memory_mb"] / med.loc[baseline, "peak_memory_mb"]
            if have
            else math.nan
        )
        rows.append(
            {
                "variant": variant,
                "paper time %": float(paper.loc[variant, "time_overhead_pct"]),
                "ours time %": 100 * (time_ratio - 1),
                "paper memory %": float(paper.loc[variant, "memory_overhead_pct"]),
                "ours memory %": 100 * (mem_ratio - 1),
                "runs": int(counts.get(variant, 0)),
                "memory measured as": kinds,
            }
        )
    return pd.DataFrame(rows)


def write_frame(
    frame: pd.DataFrame,
    title: str,
    header: str,
    md_path,
    tex_path,
    floatfmt: str = ".4f",
    numparse: bool = True,
) -> None:
    """A numeric study table as Markdown and LaTeX with its title and profile note.

    numparse=False keeps cells that are already formatted text (e.g. "+3.00") as written."""
    md = tabulate(
        frame,
        headers="keys",
        tablefmt="github",
        showindex=False,
        floatfmt=floatfmt,
        missingval="n/a",
        disable_numparse=not numparse,
    )
    tex = tabulate(
        frame,
        headers="keys",
        tablefmt="latex_booktabs",
        showindex=False,
        floatfmt=floatfmt,
        missingval="n/a",
        disable_numparse=not numparse,
    )
    md_path.write_text(f"**{title}**\n\n{header}\n\n{md.replace(' nan ', ' n/a ')}\n")
    tex_path.write_text(f"% {title}\n% {header}\n{tex}\n")
