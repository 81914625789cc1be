"""What each job asks a cluster for, and a SLURM cluster the workflow can safely wait on.

Resources. Every rule declares what it needs (``mem_mb``, ``runtime`` in minutes, ``gpu``;
``threads`` are its CPUs) in the workflow itself, so a command-line ``--set-resources`` or
``--default-resources`` changes only what it names. A training job asks for the cost plan's
numbers where its data, ``results/plan.json`` (written beside ``results/plan.md`` by ``pdelab
plan`` and the ``plan`` rule: pdelab.plan.render.plan_data), covers it: on a CUDA run profile the
slowest named GPU's hours times :data:`RUNTIME_MARGIN` plus :data:`STARTUP_MIN` (the plan's
GPU-hours are a lower bound, training steps only); on a CPU profile the step's peak memory,
doubled, plus :data:`HOST_BASE_MB`. Elsewhere, and for a plan of another run profile, the
device's allowance in :data:`TRAIN_DEFAULT`. The plan is read as data (the numbers the plan
computed, not the Markdown's rounded text), once per workflow parse. Jobs that only turn
Parquet into tables and figures (aggregate, study, heatmap, learning, report) ask for
:data:`SMALL`; a job that touches CUDA asks for :data:`PROBE`, and ``gpu=1`` on a CUDA profile
(a training job the plan puts on N GPUs of one node: ``gpu=N``, N CPUs, torchrun's N processes:
:func:`train_launch`).
No rule names a partition: the SLURM profile's ``partitions.yaml`` routes a job that asks for a
GPU to a partition with GPUs and every other job to one without (the plugin's
``partition-config``).

SLURM status. snakemake-executor-plugin-slurm asks ``sacct`` for job states where ``sacct``
is installed. On a cluster without an accounting database
(``AccountingStorageType=accounting_storage/none``) sacct answers every query with an error,
the plugin then forgets the jobs it asked about, and Snakemake waits forever, cancelling
nothing when interrupted. Before any job is submitted (onstart) :func:`prepare_slurm` reads
``scontrol show config`` and, where sacct cannot answer, switches the plugin to ``squeue``:
squeue shows a finished job for ``MinJobAge`` seconds, and the plugin checks at most
:data:`PLUGIN_MAX_CHECK_GAP_S` apart, so it needs ``MinJobAge`` of at least
:data:`MIN_JOB_AGE_S`; on a cluster that forgets sooner the run stops at once, saying what
its administrators must add. Where accounting works, sacct stays (it keeps every job and why
it failed). It also turns SIGTERM into the interrupt Ctrl-C is, so either cancels the run's
SLURM jobs (Snakemake alone would wait for them to finish).

SLURM account. Without ``slurm_account`` the plugin guesses one from ``sacct`` before its
first submission, printing warnings (and, in 2.8, a ``sacct: invalid option`` line: it hands
``| tail -1`` to sacct as arguments). Where the user passes the plugin's own
``--slurm-no-account`` (declared, but not read by 2.8) or the cluster keeps no accounting
(there is no account to find), :func:`prepare_slurm` tells the executor to submit without
one, as its guess would have ended, so nothing is guessed or printed.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PLAN_FILE = Path(
    "results/plan.json"
)  # the cost plan's data (pdelab.training.micro_batch.PLAN_DATA)
RUNTIME_MARGIN = 3.0  # the plan's GPU-hours assume 40 % of peak and omit evaluation passes
STARTUP_MIN = 30  # interpreter, torch, CUDA context, data loading, checkpoints
HOST_BASE_MB = 1500  # an interpreter with torch imported, and the prepared data
PROCESS_MB = 4000  # each further process of a job on several GPUs: torch, a CUDA context
PLUGIN_MAX_CHECK_GAP_S = 180  # the plugin's longest wait between two status checks (2.8)
MIN_JOB_AGE_S = 240  # squeue must still list a finished job at the next check


@dataclass(frozen=True)
class Need:
    """One job's request: memory in MB and wall time in minutes (CPUs are its threads)."""

    mem_mb: int
    runtime: int


TRAIN_DEFAULT = {"cuda": Need(mem_mb=16000, runtime=1440), "cpu": Need(mem_mb=2000, runtime=60)}
SMALL = Need(mem_mb=1000, runtime=15)  # tables, figures, records: pandas and matplotlib
PROBE = {"cuda": Need(mem_mb=8000, runtime=120), "cpu": Need(mem_mb=2000, runtime=60)}


@dataclass(frozen=True)
class Planned:
    """One training job's row of the cost plan."""

    peak_mib: float
    gpu_hours: dict[str, float]  # named GPU -> hours (all its GPUs together)
    gpus: int = 1  # the GPUs of one node it trains on (torchrun's processes)


MIB = 2**20


@lru_cache(maxsize=4)
def _plan_rows(path: str, mtime_ns: int) -> tuple[str, dict[tuple[str, str, str], Planned]]:
    del mtime_ns  # part of the cache key: a rewritten plan is read again
    doc = json.loads(Path(path).read_text())
    rows = {
        (str(job["task"]), str(job["variant"]), str(job["seed"])): Planned(
            float(job["peak_bytes"]) / MIB,
            {str(gpu): float(h) for gpu, h in job["gpu_hours"].items()},
            max(1, int(job.get("gpus", 1))),
        )
        for job in doc["jobs"]
    }
    return str(doc["profile"]), rows


def plan_rows(profile: str, path: Path = PLAN_FILE) -> dict[tuple[str, str, str], Planned]:
    """The plan's jobs by (task, variant, seed); none if the plan is absent or another run
    profile's."""
    try:
        found, rows = _plan_rows(str(path), path.stat().st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # no plan, or one this reader does not understand: the defaults apply
    return rows if found == profile else {}


def gpu_count(config: dict[str, Any], profile: str) -> int:
    """1 for a job that touches CUDA under a CUDA run profile, else 0."""
    return 1 if config["profiles"][profile].get("device") == "cuda" else 0


def train_processes(
    config: dict[str, Any], profile: str, wildcards: Any, path: Path = PLAN_FILE
) -> int:
    """The processes one training job runs (torchrun's, one per GPU): the cost plan's
    ``gpus`` where it has the job, else 1. How a run is computed, not what it is: changing
    it retrains nothing (the train rule keeps it out of Snakemake's rerun triggers)."""
    del config  # the plan is of the run profile; the profile's threshold made it
    row = plan_rows(profile, path).get((wildcards.task, wildcards.variant, str(wildcards.seed)))
    return row.gpus if row is not None else 1


def train_gpus(config: dict[str, Any], profile: str, wildcards: Any, path: Path = PLAN_FILE) -> int:
    """The GPUs one training job asks for (``resources: gpu``; SLURM's ``--gpus``): one per
    process on a CUDA run profile, none on a CPU one."""
    return train_processes(config, profile, wildcards, path) * gpu_count(config, profile)


def train_launch(processes: int, gpus: int) -> str:
    """The command that starts a training job's ``pdelab.training.train``: one process started warm
    (pdelab.runtime.warm), or torchrun's ``processes`` on one node after pdelab.runtime.gpu_job took
    the job's ``gpus`` GPU slots (none under SLURM, which gave the job its GPUs)."""
    if processes <= 1:
        return "python -m pdelab.runtime.warm pdelab.training.train"
    return (
        f"python -m pdelab.runtime.gpu_job {gpus} torchrun --standalone "
        f"--nproc-per-node {processes} -m pdelab.training.train"
    )


def probe_need(config: dict[str, Any], profile: str) -> Need:
    """What a step timing or a probe of trained models asks for."""
    return PROBE["cuda" if gpu_count(config, profile) else "cpu"]


def train_need(
    config: dict[str, Any], profile: str, wildcards: Any, path: Path = PLAN_FILE
) -> Need:
    """What one training job asks for: the cost plan's numbers where it has the job, else
    the device's allowance. A job on N GPUs asks for :data:`PROCESS_MB` more host memory per
    further process (each has torch and a CUDA context; the prepared data is memory-mapped,
    so its pages are shared) and its GPU-hours over N (the plan assumes linear scaling;
    :data:`RUNTIME_MARGIN` covers what the gradients' all-reduce costs)."""
    device = "cuda" if gpu_count(config, profile) else "cpu"
    need = TRAIN_DEFAULT[device]
    row = plan_rows(profile, path).get((wildcards.task, wildcards.variant, str(wildcards.seed)))
    if row is None:
        return need
    if device == "cuda":
        slowest = max(row.gpu_hours.values(), default=0.0) / row.gpus
        minutes = math.ceil(slowest * 60 * RUNTIME_MARGIN) + STARTUP_MIN
        return Need(need.mem_mb + (row.gpus - 1) * PROCESS_MB, minutes)
    return Need(max(need.mem_mb, HOST_BASE_MB + math.ceil(2 * row.peak_mib)), need.runtime)


# -- SLURM ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmStatus:
    """What the cluster says about job accounting and how long squeue keeps a finished job."""

    accounting: str  # AccountingStorageType
    min_job_age_s: int | None
    sacct_works: bool


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def slurm_status() -> SlurmStatus:
    """Ask the cluster (one ``scontrol show config``; one ``sacct`` where accounting is on)."""
    shown = _run(["scontrol", "show", "config"])
    text = shown.stdout if shown is not None and shown.returncode == 0 else ""
    accounting = re.search(r"(?m)^AccountingStorageType\s*=\s*(\S+)", text)
    age = re.search(r"(?m)^MinJobAge\s*=\s*(\d+)\s*(\w*)", text)
    age_s = None
    if age:
        age_s = int(age.group(1)) * (3600 if age.group(2).lower().startswith("h") else 1)
    kind = accounting.group(1) if accounting else "unknown"
    works = False
    if kind != "accounting_storage/none":
        probe = _run(["sacct", "--noheader", "-X", "--format=JobIDRaw", "-j", "1"])
        works = probe is not None and probe.returncode == 0
    return SlurmStatus(kind, age_s, works)


def status_command(status: SlurmStatus, asked: str | None) -> str:
    """The plugin's status command on this cluster: the one ``asked`` for where sacct
    answers, else squeue, which must keep finished jobs long enough (a ValueError if not)."""
    if status.sacct_works:
        return asked or "sacct"
    if status.min_job_age_s is not None and status.min_job_age_s >= MIN_JOB_AGE_S:
        return "squeue"
    why = (
        "keeps no job accounting (AccountingStorageType=accounting_storage/none)"
        if status.accounting == "accounting_storage/none"
        else f"has a sacct that does not answer (AccountingStorageType={status.accounting})"
    )
    raise ValueError(
        f"this SLURM cluster {why}, so the plugin cannot ask sacct whether a job finished, "
        f"and squeue forgets a finished job after MinJobAge={status.min_job_age_s} s, sooner "
        f"than the status checks (up to {PLUGIN_MAX_CHECK_GAP_S} s apart) see it: Snakemake "
        f"would wait on its jobs forever. Ask the cluster's administrators for accounting "
        f"(slurmdbd, AccountingStorageType=accounting_storage/slurmdbd) or for "
        f"MinJobAge={MIN_JOB_AGE_S} or more in slurm.conf; no job was submitted"
    )


def _interrupt(signum: int, frame: Any) -> None:
    del signum, frame
    raise KeyboardInterrupt  # Snakemake's scheduler cancels the executor's jobs on it


def skip_account_guess(workflow: Any, status: SlurmStatus) -> bool:
    """Submit without an account and without guessing one, where the user passed
    ``--slurm-no-account`` or the cluster keeps no accounting and no ``slurm_account`` was
    set. The plugin keeps the outcome of its guess on the executor (``_fallback_account_arg``,
    None until it guesses); setting it to "" (no account argument) is what a guess that finds
    nothing leaves. True if the guess is skipped."""
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    if executor is None or not hasattr(executor, "_fallback_account_arg"):
        return False  # another plugin version: it guesses as it always did
    asked = bool(getattr(workflow.executor_settings, "no_account", False))
    if not (asked or status.accounting == "accounting_storage/none"):
        return False
    executor._fallback_account_arg = ""  # noqa: SLF001 - see the docstring
    return True


def prepare_slurm(workflow: Any) -> str:
    """Before the first job of a SLURM run: the status command that works here, no account
    guessing where there is none to find, and SIGTERM cancelling the run's jobs as Ctrl-C
    does. Returns the line to print."""
    settings = workflow.executor_settings
    status = slurm_status()
    settings.status_command = status_command(status, settings.status_command)  # read per check
    no_account = "; submitting without an account" if skip_account_guess(workflow, status) else ""
    signal.signal(signal.SIGTERM, _interrupt)
    why = "" if status.sacct_works else f" (no sacct here; MinJobAge={status.min_job_age_s} s)"
    return (
        f"SLURM: job states from {settings.status_command}{why}{no_account}; Ctrl-C or SIGTERM "
        f"cancels this run's jobs"
    )
