"""``python -m pdelab.report STEP``: the report rules' commands.

aggregate (per-run Parquet -> summary, and every epoch -> curves), study (one study's table,
its HTML page and figure, written by the paper that registered the study's kind, and its
learning curves), heatmap, report (REPORT.md), outputs
(every file the report of the active profile consists of, one per line: what CI checks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from pdelab.data.store import MANIFEST, verified_manifest
from pdelab.report.aggregate import aggregate
from pdelab.report.context import ReportContext, StudyContext
from pdelab.report.curves import collect, curves_figure
from pdelab.report.document import write_report
from pdelab.report.figures import heatmap
from pdelab.report.stats import own_runs
from pdelab.report.table_file import TableFile
from pdelab.report.tables import paper_table, study_data, study_frame, study_notes
from pdelab.spec.config import PARAMS_FILE, RunSpec, active_profile, load_params
from pdelab.spec.plugins import active
from pdelab.spec.run_sheet import same_runs, validate
from pdelab.spec.studies import report_files, studies_of


def todays_data(specs: list[RunSpec]) -> dict[str, str]:
    """Each task's prepared data as they are now: the content hash of every file hashed afresh
    (a task whose data are not prepared here is left out)."""
    folders = {spec.task: Path(spec.data_dir) for spec in specs}
    return {
        task: verified_manifest(folder)["content_hash"]
        for task, folder in folders.items()
        if (folder / MANIFEST).exists()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pdelab.report", description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    agg = sub.add_parser("aggregate", help="per-run result.parquet files -> summary.parquet")
    agg.add_argument("results", nargs="+", type=Path)
    agg.add_argument("--out", type=Path, required=True)
    agg.add_argument("--curves", type=Path, help="every run's epochs (pdelab.report.curves)")
    study = sub.add_parser("study", help="one study's table (md, tex, html) and figure")
    study.add_argument("name")
    study.add_argument("--summary", type=Path, required=True)
    study.add_argument("--md", type=Path, required=True)
    study.add_argument("--tex", type=Path, required=True)
    study.add_argument("--figure", type=Path, required=True)
    study.add_argument("--curves", type=Path, help="results/curves.parquet (aggregate's)")
    study.add_argument("--curves-figure", type=Path, help="where the learning curves go")
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
        expected = {(k.task, k.variant, k.seed): k.to_dict() for k in specs}
        aggregate(args.results, args.out, same, expected, todays_data(specs))
        if args.curves:
            collect([Path(p).parent for p in args.results], args.curves, same)
        return
    if args.step == "outputs":
        print("\n".join(f"results/{f}" for f in report_files(params)))
        return
    profile = active_profile(params, args.profile)
    summary = pd.read_parquet(args.summary)
    summary = summary[summary["profile"] == profile]
    studies = studies_of(params, profile)
    if args.step == "report":
        runs = {name: s.run_keys for name, s in studies.items()}
        ctx = ReportContext(summary, studies, profile, args.out.parent, runs)
        write_report(ctx, active(s.kind for s in studies.values()), args.out)
        return
    study = studies[args.name]
    summary = own_runs(summary, study.run_keys)  # only this study's seeds
    if args.step == "heatmap":
        table = paper_table(study.paper.package, study.paper_table) if study.paper_table else None
        heatmap(study_frame(summary, study, table), study.title, profile, args.out)
        return
    for path in (args.md, args.tex, args.figure):
        path.parent.mkdir(parents=True, exist_ok=True)
    write = study.paper.report_module().STUDY_WRITERS[study.kind]
    table = write(StudyContext(study, summary, profile, args.md, args.tex, args.figure))
    if not isinstance(table, TableFile):
        raise TypeError(
            f"{study.paper.name}'s writer of {study.kind} studies returned {type(table).__name__}"
            ": a study writer returns its table (pdelab.report.table_file.TableFile)"
        )
    # the notes every study's table carries, added before any of its files is written; the
    # page beside the Markdown is what Snakemake's report shows inline
    table.add(*study_notes(study, summary, studies))
    table.data = study_data(study, summary, table.data)  # every study's CSV: tidy, numbers only
    table.write(args.md, args.tex, profile)
    if args.curves and args.curves_figure:
        curves = own_runs(pd.read_parquet(args.curves), study.run_keys)
        variants = list(study.variants)
        curves_figure(curves, list(study.tasks), variants, study.title, profile, args.curves_figure)


if __name__ == "__main__":
    main()
