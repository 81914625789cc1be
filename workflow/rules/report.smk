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


rule aggregate:
    input:
        results=run_files("result.parquet"),
        code=code_of(REPORT_CODE),
    output:
        summary="results/summary.parquet",
        curves="results/curves.parquet",  # every run's epochs (pdelab.report.curves)
    params:
        same_run=json.dumps(sorted(f"{t}/{v}/{s}={c}" for (t, v, s), c in SAME_RUN.items())),
    log:
        "results/logs/aggregate.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report aggregate {input.results} --profile {PROFILE} "
        "--out {output.summary} --curves {output.curves} "
        "> {log} 2>&1"


rule study:
    input:
        summary="results/summary.parquet",
        curves="results/curves.parquet",
        extra=study_inputs,
        code=study_code,
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
        "> {log} 2>&1"


rule heatmap:
    input:
        summary="results/summary.parquet",
        code=study_code,
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
        "--summary {input.summary} --out {output} > {log} 2>&1"


rule learning:
    """Does each task's model learn? Its test score against the input-blind predictor's on
    the same test set; under a run profile's `learning` block a task that does not learn fails
    the build, naming the task and both numbers."""
    input:
        summary="results/summary.parquet",
        data=expand("data/{profile}/prepared/{task}/manifest.json", profile=PROFILE, task=TASKS),
        code=code_of("pdelab.report.learning"),
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
        rule=json.dumps(config["profiles"][PROFILE].get("learning", {}), sort_keys=True),
    log:
        "results/logs/learning.log",
    resources:  # tables and figures from Parquet: small and quick (pdelab.runtime.cluster)
        mem_mb=cluster.SMALL.mem_mb,
        runtime=cluster.SMALL.runtime,
    shell:
        "python -m pdelab.runtime.warm pdelab.report.learning --summary {input.summary} "
        "--profile {PROFILE} --out {output.md} > {log} 2>&1 || {{ cat {log} >&2; exit 1; }}"


rule report:
    input:
        papers=PAPER_OUTPUTS,
        learning="results/tables/learning.md",
        summary="results/summary.parquet",
        tables=expand("results/tables/{study}.md", study=STUDIES),
        figures=expand("results/figures/{study}.png", study=STUDIES),
        curves=expand("results/figures/{study}_curves.png", study=STUDIES),
        heatmaps=expand("results/figures/{study}_heatmap.png", study=HEATMAP_STUDIES),
        code=code_of(REPORT_CODE, *(f"{p.package}.report" for p in PAPERS)),
        numbers=paper_numbers(*PAPERS),
    output:
        md=report(
            "results/REPORT.md",
            caption=f"{REPORT_CAPTIONS}/report_md.rst",
            category="Pipeline checks",
            subcategory="REPORT.md",
        ),
        long=directory("results/report"),  # the whole of each table REPORT.md shows cut
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
        "--out {output.md} > {log} 2>&1"


# The cost plan (`pdelab plan`, pdelab.plan): FLOPs, peak memory, GPU- or core-hours and card fit
# of every training job of the run profile, per study and in total, before any of them runs. A
# job's cost is its spec's and its code's: the rule reads the params (params.yaml and each
# paper's config.yaml) and the source each run executes (pdelab.records.provenance), the prepared
# manifests where they exist (else the shapes the params declare) and
# results/plan/measured.json where present. Step counts are cached
# in results/plan/cache.json, keyed by model, batch and code. The run records whose step times
# it reads (every trained CPU run; CUDA runs where measured.json names records_gpu) are no
# inputs: training does not make the plan again. The inputs are functions, so a run that does
# not ask for the plan does not work them out.


rule plan:
    input:
        params=PARAMS_FILES,
        code=lambda wc: sorted(
            {f"src/{f}" for spec in SPECS.values() for f in provenance.code_files(spec)}
            | {f"src/pdelab/plan/{p.name}" for p in Path("src/pdelab/plan").glob("*.py")}
            | {"src/pdelab/plan/shapes.py", "src/pdelab/plan/card_fit.py"}
        ),
        measured=lambda wc: [f for f in ["results/plan/measured.json"] if Path(f).exists()],
    output:
        md="results/plan.md",
        data="results/plan.json",  # written beside the Markdown
    params:
        # where each task's shapes come from: its prepared data's hash, or "" (declared)
        shapes=lambda wc: json.dumps(
            {
                t: load_manifest(data_dir(PROFILE, t))["content_hash"]
                if Path(data_dir(PROFILE, t), "manifest.json").exists()
                else ""
                for t in TASKS
            },
            sort_keys=True,
        ),
    # the smoke profile's small models count fastest in the warm process itself; a GPU
    # profile's (minutes on one core) in worker processes
    threads: 8 if config["profiles"][PROFILE].get("device") == "cuda" else 1
    log:
        "results/logs/plan.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.cli --profile {PROFILE} plan --format md --out {output.md} "
        "--workers {threads} > {log} 2>&1"
