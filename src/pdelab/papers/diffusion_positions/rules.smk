# Where to Add PDE Diffusion: the Layer I theory checks, the diagnostics of trained models and
# the cost study's step timing.
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names.

from pdelab.papers.diffusion_positions import cost_timings

DIAGNOSED = [s for s in STUDIES.values() if s.get("diagnose")]
DIAGNOSED_TASKS = sorted({t for s in DIAGNOSED for t in s.tasks})
PAPER_DIR = "src/pdelab/papers/diffusion_positions"


# each diagnosed task's run folders: its runs in the studies marked `diagnose: true`
DIAGNOSED_RUNS = {
    task: [
        RUN_DIR.format(profile=PROFILE, task=t, variant=v, seed=s)
        for t, v, s in RUNS
        if t == task and any(v in d.variants for d in DIAGNOSED)
    ]
    for task in DIAGNOSED_TASKS
}


DIAGNOSED_KEYS = {  # each diagnosed task's runs, as (task, variant, seed)
    task: [(t, v, s) for t, v, s in RUNS if t == task and any(v in d.variants for d in DIAGNOSED)]
    for task in DIAGNOSED_TASKS
}


DIAGNOSE_STAMP = stamped(
    "diagnose",
    code=lambda wc: [  # the probe, and the mechanisms its runs' models import
        "pdelab.papers.diffusion_positions.diagnostics",
        *sorted({m for key in DIAGNOSED_KEYS[wc.task] for m in provenance.mechanism_modules(SPECS[key])}),
    ],
    inputs=lambda wc: [f"{d}/{f}" for d in DIAGNOSED_RUNS[wc.task] for f in RECORD_FILES],
    dirs=lambda wc: DIAGNOSED_RUNS[wc.task],
)


rule diagnose:
    """Roughness and diffusion-attention commutators of one task's trained models."""
    input:
        lambda wc: [f"{d}/result.parquet" for d in DIAGNOSED_RUNS[wc.task]],
        stamp=DIAGNOSE_STAMP,
    output:
        "results/diagnostics/{task}.parquet",
    params:
        dirs=lambda wc: DIAGNOSED_RUNS[wc.task],
    log:
        "results/logs/diagnose/{task}.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.runtime.warm "
        "pdelab.papers.diffusion_positions.diagnostics measure {params.dirs} --out {output} --n-examples 16 > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(DIAGNOSE_STAMP, rules.diagnose.output, task=DIAGNOSED_TASKS)
DIAGNOSTICS_PARTS = expand("results/diagnostics/{task}.parquet", task=DIAGNOSED_TASKS)
DIAGNOSTICS_STAMP = stamped(
    "diagnostics",
    code=["pdelab.papers.diffusion_positions.diagnostics"],
    inputs=[*DIAGNOSTICS_PARTS, "results/summary.parquet"],
)


rule diagnostics:
    input:
        parts=DIAGNOSTICS_PARTS,
        summary="results/summary.parquet",
        stamp=DIAGNOSTICS_STAMP,
    output:
        png=report_paper("results/figures/diagnostics.png", "diffusion_positions", "diagnostics", "diagnostics"),
        table=report_paper("results/tables/diagnostics.md", "diffusion_positions", "diagnostics", "diagnostics"),
        page=report_paper("results/tables/diagnostics.html", "diffusion_positions", "diagnostics", "diagnostics"),
        data=report_paper("results/tables/diagnostics.csv", "diffusion_positions", "diagnostics", "diagnostics"),
    log:
        "results/logs/diagnostics.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.papers.diffusion_positions.diagnostics summarize "
        "{input.parts} --summary {input.summary} --png {output.png} --table {output.table} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(DIAGNOSTICS_STAMP, rules.diagnostics.output)
THEORY_STAMP = stamped("theory", code=["pdelab.papers.diffusion_positions.theory_report"])


rule theory:
    """Layer I checks of the diffusion operator (no training): figure and table."""
    input:
        stamp=THEORY_STAMP,
    output:
        figure=report_paper("results/figures/theory.png", "diffusion_positions", "theory", "theory"),
        table=report_paper("results/tables/theory.md", "diffusion_positions", "theory", "theory"),
        page=report_paper("results/tables/theory.html", "diffusion_positions", "theory", "theory"),
        data=report_paper("results/tables/theory.csv", "diffusion_positions", "theory", "theory"),
    log:
        "results/logs/theory.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.papers.diffusion_positions.theory_report "
        "--out {output.figure} --table {output.table} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(THEORY_STAMP, rules.theory.output)


# The cost study (Table 9): every variant's training step timed interleaved in one process
# (pdelab.plan.step_timing), alone on the machine, since step times of jobs sharing it measure
# their load.


COST = cost_timings(STUDIES.values(), config, PROFILE)  # task -> what its timing compares
# every core Snakemake may use, so no other job runs beside the timing; a cluster run sets no
# core count (1 here): give the rule a node of its own in the Snakemake profile
try:
    ALL_CORES = workflow.cores
except WorkflowError:
    ALL_CORES = 1


COST_TIMING_STAMP = stamped(
    "cost_timing",
    code=lambda wc: [
        "pdelab.plan.step_timing",
        provenance.CORE_ENTRY,
        *sorted(
            {
                m
                for (t, v, _), spec in SPECS.items()
                if t == wc.task and v in COST[wc.task].variants
                for m in provenance.mechanism_modules(spec)
            }
        ),
    ],
    inputs=lambda wc: [f"data/{PROFILE}/prepared/{wc.task}/manifest.json"],
    variants=lambda wc: " ".join(COST[wc.task].variants),
    baseline=lambda wc: COST[wc.task].baseline,
    timing=lambda wc: " ".join(f"--{k} {v}" for k, v in COST[wc.task].settings.items()),
    specs=lambda wc: COST[wc.task].specs,
)


rule cost_timing:
    """Step time (and CUDA peak memory) of a task's cost-study variants over the baseline."""
    input:
        data=f"data/{PROFILE}/prepared/{{task}}/manifest.json",
        stamp=COST_TIMING_STAMP,
    output:
        "results/cost/{task}.parquet",
    params:
        variants=lambda wc: " ".join(COST[wc.task].variants),
        baseline=lambda wc: COST[wc.task].baseline,
        timing=lambda wc: " ".join(f"--{k} {v}" for k, v in COST[wc.task].settings.items()),
        threads=lambda wc: COST[wc.task].settings["threads"],
        specs=lambda wc: COST[wc.task].specs,
    log:
        "results/logs/cost/{task}.log",
    threads: ALL_CORES
    resources:  # a GPU of its own on a CUDA profile: pdelab.runtime.gpu_job takes its slot
        gpu=cluster.gpu_count(config, PROFILE),
        gpu_percent=100 * cluster.gpu_count(config, PROFILE),  # whole GPUs (pdelab.runtime.gpu_slots)
        mem_mb=cluster.probe_need(config, PROFILE).mem_mb,
        runtime=cluster.probe_need(config, PROFILE).runtime,
    shell:
        "OMP_NUM_THREADS={params.threads} MKL_NUM_THREADS={params.threads} "
        "python -m pdelab.runtime.gpu_job {resources.gpu} python -m pdelab.plan.step_timing --task {wildcards.task} "
        "--profile {PROFILE} --variants {params.variants} --baseline {params.baseline} "
        "{params.timing} --out {output} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(COST_TIMING_STAMP, rules.cost_timing.output, task=sorted(COST))
