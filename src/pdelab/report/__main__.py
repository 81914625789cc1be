"""``python -m pdelab.report STEP``: the report rules' commands.

aggregate (per-run Parquet -> summary), study (one study's table and figure, written by the
paper that registered the study's kind), heatmap, report (REPORT.md), outputs (every file the
report of the active profile consists of, one per line: what CI checks).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pdelab.config import PARAMS_FILE, active_profile, load_params
from pdelab.papers import active, study_paper
from pdelab.report.aggregate import aggregate
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.document import write_report
from pdelab.report.figures import heatmap
from pdelab.report.stats import own_runs
from pdelab.report.tables import note_same_runs, paper_table, study_frame
from pdelab.run_sheet import same_runs, study_runs, validate


@dataclass(frozen=True)
class ReportGroup:
    """The files of one study (or, with ``study`` None, a paper's own outputs), relative to
    results/: what Snakemake's report files under the paper and study, and what MLflow's
    report experiment holds as one run."""

    paper: str  # the paper's package name
    paper_title: str
    study: str | None
    title: str
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.study or f"{self.paper}-outputs"


def report_groups(params: dict) -> list[ReportGroup]:
    """Every study's table (md, tex), figure and heatmap, then each paper's own outputs."""
    groups = []
    papers = active(params)
    heatmaps = {kind for paper in papers for kind in paper.heatmap_kinds}
    for name, cfg in params["studies"].items():
        kind = cfg.get("kind", "accuracy")
        files = [f"tables/{name}.md", f"tables/{name}.tex", f"figures/{name}.png"]
        if kind in heatmaps:
            files.append(f"figures/{name}_heatmap.png")
        paper = study_paper(kind)
        groups.append(
            ReportGroup(paper.name, paper.title, name, cfg.get("title", name), tuple(files))
        )
    for paper in papers:
        if paper.outputs(params):
            title = f"{paper.title}: its own measurements"
            outputs = tuple(paper.outputs(params))
            groups.append(ReportGroup(paper.name, paper.title, None, title, outputs))
    return groups


def report_files(params: dict) -> list[str]:
    """Every file under results/ that the report of these params consists of."""
    files = ["REPORT.md", "tables/learning.md"]
    for group in report_groups(params):
        files += group.files
    return files


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
    rep = sub.add_parser("report", help="results/REPORT.md")
    rep.add_argument("--summary", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True)
    outputs = sub.add_parser("outputs", help="the report's files, one per line")
    for p in (agg, study, heat, rep, outputs):
        p.add_argument("--profile")
        p.add_argument("--params", default=str(PARAMS_FILE))
    args = parser.parse_args(argv)

    params = load_params(args.params)
    if args.step == "aggregate":
        specs = validate(params, args.profile)
        same = {(k.task, k.variant, k.seed): c.variant for k, c in same_runs(specs).items()}
        aggregate(args.results, args.out, same)
        return
    if args.step == "outputs":
        print("\n".join(f"results/{f}" for f in report_files(params)))
        return
    profile = active_profile(params, args.profile)
    summary = pd.read_parquet(args.summary)
    summary = summary[summary["profile"] == profile]
    if args.step == "report":
        runs = {
            name: {(r.task, r.variant, r.seed) for r in study_runs(params, name, profile)}
            for name in params["studies"]
        }
        ctx = ReportContext(summary, params["studies"], profile, args.out.parent, runs)
        write_report(ctx, active(params), args.out)
        return
    cfg = params["studies"][args.name]
    paper = study_paper(cfg.get("kind", "accuracy"))
    keys = {(r.task, r.variant, r.seed) for r in study_runs(params, args.name, profile)}
    summary = own_runs(summary, keys)  # only this study's seeds
    if args.step == "heatmap":
        table = paper_table(paper.package, cfg["paper_table"]) if cfg.get("paper_table") else None
        heatmap(study_frame(summary, cfg, table), cfg.get("title", args.name), profile, args.out)
        return
    for path in (args.md, args.tex, args.figure):
        path.parent.mkdir(parents=True, exist_ok=True)
    write = paper.report_module().STUDY_WRITERS[cfg.get("kind", "accuracy")]
    write(StudyContext(args.name, cfg, summary, profile, args.md, args.tex, args.figure))
    note_same_runs(summary, args.md, args.tex)


if __name__ == "__main__":
    main()
