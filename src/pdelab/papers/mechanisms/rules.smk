# The mechanisms study's step time and memory: every mechanism of a task timed in one process,
# interleaved and paired with the baseline (the training jobs share the cores, so their own
# step times measure the load they met). The timing tool is the cost study's
# (pdelab.plan.step_timing, which knows no mechanism by name), run over this
# study's variants. Included by the Snakefile; uses common.smk's names (config, PROFILE).

from pdelab.papers.mechanisms import TIMING_FILE, timing_baseline, timing_variants

MECHANISMS_TIMING_STAMP = stamped(
    "mechanisms_timing",
    code=lambda wc: [
        "pdelab.plan.step_timing",
        provenance.CORE_ENTRY,
        *sorted(
            {
                m
                for (t, v, _), spec in SPECS.items()
                if t == wc.task and v in timing_variants(STUDIES.values(), wc.task)
                for m in provenance.mechanism_modules(spec)
            }
        ),
    ],
    inputs=lambda wc: [f"data/{PROFILE}/prepared/{wc.task}/manifest.json"],
    variants=lambda wc: " ".join(timing_variants(STUDIES.values(), wc.task)),
    baseline=lambda wc: timing_baseline(STUDIES.values()),
)


rule mechanisms_timing:
    """Step time (and CUDA peak memory) of a task's mechanisms over the baseline, interleaved
    in one process."""
    input:
        data=f"data/{PROFILE}/prepared/{{task}}/manifest.json",
        stamp=MECHANISMS_TIMING_STAMP,
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
        gpu_percent=100 * cluster.gpu_count(config, PROFILE),  # whole GPUs (pdelab.runtime.gpu_slots)
        mem_mb=cluster.probe_need(config, PROFILE).mem_mb,
        runtime=cluster.probe_need(config, PROFILE).runtime,
    shell:
        "OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "python -m pdelab.runtime.gpu_job {resources.gpu} python -m pdelab.plan.step_timing --task {wildcards.task} "
        "--profile {PROFILE} --variants {params.variants} --baseline {params.baseline} "
        "--repeats 30 --out {output} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(
    MECHANISMS_TIMING_STAMP,
    rules.mechanisms_timing.output,
    task=sorted({t for s in STUDIES.values() if s.kind == "mechanisms" for t in s.tasks}),
)
