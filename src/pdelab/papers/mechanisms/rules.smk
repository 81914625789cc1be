# The mechanisms study's step time and memory: every mechanism of a task timed in one process,
# interleaved and paired with the baseline (the training jobs share the cores, so their own
# step times measure the load they met). The timing tool is the cost study's
# (pdelab.papers.diffusion_positions.cost, which knows no mechanism by name), run over this
# study's variants. Included by the Snakefile; uses common.smk's names (config, PROFILE).

from pdelab.papers.mechanisms import TIMING_FILE
from pdelab.run_sheet import study_runs

MECH_STUDIES = [s for s, c in config["studies"].items() if c.get("kind") == "mechanisms"]


def mechanisms_variants(task):
    """The variants the mechanisms studies run on a task in this profile, baselines first."""
    found = []
    for name in MECH_STUDIES:
        runs = {r.variant for r in study_runs(config, name, PROFILE) if r.task == task}
        rows = [config["studies"][name].get("baseline", "baseline"), *config["studies"][name]["rows"].values()]
        found += [v for v in rows if v in runs]
    return list(dict.fromkeys(found))


def mechanisms_baseline(task):
    names = {config["studies"][n].get("baseline", "baseline") for n in MECH_STUDIES}
    if len(names) != 1:
        raise WorkflowError(f"the mechanisms studies name different baselines: {names}")
    return names.pop()


rule mechanisms_timing:
    """Step time (and CUDA peak memory) of a task's mechanisms over the baseline, interleaved
    in one process."""
    input:
        data=f"data/{PROFILE}/prepared/{{task}}/manifest.json",
        code=[*sorted(Path("src/pdelab/models").glob("*.py")),  # and the papers' mechanisms
              *sorted(Path("src/pdelab/papers").glob("*/attention.py")),
              *sorted(Path("src/pdelab/papers").glob("*/layer.py")),
              "src/pdelab/papers/diffusion_positions/cost.py"],
    output:
        f"results/{TIMING_FILE.format(task='{task}')}",
    params:
        variants=lambda wc: " ".join(mechanisms_variants(wc.task)),
        baseline=lambda wc: mechanisms_baseline(wc.task),
    log:
        "results/logs/mechanisms_timing/{task}.log",
    threads: 1
    resources:
        gpu=1 if config["profiles"][PROFILE].get("device") == "cuda" else 0,
    shell:
        "OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m pdelab.papers.diffusion_positions.cost --task {wildcards.task} "
        "--profile {PROFILE} --variants {params.variants} --baseline {params.baseline} "
        "--repeats 30 --out {output} > {log} 2>&1"
