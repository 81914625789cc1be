"""Below autograd, over a fake training step: the live bytes of every tensor storage and
their peak, matrix-product FLOPs by precision, and the values a fake tensor cannot give.

Why a dispatch mode of its own: FakeTensorMode gives shapes and dtypes without allocating, but
neither the memory a step holds at its peak (which storages are alive together) nor the
values a model reads from its weights (a learned bandwidth that sets a block size). The
:class:`Tracker` counts the first and computes the second from the real initial weights,
lazily (:class:`Known`); what depends on the batch reads as 1, and a boolean mask of it
selects every position (in a synthetic batch at the longest length every position is real).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils.weak import WeakIdKeyDictionary

from pdelab.plan.cuda_kernels import CUDA_BLOCK
from pdelab.plan.hardware import LOW_DTYPES, PRECISIONS

aten = torch.ops.aten


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
        self.flops["bf16" if first.dtype in LOW_DTYPES else "fp32"] += int(flops)
