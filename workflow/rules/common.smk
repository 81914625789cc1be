# The run sheet: every (task, variant, seed) the active profile's studies need, resolved and
# validated before any job starts (an invalid params.yaml fails here, naming the key).
# pdelab.config's checks come first because they name the key; the JSON schema then checks
# structure and types.
import json
from pathlib import Path

import jsonschema

from pdelab.config import ConfigError, data_dir, load_params
from pdelab.data.store import CorruptDataError, check_files, load_manifest
from pdelab.papers import active, study_paper
from pdelab.run_sheet import same_runs, validate as check_params

SCHEMA = Path(workflow.basedir) / "workflow/schemas/params.schema.yaml"


def validate(config, schema_file):
    """The config against the JSON schema, raising the error that names the key (what
    snakemake.utils.validate does, a tenth of the time: 0.02 s of every call, a no-op's
    included; the schema sets no defaults)."""
    schema = load_params(schema_file)  # a YAML file, read with libyaml
    try:
        jsonschema.validators.validator_for(schema)(schema).validate(config)
    except jsonschema.ValidationError as err:
        where = ".".join(str(k) for k in err.absolute_path) or "params.yaml"
        raise WorkflowError(f"invalid params.yaml: {where}: {err.message}") from None


PROFILE = str(config.get("profile"))
try:
    SPECS = {(s.task, s.variant, s.seed): s for s in check_params(config, PROFILE)}
except ConfigError as err:
    raise WorkflowError(f"invalid params.yaml: {err}") from None
except Exception:
    validate(config, SCHEMA)  # a structural problem: the schema's message names it
    raise
validate(config, SCHEMA)

# DVC builds the data of the profile that params.yaml names, so the two must agree.
DVC_PROFILE = PARAMS_YAML.get("profile")  # the file's, as the Snakefile read it
if PROFILE != DVC_PROFILE:
    raise WorkflowError(
        f"profile {PROFILE!r} was asked for, but params.yaml says profile: {DVC_PROFILE!r}, "
        f"and DVC builds the data of that one. Set `profile: {PROFILE}` in params.yaml "
        "(both tools read it) instead of passing --config profile=..."
    )

# variants whose resolved specs coincide (baseline_T256 where the task's length is 256) share
# one trained run; the summary gives each its row, marked `same_run_as`
SAME_RUN = {(k.task, k.variant, k.seed): c.variant for k, c in same_runs(list(SPECS.values())).items()}
RUNS = [key for key in SPECS if key not in SAME_RUN]
TASKS = sorted({t for t, _, _ in RUNS})

# Prepared data already on disk must have the sizes its manifest records (a stat per file): a
# truncated or replaced file stops the workflow here, even when no job would run, naming the
# file and the repair. Hashes are checked by each data job (pdelab.data verify).
try:
    for task in TASKS:
        if Path(data_dir(PROFILE, task), "manifest.json").exists():
            check_files(data_dir(PROFILE, task), load_manifest(data_dir(PROFILE, task)))
except CorruptDataError as err:
    raise WorkflowError(f"corrupt prepared data: {err}") from None
STUDIES = list(config["studies"])
PAPERS = active(config)  # the papers whose study kinds params.yaml uses
HEATMAP_KINDS = {kind for paper in PAPERS for kind in paper.heatmap_kinds}
HEATMAP_STUDIES = [s for s in STUDIES if config["studies"][s].get("kind", "accuracy") in HEATMAP_KINDS]
# each paper's own rules (src/pdelab/papers/<paper>/rules.smk) and the files they add to the
# report
PAPER_RULES = [str(paper.rules()) for paper in PAPERS if paper.rules()]
PAPER_OUTPUTS = [f"results/{f}" for paper in PAPERS for f in paper.outputs(config)]
RUN_DIR = "results/runs/{profile}/{task}/{variant}/seed{seed}"
# The data stages depend on the whole data package, in dvc.yaml and here alike, so that a
# build leaves `dvc status` clean.
DATA_CODE = sorted(str(p) for p in Path("src/pdelab/data").glob("*.py"))


wildcard_constraints:
    profile=PROFILE,
    task="|".join(TASKS),
    variant="|".join(sorted({v for _, v, _ in RUNS})),
    seed=r"\d+",
    study="|".join(STUDIES),


def run_files(name):
    """One file of every run in the run sheet."""
    return [
        f"{RUN_DIR}/{name}".format(profile=PROFILE, task=t, variant=v, seed=s) for t, v, s in RUNS
    ]


def spec_json(wildcards):
    """The fully resolved spec of one run: Snakemake reruns the job when it changes."""
    return SPECS[(wildcards.task, wildcards.variant, int(wildcards.seed))].to_json()
