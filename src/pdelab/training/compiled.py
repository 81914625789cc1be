"""torch.compile of a training step's forward and loss: how a run is computed, not what it is.

The run profile's ``compile`` (pdelab.spec.config.compile_mode) reaches the trainer on its command
line, like its micro-batches, so switching it retrains nothing; run.json records it under
``execution``. Modes:

- ``off``: eager, as every CPU profile runs;
- ``default``: the task kind's forward and loss compiled as one function (Inductor fuses the
  elementwise work between the matrix products, the quarter of a listops step that ran eager);
- ``reduce-overhead``: the same, replayed as CUDA graphs, for steps whose GPU work is smaller
  than their launches (the small jobs: FNA's IMDb, ViT, translation, WikiText);
- ``auto``: ``reduce-overhead`` where the cost plan prices a step under
  :data:`SMALL_STEP_S` on this GPU kind, ``default`` elsewhere; ``off`` on a CPU.

Sequence lengths vary from batch to batch; a compiled step pads each batch up to its length
bucket (pdelab.training.shape_buckets, pdelab.training.step.bucketed), so a few shapes repeat and
CUDA graphs are recorded once per bucket; every mechanism masks its padding, so the numbers stay
the unbucketed batch's. pdelab.plan.compile_check counts graph breaks and recompiles on a CPU.
Evaluation stays eager: it runs once an epoch, without a backward. That compiling (buckets
included) leaves the numbers as they are is tested in float64 (tests/test_compiled.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from pdelab.spec.config import COMPILE_MODES

PLAN_DATA = Path("results/plan.json")  # the cost plan's data (pdelab.plan.render.plan_data)
SMALL_STEP_S = 0.02  # a step under this does less GPU work than launches: CUDA graphs pay
LossFn = Callable[[nn.Module, dict[str, Tensor], Tensor, bool], Any]


def check_mode(mode: str) -> str:
    """The mode, or an error naming the valid ones."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}; valid: {', '.join(COMPILE_MODES)}")
    return mode


def resolved_mode(mode: str, device: torch.device, planned_step_s: float | None) -> str:
    """What ``auto`` means for this job: off on a CPU (compiling costs more than a smoke run
    trains), CUDA graphs for a step the plan prices under SMALL_STEP_S, else ``default``."""
    check_mode(mode)
    if mode != "auto":
        return mode
    if device.type != "cuda":
        return "off"
    small = planned_step_s is not None and planned_step_s < SMALL_STEP_S
    return "reduce-overhead" if small else "default"


def gpu_kind(device_name: str, kinds: Iterable[str]) -> str | None:
    """Which of the cost plan's GPU kinds (its names, pdelab.plan.hardware.GPUS) a CUDA
    device is: "NVIDIA H200" is H200, "NVIDIA A100-SXM4-80GB" A100-80GB; None for another."""
    words = set(re.split(r"[\s-]+", device_name.upper()))
    for kind in kinds:
        if set(kind.upper().split("-")) - {"SXM", "80GB"} <= words:
            return kind
    return None


def planned_step_s(
    run: Any, steps: int, device: torch.device, plan: Path = PLAN_DATA
) -> float | None:
    """The cost plan's seconds per step of this run on this GPU (its GPU-hours over its
    steps), or None where the plan does not price it (a CPU, another profile's plan)."""
    if device.type != "cuda" or not plan.exists() or steps <= 0:
        return None
    doc = json.loads(plan.read_text())
    if doc.get("profile") != run.profile:
        return None
    for job in doc.get("jobs", []):
        if (job["task"], job["variant"], job["seed"]) == (run.task, run.variant, run.seed):
            hours = job.get("gpu_hours", {})
            kind = gpu_kind(torch.cuda.get_device_name(device), hours)
            return None if kind is None else hours[kind] * 3600 / steps
    return None


def forward_loss(loss: LossFn, mode: str) -> LossFn:
    """The task kind's ``loss(model, inputs, labels, include_pad)``, compiled as one function
    unless ``mode`` is off (``auto`` is resolved by the caller: :func:`resolved_mode`)."""
    if mode == "off":
        return loss
    if mode == "auto":
        raise ValueError("resolve the compile mode first (resolved_mode)")
    return torch.compile(loss, mode=None if mode == "default" else mode)
