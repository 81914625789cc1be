"""What a CUDA device runs where its memory differs from the CPU kernels a fake CPU step
dispatches to, emulated on the CPU.

Why: a plan for a GPU profile is made on a machine without one, and FakeTensorMode cannot
dispatch to CUDA. :class:`CudaKernels` swaps in what a GPU runs: autocast's CUDA op lists
(matrix products in bf16; softmax, norms, exp, sums and losses in fp32), a fused O(T)
attention kernel (flash or memory-efficient: output and log-sum-exp kept, plus the backward's
fp32 dq accumulator, which :class:`pdelab.plan.tracker.Tracker` adds), fused dropout (a 1-byte
mask), and the caching allocator's 512-byte rounding (:data:`CUDA_BLOCK`) and cuBLAS's
workspaces (:data:`CUBLAS_WORKSPACE_BYTES`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from pdelab.plan.hardware import LOW_DTYPES

aten = torch.ops.aten
CUDA_BLOCK = 512  # the caching allocator rounds every allocation up to 512 bytes
# cuBLAS workspaces torch allocates through its caching allocator: 32 MiB per handle on Hopper
# (torch's default), one handle for the forward's thread and one for autograd's; an H200
# measured 61-100 MB above the counted tensors in each of eight paper jobs
# (pdelab.plan.calibration)
CUBLAS_WORKSPACE_BYTES = 2 * 32 * 2**20


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
            if x.is_leaf and x.requires_grad and not x._is_view() and dtype in LOW_DTYPES:
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


def precision_region(cuda: bool, precision: str) -> contextlib.AbstractContextManager:
    """The forward pass's autocast (pdelab.training.precision) on CPU, or CUDA's emulated."""
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
