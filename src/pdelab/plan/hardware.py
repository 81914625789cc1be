"""The processors a plan times its steps on: named GPUs and one CPU core, their dense peaks, and
the share of a peak a training step is assumed to sustain.

Why here, apart from the counting: the counts (FLOPs, bytes) are the step's own; a time is a
count at a rate, and the rates are assumptions a measurement replaces
(:mod:`pdelab.plan.measured`). A GPU job's time is GPU-hours; a CPU job's is core-hours on
one core per torch thread (:data:`JOB_THREADS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Gpu:
    """A named GPU: its memory and dense datasheet peaks (TFLOPS) per precision."""

    name: str
    memory_gib: int
    peak_tflops: Mapping[str, float]  # "bf16" (tensor cores, fp32 accumulate), "fp32"
    source: str


@dataclass(frozen=True)
class CpuCore:
    """One CPU core, as a CPU training job holds it (one torch thread): its dense peaks (TFLOPS)
    per precision."""

    name: str
    peak_tflops: Mapping[str, float]
    source: str


Device = Gpu | CpuCore

GPUS: tuple[Gpu, ...] = (
    Gpu(
        "A100-80GB",
        80,
        {"bf16": 312.0, "fp32": 19.5},
        "NVIDIA A100 datasheet (SXM): 312 dense BF16 tensor, 19.5 FP32",
    ),
    Gpu(
        "H100-SXM",
        80,
        {"bf16": 989.4, "fp32": 66.9},
        "NVIDIA H100 datasheet (SXM5): 989 dense BF16 tensor, 67 FP32",
    ),
    Gpu(
        "H200",
        141,
        {"bf16": 989.4, "fp32": 66.9},
        "NVIDIA H200 datasheet (SXM): 989 dense BF16 tensor, 67 FP32 (the H100's rates)",
    ),
    Gpu(
        "RTX-4090",
        24,
        {"bf16": 165.2, "fp32": 82.6},
        "NVIDIA Ada whitepaper (GeForce RTX 4090): 165 dense BF16 tensor with FP32 "
        "accumulate, 82.6 FP32; an RTX A6000 (48 GB) is of its class at 155 and 38.7",
    ),
)
# a typical x86 server core: no datasheet names the CPU a CPU profile's jobs run on, so its
# rate is this assumption until the profile's own CPU runs (their records) replace it
CPU_CORE = CpuCore(
    "CPU-core",
    {"bf16": 0.096, "fp32": 0.096},
    "a 3.0 GHz x86 core with two AVX2 FMA units: 2 x 8 fp32 lanes x 2 FLOPs x 3.0 GHz = "
    "96 GFLOPS; bf16 products no faster (no AMX assumed: torch computes them in fp32)",
)
DEVICES: tuple[Device, ...] = (*GPUS, CPU_CORE)
# share of the dense peak a training step sustains: small models (width 128 and less) and
# short batches reach less, so the GPU-hours and core-hours are lower bounds unless measured
UTILISATION = 0.40
CARDS_GIB = (24, 40, 80)  # the card sizes every plan says its jobs fit or not
PRECISIONS = ("bf16", "fp32")  # the rate a FLOP runs at: lower precision, or fp32
LOW_DTYPES = (torch.bfloat16, torch.float16)  # the dtypes whose products run at "bf16"
JOB_THREADS = 1  # torch threads of a training job's process (workflow/rules/train.smk: a CPU each)


@dataclass(frozen=True)
class Throughput:
    """Sustained FLOP/s of one device (a GPU or the CPU core) at one precision, and where the
    number comes from."""

    device: str
    precision: str
    tflops: float
    source: str
    measured: bool = False


def rate(tflops: float, fmt: str = ".1f") -> str:
    """A rate as people read it: TFLOPS for a GPU, GFLOPS for a CPU core."""
    return f"{tflops:{fmt}} TFLOPS" if tflops >= 1 else f"{tflops * 1e3:{fmt}} GFLOPS"


def assumed_throughput(device: Device, precision: str) -> Throughput:
    """The dense peak x :data:`UTILISATION`."""
    peak = device.peak_tflops[precision]
    why = f"{rate(peak, 'g')} peak x {UTILISATION:.0%} ({device.source})"
    return Throughput(device.name, precision, peak * UTILISATION, why)
