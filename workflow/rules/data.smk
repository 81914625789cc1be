# Data: DVC owns data/. Each job runs the DVC stages of one (task, profile), so `dvc repro`
# alone rebuilds the same files and dvc.lock records their provenance. The training jobs read
# only the manifest, whose content hash changes exactly when the data does. Each data job then
# checks every prepared file against the manifest's size and sha256 (pdelab.data verify), and
# every load checks the sizes again, so a file corrupted later stops the first job that reads
# it, naming the file and the repair.


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
    resources:
        dvc_lock=1,  # DVC takes a repository-wide lock: one data job at a time
    shell:
        "dvc repro prepare@{wildcards.task} > {log} 2>&1 && "
        "python -m pdelab.data verify {wildcards.task} --profile {wildcards.profile} >> {log} 2>&1"
