"""``python -m pdelab.report STEP``: the report rules' commands (aggregate, study, report)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from pdelab.config import PARAMS_FILE, active_profile, load_params, study_runs
from pdelab.report.aggregate import aggregate
from pdelab.report.figures import (
    accuracy_by_variant,
    heatmap,
    paired_bars,
    ppl_bars,
    ppl_by_seq_len,
    ppl_by_steps,
)
from pdelab.report.pde_tables import (
    classification_caption,
    classification_frame,
    classification_table,
    lm_caption,
    lm_frame,
    lm_table,
)
from pdelab.report.report import write_report
from pdelab.report.tables import (
    PROFILE_NOTES,
    cost_frame,
    multiscale_frame,
    seeds_frame,
    study_frame,
    write_frame,
    write_tables,
)


def write_study(
    kind: str, cfg: dict, summary: pd.DataFrame, title: str, profile: str, args: argparse.Namespace
) -> None:
    """One study's table (md, tex) and figure, by the study's kind."""
    note = f"Ours: {PROFILE_NOTES.get(profile, profile)}."
    if kind == "accuracy":
        frame = study_frame(summary, cfg)
        write_tables(frame, title, profile, args.md, args.tex)
        accuracy_by_variant(frame, title, profile, args.figure)
    elif kind == "multiscale":
        frame = multiscale_frame(summary, cfg)
        write_frame(frame, title, f"Test accuracy (fraction). {note}", args.md, args.tex)
        rows = frame[frame["position"] != "baseline"]
        labels = [f"{p} {c}" for p in rows["position"] for c in cfg["grid"][p]]
        paper = [r[f"{c} paper"] for _, r in rows.iterrows() for c in cfg["grid"][r["position"]]]
        ours = [r[f"{c} ours"] for _, r in rows.iterrows() for c in cfg["grid"][r["position"]]]
        paired_bars(labels, paper, ours, "test accuracy", title, profile, args.figure)
    elif kind == "seeds":
        frame = seeds_frame(summary, cfg)
        write_frame(
            frame,
            title,
            f"Test accuracy (fraction) over seeds; Δ vs baseline with a 95% Welch interval. {note}",
            args.md,
            args.tex,
        )
        rows = frame[frame["variant"] != cfg.get("baseline", "baseline")]
        base = frame[frame["variant"] == cfg.get("baseline", "baseline")].iloc[0]
        half = ((rows["95% CI high"] - rows["95% CI low"]) / 2).fillna(0).tolist()
        paired_bars(
            rows["variant"].tolist(),
            (rows["paper mean"] - base["paper mean"]).tolist(),
            rows["Δ vs baseline"].tolist(),
            "accuracy difference from baseline",
            title,
            profile,
            args.figure,
            errors=half,
        )
    elif kind == "cost":
        frame = cost_frame(summary, cfg)
        write_frame(
            frame,
            title,
            f"Overhead over the baseline in percent, from the training "
            f"runs' median step time and peak memory. {note}",
            args.md,
            args.tex,
            floatfmt=".1f",
        )
        paired_bars(
            frame["variant"].tolist(),
            frame["paper time %"].tolist(),
            frame["ours time %"].tolist(),
            "step-time overhead (%)",
            title,
            profile,
            args.figure,
        )
    elif kind == "pde_classification":
        caption = classification_caption(summary, cfg, profile)
        table = classification_table(summary, cfg)
        write_frame(table, title, caption, args.md, args.tex, numparse=False)
        accuracy_by_variant(
            classification_frame(summary, cfg),
            f"{title}\nwords: a WordPiece tokenizer trained on each training split stands in "
            "for the paper's bert-base-uncased; imdb_char: bytes",
            profile,
            args.figure,
            ylabel="test accuracy (%)",
        )
    elif kind in ("lm", "lm_seq_len"):
        frame = lm_frame(summary, cfg)
        caption = lm_caption(frame, cfg, profile)
        write_frame(lm_table(frame, cfg), title, caption, args.md, args.tex, numparse=False)
        if kind == "lm_seq_len":
            ppl_by_seq_len(frame, title, profile, args.figure)
        elif cfg["key"] == "steps":
            ppl_by_steps(frame, title, profile, args.figure)
        else:
            ppl_bars(frame, cfg["key"], title, profile, args.figure)
    else:
        raise ValueError(
            f"unknown study kind {kind!r}; known: accuracy, multiscale, seeds, cost, "
            "pde_classification, lm, lm_seq_len"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pdelab.report", description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    agg = sub.add_parser("aggregate", help="per-run result.parquet files -> summary.parquet")
    agg.add_argument("results", nargs="+", type=Path)
    agg.add_argument("--out", type=Path, required=True)
    study = sub.add_parser("study", help="one study's table (md, tex) and figure")
    study.add_argument("name")
    study.add_argument("--summary", type=Path, required=True)
    study.add_argument("--md", type=Path, required=True)
    study.add_argument("--tex", type=Path, required=True)
    study.add_argument("--figure", type=Path, required=True)
    heat = sub.add_parser("heatmap", help="variants x tasks heatmap of an accuracy study")
    heat.add_argument("name")
    heat.add_argument("--summary", type=Path, required=True)
    heat.add_argument("--out", type=Path, required=True)
    diag = sub.add_parser("diagnostics", help="figure and correlation table of diagnostics")
    diag.add_argument("parts", nargs="+", type=Path, help="per-task diagnostics parquet files")
    diag.add_argument("--summary", type=Path, required=True)
    diag.add_argument("--png", type=Path, required=True)
    diag.add_argument("--table", type=Path, required=True)
    rep = sub.add_parser("report", help="results/REPORT.md")
    rep.add_argument("--summary", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True)
    for p in (study, heat, rep):
        p.add_argument("--profile")
        p.add_argument("--params", default=str(PARAMS_FILE))
    args = parser.parse_args(argv)

    if args.step == "aggregate":
        aggregate(args.results, args.out)
        return
    if args.step == "diagnostics":
        from pdelab.diagnostics import correlations, plot, write_table

        frames = pd.concat([pd.read_parquet(p) for p in args.parts], ignore_index=True)
        summary = pd.read_parquet(args.summary)
        for path in (args.png, args.table):
            path.parent.mkdir(parents=True, exist_ok=True)
        plot(frames, summary, args.png)
        write_table(
            correlations(frames, summary),
            args.table,
            "Diagnostics against test-accuracy change from the baseline",
        )
        return
    params = load_params(args.params)
    profile = active_profile(params, args.profile)
    summary = pd.read_parquet(args.summary)
    summary = summary[summary["profile"] == profile]
    if args.step in ("study", "heatmap"):
        cfg = params["studies"][args.name]
        title = cfg.get("title", args.name)
        keys = {(r.task, r.variant, r.seed) for r in study_runs(params, args.name, profile)}
        own = [
            k in keys
            for k in zip(summary["task"], summary["variant"], summary["seed"], strict=True)
        ]
        summary = summary[own]  # only this study's seeds
        if args.step == "heatmap":
            heatmap(study_frame(summary, cfg), title, profile, args.out)
            return
        for path in (args.md, args.tex, args.figure):
            path.parent.mkdir(parents=True, exist_ok=True)
        write_study(cfg.get("kind", "accuracy"), cfg, summary, title, profile, args)
    else:
        runs = {
            name: {(r.task, r.variant, r.seed) for r in study_runs(params, name, profile)}
            for name in params["studies"]
        }
        write_report(summary, params["studies"], profile, args.out.parent, args.out, runs)


if __name__ == "__main__":
    main()
