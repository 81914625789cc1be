# The run sheet: every (task, variant, seed) the active run profile's studies need, resolved and
# validated before any job starts (invalid params fail here, naming the file and the key: the
# config is params.yaml merged with each paper's config.yaml, pdelab.spec.config.load_params).
# pdelab.spec.config's checks come first because they name the key; the JSON schema then checks
# structure and types.
import json
import sys
from pathlib import Path

import jsonschema

from pdelab.runtime import dvc_stages
from pdelab.records import provenance, staleness
from pdelab.spec.config import ConfigError, data_dir, load_params, load_with_sources, param_files
from pdelab.spec.data import data_spec
from pdelab.data.store import CorruptDataError, load_manifest, verified_manifest
from pdelab.spec.plugins import PAPERS as REGISTERED_PAPERS, active
from pdelab.spec.run_sheet import same_runs, validate as check_params
from pdelab.spec.shadowed import warning as shadowed_warning
from pdelab.records.build_summary import build_summary
from pdelab.records.run import now_ms, plan_sha256, plan_text, tracking_uri
from pdelab.spec.studies import heatmap_studies, studies_of

SCHEMA = Path(workflow.basedir) / "workflow/schemas/params.schema.yaml"


def validate(config, schema_file):
    """The config against the JSON schema, raising the error that names the key (what
    snakemake.utils.validate does, in a fraction of its time, which every call pays, a no-op's
    included; the schema sets no defaults)."""
    schema = load_params(schema_file)  # a YAML file, read with libyaml
    try:
        jsonschema.validators.validator_for(schema)(schema).validate(config)
    except jsonschema.ValidationError as err:
        where = ".".join(str(k) for k in err.absolute_path) or "params.yaml"
        raise WorkflowError(f"invalid params: {located(f'{where}: {err.message}')}") from None


def located(message):
    """An error's message with the file that holds its key: params.yaml or a paper's config
    file (read again for this, on the error's path only)."""
    return load_with_sources("params.yaml")[1].locate(message)


PARAMS_FILES = [str(p) for p in param_files("params.yaml")]  # what the config is read from
PROFILE = str(config.get("profile"))
try:
    SPECS = {(s.task, s.variant, s.seed): s for s in check_params(config, PROFILE)}
except ConfigError as err:
    raise WorkflowError(f"invalid params: {located(str(err))}") from None
except Exception:
    validate(config, SCHEMA)  # a structural problem: the schema's message names it
    raise
validate(config, SCHEMA)

# a key set for a task or variant that the run profile overrides in all of its runs: an edit
# of it would change nothing, so say so once (pdelab.spec.shadowed)
if (SHADOWED := shadowed_warning(config, PROFILE, [(t, v) for t, v, _ in SPECS])) is not None:
    print(SHADOWED, file=sys.stderr)

# dvc.yaml's stages are generated from the task registry (pdelab.runtime.dvc_stages)
if (problem := dvc_stages.check()) is not None:
    raise WorkflowError(problem)

# DVC builds the data of the run profile that params.yaml names, so the two must agree.
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
            verified_manifest(data_dir(PROFILE, task))  # hashes kept while files are unchanged
except CorruptDataError as err:
    raise WorkflowError(f"corrupt prepared data: {err}") from None
STUDIES = studies_of(config, PROFILE)  # name -> the typed study (pdelab.spec.studies), file order
PAPERS = active(s.kind for s in STUDIES.values())  # the papers whose study kinds it uses
HEATMAP_STUDIES = heatmap_studies(STUDIES)
# each paper's own rules (src/pdelab/papers/<paper>/rules.smk) and the files they add to the
# report
PAPER_RULES = [str(paper.rules()) for paper in PAPERS if paper.rules()]
PAPER_OUTPUTS = [f"results/{f}" for paper in PAPERS for f in paper.outputs(config)]
RUN_DIR = "results/runs/{profile}/{task}/{variant}/seed{seed}"


wildcard_constraints:
    profile=PROFILE,
    task="|".join(TASKS),
    variant="|".join(sorted({v for _, v, _ in RUNS})),
    seed=r"\d+",
    study="|".join(STUDIES),


BUILD_START_MS = now_ms()  # a run whose record ends after this was trained by this build


def end_of_build(failed_log=None):
    """The lines a build ends with (pdelab.records.build_summary): runs trained and reused, their
    training time, failed jobs, where the results are."""
    folders = [RUN_DIR.format(profile=PROFILE, task=t, variant=v, seed=s) for t, v, s in RUNS]
    return build_summary(folders, BUILD_START_MS, tracking_uri(shown=True), failed_log)


def run_files(name):
    """One file of every run in the run sheet."""
    return [
        f"{RUN_DIR}/{name}".format(profile=PROFILE, task=t, variant=v, seed=s) for t, v, s in RUNS
    ]


def data_params(profile, task):
    """A task's data block as written, each value in its key's canonical form (``n: 1200.0``
    is ``n: 1200``), so a number's spelling reruns no data job."""
    spec = data_spec(config, profile, task)
    given = config["data"][profile][task] or {}
    return json.dumps(
        {k: list(v) if isinstance(v, tuple) else v for k in given for v in [getattr(spec, k)]},
        sort_keys=True,
    )


PLANNED = {}  # (task, variant, seed) -> the digest of the plan this parse wrote for the run


def plan_stamp(wildcards):
    """The run's plan (pdelab.records.staleness): the spec, code digest and data it is to be trained
    from, which the job trains as written. Dated now when its records hold another spec or code
    (or no reader would take them), long ago when they hold the same, so the records decide
    whether it reruns even without .snakemake/."""
    key = (wildcards.task, wildcards.variant, int(wildcards.seed))
    spec = SPECS[key]
    folder = RUN_DIR.format(
        profile=wildcards.profile, task=spec.task, variant=spec.variant, seed=spec.seed
    )
    manifest = Path(spec.data_dir) / "manifest.json"  # verified when the workflow parsed
    data = load_manifest(spec.data_dir)["content_hash"] if manifest.exists() else None
    plan = staleness.planned(spec.to_dict(), provenance.code_digest(spec), data)
    PLANNED[key] = plan_sha256(plan_text(plan))
    return staleness.write_stamp(
        staleness.stamp_path(PROFILE, spec.task, spec.variant, spec.seed), folder, plan
    )


def plan_digest(wildcards, input):
    """The digest of the plan this parse wrote for the run, for the job to check that its plan
    file still holds it. A function of the input, so Snakemake keeps it out of its params
    trigger: the plan's date decides reruns, from the records."""
    key = (wildcards.task, wildcards.variant, int(wildcards.seed))
    return PLANNED.get(key) or plan_sha256(Path(input.plan).read_text())


def code_of(*modules):
    """The project source files a job running ``modules`` executes (pdelab.records.staleness): a
    table's, figure's or probe's rule takes them as inputs, so an edit rebuilds exactly the
    outputs made by the edited code, with or without .snakemake/."""
    return staleness.module_files(modules)


def paper_numbers(*papers):
    """The papers' published numbers (paper_tables/*.csv) their tables and claims read, named
    relative to the project as code_of names the source (so a moved or copied project, whose
    inputs Snakemake compares by name, plans nothing)."""
    here = Path.cwd()
    found = (p for paper in papers for p in (paper.folder / "paper_tables").glob("*.csv"))
    return sorted(str(p.relative_to(here) if p.is_relative_to(here) else p) for p in found)


REPORT_CODE = "pdelab.report.__main__"  # the aggregate, study, heatmap and report jobs


def study_code(wildcards):
    """A study job's code (the report's and its paper's report module) and its paper's numbers."""
    paper = STUDIES[wildcards.study].paper
    return code_of(REPORT_CODE, f"{paper.package}.report") + paper_numbers(paper)


def task_run_dirs(task):
    """The run folders of one task (one MLflow experiment)."""
    return [
        RUN_DIR.format(profile=PROFILE, task=t, variant=v, seed=s) for t, v, s in RUNS if t == task
    ]


# Snakemake's report: every table and figure marked with report(), filed under its paper
# (category) and study (subcategory), with a caption.
REPORT_CAPTIONS = f"{workflow.basedir}/workflow/report"  # the captions every study shares


def study_title(wc):
    """The paper a study's outputs are filed under in Snakemake's report."""
    return STUDIES[wc.study].paper.title


def report_study(path, what):
    """One of a study's outputs (table, its page, tex, figure, heatmap) in Snakemake's report."""
    return report(
        path,
        caption=f"{REPORT_CAPTIONS}/study_{what}.rst",
        category=study_title,
        subcategory="{study}",
        labels={"study": "{study}", "file": what},
    )


def report_paper(path, paper, part, caption):
    """A paper's own output (outside its studies) in Snakemake's report, filed under the
    paper and ``part``; ``caption`` names captions/<caption>.rst in the paper's package."""
    return report(
        path,
        caption=str(REGISTERED_PAPERS.get(paper).folder / "captions" / f"{caption}.rst"),
        category=REGISTERED_PAPERS.get(paper).title,
        subcategory=part,
        labels={"part": part, "file": Path(path).name},
    )


def study_inputs(wildcards):
    """What a study's table reads besides the summary (its paper says)."""
    study = STUDIES[wildcards.study]
    ran = {r.task for r in study.runs}  # in this run profile
    block = dict(study) | {"tasks": [t for t in study.tasks if t in ran]}
    return [f"results/{f}" for f in study.paper.study_inputs(wildcards.study, block)]
