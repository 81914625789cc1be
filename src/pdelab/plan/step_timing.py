"""Step time and peak memory of several variants of one task over a baseline, measured where
the comparison means something: the tool of every study that compares costs (Where to Add
PDE Diffusion's Table 9, the mechanisms study), which knows no mechanism by name.

    python -m pdelab.plan.step_timing --task listops \\
        --variants baseline after_embedding after_mlp multiscale_after_embedding \\
        --out results/cost/listops.parquet

Why not the training jobs' step times: those jobs share the machine with each other, so their
times differ by the load they met, not by the mechanism. Here every variant runs in one process
on the same batches and threads, and the comparison is paired:

- each variant's model, AdamW and schedule come from ``pdelab.training.train.build`` (the resolved
  run spec, the prepared data's manifest, ``build_model``), so the timed network is the trained one;
- a step is training's own (``to_device``, ``batch_loss``, zero_grad, backward, gradient
  clipping, AdamW step, schedule step): :func:`pdelab.training.train.train_step`;
- the batches are the first ``batches`` of the seed's first training epoch, cycled;
- after ``warmup`` untimed steps each, repetition r runs every variant once on batch
  r mod batches, starting at a rotating offset, so the times of one repetition meet the same
  machine state; a GPU is synchronized around every timed step;
- overhead: the median over repetitions of the paired ratio variant / baseline, with a
  distribution-free 95% interval of that median from order statistics (binomial ranks; none
  below 6 repetitions);
- peak memory, CUDA only: the peak allocation of one step above what was allocated before it,
  plus the variant's own resident training state (parameters, buffers, gradients, AdamW
  moments), i.e. what training that variant alone needs. On a CPU torch keeps no allocator
  statistics, so it is "not measured" rather than estimated.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tabulate import tabulate

from pdelab.records.atomic import atomic_path
from pdelab.spec.config import PARAMS_FILE, load_params, resolve
from pdelab.training.train import Session, batches, build, train_step

LEVEL = 0.95
INTERVAL = "order-statistic interval of the median paired ratio"
NOT_MEASURED = "not measured (CPU: torch keeps no allocator statistics)"


@dataclass(frozen=True)
class Timing:
    """How the steps are timed: repetitions, untimed warm-up steps per variant, distinct
    batches cycled, and torch's CPU threads."""

    repeats: int = 50
    warmup: int = 5
    batches: int = 8
    threads: int = 1


# -- statistics (pure: the report and the tests use them on any timings) -----------------------


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval of the median from order statistics.

    With k the largest rank such that P(Binomial(n, 1/2) <= k - 1) <= (1 - level) / 2, the
    interval [x_(k), x_(n+1-k)] covers the median with probability >= level for any continuous
    distribution. NaN bounds when n is too small for that (n < 6 at 95%)."""
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    tail = (1 - level) / 2
    k, cdf = 0, 0.0
    while k < n // 2:
        cdf += math.comb(n, k) / 2**n  # now P(Binomial(n, 1/2) <= k)
        if cdf > tail:
            break
        k += 1
    median = statistics.median(x)
    if k == 0:
        return median, math.nan, math.nan
    return median, x[k - 1], x[n - k]


def paired_ratio(
    times: Sequence[float], base: Sequence[float], level: float = LEVEL
) -> tuple[float, float, float]:
    """(median, low, high) of times[r] / base[r] over repetitions r: each ratio compares two
    steps taken moments apart, so slow drifts of the machine cancel."""
    ratios = [t / b for t, b in zip(times, base, strict=True)]
    return median_interval(ratios, level)


def summarize(
    times: dict[str, list[float]],
    baseline: str,
    memory_mb: dict[str, float] | None = None,
    level: float = LEVEL,
) -> pd.DataFrame:
    """One row per variant: median step time, the overhead ratio over the baseline with its
    interval, peak memory and its ratio (NaN where not measured), and the raw step times."""
    if baseline not in times:
        raise ValueError(f"the baseline {baseline!r} was not timed; timed: {', '.join(times)}")
    memory_mb = memory_mb or {}
    base_memory = memory_mb.get(baseline, math.nan)
    rows = []
    for variant, steps in times.items():
        ratio, low, high = paired_ratio(steps, times[baseline], level)
        memory = memory_mb.get(variant, math.nan)
        rows.append(
            {
                "variant": variant,
                "median_step_s": statistics.median(steps),
                "time_ratio": ratio,
                "time_ratio_low": low,
                "time_ratio_high": high,
                "level": level,
                "peak_memory_mb": memory,
                "memory_ratio": memory / base_memory,
                "step_times_s": [float(t) for t in steps],
            }
        )
    return pd.DataFrame(rows)


# -- measuring ---------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a timer read measures the step, not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The device as the table names it: its type and model."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    return f"cpu ({model or platform.processor() or platform.machine()})"


def sessions(
    params: dict[str, Any],
    task: str,
    variants: Sequence[str],
    profile: str | None = None,
    seed: int = 0,
    device: str | None = None,
) -> dict[str, Session]:
    """Each variant's data, model, optimizer and schedule, built as its training run builds
    them; device overrides the profile's (e.g. to time a smoke model on a GPU)."""
    out = {}
    for variant in variants:
        run = resolve(params, task, variant, seed, profile)
        if device:
            run = replace(run, device=device)
        out[variant] = build(run, Path(os.devnull))  # nothing is written
        out[variant].model.train()
    return out


def timed_batches(s: Session, count: int) -> list[np.ndarray]:
    """The first `count` batches of the seed's first training epoch, in training's order."""
    n = len(s.data["train"])
    order = np.random.default_rng([s.run.seed, 1]).permutation(n)
    return batches(n, s.run.train.batch_size, order)[:count]


def interleaved(
    steps: dict[str, Callable[[int], None]],
    repeats: int,
    warmup: int,
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Seconds per step of each method: after `warmup` untimed steps each, repetition r runs
    every method once with argument r, starting at offset r mod (number of methods), so
    times[name][r] of different methods are paired."""
    names = list(steps)
    for name in names:
        for i in range(warmup):
            steps[name](i)
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            sync(device)
            start = clock()
            steps[name](r)
            sync(device)
            times[name].append(clock() - start)
    return times


def state_bytes(s: Session) -> int:
    """What training the variant keeps resident between steps: parameters, buffers,
    gradients and the optimizer's state."""
    params = list(s.model.parameters())
    tensors = [*params, *s.model.buffers(), *(p.grad for p in params if p.grad is not None)]
    for state in s.optimizer.state.values():
        tensors += [v for v in state.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def cuda_peak_mb(s: Session, step: Callable[[], None]) -> float:
    """MiB that training this variant alone peaks at: its resident state plus one step's peak
    allocation above what was allocated before the step."""
    device = s.device
    sync(device)
    resident = state_bytes(s)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    sync(device)
    return (resident + torch.cuda.max_memory_allocated(device) - before) / 2**20


def measure(
    params: dict[str, Any],
    task: str,
    variants: Sequence[str],
    baseline: str = "baseline",
    profile: str | None = None,
    seed: int = 0,
    timing: Timing | None = None,
    device: str | None = None,
) -> pd.DataFrame:
    """Time every variant's training step interleaved in this process; one row per variant
    with the statistics of :func:`summarize` and how they were measured."""
    timing = timing or Timing()
    if baseline not in variants:
        raise ValueError(f"the variants must include the baseline {baseline!r}")
    torch.set_num_threads(timing.threads)
    built = sessions(params, task, variants, profile, seed, device)
    first = built[variants[0]]
    picked = timed_batches(first, max(1, timing.batches))

    def stepper(s: Session) -> Callable[[int], None]:
        return lambda r: train_step(s, picked[r % len(picked)])

    steps = {v: stepper(built[v]) for v in variants}
    times = interleaved(steps, timing.repeats, timing.warmup, first.device)
    memory: dict[str, float] = {}
    if first.device.type == "cuda":
        memory = {v: cuda_peak_mb(built[v], lambda v=v: steps[v](0)) for v in variants}
    frame = summarize(times, baseline, memory)
    spec = first.run
    frame.insert(0, "task", task)
    return frame.assign(
        profile=spec.profile,
        device=first.device.type,
        device_name=device_name(first.device),
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        repeats=timing.repeats,
        warmup=timing.warmup,
        batches=len(picked),
        batch_size=spec.train.batch_size,
        interval=INTERVAL,
        memory_measured_as=(
            "cuda max_memory_allocated: resident state + one step's peak"
            if memory
            else NOT_MEASURED
        ),
    )


def render(frame: pd.DataFrame) -> str:
    """A Markdown summary of a timing frame (what the command prints)."""
    head = frame.iloc[0]
    table = pd.DataFrame(
        {
            "variant": frame["variant"],
            "step ms": 1e3 * frame["median_step_s"],
            "overhead %": 100 * (frame["time_ratio"] - 1),
            "95% low": 100 * (frame["time_ratio_low"] - 1),
            "95% high": 100 * (frame["time_ratio_high"] - 1),
            "peak MiB": frame["peak_memory_mb"],
            "memory %": 100 * (frame["memory_ratio"] - 1),
        }
    )
    table = table.astype(object).where(table.notna(), None)  # NaN prints as n/a
    return (
        f"{head['task']} ({head['profile']} profile), interleaved in one process on "
        f"{head['device_name']}, {head['threads']} thread(s), torch {head['torch_version']}, "
        f"{head['repeats']} repeats after {head['warmup']} warm-up steps, {head['batches']} "
        f"batches of {head['batch_size']}; 95% {head['interval']}; memory: "
        f"{head['memory_measured_as']}\n\n"
        + tabulate(
            table,
            headers="keys",
            tablefmt="github",
            showindex=False,
            floatfmt=("", ".2f", "+.2f", "+.2f", "+.2f", ".1f", "+.2f"),
            missingval="n/a",
        )
    )


def main(argv: list[str] | None = None) -> None:
    """The command line (the workflow's cost_timing rule)."""
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.plan.step_timing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--task", required=True)
    parser.add_argument("--variants", nargs="+", required=True)
    parser.add_argument("--baseline", default="baseline")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", help="defaults to params.yaml's `profile`")
    parser.add_argument("--params", default=str(PARAMS_FILE))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="override the profile's device (cpu, cuda)")
    for setting in fields(Timing):
        parser.add_argument(f"--{setting.name}", type=int, default=setting.default)
    args = parser.parse_args(argv)
    timing = Timing(args.repeats, args.warmup, args.batches, args.threads)
    frame = measure(
        load_params(args.params),
        args.task,
        args.variants,
        args.baseline,
        args.profile,
        args.seed,
        timing,
        args.device,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        frame.to_parquet(tmp, index=False)
    print(render(frame))
    print(f"-> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
