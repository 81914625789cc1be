"""The environment a run was trained in, recorded beside its code (run.json's ``environment``,
MLflow's ``env.*`` tags).

A run's numbers depend on more than its spec, code and data: the interpreter, torch and its CUDA,
numpy, the thread count (``threads: 1 -> 2`` moves a loss in the 8th digit), the device, the
CPU and the kernels torch picks on it, the environment variables that steer those kernels
(:data:`NUMERICS_VARIABLES`: ``MKL_CBWR=COMPATIBLE`` moves a loss in the 8th digit too) and, on
CUDA, the GPU, its driver, cuDNN, cuBLAS and the TF32 switches. None of these retrains anything
by itself (a run is not its environment: the same spec, code and data on another machine is the
same experiment), but each is written down, so ``pdelab status`` can name a run made in another
environment than today's and a table can say when its runs' environments differ.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

# The environment variables that change a run's numbers, each recorded with its value ("unset"
# when it is not set). Allocator settings (PYTORCH_CUDA_ALLOC_CONF and the like) are left out:
# where a tensor lives changes no value.
NUMERICS_VARIABLES: tuple[str, ...] = (
    # the widest SIMD kernels ATen dispatches to (default, avx2, avx512): other reduction orders
    "ATEN_CPU_CAPABILITY",
    # MKL's reproducibility mode: one fixed code path (COMPATIBLE, AVX2, ...) instead of the CPU's
    "MKL_CBWR",
    # the widest instruction set MKL may use: other BLAS kernels, other rounding
    "MKL_ENABLE_INSTRUCTIONS",
    # the widest instruction set oneDNN (convolutions, some matmuls) may use
    "DNNL_MAX_CPU_ISA",
    # the same switch under oneDNN's newer name
    "ONEDNN_MAX_CPU_ISA",
    # the threads a CPU op splits a reduction over, as ``threads`` (Snakemake sets it per job)
    "OMP_NUM_THREADS",
    # MKL's own thread count, which overrides OMP_NUM_THREADS for BLAS (Snakemake sets it per job)
    "MKL_NUM_THREADS",
    # OpenBLAS's thread count, torch's BLAS where it is not MKL (Snakemake sets it per job)
    "OPENBLAS_NUM_THREADS",
    # the CPU whose kernels OpenBLAS uses, instead of the one it detects
    "OPENBLAS_CORETYPE",
    # cuBLAS's workspace: which split-K kernels it may pick, and whether they are deterministic
    "CUBLAS_WORKSPACE_CONFIG",
    # 0 turns TF32 off in cuBLAS and cuDNN whatever torch's flags say
    "NVIDIA_TF32_OVERRIDE",
    # 1 makes torch's cuBLAS matmuls TF32 whatever torch.backends.cuda.matmul.allow_tf32 says
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    # cuBLASLt's matmul kernels instead of cuBLAS's
    "TORCH_BLAS_PREFER_CUBLASLT",
)

UNSET = "unset"  # the value recorded for a variable not set

# the variables Snakemake sets in each job from its ``threads`` (snakemake.shell): a shell's
# value says nothing of a job's, so ``pdelab status`` does not compare them with its own
PER_JOB_VARIABLES = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"})

# recorded on CUDA only, and compared only for runs made on CUDA: the GPU model, its driver,
# cuDNN, cuBLAS and the TF32 switches of cuBLAS matmuls and cuDNN convolutions
CUDA_KEYS = ("gpu", "gpu_driver", "cudnn", "cublas", "tf32_matmul", "tf32_cudnn")

# the keys two environments are compared on (``packages`` is compared separately, by name)
COMPARED = (
    "python",
    "torch",
    "cuda",
    "numpy",
    "threads",
    "device",
    "cpu",
    "cpu_capability",
    "float32_matmul_precision",
    "deterministic",
    *NUMERICS_VARIABLES,
    *CUDA_KEYS,
)


def imported_packages(modules: Iterable[str] | None = None) -> dict[str, str]:
    """{package: version} of the third-party packages imported so far (the standard library
    and pdelab aside), each looked up under its import name (a package installed under
    another name than it imports as, PyYAML's ``yaml``, is left out)."""
    names = {m.partition(".")[0] for m in (sys.modules if modules is None else modules)}
    names -= {*sys.stdlib_module_names, "pdelab"}
    found: dict[str, str] = {}
    for name in sorted(n for n in names if not n.startswith("_")):
        try:
            found[name] = metadata.version(name)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return found


def numerics_variables(names: Iterable[str] = NUMERICS_VARIABLES) -> dict[str, str]:
    """{name: value} of the environment variables that change numbers, "unset" for those
    not set (an empty value is a value: some libraries read it)."""
    return {name: os.environ.get(name, UNSET) for name in names}


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what ``platform`` knows; "unknown"
    when neither says): the same code on another CPU may run other kernels."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def nvidia_smi(fields: str) -> list[list[str]]:
    """One row of ``fields`` per GPU from nvidia-smi, none where it is absent or fails (a
    machine without a GPU, a container without the tool)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    command = [tool, f"--query-gpu={fields}", "--format=csv,noheader"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [[cell.strip() for cell in row.split(",")] for row in out.stdout.splitlines() if row]


def gpu_driver() -> str | None:
    """The NVIDIA driver's version (nvidia-smi's; torch does not report it), None when
    unknown."""
    rows = nvidia_smi("driver_version")
    return rows[0][0] if rows else None


def cublas_version(toolkit: str | None) -> str | None:
    """cuBLAS's version: that of the nvidia-cublas wheel torch loads it from when installed,
    else the CUDA toolkit torch was built with (``torch.version.cuda``), whose cuBLAS a build
    without the wheel uses."""
    for wheel in ("nvidia-cublas-cu12", "nvidia-cublas-cu11", "nvidia-cublas"):
        try:
            return metadata.version(wheel)
        except metadata.PackageNotFoundError:
            continue
    return toolkit


def cuda_environment(device: str) -> dict[str, Any]:
    """The CUDA part of the environment (:data:`CUDA_KEYS`) of a job on ``device``."""
    import torch

    return {
        "gpu": torch.cuda.get_device_name(torch.device(device)),
        "gpu_driver": gpu_driver(),
        "cudnn": torch.backends.cudnn.version(),
        "cublas": cublas_version(torch.version.cuda),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }


def environment(device: str) -> dict[str, Any]:
    """What this process trains with: interpreter, torch, CUDA, numpy, threads, the device, the
    CPU and torch's kernels for it, the float32 matmul precision, deterministic algorithms, the
    :data:`NUMERICS_VARIABLES`, on CUDA :data:`CUDA_KEYS`, and the packages it imported (call at
    the end of a job, when all are imported and set)."""
    import numpy
    import torch

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "numpy": numpy.__version__,
        "threads": torch.get_num_threads(),
        "device": device,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        **numerics_variables(),
    }
    if device.startswith("cuda"):
        found |= cuda_environment(device)
    return found | {"packages": imported_packages()}


def versions() -> dict[str, str]:
    """What ``pdelab status`` compares each run's environment with, read without importing
    torch: this interpreter's Python, torch and numpy versions (the installed metadata), the
    CPU, the :data:`NUMERICS_VARIABLES` a shell passes on to its jobs (not
    :data:`PER_JOB_VARIABLES`) and, where nvidia-smi sees one GPU model, the GPU and its driver.
    The CPU capability torch picks follows from the CPU, torch and ATEN_CPU_CAPABILITY; cuDNN,
    cuBLAS and the TF32 switches from torch and the code; the thread count from the workflow."""
    found = {"python": platform.python_version()}
    for name in ("torch", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    found["cpu"] = cpu_model()
    found |= numerics_variables(v for v in NUMERICS_VARIABLES if v not in PER_JOB_VARIABLES)
    gpus = nvidia_smi("name,driver_version")
    if len({row[0] for row in gpus}) == 1:
        found |= {"gpu": gpus[0][0], "gpu_driver": gpus[0][-1]}
    return found


def shown(env: Mapping[str, Any], key: str) -> str:
    """A key's value as a difference names it: "unrecorded" when the record lacks the key
    (made before it was recorded), "unknown" when it was recorded as not readable."""
    if key not in env:
        return "unrecorded"
    return "unknown" if env[key] is None else str(env[key])


def differences(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for each compared key ``new`` has (and each package both have)
    that differs, the :data:`CUDA_KEYS` only for a run made on CUDA. A key ``old`` lacks (made
    before it was recorded) is "unrecorded", all :data:`NUMERICS_VARIABLES` lacking in one line;
    a record without an environment (made before runs recorded one) differs in
    ``environment: unrecorded``."""
    if not old:
        return ["environment: unrecorded"]
    on_cuda = str(old.get("device", "")).startswith("cuda")
    keys = [k for k in COMPARED if k in new and (on_cuda or k not in CUDA_KEYS)]
    variables_unrecorded = not any(k in old for k in NUMERICS_VARIABLES)
    if variables_unrecorded:
        keys = [k for k in keys if k not in NUMERICS_VARIABLES]
    found = [
        f"{k}: {shown(old, k)} -> {shown(new, k)}" for k in keys if k not in old or old[k] != new[k]
    ]
    if variables_unrecorded and any(k in new for k in NUMERICS_VARIABLES):
        found.append("numerics variables: unrecorded")
    before, now = old.get("packages") or {}, new.get("packages") or {}
    for name in sorted(set(before) & set(now)):
        if before[name] != now[name]:
            found.append(f"{name}: {before[name]} -> {now[name]}")
    return found


def tags(env: Mapping[str, Any] | None) -> dict[str, str]:
    """MLflow tags ``env.<key>`` of an environment's scalar entries (the packages stay
    in run.json, an artifact)."""
    return {f"env.{k}": str(v) for k, v in (env or {}).items() if k != "packages"}
