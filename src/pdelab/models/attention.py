"""Multi-head self-attention that owns its projections and picks its kernel from a registry.

Every kernel is an ``nn.Module`` built as ``Kernel(heads=H, head_dim=Dh, **options)`` whose
forward maps ``(q, k, v)`` of shape (B, H, T, Dh) to (B, H, T, Dh), given
``key_padding_mask`` (B, T), True at real tokens, and ``causal``. Kernels may hold learnable
parameters (PDE coefficients, for instance); the plain ones hold none. A kernel whose
mechanism constrains the projections themselves (tied or orthogonal W_Q, W_K) defines
``make_projection(dim)``: a module mapping (B, T, C) to (B, T, 3C) = [q | k | v], which
``SelfAttention`` then uses in place of its own ``nn.Linear(C, 3C)``.

Queries and keys may be different sequences, (B, H, Tq, Dh) against (B, H, Tk, Dh) with the
mask over the Tk keys, as an encoder-decoder's cross-attention needs (never causal there). A
kernel that is defined on one sequence only (a positional pattern tying query i to key i)
sets ``cross_attention = False``, on its class, or on the instance where its options decide
(keys tied to the queries); models refuse such a kernel where Tq != Tk instead of failing or
silently pairing positions of two different sentences. :func:`supports_cross_attention` reads
the class.
"""

from __future__ import annotations

import math
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.spec.registry import Registry

ATTENTION_KERNELS: Registry[type[nn.Module]] = Registry("attention kernel")
# set while a CPU stands in for a GPU: pdelab.plan.counting counts a CUDA step on fake CPU
# tensors, pdelab.plan.host_syncs counts a step's host syncs; a kernel (or loss) that picks its
# path by the device takes its CUDA path (see runs_as_cuda)
COUNTING_FOR_CUDA: ContextVar[bool] = ContextVar("counting_for_cuda", default=False)


def runs_as_cuda(x: Tensor) -> bool:
    """Whether ``x`` is on a GPU, or stands for a tensor on one (:data:`COUNTING_FOR_CUDA`).

    A compiled step never runs inside the count (fake tensors, eager), and Dynamo cannot
    trace ``ContextVar.get`` (a graph break in every kernel that asks): compiled, the device
    alone answers."""
    if torch.compiler.is_compiling():
        return x.is_cuda
    return x.is_cuda or COUNTING_FOR_CUDA.get()


def supports_cross_attention(kernel: str) -> bool:
    """Whether the registered kernel takes queries and keys of different sequences (with its
    default options: an instance may still decline, see the module docstring)."""
    return bool(getattr(ATTENTION_KERNELS.get(kernel), "cross_attention", True))


def attention_mask(key_padding_mask: Tensor | None, causal: bool, t: int, device) -> Tensor | None:
    """Boolean (B|1, 1, T, T) mask, True where a query may attend to a key."""
    mask = None
    if key_padding_mask is not None:
        mask = key_padding_mask[:, None, None, :]
    if causal:
        tri = torch.ones(t, t, dtype=torch.bool, device=device).tril()[None, None]
        mask = tri if mask is None else mask & tri
    return mask


@ATTENTION_KERNELS.register("sdpa")
class SDPAKernel(nn.Module):
    """``scaled_dot_product_attention``: PyTorch picks a flash or memory-efficient kernel.

    The kernel follows the mask as given, never its values: reading whether a batch happens to
    be unpadded would be a host sync (and a graph break under ``torch.compile``) in every
    layer of every step. A boolean key mask sends SDPA to the memory-efficient kernel on a GPU;
    where every sequence fills its length by the task's format (images), the model is built to
    pass None (``Encoder(unpadded=True)``, decided from the manifest) and SDPA may take its
    flash kernel.
    """

    def __init__(self, heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        p = self.dropout if self.training else 0.0
        if key_padding_mask is None:  # no (T, T) mask: lets PyTorch pick an O(T) kernel
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        mask = attention_mask(key_padding_mask, causal, q.shape[-2], q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)


@ATTENTION_KERNELS.register("reference")
class ReferenceKernel(nn.Module):
    """The textbook softmax(QK^T / sqrt(d)) V, materialized; the slow path kernels test against."""

    def __init__(self, heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        mask = attention_mask(key_padding_mask, causal, q.shape[-2], q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.dropout(scores.softmax(dim=-1)) @ v
