"""FNA on FlexAttention (CUDA; its forward also runs on a CPU): log Phi as ``score_mod``, and
padding, causality and the zero diagonal as one block-sparse ``mask_mod``.

What torch 2.13's FlexAttention imposes, and what this path does about it:

- **Widths.** Inductor's Triton kernel refuses a query, key or value head dimension below 16
  (``tl.dot``) and rounds each one up to a power of two (``next_power_of_two`` in
  torch/_inductor/kernel/flex/common.py). q, k and v are zero-padded to at least MIN_HEAD_DIM,
  which is exact: zero columns add nothing to q.k, and the output's extra columns are cut off.
- **Norms.** The Euclidean d^2 = |q_i|^2 + |k_j|^2 - 2 q_i.k_j has two constructions, equal in
  exact arithmetic for every variant (tied, the zero diagonal, padding, causal, cross-
  attention; the sphere has no norms) and to rounding in float64 (tests/
  test_fna_throughput.py, outputs and gradients). ``norms="columns"``, the default, hands the
  kernel q' = [-2q, 1, |q|^2], k' = [k, |k|^2, 1], so d^2 = q'.k' is its own score: width
  d + 2, which the kernel rounds up to a power of two (16 up to d = 14: free at the ViT's
  d = 8; 2d at d = 16, 32, 64), and a backward with no atomic adds, deterministic.
  ``norms="captured"`` takes q.k at width d and the squared norms from two captured (B, H, L)
  tensors that ``score_mod`` indexes by (b, h, q_idx) and (b, h, kv_idx): gradients reach
  captured tensors through the backward kernel's fp32 atomic adds (a Scatter in
  torch/_inductor/kernel/flex/common.py), two per score, each score of a row adding into its
  query's entry and each of a column into its key's, so they contend and their last bits
  depend on the order. Against them the columns cost wider products: at d = 16 (LRA), 32
  (IMDb) or 64 (Multi30K) three of the backward's five products and one of the forward's two
  run at 2d. Which is faster there is a GPU measurement (benchmarks/bench_fna.py --norms);
  ``columns`` is the default as the exact, deterministic one without atomics.
- **Compilations.** Every length is padded up to a bucket, a power of two >= FLEX_BLOCK
  (``flex_length``), and the kernel is compiled with static lengths: one compilation per
  kernel configuration, bucket met (pair of buckets in cross-attention), requires-grad state
  (training against evaluation) and, on a CPU, batch size (on CUDA the batch dimension is
  dynamic; torch's CPU template mis-renames symbolic sizes once a kernel has many, so a CPU
  compiles static shapes only). Padded keys, and query blocks that
  lie wholly in the padding, are empty blocks of the block mask, which the kernel skips: a
  bucket costs the padding's memory, not its work. Padding or none, causal or not (a per-batch
  reach, data rather than code) share one graph; a run's compilations stay within
  COMPILE_LIMIT, past which torch would run FlexAttention unfused, with O(T^2) memory.
- **Evaluation.** Compiled under no_grad on CUDA (torch 2.11, an H200), the forward-only
  kernel faulted (an illegal memory access, or an invalid address space) where the training
  kernel on the same inputs was exact (benchmarks/flex_cuda_probe.py, both with a static and
  a dynamic batch). An evaluation forward therefore runs the training kernel: q requires
  grad inside the call, the output comes back detached, and the saved tensors are freed with
  it; the cost is the log-sum-exp the kernel writes besides.
- **Precision.** The lowering reads TF32-or-not from the global matmul precision when it
  compiles each kernel, and compiles the backward lazily, at the first backward call, outside
  the caller's full_precision. The kernel options pin fp32 ("ieee") products for both, and the
  call runs under full_precision, so the caller's precision neither changes the kernels nor
  adds compilations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from pdelab.training.precision import full_precision

try:  # FlexAttention (torch >= 2.5)
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - older torch: the chunked path everywhere
    BlockMask = flex_attention = None

FLEX_AVAILABLE = flex_attention is not None
FLEX_BLOCK = 128  # FlexAttention's sparse block (its default)
MIN_HEAD_DIM = 16  # the narrowest q, k or v inductor's Triton kernel accepts
# torch gives up compiling a function after 8 graphs; a run meets (buckets met) x 2
# requires-grad states, and pairs of buckets in cross-attention
COMPILE_LIMIT = 64
NORMS = ("captured", "columns")
DEFAULT_NORMS = "columns"  # module docstring: exact, deterministic, no atomic adds
# fp32 products without TF32 in the forward and the backward kernels, whatever the global
# precision when either is compiled (torch/_inductor/kernel/flex/flex_attention.py reads the
# option before it falls back to torch.get_float32_matmul_precision()).
KERNEL_OPTIONS = {"FLOAT32_PRECISION": "'ieee'"}


class Geometry(Protocol):
    """What this path reads of attention.Geometry (which imports this module)."""

    @property
    def spherical(self) -> bool: ...

    @property
    def tied(self) -> bool: ...

    def distance_clamped_grad(self, s: Tensor) -> Tensor: ...

    def log_phi(self, dist: Tensor) -> Tensor: ...


def flex_length(n: int) -> int:
    """The bucket a length of n is padded to: a power of two, at least one block (a loop, so
    that a compiled model with a symbolic n guards on its bucket)."""
    length = FLEX_BLOCK
    while length < n:
        length *= 2
    return length


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """(count, indices) of the True blocks of each row of a (B, 1, Nq, Nk) block table, as
    ``BlockMask.from_kv_blocks`` reads them."""
    dense = dense.to(torch.int32)
    order = torch.argsort(dense, dim=-1, descending=True, stable=True)
    return dense.sum(-1, dtype=torch.int32), order.to(torch.int32)


def block_mask(
    keep: Tensor,
    reach: Tensor,
    rows: Tensor,
    q_len: int,
    zero_diagonal: bool,
    mask_mod: Callable[..., Tensor],
) -> BlockMask:
    """The BlockMask of ``mask_mod`` from per-block key counts, O(B (L / 128)^2) work, never a
    (T, T) mask: query i may read key j iff keep[b, j], j <= i + reach[b] (reach 0 is causal,
    >= L none) and, with ``zero_diagonal``, i != j. Blocks of queries at or past ``rows`` (the
    bucket's padding) read nothing. A block is full where every pair is allowed (the kernel
    skips ``mask_mod`` there), empty where none is (it skips the block), else partial."""
    b, kv_len = keep.shape
    n = FLEX_BLOCK
    count = keep.view(b, kv_len // n, n).sum(-1)[:, None, None, :]  # (B, 1, 1, Nk)
    q0 = torch.arange(0, q_len, n, device=keep.device)[:, None]  # first query of a block
    k0 = torch.arange(0, kv_len, n, device=keep.device)[None, :]  # first key of a block
    limit = q0 + reach[:, None, None, None]  # (B, 1, Nq, 1): key j <= query i + reach
    empty = (count == 0) | (k0 > limit + n - 1) | (q0 >= rows)
    every = (count == n) & (k0 + n - 1 <= limit)
    if zero_diagonal:  # a block holding some i == j needs mask_mod
        every = every & ((k0 > q0 + n - 1) | (q0 > k0 + n - 1))
    full = every & ~empty
    partial = ~empty & ~every
    return BlockMask.from_kv_blocks(
        *_ordered(partial),
        *_ordered(full),
        BLOCK_SIZE=n,
        mask_mod=mask_mod,
        seq_lengths=(q_len, kv_len),
    )


def flex_kernel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    qq: Tensor | None,
    kk: Tensor | None,
    keep: Tensor,
    reach: Tensor,
    rows: Tensor,
    geo: Geometry,
    zero_diagonal: bool,
) -> Tensor:
    """FlexAttention on bucket-padded inputs (what is compiled): the score handed to
    ``score_mod`` is q.k with scale 1, and s is d^2 (qq[i] + kk[j] - 2 q.k, or q.k itself when
    qq is None: the augmented columns) or the cosine on the sphere."""

    def score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        s = score if qq is None or kk is None else qq[b, h, i] + kk[b, h, j] - 2 * score
        dist = geo.distance_clamped_grad(s)
        if geo.tied:
            dist = torch.where(i == j, torch.zeros_like(dist), dist)
        return geo.log_phi(dist)

    def mask_mod(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        allowed = keep[b, j] & (j <= i + reach[b])
        return allowed & (i != j) if zero_diagonal else allowed

    blocks = block_mask(keep, reach, rows, q.shape[-2], zero_diagonal, mask_mod)
    return flex_attention(
        q, k, v, score_mod=score_mod, block_mask=blocks, scale=1.0, kernel_options=KERNEL_OPTIONS
    )


@functools.cache
def compiled_kernel() -> Callable[..., Tensor]:
    """``flex_kernel`` compiled once per process, static shapes (see the module docstring)."""
    return torch.compile(flex_kernel, dynamic=False, fullgraph=True)


def _pad(x: Tensor, length: int, width: int) -> Tensor:
    return F.pad(x, (0, width - x.shape[-1], 0, length - x.shape[-2]))


def bucketed(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k, v zero-padded to their length buckets and to the narrowest width the kernel
    accepts, and the (B, bucket) mask of real keys: the shapes FlexAttention is handed."""
    t_k = k.shape[-2]
    q_len, kv_len = flex_length(q.shape[-2]), flex_length(t_k)
    width = max(MIN_HEAD_DIM, q.shape[-1])
    q_, k_ = _pad(q, q_len, width), _pad(k, kv_len, width)
    v_ = _pad(v, kv_len, max(MIN_HEAD_DIM, v.shape[-1]))
    real = torch.ones(q.shape[0], t_k, dtype=torch.bool, device=q.device)
    keep = F.pad(real if key_padding_mask is None else key_padding_mask, (0, kv_len - t_k))
    return q_, k_, v_, keep


def flex_path(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
    compiled: bool = True,
    norms: str = DEFAULT_NORMS,
) -> Tensor:
    """FlexAttention with log Phi as ``score_mod``: fused, O(T) memory (CUDA).

    q (B, H, Tq, d), k and v (B, H, Tk, d); padding, ``causal`` and ``zero_diagonal`` go to the
    block mask, a row left with no key gives 0. ``compiled=False`` runs FlexAttention eagerly
    (a forward check on a CPU); ``norms`` picks the Euclidean construction (module docstring).
    """
    if not FLEX_AVAILABLE:
        raise RuntimeError("FlexAttention needs torch >= 2.5")
    if norms not in NORMS:
        raise ValueError(f"unknown norms {norms!r}; one of {', '.join(NORMS)}")
    b, _, t_q, _ = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    q_len, kv_len = flex_length(t_q), flex_length(t_k)
    qq = kk = None
    if not geo.spherical:
        qq, kk = q.square().sum(-1), k.square().sum(-1)  # two tensors even when k is q
        if norms == "columns":
            q = torch.cat([-2 * q, torch.ones_like(qq)[..., None], qq[..., None]], dim=-1)
            k = torch.cat([k, kk[..., None], torch.ones_like(kk)[..., None]], dim=-1)
            qq = kk = None
        else:
            qq, kk = F.pad(qq, (0, q_len - t_q)), F.pad(kk, (0, kv_len - t_k))
    q_, k_, v_, keep = bucketed(q, k, v, key_padding_mask)
    if k_ is q_:  # distinct tensors when tied: FlexAttention's graph guards aliasing
        k_ = k_.clone()
    reach = torch.full((b,), 0 if causal else kv_len, dtype=torch.int32, device=q.device)
    rows = torch.full((), t_q, dtype=torch.int32, device=q.device)
    inputs = (q_, k_, v_, qq, kk, keep, reach, rows)
    if torch.compiler.is_compiling():  # inside a compiled model: traced inline
        out = flex_kernel(*inputs, geo, zero_diagonal)
    else:
        # specialize_float: the Geometry's constants are compiled in (eager FlexAttention
        # compiles too), never symbolic inputs, which FlexAttention cannot trace
        settings = torch._dynamo.config.patch(recompile_limit=COMPILE_LIMIT, specialize_float=True)
        evaluating = compiled and q.is_cuda and not torch.is_grad_enabled()
        evaluating = evaluating and not torch.is_inference_mode_enabled()
        if evaluating:  # the training kernel, not the no_grad one (module docstring)
            inputs = (q_.detach().requires_grad_(), *inputs[1:])
        grad = torch.set_grad_enabled(torch.is_grad_enabled() or evaluating)
        with full_precision(q.device.type), settings, grad:
            run = compiled_kernel() if compiled else flex_kernel
            if compiled and q.is_cuda:  # a dynamic batch on CUDA only (module docstring)
                for x in inputs:
                    if x is not None and x.dim() > 0:
                        torch._dynamo.maybe_mark_dynamic(x, 0)
            out = run(*inputs, geo, zero_diagonal)
        if evaluating:
            out = out.detach()
    return out[:, :, :t_q, :d_v]


__all__ = [
    "FLEX_AVAILABLE",
    "FLEX_BLOCK",
    "MIN_HEAD_DIM",
    "COMPILE_LIMIT",
    "NORMS",
    "DEFAULT_NORMS",
    "KERNEL_OPTIONS",
    "flex_length",
    "bucketed",
    "block_mask",
    "flex_kernel",
    "compiled_kernel",
    "flex_path",
]
