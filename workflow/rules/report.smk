# Report: per-run Parquet -> results/summary.parquet -> each study's tables and figure ->
# results/REPORT.md. Only Parquet is read; MLflow is for people. A study is written by the
# paper that registered its kind; a paper's own rules (rules.smk in its package) add files
# that REPORT.md waits for (PAPER_OUTPUTS).


rule aggregate:
    input:
        run_files("result.parquet"),
    output:
        "results/summary.parquet",
    log:
        "results/logs/aggregate.log",
    shell:
        "python -m pdelab.report aggregate {input} --out {output} > {log} 2>&1"


rule study:
    input:
        "results/summary.parquet",
    output:
        md="results/tables/{study}.md",
        tex="results/tables/{study}.tex",
        figure="results/figures/{study}.png",
    params:
        study=lambda wc: json.dumps(config["studies"][wc.study], sort_keys=True),
    log:
        "results/logs/study/{study}.log",
    shell:
        "python -m pdelab.report study {wildcards.study} --profile {PROFILE} "
        "--summary {input} --md {output.md} --tex {output.tex} --figure {output.figure} "
        "> {log} 2>&1"


rule heatmap:
    input:
        "results/summary.parquet",
    output:
        "results/figures/{study}_heatmap.png",
    params:
        study=lambda wc: json.dumps(config["studies"][wc.study], sort_keys=True),
    log:
        "results/logs/heatmap/{study}.log",
    shell:
        "python -m pdelab.report heatmap {wildcards.study} --profile {PROFILE} "
        "--summary {input} --out {output} > {log} 2>&1"


rule report:
    input:
        papers=PAPER_OUTPUTS,
        summary="results/summary.parquet",
        tables=expand("results/tables/{study}.md", study=STUDIES),
        figures=expand("results/figures/{study}.png", study=STUDIES),
        heatmaps=expand("results/figures/{study}_heatmap.png", study=HEATMAP_STUDIES),
    output:
        "results/REPORT.md",
    log:
        "results/logs/report.log",
    shell:
        "python -m pdelab.report report --profile {PROFILE} --summary {input.summary} "
        "--out {output} > {log} 2>&1"
