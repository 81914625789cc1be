"""Training precision: bf16 autocast where the profile asks for it, fp32 where a mechanism
needs it.

``train.precision: bf16`` runs each training and evaluation forward pass under
``torch.autocast(dtype=torch.bfloat16)``: matrix products and attention in bf16, reductions,
norms and the loss in fp32 (autocast's own lists); weights, gradients and the optimizer
stay fp32, so no loss scaling is needed (bf16 has fp32's exponent range). ``fp32`` (the
default, and the smoke profile's) runs everything in fp32, bit-for-bit as before.

Some computations lose their meaning in bf16 (8 bits of mantissa): a distance
``|q|^2 + |k|^2 - 2 q.k`` between nearby points cancels to noise, a heavy-tailed kernel of
it then weighs keys by that noise, and a causality probe's "did the past move by more than
1e-6" cannot be answered at bf16's resolution of about 1e-2. Those run inside
:func:`full_precision`: autocast off, inputs cast to fp32 and TF32 off for their matrix
products (TF32 keeps 10 bits of mantissa, too few for the same cancellation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from pdelab.spec.model import PRECISIONS  # declared torch-free: params.yaml is checked with it

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def check(precision: str) -> str:
    """The precision, or an error naming the valid ones."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The region a forward pass runs in: bf16 autocast on ``device``, or nothing (fp32)."""
    if check(precision) == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


@contextlib.contextmanager
def full_precision(device_type: str | None = None) -> Iterator[None]:
    """fp32 inside, whatever the caller runs in: autocast off (for ``device_type``, or CUDA
    and CPU) and fp32 matrix products without TF32. Callers cast their inputs with
    :func:`fp32`; tensors made inside are fp32 already."""
    if torch.compiler.is_compiling():  # traced: no ExitStack, and the matmul precision is a
        # global setting it cannot read (TF32 is off by default, and a compiled step keeps the
        # setting it was compiled under)
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            yield
        return
    types = (device_type,) if device_type else ("cuda", "cpu")
    with contextlib.ExitStack() as stack:
        for kind in types:
            stack.enter_context(torch.autocast(device_type=kind, enabled=False))
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(previous)


def fp32(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Each floating tensor in fp32 (fp64 is kept: the oracles run in it)."""
    return tuple(
        t.float() if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64) else t
        for t in tensors
    )
