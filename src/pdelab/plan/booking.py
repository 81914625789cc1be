"""What to book: per GPU kind, the GPU-hours and the wall-clock on N GPUs of a plan, in total and
per study, with the share priced from measurements and, where a rate is assumed, a range.

Why apart from the plan's tables: a booking is read per GPU kind, and a kind whose rate is a
datasheet guess must not sit beside a measured one as if both were measured. So a job priced
at the assumed utilisation (:data:`pdelab.plan.hardware.UTILISATION`) is shown as a range:
its FLOPs at the lowest and at the highest utilisation any job class reached where one was
measured (a measured step on a named GPU: its seconds at the datasheet peak over its measured
seconds, as :mod:`pdelab.plan.calibration` computes it). A job with a measured step, or on a
GPU with a measured rate, keeps its one number.

Wall-clock: the jobs placed on ``N`` GPUs longest first, each on the least loaded GPUs it
needs (a job on several GPUs starts when all of them are free; one asking for more than
``N`` runs on all ``N`` for its GPU-hours over ``N``), one job per GPU at a time: what
co-tenants of one GPU gain is not counted (the plan's Jobs per GPU says which fit together).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from tabulate import tabulate

from pdelab.plan.cost import JobCost, Plan
from pdelab.plan.hardware import GPUS, PRECISIONS, UTILISATION, Gpu

ASSUMED = "assumed"


@dataclass(frozen=True)
class Utilisation:
    """The lowest and highest share of a GPU's datasheet peak a job class reached where its
    step was measured, and the classes measured ("GPU task/variant")."""

    low: float
    high: float
    classes: tuple[str, ...]

    def text(self) -> str:
        return f"{100 * self.low:.2g}-{100 * self.high:.2g}%"


def at_peak_seconds(job: JobCost, gpu: Gpu) -> float:
    """A step's seconds on ``gpu`` at its datasheet peaks: bf16 FLOPs at the bf16 peak, the rest
    at the fp32 one (the plan's rule, at 100% utilisation)."""
    fp32 = job.step.flops - job.step.low_precision_flops
    peak = {p: gpu.peak_tflops[p] * 1e12 for p in PRECISIONS}
    return job.step.low_precision_flops / peak["bf16"] + fp32 / peak["fp32"]


def measured_utilisation(jobs: Sequence[JobCost]) -> Utilisation | None:
    """The utilisation range over the job classes with a measured step on a named GPU (None:
    no GPU step measured)."""
    found: dict[str, float] = {}
    for j in jobs:
        for gpu in GPUS:
            if j.time_source.get(gpu.name) == "measured step" and j.step_s.get(gpu.name):
                name = f"{gpu.name} {j.run.task}/{j.run.variant}"
                found[name] = at_peak_seconds(j, gpu) / j.step_s[gpu.name]
    if not found:
        return None
    return Utilisation(min(found.values()), max(found.values()), tuple(found))


def hours_range(job: JobCost, gpu: str, utilisation: Utilisation | None) -> tuple[float, float]:
    """(low, high) GPU-hours of one job on ``gpu``: its one number where measured; where its
    rate is assumed, its FLOPs at the highest and the lowest measured utilisation (the assumed
    seconds are the FLOPs at the peaks over :data:`UTILISATION`)."""
    hours = job.gpu_hours(gpu)
    if job.time_source.get(gpu) != ASSUMED or utilisation is None:
        return hours, hours
    at_peak = hours * UTILISATION
    return at_peak / utilisation.high, at_peak / utilisation.low


def wall_clock(jobs: Sequence[tuple[float, int]], gpus: int) -> float:
    """Hours until the last of ``jobs`` ((GPU-hours, GPUs it trains on)) ends on ``gpus`` GPUs:
    longest first, each on the least loaded GPUs it needs, starting when all are free."""
    if gpus < 1:
        raise ValueError(f"--gpus {gpus}: book at least one GPU")
    loads = [0.0] * gpus
    heapq.heapify(loads)
    for hours, wanted in sorted(jobs, key=lambda j: -j[0] / min(j[1], gpus)):
        k = min(wanted, gpus)
        taken = [heapq.heappop(loads) for _ in range(k)]
        end = max(taken) + hours / k
        for _ in range(k):
            heapq.heappush(loads, end)
    return max(loads)


@dataclass(frozen=True)
class Booking:
    """One GPU kind's booking for a set of jobs: GPU-hours and wall-clock on ``gpus`` GPUs (each
    low, high: equal where every job is measured), the longest job's hours on its GPUs, and
    the jobs priced from a measured step, a measured rate, or the assumed one."""

    gpu: str
    gpus: int
    jobs: int
    gpu_hours: tuple[float, float]
    wall: tuple[float, float]
    longest: tuple[float, float]
    measured_step: int
    measured_rate: int
    assumed: int

    @property
    def measured_share(self) -> float:
        """The share of the jobs priced from measurements (their own step, or the GPU's rate)."""
        return (self.measured_step + self.measured_rate) / self.jobs if self.jobs else 0.0


def book(jobs: Sequence[JobCost], gpu: str, gpus: int, utilisation: Utilisation | None) -> Booking:
    """The booking of ``jobs`` on ``gpus`` GPUs of kind ``gpu``."""
    ranges = [hours_range(j, gpu, utilisation) for j in jobs]
    sources = [j.time_source.get(gpu, ASSUMED) for j in jobs]
    ends = []
    for end in (0, 1):
        ends.append(wall_clock([(r[end], j.gpus) for r, j in zip(ranges, jobs, strict=True)], gpus))
    longest = [
        max((r[end] / min(j.gpus, gpus) for r, j in zip(ranges, jobs, strict=True)), default=0.0)
        for end in (0, 1)
    ]
    return Booking(
        gpu,
        gpus,
        len(jobs),
        (sum(r[0] for r in ranges), sum(r[1] for r in ranges)),
        (ends[0], ends[1]),
        (longest[0], longest[1]),
        sources.count("measured step"),
        sources.count("measured rate"),
        sources.count(ASSUMED),
    )


def span(low: float, high: float) -> str:
    """Hours, or a range of them, to three significant figures (a tenth from ten on)."""

    def one(h: float) -> str:
        return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"

    same = abs(high - low) <= 1e-9 * max(abs(high), 1.0)
    return one(low) if same else f"{one(low)}-{one(high)}"


def wall_text(low: float, high: float) -> str:
    """Wall-clock hours, with days from two days on."""
    days = f" ({span(low / 24, high / 24)} d)" if high >= 48 else ""
    return f"{span(low, high)} h{days}"


def priced_from(b: Booking) -> str:
    """Where a booking's numbers come from, in words."""
    parts = []
    if b.measured_step:
        parts.append(f"{b.measured_step} measured steps")
    if b.measured_rate:
        parts.append(f"{b.measured_rate} at the measured rate")
    if b.assumed:
        parts.append(f"{b.assumed} assumed (a range)")
    return f"{100 * b.measured_share:.0f}% measured: " + ", ".join(parts) if parts else "-"


def kind_label(b: Booking) -> str:
    """A GPU kind as its column names it: whether its hours are measured or assumed."""
    if not b.assumed:
        return f"{b.gpu} (measured)"
    return f"{b.gpu} (assumed, a range)" if not b.measured_share else f"{b.gpu} (partly assumed)"


def section(p: Plan, gpus: int = 1, fmt: str = "text") -> str:
    """The plan's opening section: what to book, per GPU kind, in total and per study."""
    table = "github" if fmt == "md" else "simple"
    sub = "## " if fmt == "md" else ""
    utilisation = measured_utilisation(p.jobs)
    total = [book(p.jobs, g.name, gpus, utilisation) for g in GPUS]
    rows = [
        {
            "GPU kind": kind_label(b),
            "jobs": b.jobs,
            "GPU-hours": span(*b.gpu_hours),
            f"wall-clock on {gpus} GPU{'s' if gpus > 1 else ''}": wall_text(*b.wall),
            "longest job": wall_text(*b.longest),
            "priced from": priced_from(b),
        }
        for b in total
    ]
    per_study = []
    for name, jobs in p.study_jobs.items():
        row: dict[str, object] = {"study": name, "jobs": len(jobs)}
        for g in GPUS:
            b = book(jobs, g.name, gpus, utilisation)
            row |= {f"{g.name} GPU-h": span(*b.gpu_hours), f"{g.name} wall": wall_text(*b.wall)}
        per_study.append(row)
    if utilisation is None:
        rule = (
            f"no step was measured on a GPU, so an assumed rate is {UTILISATION:.0%} of the "
            "datasheet peak, one number and a lower bound (small models reach far less)"
        )
    else:
        rule = (
            f"where a rate is assumed the hours are a range: the jobs' FLOPs at the highest and "
            f"the lowest utilisation measured on any job class, {utilisation.text()} of the "
            f"datasheet peak over {len(utilisation.classes)} classes "
            f"({', '.join(utilisation.classes)}), not the assumed {UTILISATION:.0%}"
        )
    return "\n".join(
        [
            f"{sub}What to book",
            "",
            f"Per GPU kind: the GPU-hours of the {p.total.jobs} training jobs and the wall-clock "
            f"on {gpus} GPU{'s' if gpus > 1 else ''} of that kind (`--gpus N`); {rule}. "
            "Wall-clock: the jobs longest first, each on the least loaded GPUs it needs, one job "
            "per GPU at a time (co-tenants not counted), never under the longest job. Training "
            "steps only: evaluation passes add to it.",
            "",
            tabulate(rows, headers="keys", tablefmt=table),
            "",
            f"Per study (each alone on the {gpus} GPU{'s' if gpus > 1 else ''}; studies share "
            "runs, so their rows add up to more than the total):",
            "",
            tabulate(per_study, headers="keys", tablefmt=table),
            "",
        ]
    )
