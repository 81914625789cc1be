# pdelab: `snakemake --cores all` rebuilds every table and figure of the active run profile.
# params.yaml is the single source of truth: set `profile: paper` there for the paper run
# profile (`--config`/`--configfile` are refused: DVC and the data and report jobs read it).
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# This tree's pdelab, for the workflow and for every job it starts (they inherit PYTHONPATH):
# a job of a second checkout or a copied tree must run that tree's code, the code its runs'
# digests are computed from (pdelab.records.provenance), not the checkout pip installed.
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
from pdelab.spec.config import load_with_sources
from pdelab.records.bytecode import hash_checked as hash_checked_bytecode
from pdelab.runtime.job_lines import install as keep_job_lines_short
from snakemake.logging import logger

# Each job's lines fit a screen (pdelab.runtime.job_lines): a dry run's file lists say how many more
# files, long commands wrap, so `snakemake -n` after an edit reads as the jobs and their reasons.
keep_job_lines_short(logger)

# The config is params.yaml, read with libyaml (`configfile:` would parse it in pure Python on
# every call, a no-op rerun's included). It is the only source of params: the training jobs
# train the specs the workflow resolves from it (their plans, pdelab.records.staleness), but DVC and the
# data, report and timing jobs read params.yaml itself, so a --config or --configfile value
# would train one thing and prepare, check and report another; the workflow refuses one, naming
# the fix.
PARAMS_YAML, PARAMS_SOURCES = load_with_sources("params.yaml")  # and the file behind each key
if config:
    fix = (
        f"Set `profile: {config['profile']}` in params.yaml"
        if set(config) == {"profile"}
        else "Edit params.yaml instead"
    )
    raise WorkflowError(
        f"--config/--configfile ({', '.join(sorted(config))}) is refused: DVC and the data, "
        f"report and timing jobs read params.yaml itself, so an override would change what "
        f"Snakemake trains but not the data they prepare or the runs they check and report. "
        f"{fix} (Snakemake and DVC both read it)."
    )
config.update(PARAMS_YAML)

report: "workflow/report/workflow.rst"  # `snakemake --report report.zip`: see workflow/report/

# Content decides what runs, never a file's date (docs/reruns.md): each job takes one more input,
# its stamp, and the parse sets the dates Snakemake compares from the job's records: when they
# hold what the job would be made from now, the stamp is dated 1970 and the outputs no earlier
# than the inputs, else the stamp just after the outputs (pdelab.records.staleness for training,
# pdelab.records.made for every other job).
# Snakemake's own memory of params and code (.snakemake/) triggers nothing (the project's
# Snakemake profiles, and common.smk where a run lacks them), so a build with or without it
# plans the same jobs.
# Bytecode is checked against its source's hash (PEP 552): no job runs code older than its source.
hash_checked_bytecode()

include: "workflow/rules/common.smk"  # validates params.yaml before any job starts
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/replicate.smk"  # the nondeterminism floor: one run per task, again
include: "workflow/rules/report.smk"

for paper_rules in PAPER_RULES:  # each paper's own rules, from its package
    include: paper_rules


rule all:
    input:
        "results/REPORT.md",
        rules.dvc_commit.output,  # dvc.lock records the data the runs were trained on
        MLFLOW_SYNCED,  # every run and each study's tables and figures in MLflow
    default_target: True
