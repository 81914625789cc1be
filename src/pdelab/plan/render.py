"""The plan as people and the workflow read it: Markdown or plain text (totals, per study,
jobs per GPU, the assumptions it rests on, every job) and its JSON data file.

Why apart from the plan: the same numbers go to a reader (the Markdown), to the cluster's
resource requests (pdelab.runtime.cluster reads the Jobs table's columns), to the GPU shares
(pdelab.runtime.gpu_slots.planned_share reads each job's ``gpu_share_mib``) and to the trainer's
micro-batches (pdelab.training.micro_batch reads the data file); each column is named once, here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tabulate import tabulate

from pdelab.plan.booking import ASSUMED
from pdelab.plan.booking import section as booking_section
from pdelab.plan.card_fit import (
    CUDA_CONTEXT_GIB,
    GIB,
    RESERVED_OVER_ALLOCATED,
    SAFETY,
    fits,
    share_mib,
)
from pdelab.plan.cost import JobCost, Plan, Summary
from pdelab.plan.hardware import CARDS_GIB, CPU_CORE, GPUS, JOB_THREADS, UTILISATION, rate
from pdelab.plan.measured import MEASURED_FILE
from pdelab.runtime.gpu_slots import MAX_JOBS_PER_GPU, jobs_per_gpu

CORE_HOURS = "CPU core-h"  # the column of a CPU job's core-hours (GPU-h columns: per GPU)


def si(value: float, unit: str = "") -> str:
    """1.2e15 -> "1.20 P" (+ unit): three significant figures and an SI prefix."""
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g} k{unit}"
    return f"{value:.3g} {unit}".rstrip()


def size(n: int) -> str:
    """Bytes in MiB below a GiB, else in GiB."""
    return f"{n / 2**20:.0f} MiB" if n < GIB else f"{n / GIB:.1f} GiB"


def hours(h: float) -> str:
    """Hours to three significant figures, or to a tenth from ten on."""
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def assumed_kinds(p: Plan) -> set[str]:
    """The GPU kinds on which no job is priced from a measurement: their hours are at the
    assumed utilisation, and their columns say so."""
    return {g.name for g in GPUS if all(j.time_source.get(g.name) == ASSUMED for j in p.jobs)}


def summary_rows(
    summaries: Sequence[Summary], cpu: bool | None = None, assumed: Collection[str] = ()
) -> list[dict[str, Any]]:
    """One row per summary; ``cpu`` (default: where any summary has a CPU job) adds the CPU
    core-hours column; a GPU kind of ``assumed`` is labelled as at the assumed utilisation."""
    cpu = any(s.cpu_jobs for s in summaries) if cpu is None else cpu
    label = {g.name: f" (assumed {UTILISATION:.0%})" if g.name in assumed else "" for g in GPUS}
    rows = []
    for s in summaries:
        row: dict[str, Any] = {"": s.name, "jobs": s.jobs, "parameters (sum)": si(s.parameters)}
        row |= {"tokens": si(s.tokens), "FLOPs": si(s.flops)}
        row |= {f"GPU-h {g.name}{label[g.name]}": hours(s.gpu_hours[g.name]) for g in GPUS}
        row |= {CORE_HOURS: hours(s.core_hours)} if cpu else {}
        row |= {"peak memory (max)": size(s.peak_bytes), "largest job": s.peak_job}
        row |= {f"over {c} GB": s.too_big[c] for c in CARDS_GIB}
        row |= {f"fit {c} GB (micro-batches)": s.fit[c] for c in CARDS_GIB if c in s.fit}
        rows.append(row)
    return rows


def running_peak(j: JobCost) -> int:
    """The peak of a pass as the job trains it: its micro-batch's on the declared card (the
    trainer reads it from the plan's data), else the paper's batch's."""
    return j.fit.peak_bytes if j.fit is not None else j.step.peak_bytes


def per_gpu(j: JobCost, card_gib: float) -> str:
    """How many jobs like ``j`` one GPU of ``card_gib`` runs at once (pdelab.plan.card_fit):
    "4"; "whole" for a job on several GPUs (torchrun's, each GPU its own); "-" where not one
    fits."""
    if j.gpus > 1:
        return "whole"
    k = jobs_per_gpu(share_mib(running_peak(j)), card_gib * 1024)
    return str(k) if k else "-"


def per_gpu_rows(p: Plan) -> list[dict[str, Any]]:
    """Jobs per GPU, one row per job class (task and variant: the same model and batch), one
    column per named GPU and the declared card: what one GPU of each runs at once."""
    classes: dict[tuple[str, str], list[JobCost]] = {}
    for j in p.jobs:
        classes.setdefault((j.run.task, j.run.variant), []).append(j)
    cards = {f"{g.name} ({g.memory_gib} GB)": float(g.memory_gib) for g in GPUS}
    cards |= {f"card {p.card_gib:g} GB": p.card_gib} if p.card_gib else {}
    rows = []
    for (task, variant), jobs in classes.items():
        biggest = max(jobs, key=running_peak)  # seeds train the same model: one share
        row: dict[str, Any] = {"task": task, "variant": variant, "jobs": len(jobs)}
        row |= {
            "GPU share": "whole GPUs"
            if biggest.gpus > 1
            else size(share_mib(running_peak(biggest)) * 2**20)
        }
        row |= {name: per_gpu(biggest, gib) for name, gib in cards.items()}
        rows.append(row)
    return rows


def job_rows(jobs: Sequence[JobCost], cpu: bool | None = None) -> list[dict[str, Any]]:
    """One row per job (pdelab.runtime.cluster reads its peak memory and GPU-h columns); ``cpu``
    (default: where any job trains on the CPU) adds the CPU core-hours column."""
    cpu = any(j.on_cpu for j in jobs) if cpu is None else cpu
    several = any(j.gpus > 1 for j in jobs)
    rows = []
    for j in jobs:
        row: dict[str, Any] = {"task": j.run.task, "variant": j.run.variant, "seed": j.run.seed}
        row |= {"params": si(j.step.parameters), "batch": j.run.train.batch_size}
        row |= {"tokens/step": si(j.tokens_per_step), "FLOPs/step": si(j.step.flops)}
        row |= {"steps": f"{j.steps:,}{' (max)' if j.may_stop_early else ''}"}
        row |= {"tokens/run": si(j.tokens), "FLOPs/run": si(j.flops)}
        row |= {"peak memory": size(j.step.peak_bytes)}
        row |= {"fits": "/".join(str(c) for c in CARDS_GIB if fits(j.step.peak_bytes, c)) or "-"}
        if j.fit is not None:  # on the declared card (pdelab.plan.card_fit), per process
            micro, accumulation = j.fit.per_process(j.gpus)
            row |= {"micro-batch": micro, "accumulation": accumulation}
            row |= {"checkpointing": "yes" if j.fit.checkpoint_blocks else "no", "GPUs": j.gpus}
            row |= {"peak (micro)": size(j.fit.peak_bytes) + ("" if j.fit.fits else " (over)")}
            row |= {"jobs/GPU": per_gpu(j, j.fit.card_gib)}  # beside each other on the card
        elif several:  # the GPUs of one node it trains on (pdelab.plan.cost.proposed_gpus)
            row |= {"GPUs": j.gpus}
        row |= {f"GPU-h {g.name}": hours(j.gpu_hours(g.name)) for g in GPUS}
        row |= {CORE_HOURS: hours(j.core_hours) if j.on_cpu else "-"} if cpu else {}
        measured = sorted({s for s in j.time_source.values() if s != "assumed"})
        row |= {"time": ", ".join(measured) or "assumed"}
        rows.append(row)
    return rows


def cpu_assumption(p: Plan) -> str:
    """What a CPU job's core-hours rest on: the cores it holds and where its step time comes
    from."""
    measured = sum(j.time_source.get(CPU_CORE.name) == "measured step" for j in p.jobs if j.on_cpu)
    return (
        f"CPU core-hours ({p.total.cpu_jobs} of {p.total.jobs} jobs train on the CPU): one "
        f"core per torch thread, {JOB_THREADS} per job (workflow/rules/train.smk: one CPU "
        f"and thread per process, one process on a CPU profile); a step's core-seconds are "
        f"its FLOPs at the {CPU_CORE.name} rates "
        f"above ({UTILISATION:.0%} of an assumed core's peak: no datasheet names the CPU the "
        "jobs run on), unless a measured step replaces them: the profile's CPU run records "
        "(median step seconds x the torch threads the run trained with) or measured.json's "
        f"step_s for {CPU_CORE.name}; jobs timed so: {measured}. Per-operator overhead that "
        "FLOPs do not count lengthens a small model's CPU step, and a core faster than the "
        "assumed one shortens it: unmeasured core-hours are an estimate to a few times, not a "
        "bound."
    )


def throughput_changes(p: Plan) -> str:
    """What of the step's throughput work the plan prices, and what waits for a GPU."""
    return (
        "Throughput: priced where counted, the rest to be measured on a GPU. Counted (each "
        "job's FLOPs and peak come from its own step on fake tensors, so they follow the "
        "code): PDE attention's chunked dropout path, FNA's column norms, LDN's static band "
        "(on a GPU every pair within the widest learnable band), both retrieval towers in one "
        "batch. To be measured on a GPU (benchmarks/gpu_check.sh: compile, jobs, stacked): "
        f"torch.compile (profiles.{p.profile}.compile = {p.compile}; a measured step's rate "
        "already holds it where the calibration ran compiled), the step without host syncs, "
        "and what co-tenants of one GPU gain; the GPU-hours here assume neither."
    )


def assumptions(p: Plan) -> list[str]:
    """What the numbers rest on, one bullet each."""
    device = sorted({j.run.device for j in p.jobs})
    precision = sorted({j.run.train.precision for j in p.jobs})
    model = (
        "CUDA's kernels where they differ from a CPU's in memory: autocast's CUDA op lists, "
        "flash/memory-efficient attention (O(T)), fused dropout (1-byte mask), foreach AdamW, "
        "512-byte allocator blocks; a kernel that picks its path by the device is counted on "
        "its CPU path (FNA's chunked kernel for FlexAttention: the same products)"
        if "cuda" in device
        else "the CPU's own kernels"
    )
    lines = [
        f"Device: {', '.join(device)} (the run profile's), precision {', '.join(precision)} "
        f"(train.precision), one torch thread per job. Memory is modelled for that device: "
        f"{model}.",
        "Throughput (sustained, per device and precision; a bf16 run's fp32 islands, e.g. "
        "distance kernels, run at the fp32 rate; TF32 off, PyTorch's default):",
    ]
    for (name, prec), t in sorted(p.rates.items()):
        if name == CPU_CORE.name and not p.total.cpu_jobs:
            continue  # no job trains on the CPU: its rate is no assumption of this plan
        kind = "measured" if t.measured else "assumed"
        lines.append(f"  - {name} {prec}: {rate(t.tflops)}, {kind}: {t.source}")
    steps = sum(1 for j in p.jobs if any(s == "measured step" for s in j.time_source.values()))
    source = p.measured.path or f"none ({MEASURED_FILE} absent)"
    lines.append(f"Measurements: {source}; jobs timed from a measured step: {steps}.")
    lines.append(
        f"Steps: steps_per_epoch x epochs; {p.total.bounded} of {p.total.jobs} jobs may stop "
        "early (patience < epochs): their steps, FLOPs, GPU-hours and core-hours are upper "
        "bounds. Training steps only: validation and test passes are not counted."
    )
    if p.total.cpu_jobs:
        lines.append(cpu_assumption(p))
    lines.append(
        "FLOPs: torch.utils.flop_counter.FlopCounterMode over forward + backward (matrix "
        "products and attention, 2 per multiply-add) on fake tensors at the profile's batch."
    )
    lines.append(
        "Peak memory: live tensor bytes of one steady-state training step (parameters, "
        "gradients, AdamW moments, batch, activations, temporaries); a card fits when peak x "
        f"{RESERVED_OVER_ALLOCATED:g} + {CUDA_CONTEXT_GIB:g} GiB (CUDA context) <= its memory."
    )
    if p.card_gib:
        lines.append(
            f"Card: {p.card_gib:g} GB (profiles.{p.profile}.gpu_memory_gb, else the visible "
            "GPU). Per job, the largest micro-batch whose estimated peak fits it with "
            f"{SAFETY:.0%} to spare, and the accumulation steps that make the paper's batch "
            "(the optimizer steps and results are the full batch's: pdelab.training.micro_batch); "
            "where one example does not fit, the encoder's and decoder's blocks are "
            "checkpointed. GPU-hours count the micro-batches' work and the recomputation. The "
            f"totals' 'fit' columns: jobs that fit each of {', '.join(map(str, CARDS_GIB))} GB "
            "so."
        )
    lines.append(
        "Jobs per GPU: a job's share of a GPU is its pass's peak (the micro-batch's on the "
        f"declared card) x {RESERVED_OVER_ALLOCATED:g} + {CUDA_CONTEXT_GIB:g} GiB (its own CUDA "
        f"context); a GPU runs as many as fit with {SAFETY:.0%} of it left free, at most "
        f"{MAX_JOBS_PER_GPU} (what more co-tenants gain is to be measured). Locally "
        "`snakemake --resources gpu_percent=<100 x GPUs>` starts them so and "
        "pdelab.runtime.gpu_slots gives each its share (a job on several GPUs takes them "
        "whole); on SLURM a job asks for a shard of a GPU where PDELAB_SLURM_GPU_SHARDS names "
        "the cluster's shards per GPU, else a whole GPU. GPU-hours are each job's alone: "
        "co-tenants share the GPU's compute (time-sliced, or at once under MPS)."
    )
    if "cuda" in device:
        lines.append(throughput_changes(p))
    if p.multi_gpu is not None:
        rule, several = p.multi_gpu, [j for j in p.jobs if j.gpus > 1]
        lines.append(
            f"GPUs per job (profiles.{p.profile}.multi_gpu): a job over "
            f"{rule.over_hours:g} hours on its slowest named GPU trains on the fewest GPUs of "
            f"one node, a power of two up to {rule.max_gpus}, that bring its hours per GPU under "
            f"that; {len(several)} of {p.total.jobs} jobs do (the GPUs column: torchrun's "
            "processes, the batch split across them, each in the micro-batches above). Their "
            "GPU-hours are those of all their GPUs together; their wall time is those over "
            "their GPUs (linear scaling assumed: the gradients' all-reduce is not counted)."
        )
    lines.append("Shapes (pdelab.plan.shapes; batches at the longest length):")
    for task, s in sorted(p.shapes.items()):
        where = "prepared manifest" if s.source == "manifest" else "declared in params.yaml"
        extra = f"; assumed: {'; '.join(s.assumed)}" if s.assumed else ""
        length = "windows of train.seq_len" if s.kind == "lm" else f"length {s.max_length}"
        lines.append(
            f"  - {task}: {where}; {s.kind}, vocabulary {len(s.vocab):,}, {length}, "
            f"{s.n_train:,} training {'tokens' if s.kind == 'lm' else 'examples'}{extra}"
        )
    return lines


def render(p: Plan, fmt: str = "text", with_jobs: bool = True, gpus: int = 1) -> str:
    """The plan as Markdown (``md``) or plain text: what to book on ``gpus`` GPUs
    (:mod:`pdelab.plan.booking`), totals, per study, jobs per GPU, assumptions, jobs."""
    assumed = assumed_kinds(p)
    table = "github" if fmt == "md" else "simple"
    head = "# " if fmt == "md" else ""
    sub = "## " if fmt == "md" else ""
    bullet = "- " if fmt == "md" else "* "
    out = [
        f"{head}Cost plan: run profile {p.profile}",
        "",
        f"{p.total.jobs} training jobs, {p.models} distinct models x batches counted. "
        "Estimates from fake-tensor steps and assumed rates unless marked measured; "
        "studies share runs, so study rows add up to more than the total.",
        "",
        booking_section(p, gpus, fmt),
        f"{sub}Total",
        "",
        tabulate(summary_rows([p.total], assumed=assumed), headers="keys", tablefmt=table),
        "",
        f"{sub}Per study",
        "",
        tabulate(
            summary_rows(list(p.studies.values()), assumed=assumed),
            headers="keys",
            tablefmt=table,
        ),
        "",
        f"{sub}Jobs per GPU",
        "",
        "Jobs of each class one GPU runs at once, by memory (Assumptions: jobs per GPU).",
        "",
        tabulate(per_gpu_rows(p), headers="keys", tablefmt=table),
        "",
        f"{sub}Assumptions",
        "",
    ]
    for line in assumptions(p):
        nested = line.startswith("  - ")
        out.append("  " + bullet + line[4:] if nested else bullet + line)
    if with_jobs:
        out += ["", jobs_section(p, fmt).rstrip("\n")]
    return "\n".join(out) + "\n"


def jobs_section(p: Plan, fmt: str = "text") -> str:
    """The plan's last section: every job, one row each (pdelab.runtime.cluster reads it)."""
    table = "github" if fmt == "md" else "simple"
    sub = "## " if fmt == "md" else ""
    return f"{sub}Jobs\n\n{tabulate(job_rows(p.jobs), headers='keys', tablefmt=table)}\n"


def plan_data(p: Plan) -> dict[str, Any]:
    """The plan's data file: per job its fit to the card, its share of a GPU and the jobs per
    GPU of the card, and hours (a CPU job's core-hours too), per card size the jobs that fit
    at the paper's batch and with micro-batches."""
    jobs = []
    for j in p.jobs:
        row: dict[str, Any] = {"task": j.run.task, "variant": j.run.variant, "seed": j.run.seed}
        row |= {"batch": j.run.train.batch_size, "gpus": j.gpus, "peak_bytes": j.step.peak_bytes}
        # its share of a GPU (pdelab.runtime.gpu_slots.planned_share) and how many share one card
        row |= {"gpu_share_mib": share_mib(running_peak(j))}
        if p.card_gib:
            k = jobs_per_gpu(row["gpu_share_mib"], p.card_gib * 1024) if j.gpus == 1 else 1
            row |= {"jobs_per_gpu": k}
        if j.fit is not None:  # accumulation: per process, on its share of the batch
            row |= {"micro_batch": j.fit.micro_batch, "accumulation": j.fit.per_process(j.gpus)[1]}
            row |= {"checkpoint_blocks": j.fit.checkpoint_blocks, "fits": j.fit.fits}
            row |= {"micro_peak_bytes": j.fit.peak_bytes}
        row |= {"gpu_hours": {g.name: j.gpu_hours(g.name) for g in GPUS}}
        row |= {"core_hours": j.core_hours} if j.on_cpu else {}
        jobs.append(row)
    cards = {
        str(c): {"jobs": p.total.jobs, "fit_at_batch": p.total.jobs - p.total.too_big[c]}
        | ({"fit": p.total.fit[c]} if c in p.total.fit else {})
        for c in CARDS_GIB
    }
    doc = {"profile": p.profile, "card_gib": p.card_gib, "cards": cards, "jobs": jobs}
    return doc | ({"core_hours": p.total.core_hours} if p.total.cpu_jobs else {})
