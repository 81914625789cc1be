# pdelab: `snakemake --cores all` rebuilds every table and figure of the active profile.
# params.yaml is the single source of truth; `--config profile=paper` picks the paper profile.
from snakemake.utils import min_version

min_version("9.0")

configfile: "params.yaml"
report: "workflow/report/workflow.rst"  # `snakemake --report report.zip`: see workflow/report/

include: "workflow/rules/common.smk"  # validates params.yaml before any job starts
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"

for paper_rules in PAPER_RULES:  # each paper's own rules, from its package
    include: paper_rules


rule all:
    input:
        "results/REPORT.md",
        rules.dvc_commit.output,  # dvc.lock records the data the runs were trained on
        MLFLOW_SYNCED,  # every run and each study's tables and figures in MLflow
    default_target: True
