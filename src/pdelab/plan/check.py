"""A counted step against a real one: the peak bytes torch allocates for a run's training
steps, measured in a fresh process, beside the fake-tensor estimate of the same run.

Why: the plan's memory model (:mod:`pdelab.plan.counting`) is only as good as its last check;
on a CPU the check runs in the tests (tests/test_cost_plan.py), on a GPU by hand
(``python -m pdelab.plan check TASK VARIANT --device cuda``) and in the calibration
(pdelab.plan.calibration, which times the same synthetic steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from pdelab.plan.counting import count_step
from pdelab.plan.hardware import JOB_THREADS
from pdelab.plan.shapes import TaskShape, synthetic_session, task_shape
from pdelab.spec.config import RunSpec, resolve


def measure_peak(run: RunSpec, shape: TaskShape, steps: int = 2) -> int:
    """The peak bytes torch allocates for real while building ``run``'s model and taking
    ``steps`` steps of :func:`pdelab.training.train.train_step` at ``run.train.batch_size`` on
    ``run.device``: on CUDA ``max_memory_allocated``; on CPU the running sum of the CPU
    allocator's allocation and free events, which the profiler records
    (``profile_memory``). Run it in a fresh process: nothing else may allocate meanwhile.
    One torch thread, as :func:`count_step` counts."""
    from torch.profiler import ProfilerActivity, profile

    from pdelab.training.train import train_step

    torch.set_num_threads(JOB_THREADS)
    device = torch.device(run.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        train_steps(run, shape, steps, device, train_step)
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_steps(run, shape, steps, device, train_step)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def train_steps(
    run: RunSpec, shape: TaskShape, steps: int, device: torch.device, step: Callable
) -> None:
    """The trainer's session on synthetic data (pdelab.plan.shapes) and ``steps`` steps of it."""
    tc = run.train
    s = synthetic_session(run, shape, tc.batch_size, steps, device, shape.steps_per_epoch(run))
    s.model.train()
    for k in range(steps):
        step(s, np.arange(k * tc.batch_size, (k + 1) * tc.batch_size))


def checked_run(
    params: dict[str, Any],
    profile: str,
    task: str,
    variant: str,
    batch: int,
    device: str | None = None,
) -> tuple[RunSpec, TaskShape]:
    """A run of the profile at another batch size (and device), with its task's shapes."""
    run = resolve(params, task, variant, 0, profile)
    run = replace(run, device=device or run.device, train=replace(run.train, batch_size=batch))
    return run, task_shape(params, profile, task)


def measured_peak(
    params: dict[str, Any],
    profile: str,
    task: str,
    variant: str,
    batch: int,
    device: str | None = None,
) -> int:
    """:func:`measure_peak` of :func:`checked_run` (for a fresh process: it is picklable)."""
    return measure_peak(*checked_run(params, profile, task, variant, batch, device))


def estimated_peak(
    params: dict[str, Any],
    profile: str,
    task: str,
    variant: str,
    batch: int,
    device: str | None = None,
) -> int:
    """The peak bytes :func:`count_step` estimates for :func:`checked_run`."""
    return count_step(*checked_run(params, profile, task, variant, batch, device)).peak_bytes
