"""One training step of one model, counted on fake tensors: parameters, FLOPs (by precision)
and the peak of live bytes, on the run's device, without allocating what it counts.

How: the model is built with real CPU weights (at most tens of millions: cheap, and the init
code may read values), its parameters and buffers are then swapped for fake tensors
(FakeTensorMode: shapes and dtypes, no data), and :func:`pdelab.training.train.train_step`'s
sequence runs on a fake batch of the run's batch size: the task kind's loss under the run's
precision, backward, gradient clipping, AdamW.

* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over the forward and backward passes:
  matrix products and attention kernels (2 per multiply-add). Elementwise work, norms, the
  optimizer and data-dependent branches the fake step cannot take are not counted.
* Memory: the live bytes of every tensor storage (parameters, buffers, the batch,
  activations, gradients, AdamW's moments, temporaries), each counted while it is alive
  (:class:`pdelab.plan.tracker.Tracker`), peaked over the step in its steady state: a first
  optimizer step on zero gradients makes the moments, and the previous step's gradients stay
  resident through the forward pass as in training (``zero_grad`` runs after the loss). Not
  counted: the CUDA context and library workspaces (a card's fit adds
  :data:`pdelab.plan.card_fit.CUDA_CONTEXT_GIB`), allocator fragmentation (it multiplies by
  :data:`pdelab.plan.card_fit.RESERVED_OVER_ALLOCATED`), buffers a kernel allocates inside itself
  (but see CUDA's attention backward), and validation passes (no_grad: less).
* The device: the run's. On CPU the fake step runs the CPU kernels themselves (math or flash
  attention as the CPU dispatcher picks, dropout keeping a float mask, single-tensor AdamW,
  CPU autocast). For CUDA, which a CPU cannot dispatch to, :mod:`pdelab.plan.cuda_kernels`
  swaps in what a GPU runs where it changes memory. A kernel that picks its path by the device
  (FNA's FlexAttention, which a CPU cannot run backward) reads
  :data:`pdelab.models.attention.COUNTING_FOR_CUDA` and is counted with its CUDA path's shapes
  (FNA: its inputs padded to FlexAttention's length bucket and widths, through the chunked
  kernel); at LRA's lengths such a kernel loops over thousands of tiles, and counting it takes
  minutes (once: the counts are cached, :mod:`pdelab.plan.step_counts`).

The CPU estimate is checked against measured CPU steps (tests/test_cost_plan.py,
:mod:`pdelab.plan.check`); the CUDA one against a GPU (``python -m pdelab.plan.calibration``,
tests/test_cuda.py: ``torch.cuda.max_memory_allocated``), within 9% on eight sampled paper
jobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

from pdelab.models.attention import COUNTING_FOR_CUDA
from pdelab.models.factory import build_model
from pdelab.models.transformer import RECOMPUTE_CONTEXT, checkpoint_blocks
from pdelab.plan.cuda_kernels import (
    CUBLAS_WORKSPACE_BYTES,
    CudaKernels,
    autocast_asked_as_cuda,
    cuda_recompute,
    precision_region,
)
from pdelab.plan.hardware import JOB_THREADS
from pdelab.plan.shapes import TaskShape, synthetic_batch
from pdelab.plan.tracker import CPU_ATTENTION_FLOPS, Tracker
from pdelab.spec import task_kinds
from pdelab.spec.config import RunSpec, TrainSpec


@dataclass(frozen=True)
class StepCost:
    """One training step of one model at one batch: what :func:`count_step` counts."""

    parameters: int
    flops: int  # forward + backward (FlopCounterMode)
    low_precision_flops: int  # of which bf16/fp16 matrix products
    peak_bytes: int  # the step's peak of live tensor bytes, resident state included


def on_cuda(run: RunSpec) -> bool:
    """Whether the run trains on a GPU (else on the CPU: its kernels are counted as they are)."""
    return run.device.startswith("cuda")


def device_model(run: RunSpec) -> str:
    """The device whose kernels a step is counted on: part of what a count depends on."""
    return "cuda" if on_cuda(run) else "cpu"


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
