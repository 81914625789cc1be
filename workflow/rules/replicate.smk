# The nondeterminism floor: one run per task trained again with its own seed on the same machine,
# as a replicate of that run (its JSON carries the run's identity; no run of its own, no records
# under results/runs). The run replicated is the task's first in the run sheet (the run profile's
# first variant and seed of it, pdelab.records.replicate.replicate_runs). The replicate is
# trained into a temporary folder from the spec the run's run.json records, so it reruns when the
# run is retrained (a new run.json) or when its own code changes; pdelab.report.floor reads the
# JSONs for the report's "Nondeterminism floor" paragraph and flags effects smaller than it.

from pdelab.records.replicate import replicate_runs

REPLICATED = replicate_runs(RUNS)  # task -> (task, variant, seed)
REPLICATES = [f"results/replicates/{PROFILE}/{task}.json" for task in sorted(REPLICATED)]


# One process, as the replicated run's training job (a run trained on N processes is replicated
# on one: its JSON records both executions); the run's own thread count, from its run.json.
REPLICATE_STAMP = stamped(
    "replicate",
    code=lambda wc: [
        "pdelab.training.replicate",
        *provenance.mechanism_modules(SPECS[REPLICATED[wc.task]]),
    ],
    inputs=replicate_inputs,
)


rule replicate:
    input:
        replicate_inputs,
        stamp=REPLICATE_STAMP,
    output:
        "results/replicates/{profile}/{task}.json",
    params:
        run=replicated_run_dir,
    log:
        "results/logs/replicate/{profile}/{task}.log",
    threads: 1
    resources:
        gpu=lambda wc: min(1, cluster.train_gpus(config, PROFILE, replicated_key(wc))),
        gpu_percent=lambda wc: 100 * min(1, cluster.train_gpus(config, PROFILE, replicated_key(wc))),
        mem_mb=lambda wc: cluster.train_need(config, PROFILE, replicated_key(wc)).mem_mb,
        # the run's time on one process: a run trained on N takes about N times its share
        runtime=lambda wc: cluster.train_need(config, PROFILE, replicated_key(wc)).runtime
        * cluster.train_processes(config, PROFILE, replicated_key(wc)),
    shell:
        "python -m pdelab.runtime.warm pdelab.training.replicate --run {params.run} "
        "--out {output} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(REPLICATE_STAMP, rules.replicate.output, profile=[PROFILE], task=sorted(REPLICATED))
