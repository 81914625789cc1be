# Where to Add PDE Diffusion: the Layer I theory checks, the diagnostics of trained models and
# the cost study's step timing.
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names.

from pdelab.config import resolve
from pdelab.papers.diffusion_positions import timing_settings

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
        "OMP_NUM_THREADS={threads} python -m pdelab.warm "
        "pdelab.papers.diffusion_positions.diagnostics measure {params.dirs} --out {output} --n-examples 16 > {log} 2>&1"


rule diagnostics:
    input:
        parts=expand("results/diagnostics/{task}.parquet", task=DIAGNOSED_TASKS),
        summary="results/summary.parquet",
    output:
        png=report_paper("results/figures/diagnostics.png", "diffusion_positions", "diagnostics", "diagnostics"),
        table=report_paper("results/tables/diagnostics.md", "diffusion_positions", "diagnostics", "diagnostics"),
    log:
        "results/logs/diagnostics.log",
    shell:
        "python -m pdelab.warm pdelab.papers.diffusion_positions.diagnostics summarize "
        "{input.parts} --summary {input.summary} --png {output.png} --table {output.table} > {log} 2>&1"


rule theory:
    """Layer I checks of the diffusion operator (no training): figure and table."""
    input:
        sorted(Path(PAPER_DIR).glob("theory*.py")),
        "src/pdelab/models/diffusion.py",
    output:
        figure=report_paper("results/figures/theory.png", "diffusion_positions", "theory", "theory"),
        table=report_paper("results/tables/theory.md", "diffusion_positions", "theory", "theory"),
    log:
        "results/logs/theory.log",
    shell:
        "python -m pdelab.warm pdelab.papers.diffusion_positions.theory_report "
        "--out {output.figure} --table {output.table} > {log} 2>&1"


# The cost study (Table 9): every variant's training step timed interleaved in one process
# (cost.py), alone on the machine, since step times of jobs sharing it measure their load.
COST_STUDIES = [c for c in config["studies"].values() if c.get("kind") == "cost"]


def cost_variants(task):
    """The variants the cost studies of a task compare, each once, in params.yaml order."""
    return list(dict.fromkeys(v for c in COST_STUDIES if task in c["tasks"] for v in c["variants"]))


def cost_baseline(task):
    """The baseline the ratios are taken over: one per task, whichever study names it."""
    names = {c.get("baseline", "baseline") for c in COST_STUDIES if task in c["tasks"]}
    if len(names) != 1:
        raise WorkflowError(f"the cost studies of {task} name different baselines: {names}")
    return names.pop()


def cost_settings(task):
    """The timing settings (repeats, warm-up, batches, threads) of the task's first cost study."""
    return timing_settings(next(c for c in COST_STUDIES if task in c["tasks"]))


def cost_specs(task):
    """What the timing depends on in each variant's resolved spec, so a change there reruns
    it while, say, a learning-rate change does not."""
    specs = {}
    for variant in cost_variants(task):
        spec = resolve(config, task, variant, 0, PROFILE).to_dict()
        specs[variant] = {k: spec[k] for k in ("model", "diffusion", "device")} | {
            k: spec["train"][k] for k in ("batch_size", "seq_len")
        }
    return json.dumps(specs, sort_keys=True)


def all_cores():
    """Every core Snakemake may use, so no other job runs beside the timing. A cluster run
    sets no core count (1 here): give the rule a node of its own in the executor's profile."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


rule cost_timing:
    """Step time (and CUDA peak memory) of a task's cost-study variants over the baseline."""
    input:
        data=f"data/{PROFILE}/prepared/{{task}}/manifest.json",
        code=[*sorted(Path("src/pdelab/models").glob("*.py")), f"{PAPER_DIR}/cost.py"],
    output:
        "results/cost/{task}.parquet",
    params:
        variants=lambda wc: " ".join(cost_variants(wc.task)),
        baseline=lambda wc: cost_baseline(wc.task),
        timing=lambda wc: " ".join(f"--{k} {v}" for k, v in cost_settings(wc.task).items()),
        threads=lambda wc: cost_settings(wc.task)["threads"],
        specs=lambda wc: cost_specs(wc.task),
    log:
        "results/logs/cost/{task}.log",
    threads: all_cores()
    resources:
        gpu=1 if config["profiles"][PROFILE].get("device") == "cuda" else 0,
    shell:
        "OMP_NUM_THREADS={params.threads} MKL_NUM_THREADS={params.threads} "
        "python -m pdelab.papers.diffusion_positions.cost --task {wildcards.task} "
        "--profile {PROFILE} --variants {params.variants} --baseline {params.baseline} "
        "{params.timing} --out {output} > {log} 2>&1"
