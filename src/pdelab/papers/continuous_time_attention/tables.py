"""Continuous-Time Attention (arXiv 2505.20666), Tables 1-5: the paper's numbers beside ours.

Each language-model row names three runs: the causal baseline (standard), the mechanism as
the paper describes it (our reading: a two-sided PDE stencil along the keys; the paper names
neither axis nor stencil) and its leak-free form. Every
language-model run carries the causality probe's verdict; a variant that leaks future tokens
gets no perplexity in the ours columns ("withheld: leaks"), because a model that reads the
token it predicts reaches a perplexity near 1 without modelling language. Its number appears
only in a separate column labelled as not a result, as the evidence of the leak. Diverged
runs are counted and shown, never averaged in. Classification accuracies are presented in
percent, the unit of the paper's Table 1 (Table 2's fractions are converted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from pdelab.records.causal_verdict import Causality
from pdelab.report import tables, tidy
from pdelab.report.stats import seed_interval, value_stats
from pdelab.report.tables import PROFILE_NOTES, stand_ins, variant_runs

CAUSAL = Causality.CAUSAL.value
LEAKS = Causality.LEAKS.value
WITHHELD = "withheld: leaks"
LEAKY_COLUMN = "leaky ppl (not a result)"
ROLES = ("standard", "as_described", "leak_free")
ROLE_LABELS = {"standard": "standard", "as_described": "as described", "leak_free": "leak-free"}
PAPER_LABELS = {"standard": "standard", "as_described": "PDE"}  # the paper has one PDE form
BYTE_TASKS = frozenset({"imdb_bytes"})  # bytes; every other classification task is WordPiece
# our task -> the paper csv's row (the paper's dataset name), where they differ
PAPER_ROWS = {"imdb_wordpiece": "imdb", "imdb_bytes": "imdb_char_lra"}

TOKENIZER_NOTE = (
    "Tokenizer: the paper uses the pretrained bert-base-uncased tokenizer, which cannot be "
    "downloaded here; an uncased WordPiece tokenizer trained on each task's training split "
    "stands in for it (imdb_bytes reads bytes, as the paper's Table 2 does)."
)
LM_TOKENIZER_NOTE = (
    "Tokenizer: the paper uses the pretrained bert-base-uncased tokenizer (its Table 8), which "
    "cannot be downloaded here; a WordPiece tokenizer trained on the training articles stands "
    "in for it, so perplexities are over another vocabulary and compare in order of "
    "magnitude, not digit for digit."
)
PROBE_NOTE = (
    "Probe: pdelab.training.causality's perturbation probe changes every token after position t "
    "and checks that no output at a position <= t moves. A variant that leaks future tokens gets "
    f'no perplexity ("{WITHHELD}"): it scores by reading the token it predicts. The column '
    f'"{LEAKY_COLUMN}" shows that number only as evidence of the leak.'
)

BASELINE_NOTE = (
    "standard: our causal baseline (probe: causal). The authors' first code release passes no "
    "causal mask to its standard model, but the paper's baseline perplexities (thousands, "
    "near the 30,522 of a uniform guess over its vocabulary) are those of a model that barely "
    "learnt, not of one reading future tokens, which would score near 1."
)


def paper_table(name: str) -> pd.DataFrame:
    """One of this paper's tables (paper_tables/ beside this file)."""
    return tables.paper_table(__package__, name)


# --------------------------------------------------------------------------------------------
# Per-variant statistics
# --------------------------------------------------------------------------------------------


def column(runs: pd.DataFrame, name: str) -> pd.Series:
    """runs[name], or all-NaN when an older summary lacks the column."""
    return runs[name] if name in runs else pd.Series(math.nan, index=runs.index, dtype=float)


def probe_summary(runs: pd.DataFrame) -> dict[str, Any]:
    """The probe's verdict over a variant's runs: any leaking seed makes the variant leaky."""
    verdicts = [v for v in map(Causality.parse, column(runs, "causality")) if v is not None]
    probed, leaky = len(verdicts), sum(v.leaks for v in verdicts)
    if probed == 0:
        text = "not probed"
    elif leaky == 0:
        text = CAUSAL
    elif probed == 1:
        text = LEAKS
    else:
        text = f"{LEAKS} ({leaky}/{probed} seeds)"
    leak = column(runs, "max_leak").dropna()
    return {
        "probe": text,
        "probed": probed,
        "leaky": leaky,
        "max_leak": float(leak.max()) if len(leak) else math.nan,
    }


def per_seed(summary: pd.DataFrame, task: str, variant: str, name: str) -> pd.Series:
    """A metric of a variant's finished runs, indexed by seed."""
    runs = variant_runs(summary, task, variant)
    runs = runs[runs["status"] == "ok"]
    return column(runs, name).set_axis(pd.Index(runs["seed"], name="seed")).dropna()


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def fmt_ppl(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.2f}"


def fmt_pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def mean_std(row: pd.Series | dict[str, Any], fmt: Callable[[float], str] = fmt_ppl) -> str:
    """'mean ± std (n=k)', plus the diverged count; 'diverged (k/k seeds)' when none finished."""
    if row["n"] == 0:
        return f"diverged ({row['diverged']}/{row['runs']} seeds)" if row["diverged"] else "n/a"
    text = fmt(row["mean"]) + ("" if math.isnan(row["std"]) else f" ± {fmt(row['std'])}")
    text += f" (n={row['n']})"
    return text + (f", {row['diverged']} diverged" if row["diverged"] else "")


def ppl_cell(row: pd.Series | dict[str, Any]) -> str:
    """Ours as a result: withheld unless the probe found the variant causal."""
    if row["n"] == 0:
        return mean_std(row)
    if row["leaky"]:
        return WITHHELD + (f" ({row['diverged']} diverged)" if row["diverged"] else "")
    if row["probed"] == 0:
        return "withheld: not probed"
    return mean_std(row)


def interval_text(diff: float, low: float, high: float, digits: int = 2) -> str:
    if math.isnan(diff):
        return "n/a"
    ci = "n/a" if math.isnan(low) else f"[{low:+.{digits}f}, {high:+.{digits}f}]"
    return f"{diff:+.{digits}f} {ci}"


def profile_note(profile: str) -> str:
    return f"Ours: {PROFILE_NOTES.get(profile, f'profile {profile}')}."


def stand_in_text(named: dict[str, str]) -> str:
    """The notes' sentence on the data: each stand-in named, or that the data are real."""
    if not named:
        return "Data: the paper's datasets (no stand-in)."
    return "Stand-ins (not the paper's data): " + " ".join(
        f"{task}: {sentence.rstrip('.')}." for task, sentence in named.items()
    )


# --------------------------------------------------------------------------------------------
# Tables 1-2: classification
# --------------------------------------------------------------------------------------------


def classification_paper() -> pd.DataFrame:
    """The paper's Tables 1-2 in percent (Table 2 prints fractions), row = our task name."""
    paper = paper_table("pde_attention_classification.csv").copy()
    scale = np.where(paper["unit"] == "fraction", 100.0, 1.0)
    for name in ("standard_transformer", "pde_transformer"):
        paper[name] = paper[name].astype(float) * scale
    paper["unit"] = "percent"
    paper["source"] = paper["note"].fillna("").str.split(";").str[0].str.strip()
    inverse = {row: task for task, row in PAPER_ROWS.items()}
    return paper.rename(index=lambda r: inverse.get(r, r))


def paper_numbers(study: dict[str, Any]) -> pd.DataFrame | None:
    """The paper's numbers of a study as tidy rows (pdelab.report.tidy) under our task and
    variant names: Tables 1-2's accuracy (percent) per task and column's variant, Tables 3-5
    and B.4's perplexity of the model each row describes (its standard or as-described
    variant: a leak-free variant is ours, not the paper's)."""
    if not study.get("paper_table"):
        return None
    rows = []
    if "columns" in study:  # Tables 1-2
        paper = classification_paper()
        for column, variant in study["columns"].items():
            for task in study["tasks"]:
                if task in paper.index and not math.isnan(float(paper.loc[task, column])):
                    value = float(paper.loc[task, column])
                    rows.append(tidy.paper_row(task, variant, "accuracy", value))
        return tidy.frame(rows)
    if "key" not in study or "rows" not in study:
        return None
    paper = lm_paper(study)
    seq_len = "standard" in next(iter(study["rows"].values()))
    for key, roles in study["rows"].items():
        for role in ("standard", "as_described"):
            if role not in roles:
                continue
            value = _paper_value(paper, str(key), role, seq_len)[0]
            if not math.isnan(value):
                task = study["tasks"][0]
                rows.append(tidy.paper_row(task, roles[role], "perplexity", value))
    return tidy.frame(rows)


def classification_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Long form: one row per (task, variant), the paper's accuracy (%) where the paper has
    a column for the variant, ours in % (mean, std over seeds, n, diverged)."""
    paper = classification_paper()
    column_of = {variant: col for col, variant in study["columns"].items()}
    named = stand_ins(summary)
    rows = []
    for task in study["tasks"]:
        for variant in study["variants"]:
            col = column_of.get(variant, "")
            value = float(paper.loc[task, col]) if col and task in paper.index else math.nan
            rows.append(
                {
                    "task": task,
                    "variant": variant,
                    "paper_column": col,
                    "paper": value,
                    **value_stats(variant_runs(summary, task, variant), "test_acc", 100.0),
                    "stand_in": named.get(task, ""),
                }
            )
    return pd.DataFrame(rows)


def classification_table(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Wide form, a row per task: the paper's columns, ours per variant, and the PDE gain
    over the baseline in points (ours with a 95% interval over seeds: paired t where both
    variants share their seeds, Welch's otherwise; the test is named in the row)."""
    frame = classification_frame(summary, study)
    paper = classification_paper()
    baseline = study.get("baseline", "baseline")
    gains = [v for v in study["columns"].values() if v != baseline]
    rows = []
    for task, block in frame.groupby("task", sort=False):
        block = block.set_index("variant")
        row: dict[str, Any] = {
            "task": task,
            "paper table": paper.loc[task, "source"] if task in paper.index else "n/a",
            "tokens": "bytes" if task in BYTE_TASKS else "WordPiece (ours)",
        }
        for col, variant in study["columns"].items():
            row[f"paper {col} (%)"] = fmt_pct(block.loc[variant, "paper"])
        for variant in study["variants"]:
            ours_only = "" if variant in study["columns"].values() else ", ours only"
            row[f"ours {variant} (%{ours_only})"] = mean_std(block.loc[variant], fmt_pct)
        for variant in gains:
            suffix = "" if len(gains) == 1 else f" {variant}"
            paper_gain = block.loc[variant, "paper"] - block.loc[baseline, "paper"]
            row[f"paper Δ{suffix} (pp)"] = "n/a" if math.isnan(paper_gain) else f"{paper_gain:+.2f}"
            diff, low, high, test = seed_interval(
                per_seed(summary, task, variant, "test_acc") * 100,
                per_seed(summary, task, baseline, "test_acc") * 100,
            )
            row[f"ours Δ{suffix} (pp) [95% CI]"] = interval_text(diff, low, high)
            row[f"test{suffix}"] = "" if math.isnan(low) else test
        rows.append(row)
    return pd.DataFrame(rows)


def classification_caption(summary: pd.DataFrame, study: dict[str, Any], profile: str) -> str:
    baseline = study.get("baseline", "baseline")
    return " ".join(
        [
            "Test accuracy in percent (the paper's Table 2 prints fractions; converted).",
            f"Ours: mean ± std over seeds (n = finished seeds); Δ = PDE − {baseline} in points,",
            "ours with a 95% t interval over seeds: paired t over shared seeds, Welch's",
            "otherwise (the test column says which).",
            "Variants marked 'ours only' have no paper column (released: the authors' released",
            "code, hidden-state smoothing after each layer).",
            profile_note(profile),
            stand_in_text(stand_ins(summary[summary["task"].isin(study["tasks"])])),
            TOKENIZER_NOTE,
        ]
    )


# --------------------------------------------------------------------------------------------
# Tables 3-5 and Appendix B.4: language modelling
# --------------------------------------------------------------------------------------------


def lm_paper(study: dict[str, Any]) -> pd.DataFrame:
    """The paper's rows keyed by str(study key); a table with several epochs per row (Table 3)
    keeps each row's final (largest) epoch."""
    paper = paper_table(study["paper_table"]).reset_index()
    key = study["key"]
    if "epoch" in paper:
        paper = paper.sort_values("epoch").groupby(key, sort=False).tail(1)
    paper[key] = paper[key].map(lambda k: str(int(k)) if isinstance(k, float) else str(k))
    return paper.set_index(key)


def _paper_value(paper: pd.DataFrame, key: str, role: str, seq_len: bool) -> tuple[float, str]:
    """(the paper's perplexity for a row and role, the paper's note where it prints none)."""
    if key not in paper.index:
        return math.nan, "not reported"
    if seq_len:
        name = "standard_perplexity" if role == "standard" else "pde_perplexity"
    else:
        name = "perplexity"
    value = float(paper.loc[key, name])
    if not math.isnan(value):
        return value, ""
    note = paper.loc[key, "note"] if "note" in paper else ""
    return value, note if isinstance(note, str) and note else "not reported"


def lm_frame(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Long form: one row per (row key, role) with the paper's perplexity, ours (mean, std,
    n, diverged over seeds) and the probe's verdict of the role's variant."""
    task = study["tasks"][0]
    paper = lm_paper(study)
    seq_len = "standard" in next(iter(study["rows"].values()))
    named = stand_ins(summary)
    rows = []
    for key, roles in study["rows"].items():
        key = str(key)
        for role in ROLES:
            if role not in roles:
                continue
            variant = roles[role]
            runs = variant_runs(summary, task, variant)
            value, note = _paper_value(paper, key, role, seq_len)
            rows.append(
                {
                    "key": key,
                    "role": role,
                    "variant": variant,
                    "standard_row": not seq_len and roles["as_described"] == roles["leak_free"],
                    "paper": value,
                    "paper_note": note,
                    "paper_epoch": float(paper.loc[key, "epoch"])
                    if "epoch" in paper and key in paper.index
                    else math.nan,
                    **value_stats(runs, "test_ppl"),
                    **probe_summary(runs),
                    "per_seed": per_seed(summary, task, variant, "test_ppl").to_dict(),
                    "stand_in": named.get(task, ""),
                }
            )
    return pd.DataFrame(rows)


def _leaky_cell(role: str, row: pd.Series) -> str:
    if not row["leaky"] or row["n"] == 0:
        return ""
    return f"{ROLE_LABELS[role]}: {mean_std(row)}"


def lm_table(frame: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """Wide form, a row per paper row: the paper's perplexity, then per role the variant,
    ours (withheld when it leaks) and the probe's verdict; last, any leaky perplexity,
    labelled as not a result."""
    key_name = study["key"]
    rows = []
    for key, block in frame.groupby("key", sort=False):
        block = block.set_index("role")
        row: dict[str, Any] = {key_name: key}
        paper_roles = (
            ["standard", "as_described"] if "standard" in block.index else ["as_described"]
        )
        for role in paper_roles:
            label = "paper ppl" if len(paper_roles) == 1 else f"paper {PAPER_LABELS[role]} ppl"
            value, note = block.loc[role, "paper"], block.loc[role, "paper_note"]
            row[label] = note if math.isnan(value) else fmt_ppl(value)
        for role in block.index:
            r = block.loc[role]
            label = ROLE_LABELS[role]
            row[f"{label}: variant"] = r["variant"]
            row[f"{label}: ours ppl"] = ppl_cell(r)
            row[f"{label}: probe"] = r["probe"]
        leaky = [_leaky_cell(role, block.loc[role]) for role in block.index]
        row[LEAKY_COLUMN] = "; ".join(c for c in leaky if c)
        rows.append(row)
    return pd.DataFrame(rows)


def seeds_text(values: dict[Any, float]) -> str:
    """'seed 0: 93.87, seed 1: 73.05' (finished runs only), or 'no finished run'."""
    if not values:
        return "no finished run"
    return ", ".join(f"seed {k}: {fmt_ppl(v)}" for k, v in sorted(values.items()))


def standard_seeds_note(frame: pd.DataFrame) -> str:
    """Which runs the standard row averages. The standard model is one set of runs (one per
    seed) shared by every language-model table of the task; each table averages its own
    study's seeds (set per profile), so its mean differs between tables by the seed spread."""
    standard = frame[(frame["role"] == "standard") | frame["standard_row"]]
    parts = [
        f"{variant}: {seeds_text(row['per_seed'])}"
        for variant, row in standard.drop_duplicates("variant").set_index("variant").iterrows()
    ]
    return (
        "The standard row averages this study's seeds only ("
        + "; ".join(parts)
        + "). The same standard runs serve every language-model table of this task, each "
        "averaging its own study's seeds, so its mean differs between tables where their "
        "seeds differ: by the spread between seeds of one model, not between models."
    )


def lm_caption(frame: pd.DataFrame, study: dict[str, Any], profile: str) -> str:
    """The table's notes: metric, the probe rule, the paper's rows, profile, data, tokenizer."""
    notes = [
        "Test perplexity (exp of the mean loss per real token; lower is better).",
        "Ours: mean ± std over seeds (n = finished seeds; diverged runs counted, not averaged).",
        "standard = the causal baseline of the paper's comparison; as described = the paper's "
        "mechanism in our reading (a two-sided PDE stencil along the keys; the paper writes "
        "dA/dt = alpha lap A without naming the axis or the stencil); leak-free = the same PDE "
        "evolving row t on keys <= t only (Neumann boundary at t).",
        PROBE_NOTE,
        BASELINE_NOTE,
        standard_seeds_note(frame),
    ]
    epochs = frame.drop_duplicates("key").set_index("key")["paper_epoch"].dropna()
    if len(epochs):
        shown = ", ".join(f"{k}: epoch {int(e)}" for k, e in epochs.items())
        notes.append(
            f"Paper: each model's final (largest) epoch of the table ({shown}); the earlier "
            "epochs are not shown."
        )
    missing = frame.loc[frame["paper_note"] == "not reported", "key"].unique()
    if len(missing):
        notes.append(f"Paper: no number printed for {', '.join(missing)}.")
    if "released" in set(frame["variant"]):
        notes.append(
            "released (ours only): the authors' released code, which smooths the hidden states "
            "after every layer (first and last token fixed) and leaves attention untouched; "
            "released_causal is the repository's later backward-stencil form."
        )
    sentences = [s for s in frame["stand_in"] if s]
    named = {study["tasks"][0]: sentences[0]} if sentences else {}
    notes += [profile_note(profile), stand_in_text(named), LM_TOKENIZER_NOTE]
    return " ".join(notes)
