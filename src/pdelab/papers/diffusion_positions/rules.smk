# Where to Add PDE Diffusion: the Layer I theory checks and the diagnostics of trained models.
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names.

DIAGNOSED = [s for s in STUDIES if config["studies"][s].get("diagnose")]
DIAGNOSED_TASKS = sorted({t for s in DIAGNOSED for t in config["studies"][s]["tasks"]})
PAPER_DIR = "src/pdelab/papers/diffusion_positions"


def diagnosed_runs(task):
    """Run folders of a task in the studies marked `diagnose: true`."""
    return [
        RUN_DIR.format(profile=PROFILE, task=t, variant=v, seed=s)
        for t, v, s in RUNS
        if t == task and any(v in config["studies"][d]["variants"] for d in DIAGNOSED)
    ]


rule diagnose:
    """Roughness and diffusion-attention commutators of one task's trained models."""
    input:
        lambda wc: [f"{d}/result.parquet" for d in diagnosed_runs(wc.task)],
    output:
        "results/diagnostics/{task}.parquet",
    params:
        dirs=lambda wc: diagnosed_runs(wc.task),
    log:
        "results/logs/diagnose/{task}.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.papers.diffusion_positions.diagnostics "
        "measure {params.dirs} --out {output} --n-examples 16 > {log} 2>&1"


rule diagnostics:
    input:
        parts=expand("results/diagnostics/{task}.parquet", task=DIAGNOSED_TASKS),
        summary="results/summary.parquet",
    output:
        png="results/figures/diagnostics.png",
        table="results/tables/diagnostics.md",
    log:
        "results/logs/diagnostics.log",
    shell:
        "python -m pdelab.papers.diffusion_positions.diagnostics summarize {input.parts} "
        "--summary {input.summary} --png {output.png} --table {output.table} > {log} 2>&1"


rule theory:
    """Layer I checks of the diffusion operator (no training): figure and table."""
    input:
        sorted(Path(PAPER_DIR).glob("theory*.py")),
        "src/pdelab/models/diffusion.py",
    output:
        figure="results/figures/theory.png",
        table="results/tables/theory.md",
    log:
        "results/logs/theory.log",
    shell:
        "python -m pdelab.papers.diffusion_positions.theory_report --out {output.figure} "
        "--table {output.table} > {log} 2>&1"
