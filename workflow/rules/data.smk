# Data: DVC owns data/. dvc.yaml holds one fetch and one prepare stage per (task, run profile);
# `dvc repro` alone rebuilds the same files. The workflow runs the same two commands itself, one
# job per task and in parallel (`python -m pdelab.data build`: fetch, prepare, verify), since `dvc
# repro` holds a repository-wide lock and pays its start-up on every call; one `dvc commit` job
# then records every stage in dvc.lock and DVC's cache, so `dvc status` is clean and `dvc
# push`/`checkout` work as after `dvc repro`. The training jobs read only the manifest, whose
# content hash changes exactly when the data does. Each data job checks every prepared file against
# the manifest's size and sha256 (pdelab.data verify), and every load checks the sizes again, so a
# file corrupted later stops the first job that reads it, naming the file and the repair.


rule data:
    input:
        "dvc.yaml",
        DATA_CODE,
    output:
        manifest="data/{profile}/prepared/{task}/manifest.json",
    params:
        spec=lambda wc: json.dumps(config["data"][wc.profile][wc.task], sort_keys=True),
    log:
        "results/logs/data/{profile}/{task}.log",
    priority: 100  # the training jobs wait for it
    shell:
        "python -m pdelab.warm pdelab.data build {wildcards.task} --profile {wildcards.profile} "
        "> {log} 2>&1"


rule dvc_commit:
    """Record the data jobs' stages in dvc.lock and DVC's cache, as `dvc repro` would have."""
    input:
        "dvc.yaml",
        expand("data/{profile}/prepared/{task}/manifest.json", profile=PROFILE, task=TASKS),
    output:
        f"results/data/dvc_commit-{PROFILE}.txt",
    params:
        stages=" ".join(f"fetch@{t} prepare@{t}" for t in TASKS),
    log:
        f"results/logs/data/{PROFILE}/dvc_commit.log",
    resources:
        dvc_lock=1,  # DVC takes a repository-wide lock
    shell:
        "python -m pdelab.dvc_stages --commit {params.stages} > {log} 2>&1 "
        "&& echo {params.stages} > {output}"
