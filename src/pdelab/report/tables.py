"""A study's table: the paper's number beside ours (mean +/- std over seeds, n) per task.

Diverged runs are counted and shown, never silently averaged in. The builders here return a
:class:`~pdelab.report.table_file.TableFile`, whose Markdown, LaTeX, page and CSV come from
the same DataFrames; the study step adds its notes (:func:`study_notes`) before writing it.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import pandas as pd

from pdelab.records.provenance import versions
from pdelab.report import tidy
from pdelab.report.profiles import PROFILE_NOTES
from pdelab.report.stats import value_stats
from pdelab.report.table_file import Grid, Note, Part, TableFile

if TYPE_CHECKING:
    from pdelab.spec.studies import Study


def paper_table(package: str, name: str) -> pd.DataFrame:
    """A table of a paper's numbers, shipped in its package's paper_tables/ (first column: the
    row name)."""
    with resources.files(package).joinpath("paper_tables", name).open() as f:
        frame = pd.read_csv(f)
    return frame.set_index(frame.columns[0])


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


def study_frame(
    summary: pd.DataFrame, study: dict[str, Any], paper: pd.DataFrame | None
) -> pd.DataFrame:
    """Long form: one row per (task, variant) with the paper's value (rows: variants, columns:
    tasks) and ours."""
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


NO_PAPER_NUMBER = "—"  # the paper gives no number for this cell
METRICS = ("test_acc", "test_ppl", "test_bleu")  # a run's headline test metric, by task kind


def _fmt(x: float, digits: int = 4) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _paper(x: float) -> str:
    return NO_PAPER_NUMBER if math.isnan(x) else f"{100 * x:.2f}"


def _ours(row: pd.Series, scale: float = 100.0, digits: int = 2) -> str:
    """Mean ± std (n) of a stats row, in percent by default; diverged runs counted."""
    if row["n"] == 0:
        return "diverged" if row["diverged"] else "n/a"
    text = _fmt(scale * row["mean"], digits)
    text += "" if math.isnan(row["std"]) else f" ± {_fmt(scale * row['std'], digits)}"
    text += f" (n={row['n']})"
    return text + (f", {row['diverged']} diverged" if row["diverged"] else "")


STAND_IN_DELTA = "n/a (stand-in)"  # a stand-in's accuracy minus the paper's measures nothing


def _delta(diff: float, stand_in: str) -> str:
    if stand_in:
        return STAND_IN_DELTA
    return "n/a" if math.isnan(diff) else f"{100 * diff:+.2f}"


def render(frame: pd.DataFrame, profile: str) -> pd.DataFrame:
    """Wide, human form in percent: a row per variant; per task the paper, ours and the
    difference in points (none where ours ran on a stand-in of the paper's data).

    With several tasks an Average column (mean over tasks, as the paper's Table 5) follows.
    """
    out = pd.DataFrame({"variant": list(dict.fromkeys(frame["variant"]))})
    for task, block in frame.groupby("task", sort=False):
        block = block.set_index("variant").loc[out["variant"]]
        stand_in = block["stand_in"].fillna("").astype(str)
        out[f"{task} paper"] = [_paper(v) for v in block["paper"]]
        out[f"{task} ours"] = [_ours(r) for _, r in block.iterrows()]
        out[f"{task} Δ"] = [_delta(d, s) for d, s in zip(block["diff"], stand_in, strict=True)]
    if frame["task"].nunique() > 1:
        avg = frame.groupby("variant", sort=False)[["paper", "mean"]].mean(numeric_only=True)
        avg = avg.loc[out["variant"]]
        out["average paper"] = [_paper(v) for v in avg["paper"]]
        out["average ours"] = [_fmt(100 * v, 2) for v in avg["mean"]]
    out["profile"] = profile
    return out


def gains(frame: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Gain of each variant over the baseline, per task, for the paper's numbers and ours:
    absolute in points (Δ), relative in percent."""
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
                    "paper Δ": 100 * (row["paper"] - base["paper"]),
                    "paper %": 100 * (row["paper"] - base["paper"]) / base["paper"],
                    "ours Δ": 100 * (row["mean"] - base["mean"]),
                    "ours %": 100 * (row["mean"] - base["mean"]) / base["mean"],
                }
            )
    return pd.DataFrame(rows, columns=["task", "variant", "paper Δ", "paper %", "ours Δ", "ours %"])


def stand_in_note(frame: pd.DataFrame) -> list[str]:
    """Name every stand-in dataset behind the table's numbers: a line and its list (none when
    every task ran on the paper's data)."""
    lines = [f"- **{t}** is a stand-in: {s}." for t, s in stand_ins(frame).items()]
    return ["Stand-ins (not the paper's data):", "\n".join(lines)] if lines else []


MISSING_CELLS = frozenset({"", "n/a", "nan", STAND_IN_DELTA, NO_PAPER_NUMBER})


def _missing(value: Any) -> bool:
    return (isinstance(value, float) and math.isnan(value)) or str(value).strip() in MISSING_CELLS


SHORT = 12  # a constant cell up to this long is stated once in the caption
STATED_ONCE = ("profile", "device", "precision")  # columns that say how, not what, was run


def _label(value: Any) -> bool:
    """A short cell of words, not a number (formatted or not): a name that can be stated once
    in the caption when every row repeats it (a longer one is a finding, kept in place)."""
    if not isinstance(value, str) or len(value) > SHORT or ":" in value:
        return False
    return not re.fullmatch(r"[+\-−]?[\d.,]+%?", value.strip())


def compact(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A table without its columns that are missing on every row (a stand-in's Δ, a number
    the paper never gives) and without the columns saying how the runs ran (STATED_ONCE: the
    profile) that repeat one value on every row, and the sentence that says what was left
    out, for the caption. A result is never left out for being the same on every row."""
    if frame.empty:
        return frame, ""
    empty = [c for c in frame.columns[1:] if all(_missing(v) for v in frame[c])]
    constant = [
        c
        for c in frame.columns[1:]
        if c not in empty
        and len(frame) > 1
        and frame[c].nunique(dropna=False) == 1
        and _label(frame[c].iloc[0])
        and str(c).rsplit(" ", 1)[-1].rsplit(":", 1)[-1].strip() in STATED_ONCE
    ]
    parts = []
    if empty:
        values = sorted({str(v) for c in empty for v in frame[c]} - {"nan", ""}) or ["n/a"]
        parts.append(
            f"Left out: {', '.join(map(str, empty))} ({' or '.join(values)} on every row)."
        )
    if constant:
        same = "; ".join(f"{c} = {frame[c].iloc[0]}" for c in constant)
        parts.append(f"On every row: {same}.")
    return frame.drop(columns=empty + constant), " ".join(parts)


def accuracy_data(frame: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """The tidy CSV of a study frame (:func:`study_frame`): per task and variant our accuracy
    in percent with its 95% interval, the paper's beside it, then each gain over the baseline
    in points (the study is filled in by the study step)."""
    rows = []
    for r in frame.itertuples():
        mean, std = 100 * r.mean, 100 * r.std
        low, high = tidy.from_std(mean, std, int(r.n))
        rows.append(tidy.row("", r.task, r.variant, metric, mean, low, high, r.n, 100 * r.paper))
    for _, g in gains(frame).iterrows():
        rows.append(
            tidy.row("", g["task"], g["variant"], "accuracy_gain", g["ours Δ"], paper=g["paper Δ"])
        )
    return tidy.frame(rows)


def accuracy_tables(
    frame: pd.DataFrame, title: str, profile: str, gains_source: str = "the paper's"
) -> TableFile:
    """The accuracy table, then (when the study has a baseline) the gains over it; gains_source
    names where the paper's gains come from. The CSV holds the numbers behind the table
    (:func:`accuracy_data`)."""
    wide, left_out = compact(render(frame, profile))
    note = PROFILE_NOTES.get(profile, f"profile {profile}")
    header = f"Test accuracy (%). Ours: {note}. Δ = ours − paper, in points."
    if stand_ins(frame):
        header += (
            f" {STAND_IN_DELTA} where ours ran on a stand-in, whose accuracy is not comparable "
            "with the paper's."
        )
    header += f" {left_out}" if left_out else ""
    table = TableFile.titled(title, header, Grid(wide, floatfmt="g"), data=accuracy_data(frame))
    table.add(*stand_in_note(frame))
    gain = gains(frame)
    if len(gain):
        gain_caption = (
            f"Gain over the baseline (Δ in points, % relative; {gains_source} beside ours)"
        )
        # a gain the paper gives no number for (no paper table, a task it lacks) reads —
        formats = ("", "", "+.2f", "+.1f", "+.2f", "+.1f")
        grid = Grid(gain, f"{title}. {gain_caption}.", "gains", formats, missing=NO_PAPER_NUMBER)
        table.add(f"{gain_caption}:", grid)
    return table


def frame_table(
    frame: pd.DataFrame,
    title: str,
    header: str,
    floatfmt: str = ".4f",
    numparse: bool = True,
    data: pd.DataFrame | None = None,
) -> TableFile:
    """A study table with its title and profile note, its CSV ``data`` (tidy:
    pdelab.report.tidy; None: the study step's rows of our runs); columns missing on every
    row, and text repeated on every row, are left out of the Markdown, LaTeX and page and
    named in the caption.

    numparse=False keeps cells that are already formatted text (e.g. "+3.00") as written."""
    shown, left_out = compact(frame)
    header += f" {left_out}" if left_out else ""
    return TableFile.titled(title, header, Grid(shown, None, "", floatfmt, numparse), data)


def further_table(frame: pd.DataFrame, caption: str, part: str) -> list[Part]:
    """A further table under a study's table: in Markdown after a caption line, in LaTeX a
    float of its own labelled tab:<study>-<part>."""
    return [f"{caption}:", Grid(frame, f"{caption}.", part, numparse=False)]


def same_runs_note(summary: pd.DataFrame) -> Note | None:
    """Which of a study's variants share a trained run (their specs coincide in this
    profile), so equal rows read as one run, not as two agreeing ones."""
    if "same_run_as" not in summary:
        return None
    shared = summary[summary["same_run_as"].fillna("") != ""]
    pairs = sorted({(r.task, r.variant, r.same_run_as) for r in shared.itertuples()})
    if not pairs:
        return None
    return Note(
        "Same run (identical resolved specs in this profile): "
        + "; ".join(f"{task} {variant} = {trained}" for task, variant, trained in pairs)
    )


def code_versions_note(summary: pd.DataFrame) -> Note | None:
    """When a study's runs ran different code (a run kept through an edit, e.g. with
    Snakemake's rerun triggers: see docs/reruns.md), each source file recorded in more
    than one version (pdelab.records.provenance)."""
    if "code" not in summary or summary.empty:
        return None
    files = versions(json.loads(c) for c in summary["code"].drop_duplicates())
    if not files:
        return None
    listed = "; ".join(f"{path} ({n} versions)" for path, n in files.items())
    return Note(
        f"Built from runs of different code: {listed}. `pdelab status` lists the runs "
        "trained from code that has changed since"
    )


def environments_note(summary: pd.DataFrame) -> Note | None:
    """When a study's runs were made in different environments (Python, torch, CUDA, numpy,
    threads, device: pdelab.records.environment), each key's values. An environment change retrains
    nothing; this note is where a table says it mixes them."""
    if "environment" not in summary or summary.empty:
        return None
    made = [json.loads(e) for e in summary["environment"].drop_duplicates() if e and e != "{}"]
    keys = sorted({k for env in made for k in env})
    mixed = {k: sorted({str(env.get(k)) for env in made}) for k in keys}
    listed = "; ".join(f"{k} {', '.join(v)}" for k, v in mixed.items() if len(v) > 1)
    if not listed:
        return None
    return Note(
        f"Built from runs made in different environments: {listed}. `pdelab status` names "
        "the runs made in another environment than today's"
    )


def extra_variants(study: Study, summary: pd.DataFrame) -> list[Part]:
    """The variants its paper's table has no row or column for (``study.unshown_variants``),
    as a further table: every variant a study trains is shown somewhere."""
    if not study.unshown_variants:
        return []
    rows = []
    for variant in study.unshown_variants:
        row: dict[str, Any] = {"variant": variant}
        for task in study.tasks:
            runs = variant_runs(summary, task, variant)
            metric = next((m for m in METRICS if m in runs and runs[m].notna().any()), "test_acc")
            scale = 100.0 if metric == "test_acc" else 1.0  # accuracy in percent
            row[task] = f"{metric} {_ours(pd.Series(value_stats(runs, metric)), scale)}"
        rows.append(row)
    caption = (
        "Variants of this study outside the paper's table (mean ± std over seeds; test_acc in "
        "percent)"
    )
    return further_table(pd.DataFrame(rows), caption, "extra")


def seeds_text(seeds: Iterable[int]) -> str:
    """Seeds as words: "seed 0", "seeds 0, 1", runs of three or more as a range ("seeds 0-4")."""
    ordered = sorted(set(seeds))
    spans: list[list[int]] = []
    for seed in ordered:
        if spans and seed == spans[-1][-1] + 1:
            spans[-1].append(seed)
        else:
            spans.append([seed])
    parts = [
        f"{span[0]}-{span[-1]}" if len(span) > 2 else ", ".join(map(str, span)) for span in spans
    ]
    return ("seeds " if len(ordered) > 1 else "seed ") + ", ".join(parts)


def other_seeds_note(study: Study, studies: Mapping[str, Study]) -> Note | None:
    """Which rows of this study another study also trains over other seeds: the same model
    (task, variant) then shows two means, one per table, because each table averages its own
    study's seeds (from params.yaml, per run profile), not because the models differ."""
    own: dict[tuple[str, str], set[int]] = {}
    for run in study.runs:
        own.setdefault((run.task, run.variant), set()).add(run.seed)
    rows = []
    for (task, variant), seeds in own.items():
        others: dict[str, set[int]] = {}
        for name, other in studies.items():
            theirs = {r.seed for r in other.runs if (r.task, r.variant) == (task, variant)}
            if name != study.name and theirs and theirs != seeds:
                others[name] = theirs
        if others:
            elsewhere = " and ".join(f"{seeds_text(s)} in the {n} study" for n, s in others.items())
            rows.append(f"{task} {variant}: {seeds_text(seeds)} here, {elsewhere}")
    if not rows:
        return None
    return Note(
        "Rows another study also trains over other seeds: " + "; ".join(rows) + ". A mean over "
        "seeds here is over this study's seeds, so the same model's mean can differ from the "
        "other table's: by the spread between seeds, not by any difference between models"
    )


def study_data(study: Study, summary: pd.DataFrame, own: pd.DataFrame | None) -> pd.DataFrame:
    """A study table's CSV (pdelab.report.tidy): the rows its builder gave, then our headline
    metric of every (task, variant) the study trains that it did not give, so every study's
    CSV holds every number of its runs in one form; then the paper's numbers
    (:func:`with_paper`)."""
    pairs = dict.fromkeys((run.task, run.variant) for run in study.runs)
    given = own if own is not None and tuple(own.columns) == tidy.COLUMNS else None
    merged = tidy.merged(tidy.runs_rows(study.name, summary, pairs), given, study.name)
    return with_paper(merged, paper_numbers(study), study.name)


def paper_numbers(study: Study) -> pd.DataFrame | None:
    """What the paper prints for a study, as tidy rows keyed by our task and variant names:
    its paper's ``tables.paper_numbers(study)`` where the paper's package has one (None: the
    paper table is not read back here)."""
    if not study.paper_table:
        return None
    try:
        module = importlib.import_module(f"{study.paper.package}.tables")
    except ModuleNotFoundError:
        return None
    hook = getattr(module, "paper_numbers", None)
    return None if hook is None else hook(study)


def with_paper(data: pd.DataFrame, paper: pd.DataFrame | None, study: str) -> pd.DataFrame:
    """``data`` with the paper's value in ``paper`` wherever one of our rows has the same
    (task, variant, metric) and none yet; the paper's numbers no row of ours measures stay as
    rows of their own, ``source`` paper."""
    if paper is None or paper.empty:
        return data
    paper = paper.assign(study=study, source="paper")
    key = ["task", "variant", "metric"]
    value = paper.set_index(key)["paper"]
    ours = data["source"] == "ours"
    found = pd.MultiIndex.from_frame(data.loc[ours, key])
    filled = value.reindex(found).to_numpy()
    data = data.copy()
    data.loc[ours, "paper"] = data.loc[ours, "paper"].fillna(pd.Series(filled, data.index[ours]))
    measured = set(map(tuple, data.loc[ours, key].itertuples(index=False)))
    alone = [k not in measured for k in paper[key].itertuples(index=False)]
    return tidy.frame([*data.to_dict("records"), *paper[alone].to_dict("records")])


def study_notes(
    study: Study, summary: pd.DataFrame, studies: Mapping[str, Study] | None = None
) -> list[Part]:
    """What the study step adds under every study's table, before it is written: the variants
    outside the paper's table, the runs shared, the rows other studies average over other
    seeds (``studies``: every study of the run profile), mixed code and mixed environments."""
    notes = (
        same_runs_note(summary),
        other_seeds_note(study, studies or {}),
        code_versions_note(summary),
        environments_note(summary),
    )
    return [*extra_variants(study, summary), *(n for n in notes if n is not None)]
