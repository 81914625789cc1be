"""Several processes on one batch: ranks of torch.distributed, each computing a share of every
batch, their gradients summed before the one optimizer step.

Why the gradients are summed by hand rather than by DistributedDataParallel's wrapper: a task
kind's loss may call the model's parts directly (translation runs the head on the real target
positions only), which the wrapper's forward would not see; one all-reduce of the accumulated
gradients after the last micro-batch is the same sum, once per optimizer step.

Why the sum is the full batch's gradient: every rank batches the same window (the batch order
depends only on the seed and the epoch), so each knows the window's items without asking, and
weighs its micro-batches by their share of them (pdelab.training.micro_batch); the ranks' gradients
then add up to the full batch's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


@dataclass(frozen=True)
class World:
    """This process's rank among ``size`` processes computing each batch (1: alone)."""

    rank: int = 0
    size: int = 1

    @property
    def alone(self) -> bool:
        return self.size == 1


def joined() -> World:
    """The world of an initialised process group (torch.distributed), else one alone."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def share(n: int, world: World) -> slice:
    """This rank's consecutive rows of a window of ``n`` (as even as can be; the first ranks
    take one more)."""
    base, extra = divmod(n, world.size)
    start = world.rank * base + min(world.rank, extra)
    return slice(start, start + base + (world.rank < extra))


def sum_gradients(model: nn.Module, world: World) -> None:
    """Every rank's gradients summed into each rank's (one flat all-reduce); a parameter that
    got none here counts as zero."""
    if world.alone:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    for p, summed in zip(params, _unflatten_dense_tensors(flat, grads), strict=True):
        p.grad = summed.view_as(p)


def all_of(flag: bool, world: World, device: torch.device) -> bool:
    """Whether ``flag`` holds on every rank (a non-finite loss on one stops the step on all)."""
    if world.alone:
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def summed(values: list[float], world: World, device: torch.device) -> list[float]:
    """``values`` summed over the ranks (a step's loss, correct predictions and items)."""
    if world.alone:
        return values
    total = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return total.tolist()
