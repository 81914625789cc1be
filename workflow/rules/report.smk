# Report: per-run Parquet -> results/summary.parquet -> each study's tables and figure ->
# results/REPORT.md. Only Parquet is read; MLflow is for people. A study is written by the
# paper that registered its study kind; a paper's own rules (rules.smk in its package) add files
# that REPORT.md waits for (PAPER_OUTPUTS).
# `snakemake --report report.zip`: every table and figure is marked with report(), filed under
# its paper (category) and study (subcategory), with a caption from workflow/report/ (a paper's
# own outputs: its package's captions/); the helpers that mark them are in common.smk. Each
# table's Markdown has an HTML page beside it (tables/X.md -> tables/X.html, pdelab.report.page),
# written by the same job: the report shows HTML inline, Markdown/LaTeX/CSV as downloads only.
from pdelab.spec.studies import rule_params


SAME_RUN_TEXT = json.dumps(sorted(f"{t}/{v}/{s}={c}" for (t, v, s), c in SAME_RUN.items()))
AGGREGATE_STAMP = stamped(
    "aggregate",
    code=[REPORT_CODE],
    inputs=[f for name in RECORD_FILES for f in run_files(name)],
    same_run=SAME_RUN_TEXT,
)


rule aggregate:
    input:
        results=run_files("result.parquet"),
        stamp=AGGREGATE_STAMP,
    output:
        summary="results/summary.parquet",
        curves="results/curves.parquet",  # every run's epochs (pdelab.report.curves)
    params:
        same_run=SAME_RUN_TEXT,
    log:
        "results/logs/aggregate.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report aggregate {input.results} --profile {PROFILE} "
        "--out {output.summary} --curves {output.curves} "
        "> {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(AGGREGATE_STAMP, rules.aggregate.output)
SUMMARY = ["results/summary.parquet", "results/curves.parquet"]


STUDY_STAMP = stamped(
    "study",
    code=study_paper_code,
    files=lambda wc: paper_numbers(STUDIES[wc.study].paper),
    inputs=lambda wc: [*SUMMARY, *study_inputs(wc)],
    study=lambda wc: rule_params(STUDIES[wc.study]),
)


rule study:
    input:
        summary="results/summary.parquet",
        curves="results/curves.parquet",
        extra=lambda wc: study_inputs(wc),
        stamp=STUDY_STAMP,
    output:
        md=report_study("results/tables/{study}.md", "table"),
        page=report_study("results/tables/{study}.html", "page"),  # the md, shown inline
        tex=report_study("results/tables/{study}.tex", "tex"),
        csv=report_study("results/tables/{study}.csv", "csv"),  # the numbers behind the table
        figure=report_study("results/figures/{study}.png", "figure"),
        curves=report_study("results/figures/{study}_curves.png", "curves"),
    params:
        study=lambda wc: rule_params(STUDIES[wc.study]),
    log:
        "results/logs/study/{study}.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report study {wildcards.study} --profile {PROFILE} "
        "--summary {input.summary} --md {output.md} --tex {output.tex} --figure {output.figure} "
        "--curves {input.curves} --curves-figure {output.curves} "
        "> {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(STUDY_STAMP, rules.study.output, study=list(STUDIES))
HEATMAP_STAMP = stamped(
    "heatmap",
    code=study_paper_code,
    files=lambda wc: paper_numbers(STUDIES[wc.study].paper),
    inputs=["results/summary.parquet"],
    study=lambda wc: rule_params(STUDIES[wc.study]),
)


rule heatmap:
    input:
        summary="results/summary.parquet",
        stamp=HEATMAP_STAMP,
    output:
        report_study("results/figures/{study}_heatmap.png", "heatmap"),
    params:
        study=lambda wc: rule_params(STUDIES[wc.study]),
    log:
        "results/logs/heatmap/{study}.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report heatmap {wildcards.study} --profile {PROFILE} "
        "--summary {input.summary} --out {output} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(HEATMAP_STAMP, rules.heatmap.output, study=list(HEATMAP_STUDIES))
LEARNING_RULE = json.dumps(config["profiles"][PROFILE].get("learning", {}), sort_keys=True)
LEARNING_STAMP = stamped(
    "learning",
    code=["pdelab.report.learning"],
    inputs=["results/summary.parquet", *MANIFESTS],
    learning=LEARNING_RULE,
)


rule learning:
    """Does each task's model learn? Its test score against the input-blind predictor's on
    the same test set; under a run profile's `learning` block a task that does not learn fails
    the build, naming the task and both numbers."""
    input:
        summary="results/summary.parquet",
        data=MANIFESTS,
        stamp=LEARNING_STAMP,
    output:
        md=report(
            "results/tables/learning.md",
            caption=f"{REPORT_CAPTIONS}/learning.rst",
            category="Pipeline checks",
            subcategory="learning",
        ),
        page=report(  # the md as HTML (pdelab.report.page), shown inline
            "results/tables/learning.html",
            caption=f"{REPORT_CAPTIONS}/learning.rst",
            category="Pipeline checks",
            subcategory="learning",
        ),
    params:
        learning=LEARNING_RULE,
    log:
        "results/logs/learning.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report.learning --summary {input.summary} "
        "--profile {PROFILE} --out {output.md} > {log} 2>&1 || {{ cat {log} >&2; exit 1; }}; "
        "python -m pdelab.records.made {input.stamp} {output}"


produces(LEARNING_STAMP, rules.learning.output)


REPORT_STAMP = stamped(
    "report",
    code=[REPORT_CODE, *(f"{p.package}.report" for p in PAPERS)],
    files=paper_numbers(*PAPERS),
    inputs=lambda wc: report_files(),
)


rule report:
    input:
        papers=PAPER_OUTPUTS,
        learning="results/tables/learning.md",
        summary="results/summary.parquet",
        tables=expand("results/tables/{study}.md", study=STUDIES),
        figures=expand("results/figures/{study}.png", study=STUDIES),
        curves=expand("results/figures/{study}_curves.png", study=STUDIES),
        heatmaps=expand("results/figures/{study}_heatmap.png", study=HEATMAP_STUDIES),
        floor=REPLICATES,  # the nondeterminism floor (pdelab.report.floor)
        stamp=REPORT_STAMP,
    output:
        md=report(
            "results/REPORT.md",
            caption=f"{REPORT_CAPTIONS}/report_md.rst",
            category="Pipeline checks",
            subcategory="REPORT.md",
        ),
        # each paper's page (claims, studies, the runs behind each number, appendix) and the
        # whole of each table REPORT.md shows cut
        long=directory("results/report"),
        page=report(  # REPORT.md as HTML (pdelab.report.page), shown inline
            "results/REPORT.html",
            caption=f"{REPORT_CAPTIONS}/report_md.rst",
            category="Pipeline checks",
            subcategory="REPORT.md",
        ),
        # each paper's claims (findings, run verdicts, coverage) as a page filed under the paper
        **{
            f"claims_{paper.name}": report(
                f"results/claims/{paper.name}.html",
                caption=f"{REPORT_CAPTIONS}/claims.rst",
                category=paper.title,
                subcategory="claims",
                labels={"part": "claims", "file": f"{paper.name}.html"},
            )
            for paper in PAPERS
        },
        claims_md=expand("results/claims/{paper}.md", paper=[p.name for p in PAPERS]),
    log:
        "results/logs/report.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report report --profile {PROFILE} --summary {input.summary} "
        "--out {output.md} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(REPORT_STAMP, rules.report.output)


# The cost plan (`pdelab plan`, pdelab.plan): FLOPs, peak memory, GPU- or core-hours and card fit
# of every training job of the run profile, per study and in total, before any of them runs. A
# job's cost is its spec's and its code's: the rule reads the params (params.yaml and each
# paper's config.yaml) and the source each run executes (pdelab.records.provenance), the prepared
# manifests where they exist (else the shapes the params declare) and
# results/plan/measured.json where present: its recipe (pdelab.records.made). Step counts are
# cached in results/plan/cache.json, keyed by model, batch and code. The run records whose step
# times it reads (every trained CPU run; CUDA runs where measured.json names records_gpu) are
# not in it: training does not make the plan again. The recipe is a function, so a run that
# does not ask for the plan does not work it out.


PLAN_STAMP = stamped(
    "plan",
    code=lambda wc: [
        "pdelab.cli",
        "pdelab.plan.__main__",
        provenance.CORE_ENTRY,
        *sorted({m for spec in SPECS.values() for m in provenance.mechanism_modules(spec)}),
    ],
    files=lambda wc: [*PARAMS_FILES, *(f for f in ["results/plan/measured.json"] if Path(f).exists())],
    shapes=plan_shapes,
)


rule plan:
    input:
        stamp=PLAN_STAMP,
    output:
        md="results/plan.md",
        data="results/plan.json",  # written beside the Markdown
    # the smoke profile's small models count fastest in the warm process itself; a GPU
    # profile's (minutes on one core) in worker processes
    threads: 8 if config["profiles"][PROFILE].get("device") == "cuda" else 1
    log:
        "results/logs/plan.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.cli --profile {PROFILE} plan --format md --out {output.md} "
        "--workers {threads} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"
