# Training: one job per (task, variant, seed) at a fixed path. Data flows one way: the workflow
# resolves each run's spec when it parses and writes it, with the code digest and data hash, to
# the run's plan (results/stamps/..., pdelab.records.staleness); the job trains that plan as written and
# records it in run.json, and the plan's date, from the records, decides what reruns, so a
# params change reruns exactly the jobs whose spec changed. No param holds the spec: a dry
# run names the plan, `pdelab status` says what changed. MLflow: with the run profile's
# `tracking: live` each training job logs as it goes; with `tracking: batch` the jobs write only
# their records (the mode is on their command line, TRAIN_OPTIONS). In both modes one
# mlflow_sync job per experiment (per task) then logs every run MLflow lacks from its records (all
# of them in batch mode; in live mode, any whose logging failed) and sets the runs' study tags, and
# mlflow_report logs each study's tables and figures once; `rule all` waits for MLFLOW_SYNCED. The
# train rule is the same in both modes, so switching retrains nothing. The store's address
# (MLFLOW_TRACKING_URI, or the project's SQLite store) and the experiments' project
# (PDELAB_MLFLOW_PROJECT, default pdelab) are params of the MLflow rules: pointing a finished
# tree at another tracking server, or naming another project, logs every run there.
from pdelab.spec.config import compile_mode, gpu_memory_gb, tracking_mode
from pdelab.records.run import RECORD_FILES, tracking_uri
from pdelab.tracking.log import experiment_name, project_name, report_experiment
from pdelab.tracking.store import MLFLOW_DIR, planned_id, read_only, unwritable_message
from pdelab.tracking.sync import memberships

MLFLOW_STORE = "results/mlflow/experiments.json"
MLFLOW_URI = tracking_uri(shown=True)  # the project's store relative: a copied tree keeps it
MLFLOW_PROJECT = project_name()
MLFLOW_SYNCED = [f"results/mlflow/synced/{experiment_name(t, PROFILE)}.json" for t in TASKS] + [
    "results/mlflow/report.json"
]
# MLflow is for browsing only: a store folder that cannot be written (a few access() calls)
# leaves the MLflow rules out of this run, with the fix, instead of stopping the workflow
# (Snakemake cannot even clear a stale output there); training and the report go on.
if (MLFLOW_READ_ONLY := read_only()) is not None:
    MLFLOW_SYNCED = []
    MLFLOW_NOTE = unwritable_message(MLFLOW_DIR, MLFLOW_READ_ONLY)
    print(f"MLflow is left out of this run: {MLFLOW_NOTE}", file=sys.stderr)
STUDIES_OF = memberships(config, PROFILE, list(SPECS.values()))  # (t, v, seed) -> studies
# How the jobs run, not what they train (the MLflow mode, torch.compile, the card the cost
# plan's fit is for): on the command line rather than in params, so switching any retrains
# nothing.
try:
    TRAIN_OPTIONS = f"--tracking {tracking_mode(config, PROFILE)}"
    TRAIN_OPTIONS += f" --compile {compile_mode(config, PROFILE)}"
    if (CARD_GB := gpu_memory_gb(config, PROFILE)) is not None:
        TRAIN_OPTIONS += f" --card-gb {CARD_GB:g}"
except ConfigError as err:
    raise WorkflowError(f"invalid params.yaml: {err}") from None


localrules:
    mlflow_store,
    mlflow_sync,
    mlflow_report,


MLFLOW_STORE_ID = planned_id()  # once a parse: a new one is random
MLFLOW_STORE_STAMP = stamped(
    "mlflow_store",
    code=["pdelab.tracking.__main__"],
    names=sorted({experiment_name(t, PROFILE) for t in TASKS}),
    store=MLFLOW_STORE_ID,
    uri=MLFLOW_URI,
)


rule mlflow_store:
    """Create the MLflow store and experiments (the syncs wait for it; training does not: a
    live job makes what it needs itself, and a store that cannot be made only fails the MLflow
    rules). `store` is the id of the database there, read when the workflow parses
    (pdelab.tracking.store.planned_id): a database deleted or replaced has another, so this
    rule and every sync run again, and log every run from its records."""
    input:
        stamp=MLFLOW_STORE_STAMP,
    output:
        MLFLOW_STORE,
    params:
        names=sorted({experiment_name(t, PROFILE) for t in TASKS}),
        store=MLFLOW_STORE_ID,
    log:
        "results/logs/mlflow_store.log",
    priority: 100  # first, so that live training jobs find the store made
    shell:
        "python -m pdelab.runtime.warm pdelab.tracking init --store-id {params.store} --out {output} "
        "{params.names} > {log} 2>&1 && python -m pdelab.records.made {input.stamp} {output}"


produces(MLFLOW_STORE_STAMP, [MLFLOW_STORE])


# Each training job is started warm: `python -m pdelab.runtime.warm` forks it from a server that has torch
# imported (an import a fresh interpreter would pay per job, longer than a smoke run trains; see
# src/pdelab/runtime/warm.py). It runs cold, the same command in its own interpreter, with PDELAB_WARM=0
# and in SLURM jobs. Every other job starts the same way (pandas, matplotlib and mlflow load once),
# except the step timings (cost_timing, mechanisms_timing), which run in an interpreter of their
# own. A job the cost plan puts on N GPUs of one node (results/plan.json's `gpus`, from the run
# profile's `multi_gpu` threshold) runs `torchrun --standalone --nproc-per-node N -m
# pdelab.training.train` instead, after pdelab.runtime.gpu_job took its N GPU slots (none under
# SLURM), asks for gpu=N and N CPUs (SLURM: --gpus=N), and shares its --threads among the N
# processes. N is how the run is computed, not what it is: the launch is a params function of
# the input, which Snakemake keeps out of its params trigger, so a changed N retrains nothing
# (pdelab.runtime.cluster).
rule train:
    input:
        data=lambda wc: f"data/{wc.profile}/prepared/{wc.task}/manifest.json",
        plan=plan_stamp,  # what the job trains; dated after the outputs when run.json is not it
    output:
        metrics=f"{RUN_DIR}/metrics.parquet",
        result=f"{RUN_DIR}/result.parquet",
        record=f"{RUN_DIR}/run.json",
    params:
        planned=plan_digest,  # the plan as this workflow read it (derived: no rerun trigger)
        out=RUN_DIR,
        # warm, or torchrun's N processes (derived: no rerun trigger; see above)
        launch=lambda wc, input: cluster.train_launch(
            cluster.train_processes(config, PROFILE, wc), cluster.train_gpus(config, PROFILE, wc)
        ),
    log:
        "results/logs/train/{profile}/{task}/{variant}/seed{seed}.log",
    threads: lambda wc: cluster.train_processes(config, PROFILE, wc)  # one CPU per process
    resources:  # from the cost plan where it has the run (pdelab.runtime.cluster); gpu: pdelab.runtime.gpu_slots
        # whole GPUs, or a share of one sized by the plan's memory (common.smk: train_gpu_share)
        gpu=lambda wc: train_gpu_share(wc).gpu,
        gpu_percent=lambda wc: train_gpu_share(wc).percent,
        gpu_share_mib=lambda wc: train_gpu_share(wc).mib,
        gres=lambda wc: train_gpu_share(wc).gres,  # SLURM shards (None: not asked)
        slurm_partition=lambda wc: train_gpu_share(wc).partition,  # None: the plugin's choice
        mem_mb=lambda wc: cluster.train_need(config, PROFILE, wc).mem_mb,
        runtime=lambda wc: cluster.train_need(config, PROFILE, wc).runtime,
    shell:
        "PDELAB_GPU_SHARE_MIB={resources.gpu_share_mib} "  # 0: whole GPUs (pdelab.runtime.gpu_slots)
        "{params.launch} --plan {input.plan} --plan-digest {params.planned} "
        "--out {params.out} {TRAIN_OPTIONS} --threads {threads} --no-progress > {log} 2>&1 "
        "&& touch -d @0 {input.plan}"  # current now (pdelab.records.staleness)


for run_key in RUNS:  # each run's records are made by its training job
    for name in RECORD_FILES:
        PRODUCERS[f"{RUN_DIR}/{name}".format(profile=PROFILE, task=run_key[0], variant=run_key[1], seed=run_key[2])] = (
            lambda key=run_key: run_current(key)
        )


MLFLOW_SYNC_STAMP = stamped(
    "mlflow_sync",
    code=["pdelab.tracking.__main__"],
    inputs=lambda wc: [MLFLOW_STORE, *task_records(wc)],
    uri=MLFLOW_URI,
    studies=task_studies,
)


rule mlflow_sync:
    """Log one experiment's finished runs to MLflow from their records; runs already logged
    from the same records are skipped, changed ones replaced (pdelab.tracking.sync)."""
    input:
        store=MLFLOW_STORE,  # a store made afresh (new experiments) is synced again
        records=lambda wc: task_records(wc),
        stamp=MLFLOW_SYNC_STAMP,
    output:
        f"results/mlflow/synced/{MLFLOW_PROJECT}-{{task}}-{{profile}}.json",
    params:
        dirs=lambda wc: task_run_dirs(wc.task),
        uri=MLFLOW_URI,
        studies=task_studies,
    log:
        f"results/logs/mlflow_sync/{MLFLOW_PROJECT}-{{task}}-{{profile}}.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.tracking sync {params.dirs} --out {output} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


MLFLOW_REPORT_STAMP = stamped(
    "mlflow_report",
    code=["pdelab.tracking.__main__"],
    inputs=lambda wc: [MLFLOW_STORE, *report_files()],
    uri=MLFLOW_URI,
    experiment=report_experiment(PROFILE),
)


rule mlflow_report:
    """Each study's tables and figures (and each paper's own outputs) as one run of the
    run profile's report experiment, logged once; unchanged files are not logged again."""
    input:
        store=MLFLOW_STORE,
        report="results/REPORT.md",  # every table and figure is built
        stamp=MLFLOW_REPORT_STAMP,
    output:
        "results/mlflow/report.json",
    params:
        uri=MLFLOW_URI,
        experiment=report_experiment(PROFILE),
    log:
        "results/logs/mlflow_report.log",
    shell:
        "python -m pdelab.runtime.warm pdelab.tracking report --out {output} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(MLFLOW_SYNC_STAMP, rules.mlflow_sync.output, profile=[PROFILE], task=TASKS)
produces(MLFLOW_REPORT_STAMP, rules.mlflow_report.output)
