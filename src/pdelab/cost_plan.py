"""What a run profile's training will cost, before any of it runs (``pdelab plan``).

For every training job of the run sheet, and summed per study and in total: parameters,
tokens per step and per run, FLOPs per step and per run, steps per run, the peak memory of a
training step at the profile's batch, GPU-hours on named GPUs, and whether the job fits 24, 40
and 80 GB cards. Why: a paper profile queues hundreds of GPU jobs; what they need (which card,
how many GPU-hours) should be known from params.yaml alone, and no estimate should allocate
the memory it estimates.

How each number is made:

* Shapes: :mod:`pdelab.shapes` (the prepared manifest's, else the ones params.yaml declares; the
  plan names which, and what the declared ones assume). Every batch is at the longest length.
* One training step is counted once per distinct model and batch (:func:`cost_key`). The model
  is built with real CPU weights (at most tens of millions: cheap, and the init code may read
  values), its parameters and buffers are then swapped for fake tensors (FakeTensorMode:
  shapes and dtypes, no data), and :func:`pdelab.train.train_step`'s sequence runs on a fake
  batch of the profile's batch size: the task kind's loss under the run's precision, backward,
  gradient clipping, AdamW.
* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over the forward and backward passes:
  matrix products and attention kernels (2 per multiply-add). Elementwise work, norms, the
  optimizer and data-dependent branches the fake step cannot take are not counted.
* Memory: the live bytes of every tensor storage (parameters, buffers, the batch,
  activations, gradients, AdamW's moments, temporaries), each counted while it is alive,
  peaked over the step in its steady state: a first optimizer step on zero gradients makes the
  moments, and the previous step's gradients stay resident through the forward pass as in
  training (``zero_grad`` runs after the loss). Not counted: the CUDA context and library
  workspaces (a card's fit adds :data:`CUDA_CONTEXT_GIB`), allocator fragmentation (it
  multiplies by :data:`RESERVED_OVER_ALLOCATED`), buffers a kernel allocates inside itself
  (but see CUDA's attention backward below), and validation passes (no_grad: less).
* The device: the profile's. On CPU the fake step runs the CPU kernels themselves (math or
  flash attention as the CPU dispatcher picks, dropout keeping a float mask, single-tensor
  AdamW, CPU autocast). For CUDA, which a CPU cannot dispatch to, :class:`CudaKernels` swaps in
  what a GPU runs where it changes memory: autocast's CUDA op lists (matrix products in bf16,
  softmax, norms, exp, sums and losses in fp32), a fused O(T) attention kernel (flash or
  memory-efficient: output and log-sum-exp kept, plus the backward's fp32 dq accumulator),
  fused dropout (a 1-byte mask), foreach AdamW and clipping, and the caching allocator's
  512-byte rounding, and cuBLAS's workspaces (:data:`CUBLAS_WORKSPACE_BYTES`). A kernel
  that picks its path by the device (FNA's FlexAttention, which a
  CPU cannot run backward) reads :data:`pdelab.models.attention.COUNTING_FOR_CUDA` and is
  counted with its CUDA path's shapes (FNA: its inputs padded to FlexAttention's length
  bucket and widths, through the chunked kernel); at LRA's lengths such a kernel loops over
  thousands of tiles, and counting it takes minutes (once: the counts are cached). The CPU
  estimate is checked against measured CPU steps (tests/test_cost_plan.py); the CUDA one
  against a GPU (``python -m pdelab.plan_calibration``, tests/test_cuda.py:
  ``torch.cuda.max_memory_allocated``), within 9% on eight sampled paper jobs.
* A fake step has no values. What the model computes from its weights alone (a learned
  bandwidth read as a number, which sets a block size) is computed from the real initial
  weights (:class:`Tracker`); what depends on the batch reads as 1 (``mask.all()`` as True)
  and a boolean mask of it selects every position: in a synthetic batch at the longest length
  every position is real.
* Steps: ``steps_per_epoch x epochs``; an upper bound where ``patience < epochs`` (early
  stopping may stop sooner): the plan marks those jobs.
* Time: a step's FLOPs in lower precision (bf16 matrix products) at the GPU's sustained bf16
  rate plus its fp32 FLOPs (fp32 runs, and the mechanisms that keep fp32 inside bf16 ones,
  pdelab.precision) at its fp32 rate; TF32 stays off (PyTorch's default, which pdelab keeps).
  A sustained rate is the datasheet's dense peak x :data:`UTILISATION` unless a measurement
  replaces it (:func:`load_measured`); training steps only (validation and test passes add
  about a third of a step per evaluated batch).

Measurements (``results/plan/measured.json``; every key optional)::

    {"throughput": [{"gpu": "H100-SXM", "precision": "bf16", "tflops": 180.0,
                     "source": "pdelab.step_timing, listops, 2 x 50 steps"}],
     "step_s": [{"gpu": "A100-80GB", "task": "listops", "variant": "baseline",
                 "step_s": 0.21, "source": "..."}],
     "records_gpu": "H100-SXM"}

``throughput`` replaces the assumed sustained rate of one GPU and precision for every job;
``step_s`` replaces one job's step time on one GPU (its FLOPs no longer matter there);
``records_gpu`` names the GPU the profile's CUDA runs were trained on, so each trained run's
recorded median step time (results/runs/<profile>/.../run.json, whose spec must still be the
run's) replaces that job's step time on that GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tabulate import tabulate
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)
from torch.utils.weak import WeakIdKeyDictionary

from pdelab import provenance, task_kinds
from pdelab.atomic import write_text
from pdelab.card_fit import CUDA_CONTEXT_GIB, RESERVED_OVER_ALLOCATED, SAFETY, Fit, choose, fits
from pdelab.config import (
    PARAMS_FILE,
    RunSpec,
    TrainSpec,
    active_profile,
    gpu_memory_gb,
    load_params,
    resolve,
)
from pdelab.models.attention import COUNTING_FOR_CUDA
from pdelab.models.factory import build_model
from pdelab.models.transformer import RECOMPUTE_CONTEXT, checkpoint_blocks
from pdelab.records import RUNS_DIR, run_dir
from pdelab.run_sheet import same_runs, validate
from pdelab.shapes import TaskShape, synthetic_batch, synthetic_session, task_shape
from pdelab.studies import RunKey, studies_of

aten = torch.ops.aten
GIB = 2**30
MEASURED_FILE = Path("results/plan/measured.json")
CACHE_FILE = Path("results/plan/cache.json")


# -- GPUs and their sustained throughput --------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """A named GPU: its memory and dense datasheet peaks (TFLOPS) per precision."""

    name: str
    memory_gib: int
    peak_tflops: Mapping[str, float]  # "bf16" (tensor cores, fp32 accumulate), "fp32"
    source: str


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
# share of the dense peak a training step sustains: small models (width 128 and less) and
# short batches reach less, so the GPU-hours are a lower bound unless measured
UTILISATION = 0.40
CARDS_GIB = (24, 40, 80)
CUDA_BLOCK = 512  # the caching allocator rounds every allocation up to 512 bytes
# cuBLAS workspaces torch allocates through its caching allocator: 32 MiB per handle on Hopper
# (torch's default), one handle for the forward's thread and one for autograd's; an H200
# measured 61-100 MB above the counted tensors in each of eight paper jobs
# (pdelab.plan_calibration)
CUBLAS_WORKSPACE_BYTES = 2 * 32 * 2**20
PRECISIONS = ("bf16", "fp32")  # the rate a FLOP runs at: lower precision, or fp32
JOB_THREADS = 1  # torch threads of a training job (workflow/rules/train.smk: threads: 1)


@dataclass(frozen=True)
class Throughput:
    """Sustained FLOP/s of one GPU at one precision, and where the number comes from."""

    gpu: str
    precision: str
    tflops: float
    source: str
    measured: bool = False


def assumed_throughput(gpu: Gpu, precision: str) -> Throughput:
    """The datasheet's dense peak x :data:`UTILISATION`."""
    tflops = gpu.peak_tflops[precision] * UTILISATION
    why = f"{gpu.peak_tflops[precision]:g} TFLOPS peak x {UTILISATION:.0%} ({gpu.source})"
    return Throughput(gpu.name, precision, tflops, why)


@dataclass(frozen=True)
class Measured:
    """Measurements that replace the assumed rates: sustained throughput per (GPU, precision),
    and step seconds per (GPU, task, variant) with their sources."""

    throughput: Mapping[tuple[str, str], Throughput] = field(default_factory=dict)
    step_s: Mapping[tuple[str, str, str], tuple[float, str]] = field(default_factory=dict)
    path: str = ""


def load_measured(
    path: Path | str | None, profile: str, runs: Sequence[RunSpec], root: Path = RUNS_DIR
) -> Measured:
    """The measurements of ``path`` (see the module's docstring; absent: none), and, where it
    names ``records_gpu``, the median step time of each trained CUDA run of ``runs`` whose
    recorded spec is still its own (the median over its seeds)."""
    if path is None or not Path(path).exists():
        return Measured()
    doc = json.loads(Path(path).read_text())
    known = {g.name for g in GPUS}

    def gpu_of(entry: Mapping[str, Any]) -> str:
        if entry["gpu"] not in known:
            raise ValueError(f"{path}: unknown GPU {entry['gpu']!r}; known: {sorted(known)}")
        return str(entry["gpu"])

    throughput = {
        (gpu_of(e), e["precision"]): Throughput(
            gpu_of(e), e["precision"], float(e["tflops"]), str(e.get("source", path)), True
        )
        for e in doc.get("throughput", [])
    }
    steps: dict[tuple[str, str, str], tuple[float, str]] = {
        (gpu_of(e), e["task"], e["variant"]): (float(e["step_s"]), str(e.get("source", path)))
        for e in doc.get("step_s", [])
    }
    if gpu := doc.get("records_gpu"):
        gpu_of({"gpu": gpu})
        for key, seconds in recorded_steps(profile, runs, root).items():
            steps.setdefault((gpu, *key), (seconds, f"run records ({root}/{profile})"))
    return Measured(throughput, steps, str(path))


def recorded_steps(
    profile: str, runs: Sequence[RunSpec], root: Path = RUNS_DIR
) -> dict[tuple[str, str], float]:
    """(task, variant) -> the median over seeds of the recorded median step time of the runs
    trained on CUDA from their current spec."""
    found: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        record = Path(run_dir(profile, run.task, run.variant, run.seed, root)) / "run.json"
        if not record.exists():
            continue
        doc = json.loads(record.read_text())
        result = doc.get("result", {})
        seconds = float(result.get("median_step_s", math.nan))
        same = doc.get("spec") == json.loads(run.to_json())
        if result.get("device") == "cuda" and same and seconds > 0:
            found.setdefault((run.task, run.variant), []).append(seconds)
    return {k: statistics.median(v) for k, v in found.items()}


# -- one training step, counted on fake tensors -------------------------------------------------


@dataclass(frozen=True)
class StepCost:
    """One training step of one model at one batch: what :func:`count_step` counts."""

    parameters: int
    flops: int  # forward + backward (FlopCounterMode)
    low_precision_flops: int  # of which bf16/fp16 matrix products
    peak_bytes: int  # the step's peak of live tensor bytes, resident state included


def _flash_cpu_flops(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    return sdpa_flop_count(query, key, value)


def _flash_cpu_backward_flops(
    grad: Any, query: Any, key: Any, value: Any, *a: Any, **k: Any
) -> int:
    return sdpa_backward_flop_count(grad, query, key, value)


# FlopCounterMode knows CUDA's attention kernels but not the CPU's fused one
CPU_ATTENTION_FLOPS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _flash_cpu_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _flash_cpu_backward_flops,
}
_BOOL_INDEXED = (
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
)
_LOW = (torch.bfloat16, torch.float16)
KNOWN_LIMIT = 2**20  # elements: a result from the weights larger than this is not computed


def _all_true(index: Tensor) -> list[Tensor]:
    """A boolean mask's integer indices as if every position were True."""
    every = torch.zeros(index.numel(), dtype=torch.long, device=index.device)
    return [every] * index.dim()


class Known:
    """A real value behind a fake tensor's storage: given (the model's weights), or the result
    of an op on known values, computed only when first read (most never are)."""

    def __init__(self, real: Tensor | None = None, call: tuple | None = None) -> None:
        self.real, self.call = real, call  # call: (func, args, kwargs, [sibling outputs])

    def get(self) -> Tensor:
        if self.real is None:
            func, args, kwargs, outputs = self.call  # type: ignore[misc]
            args, kwargs = tree_map(lambda a: a.get() if isinstance(a, Read) else a, (args, kwargs))
            with _disable_current_modes(), unset_fake_temporarily(), torch.no_grad():
                result = func(*args, **kwargs)
            for known, real in zip(outputs, _tensors(result), strict=True):
                known.real, known.call = real, None
        return self.real  # type: ignore[return-value]


class Read:
    """A known value read at one tensor's layout (a view of the storage it belongs to)."""

    def __init__(self, known: Known, fake: Tensor) -> None:
        self.known, self.layout = known, (fake.shape, fake.stride(), fake.storage_offset())

    def get(self) -> Tensor:
        real = self.known.get()
        if (real.shape, real.stride(), real.storage_offset()) == self.layout:
            return real
        with _disable_current_modes(), unset_fake_temporarily():
            return real.as_strided(*self.layout)


def _tensors(tree: Any) -> list[Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, Tensor)]


class Tracker(TorchDispatchMode):
    """Below autograd, over fake tensors: the live bytes of every storage made inside (each
    counted once, released when its storage is freed) and their peak, matrix-product FLOPs by
    precision, and the values a fake tensor cannot give.

    Values: while :attr:`propagating`, the result of an op whose tensor inputs all have known
    values (the model's real initial weights, :meth:`know`, and what follows from them) is
    known too, up to :data:`KNOWN_LIMIT` elements, and computed when read (:class:`Known`): a
    scalar the model reads from its weights (a learned bandwidth that sets a block size) is
    the real one. A value that depends on the batch reads as 1 (``mask.all()`` as True) and a
    boolean mask of it selects every position: in a synthetic batch at the longest length
    every position is real."""

    def __init__(self, fake: FakeTensorMode, cuda: bool = False) -> None:
        super().__init__()
        self.fake, self.cuda = fake, cuda
        self.live = self.peak = 0
        self.alive: set[int] = set()
        self.flops = dict.fromkeys(PRECISIONS, 0)
        self.known: WeakIdKeyDictionary = WeakIdKeyDictionary()  # storage -> Known
        self.propagating = False

    def hold(self, tensor: Tensor) -> None:
        """Count a tensor's storage as live until it is freed."""
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self.alive:
            return
        size = storage.nbytes()
        if self.cuda:
            size = -(-size // CUDA_BLOCK) * CUDA_BLOCK
        self.alive.add(key)
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, size).atexit = False

    def _free(self, key: int, size: int) -> None:
        self.alive.discard(key)
        self.live -= size

    def know(self, fake: Tensor, real: Tensor) -> None:
        """Record a fake tensor's real value, by its storage: a view of it (which autograd
        may hand on as another tensor object) is read through the same storage."""
        self.known[fake.untyped_storage()] = Known(real)

    def read(self, fake: Tensor) -> Read | None:
        known = self.known.get(fake.untyped_storage())
        return None if known is None else Read(known, fake)

    def value(self, fake: Tensor) -> Tensor | None:
        """A fake tensor's real value, or None where it is not known."""
        read = self.read(fake)
        try:
            return None if read is None else read.get()
        except RuntimeError:  # a layout the real value does not have
            return None

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            x = args[0]
            if (real := self.value(x)) is not None:
                with _disable_current_modes(), unset_fake_temporarily():
                    return real.item()
            return True if x.dtype == torch.bool else (1.0 if x.is_floating_point() else 1)
        if func in _BOOL_INDEXED:
            args = (args[0], [self._positions(i) for i in args[1]], *args[2:])
            args = (args[0], [i for group in args[1] for i in group], *args[2:])
        if func is aten.nonzero.default:
            return torch.stack(self._positions(args[0]), dim=-1)
        out = func(*args, **kwargs)
        if self.propagating:
            self._propagate(func, args, kwargs, out)
        self._count(func, args, kwargs, out)
        for t in _tensors(out):
            self.hold(t)
        if self.cuda and func is aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
            b, h, t, d = args[1].shape  # CUDA's backward accumulates dq in fp32: (B, H, T, D)
            self.peak = max(self.peak, self.live + b * h * t * d * 4)
        return out

    def _positions(self, index: Tensor | None) -> list[Tensor | None]:
        """A boolean mask as integer indices (its real ones where its value is known)."""
        if index is None or index.dtype not in (torch.bool, torch.uint8):
            return [index]
        real = self.value(index)
        if real is None:
            return _all_true(index)
        with _disable_current_modes(), unset_fake_temporarily():
            found = real.nonzero().unbind(1)
        fakes = [self.fake.from_tensor(f) for f in found]
        for f, r in zip(fakes, found, strict=True):
            self.know(f, r)
        return list(fakes)

    def _propagate(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Know ``func``'s outputs where its inputs are known and they are small enough; an
        op that writes into a tensor from unknown values makes it unknown."""
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        reads = {id(t): self.read(t) for t in inputs}
        known = all(r is not None for r in reads.values())
        if func._schema.is_mutable:  # in place: the value read before is gone either way
            for t in inputs:
                self.known.pop(t.untyped_storage(), None)
            return
        if not known or not outputs or sum(t.numel() for t in outputs) > KNOWN_LIMIT:
            return
        args, kwargs = tree_map(
            lambda a: reads[id(a)] if isinstance(a, Tensor) else a, (args, kwargs)
        )
        results = [Known() for _ in outputs]
        for fake, known_out in zip(outputs, results, strict=True):
            known_out.call = (func, args, kwargs, results)
            self.known[fake.untyped_storage()] = known_out

    def _count(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        packet = func.overloadpacket
        formula = CPU_ATTENTION_FLOPS.get(packet) or flop_registry.get(packet)
        if formula is None:
            return
        if packet in CPU_ATTENTION_FLOPS:
            shapes = [a.shape if isinstance(a, Tensor) else a for a in args]
            flops = formula(*shapes)
        else:
            flops = formula(*args, **kwargs, out_val=out)
        first = next(a for a in tree_flatten(args)[0] if isinstance(a, Tensor))
        self.flops["bf16" if first.dtype in _LOW else "fp32"] += int(flops)


# CUDA autocast's op lists (PyTorch's Autocast Op Reference, CUDA): the torch functions, by
# name, that run in the lower precision, in fp32, or at their widest input's type


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


CUDA_LOWER = _names(
    "__matmul__ __rmatmul__ addbmm addmm addmv addr baddbmm bmm chain_matmul multi_dot "
    "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution "
    "linear matmul einsum mm mv prelu scaled_dot_product_attention"
)
CUDA_FP32 = _names(
    "__pow__ __rpow__ __rtruediv__ __rdiv__ acos asin cosh erfinv exp expm1 log log10 log2 "
    "log1p reciprocal rsqrt sinh tan pow softplus layer_norm group_norm norm nuclear_norm "
    "frobenius_norm cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss "
    "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
    "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
    "multi_margin_loss binary_cross_entropy_with_logits cross_entropy dist pdist cdist renorm "
    "logsumexp softmax log_softmax softmin cumprod cumsum prod sum vector_norm matrix_norm "
    "normalize"
)
CUDA_PROMOTE = _names(
    "addcdiv addcmul atan2 bilinear cross dot vdot tensordot scatter_add index_put "
    "index_copy cat stack"
)


class CudaKernels(TorchFunctionMode):
    """What a CUDA device runs, where it differs in memory from the CPU kernels a fake CPU step
    dispatches to: CUDA autocast's casts (while ``torch.is_autocast_enabled("cuda")``, which
    :func:`cuda_autocast` sets and the model's fp32 regions clear), with autocast's cache of
    weight casts (:attr:`casts`: clear it where the autocast region ends), a fused O(T)
    attention kernel, and fused dropout."""

    def __init__(self) -> None:
        super().__init__()
        # autocast's cache: a weight (a leaf that requires grad) cast once per region
        self.casts: dict[int, tuple[Tensor, Tensor]] = {}

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if torch.is_autocast_enabled("cuda"):
            args, kwargs = self._autocast(name, args, kwargs)
        if name == "scaled_dot_product_attention":
            return fused_attention(*args, **kwargs)
        if func is nn.functional.dropout:
            return fused_dropout(func, *args, **kwargs)
        return func(*args, **kwargs)

    def _autocast(self, name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, Tensor)]
        floating = [t for t in tensors if t.is_floating_point() and t.dtype != torch.float64]
        if name in CUDA_LOWER:
            dtype = torch.get_autocast_dtype("cuda")
        elif name in CUDA_FP32 and kwargs.get("dtype") is None:
            dtype = torch.float32
        elif name in CUDA_PROMOTE and floating:
            dtype = max((t.dtype for t in floating), key=lambda d: torch.finfo(d).bits)
        else:
            return args, kwargs

        def cast(x: Any) -> Any:
            if not (isinstance(x, Tensor) and x.is_floating_point()):
                return x
            if x.dtype in (dtype, torch.float64):
                return x
            if x.is_leaf and x.requires_grad and not x._is_view() and dtype in _LOW:
                if id(x) not in self.casts:  # the weight is kept: its id stays its own
                    self.casts[id(x)] = (x, x.to(dtype))
                return self.casts[id(x)][1]
            return x.to(dtype)

        return tree_map(cast, args), tree_map(cast, kwargs)


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``scaled_dot_product_attention`` as CUDA's flash or memory-efficient kernel runs it:
    O(T) memory (output and log-sum-exp kept; dropout drawn again in the backward), which the
    CPU's flash kernel models (a boolean mask as an additive one)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        blocked = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)
        attn_mask = blocked.masked_fill(~attn_mask, -math.inf)
    out, _ = aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )
    return out


def fused_dropout(
    func: Callable[..., Tensor],
    input: Tensor,
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
) -> Tensor:
    """Dropout as CUDA's fused kernel runs it: a 1-byte mask kept for the backward (a CPU
    keeps the float noise it multiplied by)."""
    if not training or not 0.0 < p < 1.0 or inplace:
        return func(input, p, training, inplace)
    return aten.native_dropout(input, p, True)[0]


@contextlib.contextmanager
def cuda_autocast(dtype: torch.dtype) -> Iterator[None]:
    """CUDA autocast's state set without a CUDA device (``torch.autocast("cuda")`` refuses
    one), for :class:`CudaKernels` to act on; restored on exit."""
    enabled, previous = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", previous)


@contextlib.contextmanager
def autocast_asked_as_cuda() -> Iterator[None]:
    """Inside, code that asks autocast about its tensors' device ("cpu": fake CPU tensors
    stand for CUDA ones here) is answered about CUDA, and an autocast region it opens for
    that device is CUDA's: a mechanism's fp32 region (``full_precision(q.device.type)``)
    switches the emulated CUDA autocast off, as it would on a GPU."""
    cls = torch.amp.autocast_mode.autocast
    enter, enabled, dtype = cls.__enter__, torch.is_autocast_enabled, torch.get_autocast_dtype

    def as_cuda(device: str = "cuda") -> str:
        return "cuda" if device == "cpu" else device

    def entering(self: Any) -> Any:
        self.device = as_cuda(self.device)
        return enter(self)

    cls.__enter__ = entering  # type: ignore[method-assign]
    torch.is_autocast_enabled = lambda *device: enabled(as_cuda(*device))  # type: ignore[assignment]
    torch.get_autocast_dtype = lambda device: dtype(as_cuda(device))  # type: ignore[assignment]
    try:
        yield
    finally:
        cls.__enter__ = enter  # type: ignore[method-assign]
        torch.is_autocast_enabled, torch.get_autocast_dtype = enabled, dtype


def on_cuda(run: RunSpec) -> bool:
    return run.device.startswith("cuda")


def precision_region(cuda: bool, precision: str) -> contextlib.AbstractContextManager:
    """The forward pass's autocast (pdelab.precision) on CPU, or CUDA's emulated."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16}[precision]
    return cuda_autocast(dtype) if cuda else torch.autocast("cpu", dtype=dtype)


@contextlib.contextmanager
def cuda_recompute(precision: str) -> Iterator[None]:
    """A checkpointed block's recomputation in the backward pass as a GPU runs it: CUDA's
    kernels and the forward's autocast, which torch.utils.checkpoint restores on a GPU but
    not for the emulated CUDA autocast of fake CPU tensors."""
    kernels = CudaKernels()
    with kernels, autocast_asked_as_cuda(), precision_region(True, precision):
        yield
    kernels.casts.clear()


def fake_weights(model: nn.Module, fake: FakeTensorMode) -> dict[Tensor, Tensor]:
    """Swap every parameter and buffer for a fake tensor of its shape and dtype (shared ones
    stay shared); {fake: its real value}."""
    made: dict[int, tuple[Tensor, Tensor]] = {}
    for module in model.modules():
        for table, wrap in ((module._parameters, True), (module._buffers, False)):
            for name, real in table.items():
                if real is None:
                    continue
                if id(real) not in made:
                    t = fake.from_tensor(real)
                    made[id(real)] = (nn.Parameter(t, real.requires_grad) if wrap else t, real)
                table[name] = made[id(real)][0]
    return dict(made.values())


def count_training_step(
    model: nn.Module,
    batch: Any,
    loss_of: Callable[[nn.Module, Any], Tensor],
    cuda: bool = False,
    precision: str = "fp32",
    train: TrainSpec | None = None,
) -> StepCost:
    """One training step of a model with real CPU weights on ``batch`` (a pytree of real
    tensors), counted on fake copies of both: the loss ``loss_of(model, batch)`` under the
    precision's autocast, ``zero_grad``, backward, clipping and AdamW, in the steady state
    (module docstring). The model is left holding fake weights."""
    opt = train or TrainSpec()  # its AdamW settings and clipping
    parameters = sum(p.numel() for p in model.parameters())
    foreach = True if cuda else None  # CUDA's default; the CPU's is one tensor at a time
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    tracker = Tracker(fake, cuda)
    flops = FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS)
    kernels = CudaKernels() if cuda else contextlib.nullcontext()
    asked = autocast_asked_as_cuda() if cuda else contextlib.nullcontext()
    as_cuda = COUNTING_FOR_CUDA.set(cuda)
    # a checkpointed block recomputes with CUDA's kernels and autocast, as a GPU's would
    recompute = RECOMPUTE_CONTEXT.set(
        (lambda: (contextlib.nullcontext(), cuda_recompute(precision))) if cuda else None
    )
    try:
        with fake:
            resident = fake_weights(model, fake)
            batch = tree_map(lambda t: fake.from_tensor(t) if isinstance(t, Tensor) else t, batch)
        with fake, tracker:
            for t in [*resident, *(t for t in tree_flatten(batch)[0] if isinstance(t, Tensor))]:
                tracker.hold(t)
            for t, value in resident.items():
                tracker.know(t, value)
            model.train()
            adamw = torch.optim.AdamW(
                model.parameters(),
                lr=opt.lr,
                betas=opt.betas,
                weight_decay=opt.weight_decay,
                foreach=foreach,
            )
            for p in model.parameters():  # the steady state: moments and last step's gradients
                p.grad = torch.zeros_like(p)
            adamw.step()
            with kernels, asked, flops:
                with precision_region(cuda, precision):
                    tracker.propagating = True
                    loss = loss_of(model, batch)
                    tracker.propagating = False
                if isinstance(kernels, CudaKernels):
                    kernels.casts.clear()  # autocast drops its cache where its region ends
                adamw.zero_grad(set_to_none=True)
                loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), opt.grad_clip, foreach=foreach)
            adamw.step()
            del loss
    finally:
        COUNTING_FOR_CUDA.reset(as_cuda)
        RECOMPUTE_CONTEXT.reset(recompute)
    total = flops.get_total_flops()
    counted = sum(tracker.flops.values())
    low = round(total * tracker.flops["bf16"] / counted) if counted else 0
    workspace = CUBLAS_WORKSPACE_BYTES if cuda else 0
    return StepCost(parameters, int(total), low, tracker.peak + workspace)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def count_step(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> StepCost:
    """One training step of ``run`` at its batch size on fake tensors: parameters, FLOPs and
    the peak of live bytes, on the run's device (module docstring). With one torch thread, as
    the train rule runs a job (a kernel may size its tiles by the thread count).
    ``checkpointed``: the model's blocks recompute their activations in the backward."""
    with _threads(JOB_THREADS):
        return _count_step(run, shape, checkpointed)


def _count_step(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> StepCost:
    manifest = shape.manifest()
    strategy = task_kinds.of_data(run.task, manifest).strategy()
    torch.manual_seed(run.seed)
    model = build_model(run, manifest)  # real CPU weights: the init code may read values
    checkpoint_blocks(model, checkpointed)
    tc = run.train

    def loss_of(model: nn.Module, batch: tuple[dict[str, Tensor], Tensor]) -> Tensor:
        return strategy.loss(model, *batch, tc.loss_includes_pad)[0]

    batch = synthetic_batch(shape, run, tc.batch_size, run.seed)
    return count_training_step(model, batch, loss_of, on_cuda(run), tc.precision, tc)


def device_model(run: RunSpec) -> str:
    return "cuda" if on_cuda(run) else "cpu"


def cost_key(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> str:
    """What a step's count depends on: two jobs with equal keys are counted once."""
    spec = run.to_dict()
    train = {k: spec["train"].get(k) for k in ("batch_size", "seq_len", "precision")}
    train["loss_includes_pad"] = run.train.loss_includes_pad
    sizes = (shape.kind, len(shape.vocab), len(shape.tgt_vocab), shape.num_classes)
    sizes += (shape.sequence_length(run), shape.src_max_length, shape.pairs)
    doc = {"task": run.task, "shape": sizes, "model": spec["model"], "train": train}
    doc |= {"diffusion": spec["diffusion"], "device": device_model(run)}
    if checkpointed:
        doc["checkpoint_blocks"] = True
    return json.dumps(doc, sort_keys=True)


def cache_id(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> str:
    """A step count's key on disk: its :func:`cost_key`, the source the run executes
    (pdelab.provenance), this module's and pdelab.shapes' source, and torch's version."""
    own = [Path(__file__), Path(__file__).with_name("shapes.py")]
    code = [provenance.code_digest(run), *(hashlib.sha256(p.read_bytes()).hexdigest() for p in own)]
    text = json.dumps([cost_key(run, shape, checkpointed), code, torch.__version__])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def attention_size(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> int:
    """batch x heads x T^2 x layers (x2 for document pairs): what a kernel that loops over
    tiles of the attention matrix scales with, to start the longest counts first."""
    m, t = run.model, shape.sequence_length(run)
    towers = 2 if shape.pairs else 1
    return run.train.batch_size * m.heads * t * t * m.layers * towers


def count_steps(
    todo: Mapping[str, tuple[RunSpec, TaskShape] | tuple[RunSpec, TaskShape, bool]],
    workers: int = 1,
    cache: Path | None = None,
    progress: bool = False,
) -> dict[str, StepCost]:
    """Each key's step count: from ``cache`` (a JSON file of earlier counts) where it holds
    one, else counted here (``workers`` > 1: in that many processes, the largest attention
    first) and added to the cache as it is done, so an interrupted plan keeps what it
    counted. ``progress``: a line on stderr per count."""
    stored: dict[str, dict[str, int]] = {}
    if cache is not None and cache.exists():
        with contextlib.suppress(ValueError):
            stored = json.loads(cache.read_text())
    ids = {key: cache_id(*job) for key, job in todo.items()} if cache is not None else {}
    done = {k: StepCost(**stored[ids[k]]) for k in todo if ids.get(k) in stored}
    missing = sorted((k for k in todo if k not in done), key=lambda k: -attention_size(*todo[k]))
    start = time.perf_counter()

    def finished(key: str, cost: StepCost) -> None:
        done[key] = cost
        if cache is not None:
            stored[ids[key]] = vars(cost)
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text(cache, json.dumps(stored, sort_keys=True))
        if progress:
            run = todo[key][0]
            n = len(done) - (len(todo) - len(missing))
            print(
                f"counted {n}/{len(missing)} {run.task}/{run.variant} "
                f"({time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    if workers > 1 and len(missing) > 1:
        context = get_context("spawn")  # a forked child of a threaded torch may hang
        with ProcessPoolExecutor(min(workers, len(missing)), mp_context=context) as pool:
            futures = {pool.submit(count_step, *todo[k]): k for k in missing}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    else:
        for key in missing:
            finished(key, count_step(*todo[key]))
    return done


# -- the plan ----------------------------------------------------------------------------------


def tokens_per_step(shape: TaskShape, run: RunSpec) -> int:
    """The data's tokens one step reads (pairs: both documents; translation: the source and
    the teacher-forced target; a patch model groups them, it does not drop them)."""
    b = run.train.batch_size
    if shape.kind == "translation":
        return b * (shape.src_max_length + shape.max_length - 1)
    return b * shape.sequence_length(run) * (2 if shape.pairs else 1)


@dataclass(frozen=True)
class JobCost:
    """One training job: its step, its steps, and its time per named GPU."""

    run: RunSpec
    step: StepCost
    tokens_per_step: int
    steps_per_epoch: int
    step_s: Mapping[str, float]  # GPU name -> seconds per step
    time_source: Mapping[str, str]  # GPU name -> "assumed" | "measured rate" | "measured step"
    fit: Fit | None = None  # on the declared card (pdelab.card_fit); None: none declared
    fit_flops: int = 0  # an optimizer step's FLOPs as ``fit`` runs it (recomputation included)
    card_fits: Mapping[int, bool] = field(default_factory=dict)  # CARDS_GIB -> fits there

    @property
    def name(self) -> str:
        return f"{self.run.task}/{self.run.variant}/{self.run.seed}"

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.run.train.epochs

    @property
    def may_stop_early(self) -> bool:
        """Early stopping may end it before ``steps``: then ``steps`` is an upper bound."""
        return self.run.train.patience < self.run.train.epochs

    @property
    def flops(self) -> int:
        return self.step.flops * self.steps

    @property
    def tokens(self) -> int:
        return self.tokens_per_step * self.steps

    @property
    def slowdown(self) -> float:
        """An optimizer step's time as :attr:`fit` runs it over the whole batch's: the work
        of its micro-batches (and of recomputed blocks) over the batch's."""
        if self.fit is None or not self.fit_flops or not self.step.flops:
            return 1.0
        return max(1.0, self.fit_flops / self.step.flops)

    def gpu_hours(self, gpu: str) -> float:
        return self.steps * self.step_s[gpu] * self.slowdown / 3600


def step_seconds(
    run: RunSpec,
    step: StepCost,
    gpu: Gpu,
    rates: Mapping[tuple[str, str], Throughput],
    measured: Measured,
) -> tuple[float, str]:
    """(seconds per step on ``gpu``, where the time comes from): a measured step time, else
    the step's bf16 and fp32 FLOPs at their sustained rates."""
    if (found := measured.step_s.get((gpu.name, run.task, run.variant))) is not None:
        return found[0], "measured step"
    low, high = rates[gpu.name, "bf16"], rates[gpu.name, "fp32"]
    fp32 = step.flops - step.low_precision_flops
    seconds = step.low_precision_flops / (low.tflops * 1e12) + fp32 / (high.tflops * 1e12)
    used = [low] if step.low_precision_flops else []
    used += [high] if fp32 else []
    return seconds, "measured rate" if any(t.measured for t in used) else "assumed"


@dataclass(frozen=True)
class Summary:
    """A set of jobs (a study's, or all): counts and sums, the largest peak and the jobs
    over each card."""

    name: str
    jobs: int
    parameters: int
    tokens: int
    flops: int
    gpu_hours: Mapping[str, float]
    peak_bytes: int
    peak_job: str
    too_big: Mapping[int, int]  # card GiB -> jobs that do not fit it
    bounded: int  # jobs whose steps are an upper bound (early stopping)
    # card GiB -> jobs that fit it with micro-batches and checkpointing (pdelab.card_fit)
    fit: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, jobs: Sequence[JobCost]) -> Summary:
        biggest = max(jobs, key=lambda j: j.step.peak_bytes, default=None)
        return cls(
            name=name,
            jobs=len(jobs),
            parameters=sum(j.step.parameters for j in jobs),
            tokens=sum(j.tokens for j in jobs),
            flops=sum(j.flops for j in jobs),
            gpu_hours={g.name: sum(j.gpu_hours(g.name) for j in jobs) for g in GPUS},
            peak_bytes=biggest.step.peak_bytes if biggest else 0,
            peak_job=biggest.name if biggest else "",
            too_big={c: sum(not fits(j.step.peak_bytes, c) for j in jobs) for c in CARDS_GIB},
            bounded=sum(j.may_stop_early for j in jobs),
            fit={
                c: sum(j.card_fits[c] for j in jobs)
                for c in CARDS_GIB
                if all(c in j.card_fits for j in jobs)
            },
        )


@dataclass(frozen=True)
class Plan:
    """A run profile's cost: every job, each study's and the total summary, and what the
    numbers rest on."""

    profile: str
    jobs: list[JobCost]
    studies: dict[str, Summary]
    total: Summary
    shapes: dict[str, TaskShape]
    rates: dict[tuple[str, str], Throughput]
    measured: Measured
    models: int  # distinct step counts
    card_gib: float | None = None  # the declared card (pdelab.card_fit), or the visible GPU


def visible_gpu_gib() -> float | None:
    """The memory (GiB) of the visible GPU, where there is one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GIB


def fit_job(
    run: RunSpec,
    shape: TaskShape,
    step: StepCost,
    cards: Sequence[float],
    cache: Path | None,
) -> dict[float, tuple[Fit, int]]:
    """Per card: the job's fit (pdelab.card_fit) and an optimizer step's FLOPs as it runs,
    from step counts at smaller batches, with and without checkpointed blocks (cached)."""
    counted: dict[tuple[int, bool], StepCost] = {(run.train.batch_size, False): step}

    def cost(micro: int, checkpointed: bool) -> StepCost:
        if (micro, checkpointed) not in counted:
            at = replace(run, train=replace(run.train, batch_size=micro))
            key = cost_key(at, shape, checkpointed)
            counted[micro, checkpointed] = count_steps({key: (at, shape, checkpointed)}, 1, cache)[
                key
            ]
        return counted[micro, checkpointed]

    out = {}
    for card in cards:
        fit = choose(lambda m, c: cost(m, c).peak_bytes, run.train.batch_size, card)
        out[card] = (
            fit,
            cost(fit.micro_batch, fit.checkpoint_blocks).flops * fit.accumulation_steps,
        )
    return out


def plan(
    params: dict[str, Any],
    profile: str,
    measured: Path | str | None = MEASURED_FILE,
    workers: int = 1,
    cache: Path | None = None,
    only: Sequence[str] = (),
    progress: bool = False,
    card_gib: float | None = None,
) -> Plan:
    """The cost of the profile's trained runs (``only``: "task/variant" patterns), each study's
    share and the total; with a card (``card_gib``, else the profile's ``gpu_memory_gb``, else
    the visible GPU's), each job's micro-batch, accumulation and checkpointing to fit it, and
    on :data:`CARDS_GIB`, how many jobs fit each."""
    specs = validate(params, profile)
    same = same_runs(specs)
    runs = [s for s in specs if RunKey(s.task, s.variant, s.seed) not in same]
    if only:
        runs = [r for r in runs if any(fnmatchcase(f"{r.task}/{r.variant}", p) for p in only)]
    shapes = {t: task_shape(params, profile, t) for t in dict.fromkeys(r.task for r in runs)}
    todo = {cost_key(r, shapes[r.task]): (r, shapes[r.task]) for r in runs}
    counted = count_steps(todo, workers, cache, progress)
    found = load_measured(measured, profile, runs)
    rates = {(g.name, p): assumed_throughput(g, p) for g in GPUS for p in PRECISIONS}
    rates |= found.throughput
    card = card_gib or gpu_memory_gb(params, profile) or visible_gpu_gib()
    cards = [*dict.fromkeys([*([card] if card else []), *map(float, CARDS_GIB)])]
    fitted: dict[str, dict[float, tuple[Fit, int]]] = {}
    jobs = []
    for run in runs:
        shape = shapes[run.task]
        key = cost_key(run, shape)
        step = counted[key]
        timed = {g.name: step_seconds(run, step, g, rates, found) for g in GPUS}
        if card and key not in fitted:
            fitted[key] = fit_job(run, shape, step, cards, cache)
        per_card = fitted.get(key, {})
        jobs.append(
            JobCost(
                run,
                step,
                tokens_per_step(shape, run),
                shape.steps_per_epoch(run),
                {g: t[0] for g, t in timed.items()},
                {g: t[1] for g, t in timed.items()},
                fit=per_card[card][0] if card else None,
                fit_flops=per_card[card][1] if card else 0,
                card_fits={c: per_card[float(c)][0].fits for c in CARDS_GIB} if card else {},
            )
        )
    by_key = {RunKey(j.run.task, j.run.variant, j.run.seed): j for j in jobs}
    studies = {}
    for name, study in studies_of(params, profile).items():
        keys = dict.fromkeys(same.get(k, k) for k in study.runs)
        own = [by_key[k] for k in keys if k in by_key]
        if own:
            studies[name] = Summary.of(name, own)
    total = Summary.of("total", jobs)
    return Plan(profile, jobs, studies, total, shapes, rates, found, len(todo), card)


# -- rendering ---------------------------------------------------------------------------------


def si(value: float, unit: str = "") -> str:
    """1.2e15 -> "1.20 P" (+ unit): three significant figures and an SI prefix."""
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g} k{unit}"
    return f"{value:.3g} {unit}".rstrip()


def size(n: int) -> str:
    """Bytes in MiB below a GiB, else in GiB."""
    return f"{n / 2**20:.0f} MiB" if n < GIB else f"{n / GIB:.1f} GiB"


def hours(h: float) -> str:
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def summary_rows(summaries: Sequence[Summary]) -> list[dict[str, Any]]:
    rows = []
    for s in summaries:
        row: dict[str, Any] = {"": s.name, "jobs": s.jobs, "parameters (sum)": si(s.parameters)}
        row |= {"tokens": si(s.tokens), "FLOPs": si(s.flops)}
        row |= {f"GPU-h {g.name}": hours(s.gpu_hours[g.name]) for g in GPUS}
        row |= {"peak memory (max)": size(s.peak_bytes), "largest job": s.peak_job}
        row |= {f"over {c} GB": s.too_big[c] for c in CARDS_GIB}
        row |= {f"fit {c} GB (micro-batches)": s.fit[c] for c in CARDS_GIB if c in s.fit}
        rows.append(row)
    return rows


def job_rows(jobs: Sequence[JobCost]) -> list[dict[str, Any]]:
    rows = []
    for j in jobs:
        row: dict[str, Any] = {"task": j.run.task, "variant": j.run.variant, "seed": j.run.seed}
        row |= {"params": si(j.step.parameters), "batch": j.run.train.batch_size}
        row |= {"tokens/step": si(j.tokens_per_step), "FLOPs/step": si(j.step.flops)}
        row |= {"steps": f"{j.steps:,}{' (max)' if j.may_stop_early else ''}"}
        row |= {"tokens/run": si(j.tokens), "FLOPs/run": si(j.flops)}
        row |= {"peak memory": size(j.step.peak_bytes)}
        row |= {"fits": "/".join(str(c) for c in CARDS_GIB if fits(j.step.peak_bytes, c)) or "-"}
        if j.fit is not None:  # on the declared card (pdelab.card_fit)
            row |= {"micro-batch": j.fit.micro_batch, "accumulation": j.fit.accumulation_steps}
            row |= {"checkpointing": "yes" if j.fit.checkpoint_blocks else "no", "GPUs": 1}
            row |= {"peak (micro)": size(j.fit.peak_bytes) + ("" if j.fit.fits else " (over)")}
        row |= {f"GPU-h {g.name}": hours(j.gpu_hours(g.name)) for g in GPUS}
        measured = sorted({s for s in j.time_source.values() if s != "assumed"})
        row |= {"time": ", ".join(measured) or "assumed"}
        rows.append(row)
    return rows


def assumptions(p: Plan) -> list[str]:
    """What the numbers rest on, one bullet each."""
    device = sorted({j.run.device for j in p.jobs})
    precision = sorted({j.run.train.precision for j in p.jobs})
    model = (
        "CUDA's kernels where they differ from a CPU's in memory: autocast's CUDA op lists, "
        "flash/memory-efficient attention (O(T)), fused dropout (1-byte mask), foreach AdamW, "
        "512-byte allocator blocks; a kernel that picks its path by the device is counted on "
        "its CPU path (FNA's chunked kernel for FlexAttention: the same products)"
        if "cuda" in device
        else "the CPU's own kernels"
    )
    lines = [
        f"Device: {', '.join(device)} (the run profile's), precision {', '.join(precision)} "
        f"(train.precision), one torch thread per job. Memory is modelled for that device: "
        f"{model}.",
        "Throughput (sustained, per GPU and precision; a bf16 run's fp32 islands, e.g. "
        "distance kernels, run at the fp32 rate; TF32 off, PyTorch's default):",
    ]
    for (gpu, prec), t in sorted(p.rates.items()):
        kind = "measured" if t.measured else "assumed"
        lines.append(f"  - {gpu} {prec}: {t.tflops:.1f} TFLOPS, {kind}: {t.source}")
    steps = sum(1 for j in p.jobs if any(s == "measured step" for s in j.time_source.values()))
    source = p.measured.path or f"none ({MEASURED_FILE} absent)"
    lines.append(f"Measurements: {source}; jobs timed from a measured step: {steps}.")
    lines.append(
        f"Steps: steps_per_epoch x epochs; {p.total.bounded} of {p.total.jobs} jobs may stop "
        "early (patience < epochs): their steps, FLOPs and GPU-hours are upper bounds. "
        "Training steps only: validation and test passes are not counted."
    )
    lines.append(
        "FLOPs: torch.utils.flop_counter.FlopCounterMode over forward + backward (matrix "
        "products and attention, 2 per multiply-add) on fake tensors at the profile's batch."
    )
    lines.append(
        "Peak memory: live tensor bytes of one steady-state training step (parameters, "
        "gradients, AdamW moments, batch, activations, temporaries); a card fits when peak x "
        f"{RESERVED_OVER_ALLOCATED:g} + {CUDA_CONTEXT_GIB:g} GiB (CUDA context) <= its memory."
    )
    if p.card_gib:
        lines.append(
            f"Card: {p.card_gib:g} GB (profiles.{p.profile}.gpu_memory_gb, else the visible "
            "GPU). Per job, the largest micro-batch whose estimated peak fits it with "
            f"{SAFETY:.0%} to spare, and the accumulation steps that make the paper's batch "
            "(the optimizer steps and results are the full batch's: pdelab.micro_batch); "
            "where one example does not fit, the encoder's and decoder's blocks are "
            "checkpointed. GPU-hours count the micro-batches' work and the recomputation. The "
            f"totals' 'fit' columns: jobs that fit each of {', '.join(map(str, CARDS_GIB))} GB "
            "so."
        )
    lines.append("Shapes (pdelab.shapes; batches at the longest length):")
    for task, s in sorted(p.shapes.items()):
        where = "prepared manifest" if s.source == "manifest" else "declared in params.yaml"
        extra = f"; assumed: {'; '.join(s.assumed)}" if s.assumed else ""
        length = "windows of train.seq_len" if s.kind == "lm" else f"length {s.max_length}"
        lines.append(
            f"  - {task}: {where}; {s.kind}, vocabulary {len(s.vocab):,}, {length}, "
            f"{s.n_train:,} training {'tokens' if s.kind == 'lm' else 'examples'}{extra}"
        )
    return lines


def render(p: Plan, fmt: str = "text", with_jobs: bool = True) -> str:
    """The plan as Markdown (``md``) or plain text: totals, per study, assumptions, jobs."""
    table = "github" if fmt == "md" else "simple"
    head = "# " if fmt == "md" else ""
    sub = "## " if fmt == "md" else ""
    bullet = "- " if fmt == "md" else "* "
    out = [
        f"{head}Cost plan: run profile {p.profile}",
        "",
        f"{p.total.jobs} training jobs, {p.models} distinct models x batches counted. "
        "Estimates from fake-tensor steps and datasheet rates unless marked measured; "
        "studies share runs, so study rows add up to more than the total.",
        "",
        f"{sub}Total",
        "",
        tabulate(summary_rows([p.total]), headers="keys", tablefmt=table),
        "",
        f"{sub}Per study",
        "",
        tabulate(summary_rows(list(p.studies.values())), headers="keys", tablefmt=table),
        "",
        f"{sub}Assumptions",
        "",
    ]
    for line in assumptions(p):
        nested = line.startswith("  - ")
        out.append("  " + bullet + line[4:] if nested else bullet + line)
    if with_jobs:
        out += ["", f"{sub}Jobs", "", tabulate(job_rows(p.jobs), headers="keys", tablefmt=table)]
    return "\n".join(out) + "\n"


def plan_data(p: Plan) -> dict[str, Any]:
    """The plan's data file: per job its fit to the card and hours, per card size the jobs
    that fit at the paper's batch and with micro-batches."""
    jobs = []
    for j in p.jobs:
        row: dict[str, Any] = {"task": j.run.task, "variant": j.run.variant, "seed": j.run.seed}
        row |= {"batch": j.run.train.batch_size, "gpus": 1, "peak_bytes": j.step.peak_bytes}
        if j.fit is not None:
            row |= {"micro_batch": j.fit.micro_batch, "accumulation": j.fit.accumulation_steps}
            row |= {"checkpoint_blocks": j.fit.checkpoint_blocks, "fits": j.fit.fits}
            row |= {"micro_peak_bytes": j.fit.peak_bytes}
        row |= {"gpu_hours": {g.name: j.gpu_hours(g.name) for g in GPUS}}
        jobs.append(row)
    cards = {
        str(c): {"jobs": p.total.jobs, "fit_at_batch": p.total.jobs - p.total.too_big[c]}
        | ({"fit": p.total.fit[c]} if c in p.total.fit else {})
        for c in CARDS_GIB
    }
    return {"profile": p.profile, "card_gib": p.card_gib, "cards": cards, "jobs": jobs}


def command(
    params: dict[str, Any],
    profile: str,
    fmt: str = "text",
    out: Path | None = None,
    measured: Path | None = MEASURED_FILE,
    workers: int | None = None,
    cache: Path | None = CACHE_FILE,
    only: Sequence[str] = (),
) -> list[str]:
    """``pdelab plan``: the lines to print (with ``out``: the plan written there instead);
    ``measured`` None reads :data:`MEASURED_FILE`, ``cache`` None counts every step afresh."""
    workers = workers or min(8, os.cpu_count() or 1)
    measured = MEASURED_FILE if measured is None else measured
    made = plan(params, profile, measured, workers, cache, only, progress=True)
    text = render(made, fmt)
    if out is None:
        return text.rstrip("\n").split("\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, text)
    data = out.with_suffix(".json")  # the plan's data beside it
    write_text(data, json.dumps(plan_data(made), indent=1) + "\n")
    return [f"-> {out}", f"-> {data}"]


# -- measuring a real step (what the estimate is checked against) -------------------------------


def measure_peak(run: RunSpec, shape: TaskShape, steps: int = 2) -> int:
    """The peak bytes torch allocates for real while building ``run``'s model and taking
    ``steps`` steps of :func:`pdelab.train.train_step` at ``run.train.batch_size`` on
    ``run.device``: on CUDA ``max_memory_allocated``; on CPU the running sum of the CPU
    allocator's allocation and free events, which the profiler records
    (``profile_memory``). Run it in a fresh process: nothing else may allocate meanwhile.
    One torch thread, as :func:`count_step` counts."""
    from torch.profiler import ProfilerActivity, profile

    from pdelab.train import train_step

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
    """The trainer's session on synthetic data (pdelab.shapes) and ``steps`` steps of it."""
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


def main(argv: list[str] | None = None) -> int:
    """``python -m pdelab.cost_plan check TASK VARIANT``: one run's estimated peak against a
    measured one (on a GPU: the check of the CUDA model). The plan itself: ``pdelab plan``."""
    parser = argparse.ArgumentParser(prog="python -m pdelab.cost_plan", description=main.__doc__)
    parser.add_argument("what", choices=("check",))
    parser.add_argument("task")
    parser.add_argument("variant")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--device", help="override the profile's device (cpu, cuda)")
    parser.add_argument("--profile")
    parser.add_argument("--params", type=Path, default=PARAMS_FILE)
    args = parser.parse_args(argv)
    params = load_params(args.params)
    profile = active_profile(params, args.profile)
    what = (params, profile, args.task, args.variant, args.batch, args.device)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        measured = pool.submit(measured_peak, *what).result()  # nothing else allocates there
    estimate = estimated_peak(*what)
    print(
        f"{args.task}/{args.variant} batch {args.batch}: estimated {estimate / 2**20:.1f} MiB, "
        f"measured {measured / 2**20:.1f} MiB ({100 * (estimate / measured - 1):+.1f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
