# The mechanisms study's step time and memory: every mechanism of a task timed in one process,
# interleaved and paired with the baseline (the training jobs share the cores, so their own
# step times measure the load they met). The timing tool is the cost study's
# (pdelab.plan.step_timing, which knows no mechanism by name), run over this
# study's variants. Included by the Snakefile; uses common.smk's names (config, PROFILE).

from pdelab.papers.mechanisms import TIMING_FILE, timing_baseline, timing_variants

rule mechanisms_timing:
    """Step time (and CUDA peak memory) of a task's mechanisms over the baseline, interleaved
    in one process."""
    input:
        data=f"data/{PROFILE}/prepared/{{task}}/manifest.json",
        code=[*sorted(Path("src/pdelab/models").glob("*.py")),  # and the papers' mechanisms
              *sorted(Path("src/pdelab/papers").glob("*/attention.py")),
              *sorted(Path("src/pdelab/papers").glob("*/layer.py")),
              "src/pdelab/plan/step_timing.py"],
    output:
        f"results/{TIMING_FILE.format(task='{task}')}",
    params:
        variants=lambda wc: " ".join(timing_variants(STUDIES.values(), wc.task)),
        baseline=lambda wc: timing_baseline(STUDIES.values()),
    log:
        "results/logs/mechanisms_timing/{task}.log",
    threads: 1
    resources:  # a GPU of its own on a CUDA profile: pdelab.runtime.gpu_job takes its slot
        gpu=cluster.gpu_count(config, PROFILE),
        mem_mb=cluster.probe_need(config, PROFILE).mem_mb,
        runtime=cluster.probe_need(config, PROFILE).runtime,
    shell:
        "OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m pdelab.runtime.gpu_job {resources.gpu} python -m pdelab.plan.step_timing --task {wildcards.task} "
        "--profile {PROFILE} --variants {params.variants} --baseline {params.baseline} "
        "--repeats 30 --out {output} > {log} 2>&1"
