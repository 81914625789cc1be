# Fractional Neural Attention: Figs 2a-c (no training), what every FNA run trained (its model
# and curves, which the studies' tables read) and the z probe of trained models.
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names
# (config, PROFILE, RUN_DIR, SAME_RUN). Names here are global to the workflow: FNA_ prefix.

from pdelab.papers.fractional_attention import (
    CURVES_FILE,
    GRAPH_OUTPUTS,
    RUNS_FILE,
    STUDY_KINDS as FNA_KINDS,
    TAIL_OUTPUTS,
)
from pdelab.spec.run_sheet import pairs, trained_folders

FNA_DIR = "src/pdelab/papers/fractional_attention"
FNA_PACKAGE = "pdelab.papers.fractional_attention"
FNA_STUDIES = [s for s in STUDIES.values() if s.kind in FNA_KINDS]


# "task/variant/seed" -> the folder trained for it: every FNA study's runs, its tail_probe
# variants' runs, and the shallow study's runs
FNA_RUNS = trained_folders(FNA_STUDIES, SAME_RUN, RUN_DIR, PROFILE)
FNA_TAIL_RUNS = trained_folders(FNA_STUDIES, SAME_RUN, RUN_DIR, PROFILE, probe="tail_probe")
FNA_SHALLOW_RUNS = trained_folders(
    [s for s in FNA_STUDIES if s.kind == "fna_shallow"], SAME_RUN, RUN_DIR, PROFILE
)


FNA_THEORY_STAMP = stamped("fna_theory", code=["pdelab.papers.fractional_attention.theory_report"])


rule fna_theory:
    """Fig 2a (the S^1 spectrum against j^alpha) and Fig 2b/c (the three-cluster toy graph):
    claims with verdicts, tables (md, tex, csv) and figures."""
    input:
        stamp=FNA_THEORY_STAMP,
    output:  # THEORY_OUTPUTS (tests/test_fna_theory.py keeps them equal)
        table=report_paper("results/tables/fna_theory.md", "fractional_attention", "theory", "theory_table"),
        page=report_paper("results/tables/fna_theory.html", "fractional_attention", "theory", "theory_table"),
        tex=report_paper("results/tables/fna_theory.tex", "fractional_attention", "theory", "theory_table"),
        data=report_paper("results/tables/fna_theory.csv", "fractional_attention", "theory", "theory_table"),
        # the claims with verdicts, what the audit reads (a download in the report)
        claims=report_paper("results/tables/fna_theory_claims.csv", "fractional_attention", "theory", "theory_table"),
        spectrum=report_paper("results/figures/fna_spectrum.png", "fractional_attention", "theory", "spectrum"),
        toy_graph=report_paper("results/figures/fna_toy_graph.png", "fractional_attention", "theory", "toy_graph"),
    log:
        "results/logs/fna_theory.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m pdelab.runtime.warm pdelab.papers.fractional_attention.theory_report "
        "--out-dir results > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(FNA_THEORY_STAMP, rules.fna_theory.output)
FNA_RUN_RECORDS = [f"{d}/{f}" for d in sorted(set(FNA_RUNS.values())) for f in ("run.json", "metrics.parquet")]
FNA_RUNS_STAMP = stamped(
    "fna_runs",
    code=["pdelab.papers.fractional_attention.runs"],
    inputs=FNA_RUN_RECORDS,
    pairs=pairs(FNA_RUNS),
)


rule fna_runs:
    """Each FNA run's resolved model (d, layers, alpha, kappa, ...) and per-epoch history."""
    input:
        records=FNA_RUN_RECORDS,
        stamp=FNA_RUNS_STAMP,
    output:
        runs=f"results/{RUNS_FILE}",
        curves=f"results/{CURVES_FILE}",
    params:
        pairs=pairs(FNA_RUNS),
    log:
        "results/logs/fna_runs.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.papers.fractional_attention.runs --out-dir results "
        "{params.pairs} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(FNA_RUNS_STAMP, rules.fna_runs.output)
FNA_TAIL_INPUTS = [
    *(f"{d}/{f}" for d in sorted(set(FNA_TAIL_RUNS.values())) for f in RECORD_FILES),
    *sorted({f"data/{PROFILE}/prepared/{k.split('/')[0]}/manifest.json" for k in FNA_TAIL_RUNS}),
]
FNA_TAIL_STAMP = stamped(
    "fna_tail",
    code=["pdelab.papers.fractional_attention.tail", f"{FNA_PACKAGE}.attention"],
    inputs=FNA_TAIL_INPUTS,
    pairs=pairs(FNA_TAIL_RUNS),
)


rule fna_tail:
    """z = dist / kappa in the trained models of every study's tail_probe variants."""
    input:
        FNA_TAIL_INPUTS,
        stamp=FNA_TAIL_STAMP,
    output:
        [  # the tables and figure in Snakemake's report; the frames they are made from not
            report_paper(f"results/{f}", "fractional_attention", "z tail", "tail") if f.startswith(("tables/", "figures/"))
            else f"results/{f}"
            for f in TAIL_OUTPUTS.values()
        ],
    params:
        pairs=pairs(FNA_TAIL_RUNS),
    log:
        "results/logs/fna_tail.log",
    threads: 1
    resources:  # a GPU of its own on a CUDA profile: pdelab.runtime.gpu_job takes its slot
        gpu=cluster.gpu_count(config, PROFILE),
        gpu_percent=100 * cluster.gpu_count(config, PROFILE),  # whole GPUs (pdelab.runtime.gpu_slots)
        mem_mb=cluster.probe_need(config, PROFILE).mem_mb,
        runtime=cluster.probe_need(config, PROFILE).runtime,
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.runtime.gpu_job {resources.gpu} "
        "python -m pdelab.runtime.warm pdelab.papers.fractional_attention.tail "
        "--out-dir results --profile {PROFILE} --threads {threads} {params.pairs} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(FNA_TAIL_STAMP, rules.fna_tail.output)
FNA_GRAPHS_STAMP = stamped(
    "fna_graphs",
    code=[f"{FNA_PACKAGE}.graph_probe", f"{FNA_PACKAGE}.attention"],
    inputs=[f"{d}/{f}" for d in sorted(set(FNA_SHALLOW_RUNS.values())) for f in RECORD_FILES],
    pairs=pairs(FNA_SHALLOW_RUNS),
)


rule fna_graphs:
    """Figs 4-5 on the shallow study's trained one-layer models: edge ablation under both
    null conventions, spectral gaps, a diffusion map and shortest-path hop counts."""
    input:
        records=[f"{d}/result.parquet" for d in sorted(set(FNA_SHALLOW_RUNS.values()))],
        stamp=FNA_GRAPHS_STAMP,
    output:
        [  # the tables and figures in Snakemake's report; the frames they are made from not
            report_paper(f"results/{f}", "fractional_attention", "attention graphs", "graphs")
            if f.startswith(("tables/", "figures/"))
            else f"results/{f}"
            for f in GRAPH_OUTPUTS.values()
        ],
    params:
        pairs=pairs(FNA_SHALLOW_RUNS),
    log:
        "results/logs/fna_graphs.log",
    threads: 1
    resources:  # a GPU of its own on a CUDA profile: pdelab.runtime.gpu_job takes its slot
        gpu=cluster.gpu_count(config, PROFILE),
        gpu_percent=100 * cluster.gpu_count(config, PROFILE),  # whole GPUs (pdelab.runtime.gpu_slots)
        mem_mb=cluster.probe_need(config, PROFILE).mem_mb,
        runtime=cluster.probe_need(config, PROFILE).runtime,
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.runtime.gpu_job {resources.gpu} python -m pdelab.runtime.warm "
        "pdelab.papers.fractional_attention.graph_probe --out-dir results --profile {PROFILE} --threads {threads} {params.pairs} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(FNA_GRAPHS_STAMP, rules.fna_graphs.output)
