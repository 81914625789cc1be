# Data: DVC owns data/. dvc.yaml holds one fetch and one prepare stage per (task, run profile);
# `dvc repro` alone rebuilds the same files. The workflow runs the same two commands itself, one
# job per task and in parallel (`python -m pdelab.data build`: fetch, prepare, verify), since `dvc
# repro` holds a repository-wide lock and pays its start-up on every call; one `dvc commit` job
# then records every stage in dvc.lock and DVC's cache, so `dvc status` is clean and `dvc
# push`/`checkout` work as after `dvc repro`. The training jobs read only the manifest, whose
# content hash changes exactly when the data does. Each data job checks every prepared file against
# the manifest's size and sha256 (pdelab.data verify), and every load checks the sizes again, so a
# file corrupted later stops the first job that reads it, naming the file and the repair.
#
# Data that cannot be had: before any job starts (onstart: not in a dry run), the data jobs this
# run would start are checked against the disk, and by one connection attempt per server they
# download from. A task whose data job would fail (a source path that does not exist, an
# unpinned release not allowed, a server out of reach) stops the run there with that task's
# status: what is missing, where a copy goes, the params.yaml key (pdelab.data.sources).
# PDELAB_DATA_CHECK=0 skips the check. A data job that fails anyway prints the same status, and
# Snakemake starts no job that needs its output; a failed run ends with one line per task whose
# data job it planned and whose data is still missing (onerror).
from pdelab.runtime import cluster  # what each rule asks a cluster for; a SLURM run's status checks
from pdelab.data import sources as data_sources
from pdelab.data.sources import data_status
from pdelab.runtime.gpu_slots import no_gpu_here

DATA_PLANNED = []  # the tasks whose data job this run starts (set by onstart)


onstart:
    if workflow.executor_plugin.name == "slurm":  # before the first sbatch (pdelab.runtime.cluster)
        try:
            print(cluster.prepare_slurm(workflow), file=sys.stderr)
        except ValueError as unsafe:  # a cluster whose job states cannot be read: stop now
            raise WorkflowError(str(unsafe)) from None
    planned = list(workflow.dag.needrun_jobs())
    trains = sum(j.rule.name == "train" for j in planned)
    device = config["profiles"][PROFILE].get("device")
    if trains and workflow.local_exec and (problem := no_gpu_here(device, PROFILE, trains)):
        raise WorkflowError(problem)  # a GPU profile where none is visible: stop once, now
    DATA_PLANNED[:] = sorted({j.wildcards.task for j in planned if j.rule.name == "data"})
    if DATA_PLANNED and os.environ.get("PDELAB_DATA_CHECK", "1") != "0":
        statuses = data_status(config, PROFILE, DATA_PLANNED)
        if blocked := data_sources.cannot_build(statuses):
            raise WorkflowError(data_sources.blocked_report(blocked, PROFILE))


onerror:
    statuses = data_status(config, PROFILE, DATA_PLANNED)
    if summary := data_sources.missing_summary(statuses, PROFILE):
        print(summary, file=sys.stderr)
    print("\n".join(end_of_build(log)), file=sys.stderr)


onsuccess:
    print("\n".join(end_of_build()), file=sys.stderr)


# A data job's recipe (pdelab.records.made) is the code it executes (pdelab.runtime.dvc_stages.
# data_job_code: its command and its task's module, read from the imports, but download.py,
# whose files are named by their checksums), its params block and the bytes of the user's own
# files a `source:` path names, so an edit of any of them reruns the data job, and so the runs
# of its task. dvc.yaml is the dvc_commit job's, not theirs.
DATA_STAMP = stamped("data", own=lambda wc: dvc_stages.data_recipe(config, PROFILE, wc.task))


rule data:
    input:
        stamp=DATA_STAMP,
    output:
        manifest="data/{profile}/prepared/{task}/manifest.json",
    log:
        "results/logs/data/{profile}/{task}.log",
    priority: 100  # the training jobs wait for it
    shell:
        dvc_stages.DATA_COMMAND


produces(DATA_STAMP, rules.data.output, profile=[PROFILE], task=TASKS)
MANIFESTS = expand("data/{profile}/prepared/{task}/manifest.json", profile=PROFILE, task=TASKS)
DVC_COMMIT_STAMP = stamped(
    "dvc_commit",
    code=["pdelab.runtime.dvc_stages"],
    files=["dvc.yaml"],
    inputs=MANIFESTS,
    stages=" ".join(f"fetch@{t} prepare@{t}" for t in TASKS),
)


rule dvc_commit:
    """Record the data jobs' stages in dvc.lock and DVC's cache, as `dvc repro` would have."""
    input:
        "dvc.yaml",
        MANIFESTS,
        stamp=DVC_COMMIT_STAMP,
    output:
        f"results/data/dvc_commit-{PROFILE}.txt",
    params:
        stages=" ".join(f"fetch@{t} prepare@{t}" for t in TASKS),
    log:
        f"results/logs/data/{PROFILE}/dvc_commit.log",
    resources:
        dvc_lock=1,  # DVC takes a repository-wide lock
    shell:
        "python -m pdelab.runtime.dvc_stages --commit {params.stages} --profile {PROFILE} > {log} 2>&1 "
        "&& echo {params.stages} > {output} && python -m pdelab.records.made {input.stamp} {output}"


produces(DVC_COMMIT_STAMP, rules.dvc_commit.output)
