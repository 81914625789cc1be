"""A GPU run's usage (pdelab.training.gpu_usage): sampled in a thread, summarised per epoch
(mean utilisation, peak memory) into metrics.parquet, and logged to MLflow as system metrics.
NVML is replaced by a fake reading here; a CPU run records none."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import pandas as pd
import pytest
import torch

from pdelab.spec.config import load_params, resolve
from pdelab.tracking.log import SYSTEM_METRICS, epoch_metrics
from pdelab.training import gpu_usage
from pdelab.training.gpu_usage import GPU_COLUMNS, GpuUsage
from pdelab.training.train import train


def counting_reading():
    """Utilisation 10, 20, 30, ... and memory 100, 200, 300, ... MiB, one per read."""
    n = itertools.count(1)

    def read() -> tuple[float, float]:
        i = next(n)
        return 10.0 * i, 100.0 * i

    return read


def test_each_epoch_gets_the_mean_utilisation_and_peak_memory_of_its_samples() -> None:
    usage = GpuUsage(counting_reading(), every_s=3600)  # the thread never wakes: samples are ours
    usage.start()  # the first sample (10, 100)
    usage.sample()  # (20, 200)
    assert usage.epoch() == {"gpu_utilization_pct": 20.0, "gpu_memory_mb": 300.0}  # + (30, 300)
    assert usage.epoch() == {"gpu_utilization_pct": 40.0, "gpu_memory_mb": 400.0}  # its own
    usage.stop()
    assert usage.columns == GPU_COLUMNS


def test_the_thread_samples_until_stopped() -> None:
    usage = GpuUsage(counting_reading(), every_s=0.01).start()
    while len(usage.samples) < 3:
        pass
    usage.stop()
    taken = len(usage.samples)
    assert not usage.thread.is_alive() and len(usage.samples) == taken


def test_a_cpu_run_samples_nothing() -> None:
    usage = GpuUsage.of(torch.device("cpu")).start()
    assert usage.columns == () and usage.epoch() == {} and usage.thread is None
    usage.stop()


def test_gpu_usage_is_logged_as_mlflow_system_metrics() -> None:
    row = {"epoch": 2, "train_loss": 0.5, "gpu_utilization_pct": 87.5, "gpu_memory_mb": 1024.0}
    logged = epoch_metrics(row, 0).metrics
    assert logged == {
        "train_loss": 0.5,
        SYSTEM_METRICS["gpu_utilization_pct"]: 87.5,
        SYSTEM_METRICS["gpu_memory_mb"]: 1024.0,
    }
    assert all(name.startswith("system/") for name in SYSTEM_METRICS.values())


@pytest.mark.parametrize("sampled", [True, False])
def test_a_run_s_metrics_hold_its_gpu_usage_per_epoch(
    tiny_workdir, tmp_path: Path, monkeypatch, sampled: bool
) -> None:
    """The training loop starts the sampler, adds each epoch's summary to its row, and stops
    it; metrics.parquet has the columns exactly where usage was sampled."""
    work = tiny_workdir(tmp_path / "work")
    made: list[GpuUsage] = []

    def of(device: torch.device) -> GpuUsage:
        made.append(GpuUsage(counting_reading() if sampled else None, every_s=3600))
        return made[-1]

    monkeypatch.setattr(gpu_usage.GpuUsage, "of", staticmethod(of))
    run = resolve(load_params(work / "params.yaml"), "listops", "baseline", 0)
    with contextlib.chdir(work):
        train(run, "out", track=False, progress=False, threads=1)
    history = pd.read_parquet(work / "out" / "metrics.parquet")
    assert made and made[0].done.is_set()  # stopped
    if sampled:
        assert (
            history["gpu_utilization_pct"].notna().all()
            and history["gpu_memory_mb"].is_monotonic_increasing
        )
    else:
        assert not set(GPU_COLUMNS) & set(history.columns)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_nvml_is_read_while_a_kernel_runs() -> None:
    """The real reading (benchmarks/gpu_check.sh runs it): NVML's utilisation and the
    allocator's memory, sampled while matrix products keep the GPU busy."""
    pytest.importorskip("pynvml", reason="NVML is read through nvidia-ml-py")
    device = torch.device("cuda")
    usage = GpuUsage.of(device)
    assert usage.columns == GPU_COLUMNS
    usage.every_s = 0.05
    usage.start()
    x = torch.randn(4096, 4096, device=device)
    for _ in range(200):
        x = torch.tanh(x @ x)
    torch.cuda.synchronize()
    summary = usage.epoch()
    usage.stop()
    assert 0 < summary["gpu_utilization_pct"] <= 100 and summary["gpu_memory_mb"] >= 64
