"""Measurements that replace the plan's assumed rates: a file of measured throughputs and step
times, and the step times the profile's own trained runs recorded.

Why: the assumed rates (:mod:`pdelab.plan.hardware`) are a datasheet's peak at a guessed
utilisation; a small model on a GPU reaches a tenth of it, and a CPU step of a small model is
mostly per-operator overhead that no FLOP count holds. A measured rate or step time is the
better number wherever one exists.

The file (``results/plan/measured.json``; every key optional)::

    {"throughput": [{"gpu": "H100-SXM", "precision": "bf16", "tflops": 180.0,
                     "source": "pdelab.plan.step_timing, listops, 2 x 50 steps"}],
     "step_s": [{"gpu": "A100-80GB", "task": "listops", "variant": "baseline",
                 "profile": "paper", "step_s": 0.21, "source": "..."}],
     "records_gpu": "H100-SXM"}

``throughput`` replaces the assumed sustained rate of one device and precision for every job;
``step_s`` replaces one job's step time on one device (its FLOPs no longer matter there), in
the run profile it was measured in (``profile``: another profile's job of the same name has
another shape, so it is not priced from it; an entry without one is any profile's); a
``gpu`` is a GPU of the table or ``CPU-core`` (:data:`pdelab.plan.hardware.CPU_CORE`: a CPU
step's seconds on one core). ``records_gpu`` names the GPU the profile's CUDA runs were trained
on, so each trained run's recorded median step time (results/runs/<profile>/.../run.json,
whose spec must still be the run's) replaces that job's step time on that GPU. The profile's
CPU runs need no naming: their recorded step times, times the torch threads each trained
with, are the CPU core's (core-seconds per step), read whenever the plan reads measurements.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdelab.plan.hardware import CPU_CORE, DEVICES, JOB_THREADS, Throughput
from pdelab.records.run import RUNS_DIR, run_dir
from pdelab.spec.config import RunSpec

MEASURED_FILE = Path("results/plan/measured.json")


@dataclass(frozen=True)
class Measured:
    """Measurements that replace the assumed rates: sustained throughput per (device,
    precision), and step seconds per (device, task, variant) with their sources."""

    throughput: Mapping[tuple[str, str], Throughput] = field(default_factory=dict)
    step_s: Mapping[tuple[str, str, str], tuple[float, str]] = field(default_factory=dict)
    path: str = ""  # the file read, or "" where there was none


def load_measured(
    path: Path | str | None, profile: str, runs: Sequence[RunSpec], root: Path = RUNS_DIR
) -> Measured:
    """The measurements of ``path`` (the module's docstring; None: no measurements at all, not
    even the records), the recorded median step time of each trained CPU run of ``runs``, and
    where the file names ``records_gpu``, of each trained CUDA run (each the median over its
    seeds; a record counts where its spec is still the run's)."""
    if path is None:
        return Measured()
    found = Path(path).exists()
    doc = json.loads(Path(path).read_text()) if found else {}
    known = {d.name for d in DEVICES}

    def device_of(entry: Mapping[str, Any]) -> str:
        if entry["gpu"] not in known:
            raise ValueError(f"{path}: unknown device {entry['gpu']!r}; known: {sorted(known)}")
        return str(entry["gpu"])

    throughput = {
        (device_of(e), e["precision"]): Throughput(
            device_of(e), e["precision"], float(e["tflops"]), str(e.get("source", path)), True
        )
        for e in doc.get("throughput", [])
    }
    steps: dict[tuple[str, str, str], tuple[float, str]] = {
        (device_of(e), e["task"], e["variant"]): (float(e["step_s"]), str(e.get("source", path)))
        for e in doc.get("step_s", [])
        if e.get("profile", profile) == profile  # another profile's job is another shape
    }
    if gpu := doc.get("records_gpu"):
        device_of({"gpu": gpu})
        for key, seconds in recorded_steps(profile, runs, root, "cuda").items():
            steps.setdefault((gpu, *key), (seconds, f"run records ({root}/{profile})"))
    for key, seconds in recorded_steps(profile, runs, root, "cpu").items():
        steps.setdefault((CPU_CORE.name, *key), (seconds, f"CPU run records ({root}/{profile})"))
    return Measured(throughput, steps, str(path) if found else "")


def recorded_steps(
    profile: str, runs: Sequence[RunSpec], root: Path = RUNS_DIR, device: str = "cuda"
) -> dict[tuple[str, str], float]:
    """(task, variant) -> the median over seeds of the recorded median step time of the runs
    trained on ``device`` ("cuda" or "cpu") from their current spec; on the CPU in
    core-seconds: times the torch threads the run trained with (each a core)."""
    found: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        record = Path(run_dir(profile, run.task, run.variant, run.seed, root)) / "run.json"
        if not record.exists():
            continue
        doc = json.loads(record.read_text())
        result = doc.get("result", {})
        seconds = float(result.get("median_step_s", math.nan))
        if device == "cpu":
            seconds *= int(doc.get("environment", {}).get("threads", JOB_THREADS))
        same = doc.get("spec") == json.loads(run.to_json())
        if result.get("device") == device and same and seconds > 0:
            found.setdefault((run.task, run.variant), []).append(seconds)
    return {k: statistics.median(v) for k, v in found.items()}
