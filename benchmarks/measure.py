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


def interleaved(
    runs: dict[str, Callable[[], object]], device: torch.device, repeats: int, warmup: int
) -> dict[str, float]:
    """Median seconds per run. Round r starts at run r mod n and calls each once, so a slow
    spell of a shared machine falls on all of them alike and their ratios hold."""
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
    return {name: statistics.median(ts) for name, ts in times.items()}


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
