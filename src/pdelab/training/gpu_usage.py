"""How busy a GPU run kept its GPU: utilisation and memory sampled once a second.

A thread reads NVML's utilisation (the share of the last sample period in which a kernel ran,
what ``nvidia-smi`` shows; ``torch.cuda.utilization``, which needs the ``nvidia-ml-py``
package) and the memory the caching allocator holds, without touching the training stream, so
it adds no host sync to a step. Each epoch's row gets the mean utilisation and the peak memory
of its samples (``gpu_utilization_pct``, ``gpu_memory_mb``); MLflow shows them as system
metrics (pdelab.tracking.log). A CPU run, or a GPU without NVML, records none.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import torch

GPU_COLUMNS = ("gpu_utilization_pct", "gpu_memory_mb")  # an epoch row's columns on a GPU
SAMPLE_EVERY_S = 1.0

Reading = Callable[[], tuple[float, float]]  # (utilisation %, memory MiB)


def nvml_reading(device: torch.device) -> Reading | None:
    """The reader of one CUDA device, or None where NVML cannot be read (said once)."""
    try:
        torch.cuda.utilization(device)
    except Exception as missing:  # no pynvml, no driver access
        print(
            f"GPU utilisation not recorded: {missing} (pip install nvidia-ml-py)", file=sys.stderr
        )
        return None

    def read() -> tuple[float, float]:
        return float(torch.cuda.utilization(device)), torch.cuda.memory_reserved(device) / 2**20

    return read


class GpuUsage:
    """Samples ``read`` every ``every_s`` seconds in a daemon thread between ``start`` and
    ``stop``; :meth:`epoch` returns the samples' summary since its last call."""

    def __init__(self, read: Reading | None, every_s: float = SAMPLE_EVERY_S) -> None:
        self.read, self.every_s = read, every_s
        self.samples: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    @classmethod
    def of(cls, device: torch.device) -> GpuUsage:
        return cls(nvml_reading(device) if device.type == "cuda" else None)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns an epoch's row gets: none where nothing is sampled."""
        return GPU_COLUMNS if self.read is not None else ()

    def sample(self) -> None:
        assert self.read is not None
        value = self.read()
        with self.lock:
            self.samples.append(value)

    def loop(self) -> None:
        while not self.done.wait(self.every_s):
            self.sample()

    def start(self) -> GpuUsage:
        if self.read is not None and self.thread is None:
            self.sample()
            self.thread = threading.Thread(target=self.loop, name="gpu-usage", daemon=True)
            self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join()

    def epoch(self) -> dict[str, float]:
        """Mean utilisation and peak memory of the samples since the last call (a sample is
        taken now, so a short epoch has one)."""
        if self.read is None:
            return {}
        self.sample()
        with self.lock:
            samples, self.samples = self.samples, []
        utilisation = sum(u for u, _ in samples) / len(samples)
        return dict(zip(GPU_COLUMNS, (utilisation, max(m for _, m in samples)), strict=True))
