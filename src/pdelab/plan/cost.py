"""The plan: what a run profile's training will cost, per job, per study and in total.

For every training job of the run sheet: parameters, tokens per step and per run, FLOPs per
step and per run, steps per run, the peak memory of a training step at the profile's batch,
GPU-hours on named GPUs, CPU core-hours for a job that trains on the CPU, and whether the job
fits 24, 40 and 80 GB cards (with a declared card: its micro-batch, pdelab.plan.card_fit). Why: a
paper profile queues hundreds of GPU jobs and a smoke profile hundreds of CPU ones; what they
need (which card, how many GPU- or core-hours) should be known from params.yaml alone.

How each number is made:

* Shapes: :mod:`pdelab.plan.shapes` (the prepared manifest's, else the ones params.yaml declares;
  the plan names which, and what the declared ones assume). Every batch is at the longest
  length.
* One training step per distinct model and batch, counted on fake tensors
  (:mod:`pdelab.plan.counting`, once each: :mod:`pdelab.plan.step_counts`).
* Steps: ``steps_per_epoch x epochs``; an upper bound where ``patience < epochs`` (early
  stopping may stop sooner): the plan marks those jobs.
* Time: a step's FLOPs in lower precision (bf16 matrix products) at the device's sustained
  bf16 rate plus its fp32 FLOPs (fp32 runs, and the mechanisms that keep fp32 inside bf16
  ones, pdelab.training.precision) at its fp32 rate; TF32 stays off (PyTorch's default, which pdelab
  keeps). A sustained rate is the dense peak x :data:`pdelab.plan.hardware.UTILISATION`
  unless a measurement replaces it (:mod:`pdelab.plan.measured`); training steps only
  (validation and test passes add about a third of a step per evaluated batch). A GPU job's
  time is GPU-hours on each named GPU; a CPU job's is also core-hours: one core per torch
  thread (:data:`pdelab.plan.hardware.JOB_THREADS`), at one core's rate
  (:data:`pdelab.plan.hardware.CPU_CORE`) or its measured step time.
* GPUs per job: one, or, on a CUDA run profile whose ``multi_gpu`` threshold a job's hours on
  one GPU exceed, several of one node (:func:`proposed_gpus`); the batch is split across them
  and each computes its share in the job's micro-batches. GPU-hours stay the job's total.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import torch

from pdelab.plan.card_fit import GIB, Fit, choose, fits
from pdelab.plan.counting import StepCost, on_cuda
from pdelab.plan.hardware import (
    CARDS_GIB,
    CPU_CORE,
    GPUS,
    PRECISIONS,
    Device,
    Throughput,
    assumed_throughput,
)
from pdelab.plan.measured import MEASURED_FILE, Measured, load_measured
from pdelab.plan.shapes import TaskShape, task_shape
from pdelab.plan.step_counts import cost_key, count_steps
from pdelab.spec.config import MultiGpu, RunSpec, compile_mode, gpu_memory_gb, multi_gpu
from pdelab.spec.run_sheet import same_runs, validate
from pdelab.spec.studies import RunKey, studies_of


def tokens_per_step(shape: TaskShape, run: RunSpec) -> int:
    """The data's tokens one step reads (pairs: both documents; translation: the source and
    the teacher-forced target; a patch model groups them, it does not drop them)."""
    b = run.train.batch_size
    if shape.kind == "translation":
        return b * (shape.src_max_length + shape.max_length - 1)
    return b * shape.sequence_length(run) * (2 if shape.pairs else 1)


@dataclass(frozen=True)
class JobCost:
    """One training job: its step, its steps, and its time per named GPU (and, for a job that
    trains on the CPU, on one CPU core)."""

    run: RunSpec
    step: StepCost
    tokens_per_step: int
    steps_per_epoch: int
    step_s: Mapping[str, float]  # device name -> seconds per step (CPU core: core-seconds)
    time_source: Mapping[str, str]  # device -> "assumed" | "measured rate" | "measured step"
    fit: Fit | None = None  # on the declared card (pdelab.plan.card_fit); None: none declared
    fit_flops: int = 0  # an optimizer step's FLOPs as ``fit`` runs it (recomputation included)
    card_fits: Mapping[int, bool] = field(default_factory=dict)  # CARDS_GIB -> fits there
    gpus: int = 1  # the GPUs of one node it trains on (:func:`proposed_gpus`)

    @property
    def name(self) -> str:
        return f"{self.run.task}/{self.run.variant}/{self.run.seed}"

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.run.train.epochs

    @property
    def may_stop_early(self) -> bool:
        """Early stopping may end it before ``steps``: then ``steps`` is an upper bound."""
        return self.run.train.patience < self.run.train.epochs

    @property
    def flops(self) -> int:
        return self.step.flops * self.steps

    @property
    def tokens(self) -> int:
        return self.tokens_per_step * self.steps

    @property
    def slowdown(self) -> float:
        """An optimizer step's time as :attr:`fit` runs it over the whole batch's: the work
        of its micro-batches (and of recomputed blocks) over the batch's."""
        if self.fit is None or not self.fit_flops or not self.step.flops:
            return 1.0
        return max(1.0, self.fit_flops / self.step.flops)

    def gpu_hours(self, gpu: str) -> float:
        """Hours on one ``gpu``: the job's GPU-hours, whatever number of GPUs it runs on."""
        return self.steps * self.step_s[gpu] * self.slowdown / 3600

    @property
    def slowest_hours(self) -> float:
        """Its hours on the slowest named GPU (what :func:`proposed_gpus` compares)."""
        return max(self.gpu_hours(g.name) for g in GPUS)

    @property
    def on_cpu(self) -> bool:
        """The job trains on the CPU: its cost is core-hours as well as GPU-hours elsewhere."""
        return not on_cuda(self.run)

    @property
    def core_hours(self) -> float:
        """CPU core-hours of a job that trains on the CPU: its steps at one core's seconds per
        step (core-seconds); 0.0 for a GPU job, whose host's cores are not estimated."""
        if not self.on_cpu:
            return 0.0
        return self.steps * self.step_s[CPU_CORE.name] * self.slowdown / 3600


def step_seconds(
    run: RunSpec,
    step: StepCost,
    device: Device,
    rates: Mapping[tuple[str, str], Throughput],
    measured: Measured,
) -> tuple[float, str]:
    """(seconds per step on ``device``, a GPU or one CPU core; where the time comes from): a
    measured step time, else the step's bf16 and fp32 FLOPs at their sustained rates."""
    if (found := measured.step_s.get((device.name, run.task, run.variant))) is not None:
        return found[0], "measured step"
    low, high = rates[device.name, "bf16"], rates[device.name, "fp32"]
    fp32 = step.flops - step.low_precision_flops
    seconds = step.low_precision_flops / (low.tflops * 1e12) + fp32 / (high.tflops * 1e12)
    used = [low] if step.low_precision_flops else []
    used += [high] if fp32 else []
    return seconds, "measured rate" if any(t.measured for t in used) else "assumed"


@dataclass(frozen=True)
class Summary:
    """A set of jobs (a study's, or all): counts and sums, the largest peak and the jobs
    over each card."""

    name: str
    jobs: int
    parameters: int
    tokens: int
    flops: int
    gpu_hours: Mapping[str, float]
    peak_bytes: int
    peak_job: str
    too_big: Mapping[int, int]  # card GiB -> jobs that do not fit it
    bounded: int  # jobs whose steps are an upper bound (early stopping)
    # card GiB -> jobs that fit it with micro-batches and checkpointing (pdelab.plan.card_fit)
    fit: Mapping[int, int] = field(default_factory=dict)
    cpu_jobs: int = 0  # jobs that train on the CPU
    core_hours: float = 0.0  # their CPU core-hours

    @classmethod
    def of(cls, name: str, jobs: Sequence[JobCost]) -> Summary:
        biggest = max(jobs, key=lambda j: j.step.peak_bytes, default=None)
        return cls(
            name=name,
            jobs=len(jobs),
            parameters=sum(j.step.parameters for j in jobs),
            tokens=sum(j.tokens for j in jobs),
            flops=sum(j.flops for j in jobs),
            gpu_hours={g.name: sum(j.gpu_hours(g.name) for j in jobs) for g in GPUS},
            peak_bytes=biggest.step.peak_bytes if biggest else 0,
            peak_job=biggest.name if biggest else "",
            too_big={c: sum(not fits(j.step.peak_bytes, c) for j in jobs) for c in CARDS_GIB},
            bounded=sum(j.may_stop_early for j in jobs),
            fit={
                c: sum(j.card_fits[c] for j in jobs)
                for c in CARDS_GIB
                if all(c in j.card_fits for j in jobs)
            },
            cpu_jobs=sum(j.on_cpu for j in jobs),
            core_hours=sum(j.core_hours for j in jobs),
        )


@dataclass(frozen=True)
class Plan:
    """A run profile's cost: every job, each study's and the total summary, and what the
    numbers rest on."""

    profile: str
    jobs: list[JobCost]
    studies: dict[str, Summary]
    total: Summary
    shapes: dict[str, TaskShape]
    rates: dict[tuple[str, str], Throughput]
    measured: Measured
    models: int  # distinct step counts
    card_gib: float | None = None  # the declared card (pdelab.plan.card_fit), or the visible GPU
    multi_gpu: MultiGpu | None = None  # the run profile's threshold for jobs on several GPUs
    compile: str = "off"  # how its steps are compiled (pdelab.training.compiled): not priced
    study_jobs: dict[str, list[JobCost]] = field(default_factory=dict)  # each study's own jobs


class NoMatch(ValueError):
    """An ``--only`` pattern that names no task/variant of the run profile: a typo, named with
    the closest names, rather than a plan of nothing."""


def check_patterns(patterns: Sequence[str], names: Sequence[str]) -> None:
    """Refuse a pattern that matches none of ``names`` ("task/variant"), with the closest
    names (difflib) among them, their tasks' ``task/*`` and their variants' ``*/variant``."""
    tasks = dict.fromkeys(n.split("/")[0] for n in names)
    variants = dict.fromkeys(n.split("/", 1)[1] for n in names)
    candidates = [*names, *(f"{t}/*" for t in tasks), *(f"*/{v}" for v in variants)]
    for pattern in patterns:
        if any(fnmatchcase(n, pattern) for n in names):
            continue
        close = difflib.get_close_matches(pattern, candidates, n=5, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise NoMatch(
            f"--only {pattern!r} matches no task/variant of this run profile{hint} (the names "
            "are `pdelab list`'s task/variant)"
        )


def proposed_gpus(hours: float, batch: int, rule: MultiGpu | None) -> int:
    """The GPUs of one node a job trains on: one, or, for a job whose ``hours`` on one GPU
    exceed the run profile's threshold (``multi_gpu``), the fewest, a power of two (even
    shares of the batch), that bring its hours per GPU under it, at most ``max_gpus`` and no
    more than the batch's examples (every process takes a share)."""
    n = 1
    if rule is None:
        return n
    while hours / n > rule.over_hours and 2 * n <= min(rule.max_gpus, batch):
        n *= 2
    return n


def visible_gpu_gib() -> float | None:
    """The memory (GiB) of the visible GPU, where there is one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GIB


def fit_job(
    run: RunSpec,
    shape: TaskShape,
    step: StepCost,
    cards: Sequence[float],
    cache: Path | None,
) -> dict[float, tuple[Fit, int]]:
    """Per card: the job's fit (pdelab.plan.card_fit) and an optimizer step's FLOPs as it runs,
    from step counts at smaller batches, with and without checkpointed blocks (cached)."""
    counted: dict[tuple[int, bool], StepCost] = {(run.train.batch_size, False): step}

    def cost(micro: int, checkpointed: bool) -> StepCost:
        if (micro, checkpointed) not in counted:
            at = replace(run, train=replace(run.train, batch_size=micro))
            key = cost_key(at, shape, checkpointed)
            counted[micro, checkpointed] = count_steps({key: (at, shape, checkpointed)}, 1, cache)[
                key
            ]
        return counted[micro, checkpointed]

    out = {}
    for card in cards:
        fit = choose(lambda m, c: cost(m, c).peak_bytes, run.train.batch_size, card)
        out[card] = (
            fit,
            cost(fit.micro_batch, fit.checkpoint_blocks).flops * fit.accumulation_steps,
        )
    return out


def plan(
    params: dict[str, Any],
    profile: str,
    measured: Path | str | None = MEASURED_FILE,
    workers: int = 1,
    cache: Path | None = None,
    only: Sequence[str] = (),
    progress: bool = False,
    card_gib: float | None = None,
) -> Plan:
    """The cost of the profile's trained runs (``only``: "task/variant" patterns), each study's
    share and the total; with a card (``card_gib``, else the profile's ``gpu_memory_gb``, else
    the visible GPU's), each job's micro-batch, accumulation and checkpointing to fit it, and
    on :data:`CARDS_GIB`, how many jobs fit each."""
    specs = validate(params, profile)
    same = same_runs(specs)
    runs = [s for s in specs if RunKey(s.task, s.variant, s.seed) not in same]
    if only:
        check_patterns(only, list(dict.fromkeys(f"{s.task}/{s.variant}" for s in specs)))
        runs = [r for r in runs if any(fnmatchcase(f"{r.task}/{r.variant}", p) for p in only)]
    shapes = {t: task_shape(params, profile, t) for t in dict.fromkeys(r.task for r in runs)}
    todo = {cost_key(r, shapes[r.task]): (r, shapes[r.task]) for r in runs}
    counted = count_steps(todo, workers, cache, progress)
    found = load_measured(measured, profile, runs)
    rates = {(d.name, p): assumed_throughput(d, p) for d in (*GPUS, CPU_CORE) for p in PRECISIONS}
    rates |= found.throughput
    card = card_gib or gpu_memory_gb(params, profile) or visible_gpu_gib()
    several = multi_gpu(params, profile)
    cards = [*dict.fromkeys([*([card] if card else []), *map(float, CARDS_GIB)])]
    fitted: dict[str, dict[float, tuple[Fit, int]]] = {}
    jobs = []
    for run in runs:
        shape = shapes[run.task]
        key = cost_key(run, shape)
        step = counted[key]
        devices = GPUS if on_cuda(run) else (*GPUS, CPU_CORE)  # a CPU job: its core's time too
        timed = {d.name: step_seconds(run, step, d, rates, found) for d in devices}
        if card and key not in fitted:
            fitted[key] = fit_job(run, shape, step, cards, cache)
        per_card = fitted.get(key, {})
        job = JobCost(
            run,
            step,
            tokens_per_step(shape, run),
            shape.steps_per_epoch(run),
            {g: t[0] for g, t in timed.items()},
            {g: t[1] for g, t in timed.items()},
            fit=per_card[card][0] if card else None,
            fit_flops=per_card[card][1] if card else 0,
            card_fits={c: per_card[float(c)][0].fits for c in CARDS_GIB} if card else {},
        )
        if on_cuda(run):  # several GPUs of a node: a CUDA profile's jobs over its threshold
            gpus = proposed_gpus(job.slowest_hours, run.train.batch_size, several)
            job = replace(job, gpus=gpus)
        jobs.append(job)
    by_key = {RunKey(j.run.task, j.run.variant, j.run.seed): j for j in jobs}
    studies, study_jobs = {}, {}
    for name, study in studies_of(params, profile).items():
        keys = dict.fromkeys(same.get(k, k) for k in study.runs)
        own = [by_key[k] for k in keys if k in by_key]
        if own:
            studies[name] = Summary.of(name, own)
            study_jobs[name] = own
    total = Summary.of("total", jobs)
    compiling = compile_mode(params, profile)
    return Plan(
        profile,
        jobs,
        studies,
        total,
        shapes,
        rates,
        found,
        len(todo),
        card,
        several,
        compiling,
        study_jobs,
    )
