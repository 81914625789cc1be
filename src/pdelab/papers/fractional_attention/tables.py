"""Fractional Neural Attention's tables: the paper's numbers beside ours, accuracy in percent.

* ``fna_accuracy`` (Tables I and III, the ViT of Fig 7): per paper row (FNA, LA, DP, each
  general and op) the mean, median, best and worst test accuracy over seeds, ours beside the
  paper's where it prints them.
* ``fna_shallow`` (Fig 3): accuracy per cell (layers, Q = K or not, mechanism, d). The cells
  come from the specs the runs trained (RUNS_FILE), so a cell says what was trained.
* ``fna_ablation``: a variant as the paper describes it beside one that changes one thing,
  with the difference and its 95% t interval over seeds: paired t where both share their seeds,
  Welch's otherwise (:func:`pdelab.report.stats.seed_interval`).

A study names the variants of its full grid; a profile may train part of it
(``profiles.<profile>.studies``): what was not trained reads "not run in this profile".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pdelab.report import tables, tidy
from pdelab.report.claims import NOT_RUN, change_effect
from pdelab.report.stats import seed_interval, value_stats
from pdelab.report.tables import variant_runs
from pdelab.report.verdicts import fmt, interval_text, profile_note, stand_in_text

STATS = ("mean", "median", "best", "worst")
NOT_PRINTED = "not printed"
MEASURED_AT = "Ours: test accuracy at each run's best-validation epoch (the paper: the last epoch)."
# A study's ``metric`` (default test_acc): the result column, its scale into the table's unit,
# what the table calls it, and the per-epoch column its curves draw.
METRICS = {
    "test_acc": {"scale": 100.0, "label": "test accuracy (%)", "curve": "val_acc"},
    "test_bleu": {"scale": 1.0, "label": "greedy test BLEU", "curve": "val_tf_bleu"},
    "test_tf_bleu": {"scale": 1.0, "label": "teacher-forced test BLEU", "curve": "val_tf_bleu"},
}


# The alpha of each paper row (FNA and LA, general or op; DP has none): the paper's text and
# table notes (Tables I-III, Fig 7: FNA alpha = 1.2, LA alpha = 2).
PAPER_ALPHA = {"fna": 1.2, "la": 2.0}


def paper_alpha(row: str) -> float:
    return PAPER_ALPHA.get(row.removeprefix("op_"), math.nan)


def trained_alpha(runs: pd.DataFrame | None, task: str, variant: str) -> float:
    """The alpha a variant's runs trained, from their resolved specs (RUNS_FILE); NaN for a
    softmax kernel or when no run of it is recorded."""
    if runs is None or runs.empty or "alpha" not in runs:
        return math.nan
    values = runs[(runs["task"] == task) & (runs["variant"] == variant)]["alpha"].dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def alpha_text(alpha: float) -> str:
    return "" if math.isnan(alpha) else f"{alpha:g}"


def metric_of(study: dict[str, Any]) -> str:
    return study.get("metric", "test_acc")


def paper_table(name: str) -> pd.DataFrame:
    """One of this paper's tables (paper_tables/ beside this file)."""
    return tables.paper_table(__package__, name)


def paper_rows(name: str) -> pd.DataFrame:
    """A paper table as rows fna, la, dp, op_fna, ... with the columns of STATS (NaN where the
    paper prints none) and its note. The CIFAR-10 table keys op by a column and prints means
    only; it is brought to the same form."""
    paper = paper_table(name)
    if "bleu_general" in paper:  # Table II: one row per mechanism, general and op as columns
        general = paper[["bleu_general"]].set_axis(["mean"], axis=1)
        op = paper[["bleu_orthogonal"]].set_axis(["mean"], axis=1)
        paper = pd.concat([general, op.set_axis([f"op_{m}" for m in op.index])])
    if "orthogonal" in paper:
        op = paper["orthogonal"] == "yes"
        keys = [f"op_{m}" if o else m for m, o in zip(paper.index, op, strict=True)]
        paper = paper.set_axis(keys).rename(columns={"mean_accuracy": "mean"})
    out = pd.DataFrame(index=paper.index)
    for name_ in STATS:
        out[name_] = paper[name_].astype(float) if name_ in paper else math.nan
    out["note"] = paper["note"].fillna("").astype(str) if "note" in paper else ""
    return out


# a study's metric -> what the tidy CSV calls it (pdelab.report.tidy.METRIC_OF); teacher-forced
# BLEU is not the greedy BLEU the paper prints
TIDY_METRICS = {"test_acc": "accuracy", "test_bleu": "bleu"}
TIDY_STATS = {"mean": "", "median": "_median", "best": "_best", "worst": "_worst"}


def paper_numbers(study: dict[str, Any]) -> pd.DataFrame | None:
    """An fna_accuracy study's paper numbers as tidy rows (pdelab.report.tidy), under our task
    and variant names as its table sets them side by side: per row of the paper the mean, and
    for accuracy the median, best and worst it prints."""
    metric = TIDY_METRICS.get(metric_of(study))
    if metric is None or not study.get("paper_table") or not study.get("rows"):
        return None
    paper = paper_rows(study["paper_table"])
    rows = []
    for row, variant in study["rows"].items():
        if row not in paper.index:
            continue
        for stat, suffix in TIDY_STATS.items():
            name = f"{metric}{suffix}"
            value = float(paper.loc[row, stat])
            if name not in tidy.UNITS or math.isnan(value):
                continue
            for task in study["tasks"]:
                rows.append(tidy.paper_row(task, variant, name, value))
    return tidy.frame(rows)


def row_label(row: str) -> str:
    """fna -> FNA, op_la -> op-LA: the paper's names for its rows."""
    return "op-" + row[3:].upper() if row.startswith("op_") else row.upper()


def per_seed(summary: pd.DataFrame, task: str, variant: str, metric: str = "test_acc") -> pd.Series:
    """A metric of a variant's finished runs in the table's unit (accuracy in percent, BLEU in
    points), indexed by seed."""
    runs = variant_runs(summary, task, variant)
    runs = runs[runs["status"] == "ok"]
    seeds = pd.Index(runs["seed"], name="seed")
    if metric not in runs:
        return pd.Series(dtype=float, index=seeds[:0])
    values = runs[metric].astype(float) * METRICS[metric]["scale"]
    return values.set_axis(seeds).dropna()


def seed_summary(values: pd.Series) -> dict[str, float]:
    """Mean, std, median, best and worst over seeds (NaN where too few)."""
    n = len(values)
    return {
        "n": n,
        "mean": float(values.mean()) if n else math.nan,
        "std": float(values.std(ddof=1)) if n > 1 else math.nan,
        "median": float(values.median()) if n else math.nan,
        "best": float(values.max()) if n else math.nan,
        "worst": float(values.min()) if n else math.nan,
    }


def mean_std(stats: dict[str, Any]) -> str:
    if not stats["n"]:
        return NOT_RUN
    spread = "" if math.isnan(stats["std"]) else f" ± {fmt(stats['std'])}"
    return f"{fmt(stats['mean'])}{spread} (n={stats['n']})"


def tasks_run(summary: pd.DataFrame, study: dict[str, Any]) -> list[str]:
    """The study's tasks this profile trained, in the study's order."""
    present = set(summary["task"])
    return [t for t in study["tasks"] if t in present]


# --------------------------------------------------------------------------------------------
# fna_accuracy: Tables I, III and the ViT
# --------------------------------------------------------------------------------------------


def accuracy_frame(
    summary: pd.DataFrame, study: dict[str, Any], runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Long form: one row per (task run here, variant) with the paper's row and numbers (NaN
    where not printed), the paper's alpha and the one our runs trained (from ``runs``, the
    resolved specs), and ours over seeds."""
    paper = paper_rows(study["paper_table"])
    row_of = {variant: row for row, variant in study.get("rows", {}).items()}
    metric = metric_of(study)
    out = []
    for task in tasks_run(summary, study):
        for variant in study["variants"]:
            row = row_of.get(variant, "")
            printed = paper.loc[row] if row in paper.index else None
            ours = seed_summary(per_seed(summary, task, variant, metric))
            out.append(
                {
                    "task": task,
                    "row": row,
                    "label": row_label(row) if row else f"{variant} (ours only)",
                    "variant": variant,
                    "paper alpha": paper_alpha(row) if row else math.nan,
                    "ours alpha": trained_alpha(runs, task, variant),
                    **{f"paper {s}": math.nan if printed is None else printed[s] for s in STATS},
                    **{f"ours {k}": v for k, v in ours.items()},
                    "diverged": value_stats(variant_runs(summary, task, variant), metric)[
                        "diverged"
                    ],
                }
            )
    return pd.DataFrame(out)


def accuracy_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Wide, human form: per row the paper's statistic beside ours."""
    rows = []
    for _, r in frame.iterrows():
        ours = {k[5:]: r[k] for k in r.index if k.startswith("ours ")}
        row: dict[str, str] = {"task": r["task"], "model": r["label"], "variant": r["variant"]}
        row["alpha (paper / ours)"] = (
            f"{alpha_text(r['paper alpha']) or '—'} / {alpha_text(r['ours alpha']) or '—'}"
        )
        for stat in STATS:
            printed = r[f"paper {stat}"]
            row[f"paper {stat}"] = (
                "" if not r["row"] else NOT_PRINTED if math.isnan(printed) else fmt(printed)
            )
            row[f"ours {stat}"] = mean_std(ours) if stat == "mean" else fmt(ours[stat])
            if not ours["n"]:
                row[f"ours {stat}"] = NOT_RUN
        if r["diverged"]:
            row["ours mean"] += f", {r['diverged']} diverged"
        rows.append(row)
    return pd.DataFrame(rows)


def alpha_changes(frame: pd.DataFrame) -> list[str]:
    """Rows whose trained alpha is not the paper's, in words."""
    changed = frame[
        frame["paper alpha"].notna()
        & frame["ours alpha"].notna()
        & ~np.isclose(frame["paper alpha"].fillna(0), frame["ours alpha"].fillna(0))
    ]
    return [
        f"{r['label']} ({r['variant']}) trains alpha = {r['ours alpha']:g}, the paper's "
        f"{r['paper alpha']:g}"
        for _, r in changed.drop_duplicates("variant").iterrows()
    ]


def accuracy_caption(
    summary: pd.DataFrame, study: dict[str, Any], profile: str, frame: pd.DataFrame | None = None
) -> str:
    """Units, how ours is measured, the paper's own notes, an alpha ours changed, what was not
    run, profile, data."""
    paper = paper_rows(study["paper_table"])
    notes = [
        f"{row_label(r)}: {n}" for r, n in paper["note"].items() if n and r in study.get("rows", {})
    ]
    skipped = [t for t in study["tasks"] if t not in tasks_run(summary, study)]
    changed = alpha_changes(frame) if frame is not None and len(frame) else []
    metric = metric_of(study)
    unit = {
        "test_acc": "Test accuracy in percent",
        "test_bleu": "Corpus BLEU (points) of greedy decoding on the test split, the paper's "
        "BLEU beside it (the official code's teacher-forced score, not decoding)",
    }.get(metric, METRICS[metric]["label"])
    parts = [
        f"{unit}; mean ± std over seeds (n = finished seeds), median, best and worst seed.",
        MEASURED_AT.replace("test accuracy", "the score") if metric != "test_acc" else MEASURED_AT,
        "The paper's notes: " + "; ".join(notes) + "." if notes else "",
        "Ours differs from the paper's alpha: " + "; ".join(changed) + "." if changed else "",
        f"Tasks not run in this profile: {', '.join(skipped)}." if skipped else "",
        profile_note(profile),
        stand_in_text(summary, study["tasks"]),
    ]
    return " ".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------
# fna_shallow: Fig 3
# --------------------------------------------------------------------------------------------


def mechanism(row: pd.Series) -> str:
    """DP, LA (alpha = 2) or FNA alpha = a, from the trained spec."""
    if row["attention"] not in ("fna", "fna_reference"):
        return "DP"
    return "LA (alpha=2)" if row["alpha"] == 2 else f"FNA alpha={row['alpha']:g}"


def panel(row: pd.Series) -> str:
    return f"L={row['layers']}, Q{'=' if row['tied'] else '≠'}K"


def shallow_frame(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (panel, mechanism, d) with ours over seeds; cells from the specs."""
    own = summary[summary["status"] == "ok"].merge(runs, on=["task", "variant", "seed"])
    if own.empty:
        return pd.DataFrame(columns=["task", "panel", "mechanism", "alpha", "dim"])
    own = own.assign(
        panel=own.apply(panel, axis=1),
        mechanism=own.apply(mechanism, axis=1),
        acc=own["test_acc"] * 100,
        order=np.where(own["attention"] == "fna_dp", 99.0, own["alpha"]),
    )
    cells = []
    keys = ["task", "layers", "tied", "panel", "order", "mechanism", "dim"]
    for key, block in own.groupby(keys, sort=True):
        cell = dict(zip(keys, key, strict=True))
        cells.append(cell | seed_summary(block["acc"]) | {"variant": block["variant"].iloc[0]})
    return pd.DataFrame(cells).rename(columns={"order": "alpha"})


def shallow_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Wide: a row per (task, panel, mechanism), a column per d: mean ± std (n)."""
    if frame.empty:
        return pd.DataFrame({"note": [NOT_RUN]})
    dims = sorted(frame["dim"].unique())
    rows = []
    for (task, panel_, mech), block in frame.groupby(["task", "panel", "mechanism"], sort=False):
        row = {"task": task, "panel": panel_, "mechanism": mech}
        cells = block.set_index("dim")
        for d in dims:
            row[f"d={d}"] = mean_std(cells.loc[d]) if d in cells.index else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def shallow_caption(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> str:
    """What a cell is, how many of the grid's variants ran here, profile and data."""
    trained = summary["variant"].nunique()
    return " ".join(
        [
            "Test accuracy in percent, mean ± std over seeds (n), of single-head models "
            "(orthogonal W_Q, W_K as Fig 3) per depth L, Q = K or not, mechanism and d; each "
            "cell is read from the spec its runs trained. The paper prints no numbers for "
            "Fig 3 (figure only).",
            f"{trained} of the study's {len(study['variants'])} variants run in this profile "
            "(the rest in the paper profile); — marks a cell not run.",
            MEASURED_AT,
            profile_note(profile),
            stand_in_text(summary, study["tasks"]),
        ]
    )


# --------------------------------------------------------------------------------------------
# fna_ablation: the Q = K diagonal, the Laplace kernel
# --------------------------------------------------------------------------------------------


def ablation_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Per task and ablation: both variants over seeds, the difference ablated - reference
    with its 95% interval (paired t where both share their seeds, Welch's otherwise; the test
    is named beside the interval), and whether it changes accuracy."""
    rows = []
    for task in tasks_run(summary, study):
        for name, pair in study.get("ablations", {}).items():
            ref = per_seed(summary, task, pair["reference"])
            abl = per_seed(summary, task, pair["ablated"])
            diff, low, high, test = seed_interval(abl, ref)
            shown = "" if math.isnan(low) else test
            rows.append(
                {
                    "task": task,
                    "ablation": name,
                    "reference": pair["reference"],
                    "ablated": pair["ablated"],
                    "reference acc": mean_std(seed_summary(ref)),
                    "ablated acc": mean_std(seed_summary(abl)),
                    "diff": diff,
                    "low": low,
                    "high": high,
                    "test": shown,
                    "Δ ablated − reference [95% CI]": interval_text(diff, low, high)
                    + (f" ({shown})" if shown else ""),
                    "effect": change_effect(low, high, (len(abl), len(ref))),
                }
            )
    return pd.DataFrame(rows)


def others_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The study's variants outside its ablations (context rows, e.g. tied DP)."""
    paired = {v for pair in study.get("ablations", {}).values() for v in pair.values()}
    rows = [
        {"task": task, "variant": v, "acc": mean_std(seed_summary(per_seed(summary, task, v)))}
        for task in tasks_run(summary, study)
        for v in study["variants"]
        if v not in paired
    ]
    return pd.DataFrame(rows, columns=["task", "variant", "acc"])
