# Fractional Neural Attention: the analyses that need no trained model (Figs 2a-c).
# Included by the Snakefile when params.yaml has a study of this paper. Names here are global
# to the workflow, hence the fna_ prefix.

FNA_DIR = "src/pdelab/papers/fractional_attention"


rule fna_theory:
    """Fig 2a (the S^1 spectrum against j^alpha) and Fig 2b/c (the three-cluster toy graph):
    claims with verdicts, tables (md, tex, csv) and figures."""
    input:
        [f"{FNA_DIR}/{m}.py" for m in ("spectrum", "toy_graph", "graphs", "theory_report")],
        "src/pdelab/report/tables.py",
    output:
        table="results/tables/fna_theory.md",
        tex="results/tables/fna_theory.tex",
        claims="results/tables/fna_theory.csv",
        spectrum="results/figures/fna_spectrum.png",
        toy_graph="results/figures/fna_toy_graph.png",
    log:
        "results/logs/fna_theory.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m pdelab.papers.fractional_attention.theory_report --out-dir results "
        "> {log} 2>&1"
