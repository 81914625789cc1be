"""Count the host syncs of a training step on a CPU: the reads that would stall a GPU's queue.

A GPU runs ahead of the host only while the host reads nothing back: ``.item()``, ``bool(t)``,
``int(t)``, an ``if`` on a tensor, ``t.tolist()``, ``.cpu()``, a boolean-mask index (its
result's size is data) and ``torch.nonzero`` each wait for every queued kernel. On a CPU none of
them costs anything, so they are counted instead: every such operator that reaches PyTorch's
dispatcher (``aten._local_scalar_dense`` is what ``item``, ``bool``, ``int`` and ``float``
become; ``nonzero`` and ``masked_select`` are what a boolean index becomes) and the Python
methods that copy to the host (``tolist``, ``numpy``, ``cpu``), from the code of this package.

Not counted: the optimizers' own reads of their step counters (torch keeps those on the host
unless ``capturable``), a split's making of a batch's host arrays (``batch``), the counting
of items on them before they are copied (``loss_items``), and the CPU stand-ins (``counted_*``)
for kernels that exist only on a GPU, which gpu_check.sh checks there. ``SyncCounter.sites``
says where each counted one happened.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pdelab.models.attention import COUNTING_FOR_CUDA

PACKAGE = str(Path(__file__).resolve().parents[1])  # src/pdelab
SYNCING_OPS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.masked_select.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.equal.default,
}
# a boolean index (x[mask], x[mask] = v) sizes its result by the data: nonzero inside
INDEXING_OPS = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
}
HOST_COPIES = ("tolist", "numpy", "cpu")
# host-side by construction: a split makes a batch's arrays on the host, and a window's items
# are counted on them before the copy
HOST_SIDE = ("batch", "loss_items")
IGNORED_FILES = ("/torch/optim/",)  # optimizer step counters live on the host
# a CPU stand-in for a kernel that exists only on a GPU (FNA's FlexAttention), as the cost
# plan counts it: its reads are the stand-in's, the GPU kernel is checked on a GPU
STAND_IN = "counted_"


def site(stack: list[traceback.FrameSummary], root: str = PACKAGE) -> str | None:
    """The innermost frame under ``root`` that made the call, or None where it is not ours
    (or is on the host by design)."""
    if any(marker in f.filename for f in stack for marker in IGNORED_FILES):
        return None
    ours = [f for f in stack if f.filename.startswith(root) and f.filename != __file__]
    if not ours or any(f.name in HOST_SIDE or f.name.startswith(STAND_IN) for f in ours):
        return None
    return f"{Path(ours[-1].filename).name}:{ours[-1].lineno} {ours[-1].name}"


class SyncCounter(TorchDispatchMode):
    """Inside ``with SyncCounter() as syncs:`` every host sync our code asks for is recorded
    in ``syncs.sites`` ("step.py:71 train_step _local_scalar_dense")."""

    def __init__(self, root: str = PACKAGE) -> None:
        super().__init__()
        self.root = root  # whose calls count: this package's, or a test's own file
        self.sites: list[str] = []
        self._patches = contextlib.ExitStack()

    def note(self, what: str) -> None:
        where = site(traceback.extract_stack()[:-2], self.root)
        if where is not None:
            self.sites.append(f"{where} {what}")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in SYNCING_OPS or (func in INDEXING_OPS and boolean_index(args)):
            self.note(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> SyncCounter:
        for name in HOST_COPIES:
            self._patches.enter_context(patched(self, name))
        self._as_on_gpu = COUNTING_FOR_CUDA.set(True)  # paths chosen by the device: a GPU's
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        COUNTING_FOR_CUDA.reset(self._as_on_gpu)
        self._patches.close()


def boolean_index(args: Any) -> bool:
    """Whether an index operator's indices hold a boolean mask."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


@contextlib.contextmanager
def patched(counter: SyncCounter, name: str) -> Iterator[None]:
    """``torch.Tensor.<name>`` noting each call, then doing what it did."""
    original = getattr(torch.Tensor, name)

    def noted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        counter.note(name)
        return original(self, *args, **kwargs)

    setattr(torch.Tensor, name, noted)
    try:
        yield
    finally:
        setattr(torch.Tensor, name, original)
