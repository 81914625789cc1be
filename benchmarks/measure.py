"""Measuring helpers shared by the benchmark scripts: device sync, interleaved timing, peak memory.

Peak memory is ``torch.cuda.max_memory_allocated`` on a GPU. On a CPU it is the growth of
the process's resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs),
because tracemalloc cannot see torch's allocations.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_times(
    runs: dict[str, Callable[[], object]], device: torch.device, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds of each call, one per round and run. Round r starts at run r mod n and calls
    each once, so a slow spell of a shared machine falls on all of them alike."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync(device)
            start = time.perf_counter()
            runs[name]()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def interleaved(
    runs: dict[str, Callable[[], object]], device: torch.device, repeats: int, warmup: int
) -> dict[str, float]:
    """Median seconds per run over interleaved rounds (see ``interleaved_times``)."""
    times = interleaved_times(runs, device, repeats, warmup)
    return {name: statistics.median(ts) for name, ts in times.items()}


def paired_ratios(
    times: dict[str, list[float]], baseline: str
) -> dict[str, tuple[float, float, float]]:
    """(median, first quartile, third quartile) of each run's time over the baseline's in
    the same round: paired within a round, so a slow spell that hits the round cancels."""
    out = {}
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times[baseline], strict=True)]
        q1, q2, q3 = (
            statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
        )
        out[name] = (q2, q1, q3)
    return out


def available_mib(device: torch.device) -> float:
    """Memory a new allocation can have now: free GPU memory, or MemAvailable on a CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / 2**20
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def proc_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_memory_supported() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        proc_kib("VmHWM")
    except OSError:
        return False
    try:  # M_MMAP_THRESHOLD = -3, M_TRIM_THRESHOLD = -1: large blocks map and unmap at once
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024)
        libc.mallopt(-1, 64 * 1024)
    except OSError:
        pass
    return True


def keep_freed_memory() -> None:
    """For CPU timings: serve every block from the heap and never trim it (M_MMAP_MAX = 0,
    M_TRIM_THRESHOLD = 1 GiB), as a caching allocator would, so that a call which allocates
    T x T buffers is not charged for page faults the next call repeats."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-4, 0)
        libc.mallopt(-1, 2**30)
    except OSError:
        pass


def memory_in_child(script: str | Path, argv: list[str]) -> dict[int, dict[str, float]]:
    """Run ``script argv --memory-only`` in a fresh process (whose allocator has served no
    timing pass) and read back the {T: {name: MiB}} it prints as its last line of JSON."""
    cmd = [sys.executable, str(Path(script).resolve()), *argv, "--memory-only"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return {int(t): v for t, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def memory_per_kernel(
    script: str | Path, argv: list[str], kernels: list[str]
) -> tuple[dict[int, dict[str, float]], list[str]]:
    """Peak memory with one fresh process per kernel, so a child measures only its kernel
    (no other kernel's heap or cache) and one that dies takes no other kernel's numbers.

    Each child runs ``script argv --memory-only --memory-kernel NAME`` and prints, as its last
    line, JSON ``{"peaks": {T: {key: MiB}}, "notes": [why a shape was skipped, ...]}``.
    Returns the merged {T: {key: MiB}} and the notes, with one for each child that failed.
    Call it before the caller allocates its own inputs: the caller's heap, resident while a
    child runs, is memory the child cannot have.
    """
    peaks: dict[int, dict[str, float]] = {}
    notes: list[str] = []
    for name in kernels:
        cmd = [sys.executable, str(Path(script).resolve()), *argv, "--memory-only"]
        done = subprocess.run([*cmd, "--memory-kernel", name], capture_output=True, text=True)
        if done.returncode != 0:
            why = "killed (out of memory?)" if done.returncode == -9 else "failed"
            last = "".join(f": {line}" for line in done.stderr.strip().splitlines()[-1:])
            notes.append(f"{name}: memory child {why}, exit {done.returncode}{last}")
            continue
        report = json.loads(done.stdout.strip().splitlines()[-1])
        for t, values in report["peaks"].items():
            peaks.setdefault(int(t), {}).update(values)
        notes += report["notes"]
    return peaks, notes


def peak_mib(run: Callable[[], torch.Tensor], device: torch.device) -> float:
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = run()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return peak / 2**20
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    base = proc_kib("VmRSS")
    out = run()
    peak = proc_kib("VmHWM") - base
    del out
    return peak / 1024


# -- the parts every attention benchmark shares -------------------------------------------------


def scaled_need_mib(squares: float, square_mib: float, t: int, measured: dict[int, float]) -> float:
    """Expected peak MiB of one call at length t: ``squares`` T x T buffers of ``square_mib``
    each, or the peak measured at the longest shorter length scaled by (t / t0)^2, whichever
    is larger."""
    shorter = [t0 for t0 in measured if t0 < t]
    scaled = measured[max(shorter)] * (t / max(shorter)) ** 2 if shorter else 0.0
    return max(squares * square_mib, scaled)


def refuse_above(
    name: str, mode: str, t: int, need: float, fraction: float, device: torch.device
) -> str | None:
    """Why a call expecting ``need`` MiB is skipped (above ``fraction`` of what is free), or
    None where it fits."""
    free = available_mib(device)
    if need <= fraction * free:
        return None
    return (
        f"{name} {mode} at T={t} skipped: expects ~{need:.0f} MiB, above "
        f"{fraction:g} x the {free:.0f} MiB available"
    )


def peaks_of_one_kernel(
    name: str,
    lengths: list[int],
    modes: tuple[str, ...],
    inputs_at: Callable[[int], tuple[torch.Tensor, ...]],
    run_of: Callable[[tuple[torch.Tensor, ...], str], Callable[[], torch.Tensor]],
    too_big: Callable[[str, int, dict[int, float]], str | None],
    device: torch.device,
) -> dict[str, object]:
    """A memory child's report: the peak MiB of kernel ``name`` per length and mode, shorter
    lengths first (their peaks predict the longer ones' for ``too_big``), after one small call
    has set up thread pools and scratch."""
    if device.type != "cuda" and not cpu_memory_supported():
        return {"peaks": {}, "notes": [f"{name}: /proc/self/clear_refs not writable, no memory"]}
    run_of(inputs_at(64), modes[-1])()
    peaks: dict[int, dict[str, float]] = {}
    notes: list[str] = []
    measured: dict[str, dict[int, float]] = {mode: {} for mode in modes}
    for t in sorted(lengths):
        xs = inputs_at(t)
        peaks[t] = {}
        for mode in modes:
            if why := too_big(mode, t, measured[mode]):
                notes.append(why)
                continue
            measured[mode][t] = peaks[t][f"{name} {mode} MiB"] = peak_mib(run_of(xs, mode), device)
        del xs
    return {"peaks": peaks, "notes": notes}


def cell_ms(row: dict, key: str) -> str:
    """A table cell: median milliseconds, or "skipped"."""
    return f"{row[key] * 1e3:.1f}" if key in row else "skipped"


def cell_ratio(row: dict, key: str) -> str:
    """A table cell: a paired ratio as "median (first-third quartile)", or "n/a"."""
    if key not in row:
        return "n/a"
    mid, lo, hi = row[key]
    return f"{mid:.2f} ({lo:.2f}-{hi:.2f})"
