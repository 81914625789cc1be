# The run sheet: every (task, variant, seed) the active run profile's studies need, resolved and
# validated before any job starts (invalid params fail here, naming the file and the key: the
# config is params.yaml merged with each paper's config.yaml, pdelab.spec.config.load_params).
# pdelab.spec.config's checks come first because they name the key; the JSON schema then checks
# structure and types.
import json
import sys
from itertools import product
from types import SimpleNamespace

from snakemake.io import apply_wildcards
from snakemake.settings.types import RerunTrigger
from pathlib import Path

import jsonschema

from pdelab.runtime import dvc_stages
from pdelab.records import made, provenance, staleness
from pdelab.spec.config import ConfigError, data_dir, load_params, load_with_sources, param_files
from pdelab.spec.data import data_spec
from pdelab.data.store import CorruptDataError, load_manifest, verified_manifest
from pdelab.spec.plugins import PAPERS as REGISTERED_PAPERS, active
from pdelab.spec.run_sheet import same_runs, validate as check_params
from pdelab.spec.shadowed import warning as shadowed_warning
from pdelab.records.build_summary import build_summary
from pdelab.records.run import now_ms, plan_sha256, plan_text, tracking_uri
from pdelab.spec.studies import heatmap_studies, rule_params, studies_of

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
if (SHADOWED := shadowed_warning(config, PROFILE, [(t, v) for t, v, _ in SPECS], PARAMS_SOURCES)) is not None:
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


PLANNED = {}  # (task, variant, seed) -> the digest of the plan this parse wrote for the run
RUNS_CURRENT = {}  # (task, variant, seed) -> whether the run's records hold its plan


def plan_stamp(wildcards):
    """The run's plan (pdelab.records.staleness): the spec, code digest and data it is to be trained
    from, which the job trains as written; dated 1970 when its records hold it (and its task's
    data job is current), else after the run's records, so that the run is trained."""
    key = (wildcards.task, wildcards.variant, int(wildcards.seed))
    stamp = str(staleness.stamp_path(PROFILE, *key))
    if key not in RUNS_CURRENT:
        spec = SPECS[key]
        folder = RUN_DIR.format(profile=PROFILE, task=spec.task, variant=spec.variant, seed=spec.seed)
        manifest = f"data/{PROFILE}/prepared/{spec.task}/manifest.json"  # verified at the parse
        data = load_manifest(spec.data_dir)["content_hash"] if Path(manifest).exists() else None
        plan = staleness.planned(spec.to_dict(), provenance.code_digest(spec), data)
        PLANNED[key] = plan_sha256(plan_text(plan))
        RUNS_CURRENT[key] = staleness.write_stamp(stamp, folder, plan, is_current(manifest), [manifest])
    return stamp


def plan_digest(wildcards, input):
    """The digest of the plan this parse wrote for the run, for the job to check that its plan
    file still holds it. A function of the input, so Snakemake keeps it out of its params
    trigger: the records decide reruns."""
    key = (wildcards.task, wildcards.variant, int(wildcards.seed))
    return PLANNED.get(key) or plan_sha256(Path(input.plan).read_text())


# Every other job: its recipe (own code, params and files; the files other jobs write for it)
# against its made record (pdelab.records.made). PRODUCERS maps each file a job writes to the
# function that settles that job's stamp, so a recipe can say whether its inputs are final.
STAMPS_CURRENT = {}  # job stamp path -> whether its job is current
PRODUCERS = {}  # output file -> a function: whether the job that writes it is current
STATES = {}  # a file another job writes -> its state in recipes (pdelab.records.made.content_state)


def is_current(path):
    """Whether the job that writes ``path`` is current (a file no job writes: it is)."""
    current = PRODUCERS.get(str(path))
    return current() if current else True


def input_state(path):
    """A file another job writes, as recipes hold it: hashed once a parse, however many jobs
    read it (every run's records are read by the aggregate, the syncs and the probes)."""
    if path not in STATES:
        STATES[path] = made.content_state(path, is_current(path))
    return STATES[path]


def settle(rule, key, own, inputs, outputs, reads=()):
    """Settle a job's stamp (pdelab.records.made): its recipe, dated 1970 when its made record
    holds it and its outputs their bytes, else after its outputs. ``own``: its code, params and
    read files; ``inputs``: the files other jobs write for it."""
    stamp = str(made.stamp_path(rule, key))
    check_rerun_settings()
    states = {f: input_state(f) for f in sorted(set(map(str, inputs)))}
    STAMPS_CURRENT[stamp] = made.settle(stamp, own, states, outputs, reads)


def check_rerun_settings():
    """The records decide alone only where Snakemake's own triggers (params, code, the set of
    input files, recorded in .snakemake/) and its checksums of small inputs are off. The
    project's Snakemake profiles set both; a run without them (another profile, a copy of the
    workflow without profiles/) gets them here, as the DAG is built, before it decides."""
    settings = workflow.dag_settings
    if settings is None:  # a lint or a report: no DAG decides anything
        return
    settings.rerun_triggers = frozenset({RerunTrigger.MTIME})
    settings.max_checksum_file_size = 0
    if workflow.dag is not None:  # the DAG read it when it was made
        workflow.dag.max_checksum_file_size = 0


def produces(stamp_of, outputs, **values):
    """Register the files a rule writes (its output patterns, for each wildcard value) as made
    by the job whose stamp ``stamp_of(wildcards)`` settles."""
    for combo in product(*values.values()):
        wc = Keys(zip(values, combo))
        for pattern in outputs:
            PRODUCERS[apply_wildcards(str(pattern), wc)] = lambda wc=wc: STAMPS_CURRENT[stamp_of(wc)]


def run_current(key):
    """Whether a run's records hold its plan (settling its stamp first)."""
    plan_stamp(Keys(zip(("task", "variant", "seed"), key)))
    return RUNS_CURRENT[(key[0], key[1], int(key[2]))]


class Keys(dict):
    """Wildcard values as a rule's job sees them (``wc.task``), for a job not yet in the DAG."""

    __getattr__ = dict.__getitem__


def stamp_key(wc):
    """A job's key among its rule's stamps: its wildcard values (``all`` for none)."""
    return "-".join(str(v) for k, v in sorted(wc.items()) if k != "profile") or "all"


def own_code(*modules):
    """The code digests of the project source a job running ``modules`` executes."""
    return made.files_digest(staleness.module_files(modules))


def stamped(rule, code=(), files=(), inputs=(), own=None, **params):
    """A rule's stamp input (pdelab.records.made): a function of the job's wildcards that
    settles its stamp from its recipe: the code its command runs (``code``: module names), the
    files it reads that no job writes (``files``: the papers' numbers), the files other jobs
    write for it (``inputs``) and what it reads of the params (``params``); or ``own``, a
    function of the wildcards giving that recipe whole. Each may be a function of the
    wildcards. The rule's command (its options) is part of the recipe; ``own`` names its own."""

    def value(given, wc):
        return given(wc) if callable(given) else given

    def stamp_of(wc):
        key = stamp_key(wc)
        stamp = str(made.stamp_path(rule, key))
        if stamp in STAMPS_CURRENT:  # settled once a parse: a recipe reads and hashes files
            return stamp
        read, other = value(inputs, wc), value(files, wc)
        recipe = own(wc) if own else {
            "code": own_code(*value(code, wc)),
            "files": made.files_digest(other),
            "params": {k: value(v, wc) for k, v in sorted(params.items())},
            "profile": PROFILE,
            "command": workflow.get_rule(rule).shellcmd,  # with its options (`--n-examples 16`)
        }
        outputs = [apply_wildcards(str(o), dict(wc.items())) for o in workflow.get_rule(rule).output]
        settle(rule, key, recipe, read, outputs, [*read, *other])
        return stamp

    return stamp_of


def paper_numbers(*papers):
    """The papers' published numbers (paper_tables/*.csv) their tables and claims read, named
    relative to the project (so a moved or copied project reads the same recipe)."""
    here = Path.cwd()
    found = (p for paper in papers for p in (paper.folder / "paper_tables").glob("*.csv"))
    return sorted(str(p.relative_to(here) if p.is_relative_to(here) else p) for p in found)


REPORT_CODE = "pdelab.report.__main__"  # the aggregate, study, heatmap and report jobs


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


# Functions of the rules' inputs and params (train.smk, report.smk, replicate.smk)


def task_records(wc):
    return [f"{d}/{f}" for d in task_run_dirs(wc.task) for f in RECORD_FILES]


def task_studies(wc):
    """The task's runs' studies: a study added or changed moves the tags (nothing retrains)."""
    return json.dumps(
        {f"{v}/{s}": STUDIES_OF.get((t, v, str(s)), []) for t, v, s in RUNS if t == wc.task},
        sort_keys=True,
    )


def study_paper_code(wc):
    """A study's code: the report's and its paper's report module."""
    return [REPORT_CODE, f"{STUDIES[wc.study].paper.package}.report"]


def report_files():
    """Every table and figure the report reads or names: each study's and each paper's own."""
    return [
        *PAPER_OUTPUTS,
        "results/tables/learning.md",
        "results/summary.parquet",
        *(f"results/tables/{s}.{x}" for s in STUDIES for x in ("md", "html", "tex", "csv")),
        *(f"results/figures/{s}{x}.png" for s in STUDIES for x in ("", "_curves")),
        *(f"results/figures/{s}_heatmap.png" for s in HEATMAP_STUDIES),
        *REPLICATES,
    ]


def plan_shapes(wc):
    """Where each task's shapes come from: its prepared data's hash, or "" (declared)."""
    return json.dumps(
        {
            t: load_manifest(data_dir(PROFILE, t))["content_hash"]
            if Path(data_dir(PROFILE, t), "manifest.json").exists()
            else ""
            for t in TASKS
        },
        sort_keys=True,
    )


def replicated_run_dir(wildcards):
    """The folder of the run a task's replicate trains again."""
    task, variant, seed = REPLICATED[wildcards.task]
    return RUN_DIR.format(profile=wildcards.profile, task=task, variant=variant, seed=seed)


def replicated_key(wildcards):
    """The replicated run as the train rule's wildcards (for the cluster's resources)."""
    task, variant, seed = REPLICATED[wildcards.task]
    return SimpleNamespace(task=task, variant=variant, seed=str(seed))


def replicate_inputs(wc):
    """The replicated run's records and its task's data manifest."""
    run = replicated_run_dir(wc)
    return [*(f"{run}/{name}" for name in RECORD_FILES), f"data/{PROFILE}/prepared/{wc.task}/manifest.json"]


def train_gpu_share(wc):
    """How one training job holds GPUs (pdelab.runtime.gpu_slots.planned_share): a share of one
    GPU where the cost plan (results/plan.json, made for the profile's card) fits at least
    two such jobs on the card, else its whole GPUs. The train rule's resources: ``gpu`` whole
    GPUs (SLURM --gpus), ``gpu_percent`` hundredths of GPUs for Snakemake's count
    (`snakemake --resources gpu_percent=400` on four GPUs), ``gpu_share_mib`` the share the
    job's claim takes (PDELAB_GPU_SHARE_MIB), and on a cluster whose GPUs are split into
    shards (PDELAB_SLURM_GPU_SHARDS) ``gres`` and ``slurm_partition``."""
    from pdelab.runtime import cluster, gpu_slots
    from pdelab.spec.config import gpu_memory_gb

    key = (wc.task, wc.variant, str(wc.seed))
    gpus = cluster.train_gpus(config, PROFILE, wc)
    return gpu_slots.planned_share(PROFILE, key, gpus, gpu_memory_gb(config, PROFILE))
