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

How a job runs on N GPUs: the train rule starts torchrun's N processes (``torchrun
--standalone --nproc-per-node N -m pdelab.training.train``), each joins the process group here
(:func:`join`) on the GPU of its local rank, and all train the same run: same seed, same
weights (:func:`same_parameters`), same batches, each computing its share. Rank 0 alone
writes the records, checkpoints and MLflow; what it alone decides (the checkpoint resumed
from) or keeps (an epoch's validation) reaches the others through :func:`from_first`, and a
SIGTERM that reached any rank stops all at the same step (:func:`any_of`). The number of
processes is how a run is computed, not what it is: run.json records it, the spec does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

T = TypeVar("T")


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


def launched(env: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) where torchrun started this process as one of several;
    None for a process alone (no torchrun, or ``--nproc-per-node 1``)."""
    env = os.environ if env is None else env
    size = int(env.get("WORLD_SIZE", "1"))
    if size <= 1:
        return None
    return int(env["RANK"]), size, int(env.get("LOCAL_RANK", env["RANK"]))


def join(device: str, env: Mapping[str, str] | None = None) -> World:
    """This process's rank in torchrun's process group (joined here: NCCL between GPUs, gloo
    on the CPU), its GPU made the current one; one alone where torchrun started no group.
    The GPU is its local rank's of the ones it sees (pdelab.runtime.gpu_job narrowed them to the
    job's, or SLURM did), or its only one (a rank that took its own slot)."""
    found = launched(env)
    if found is None:
        return World()
    rank, size, local = found
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local if torch.cuda.device_count() > 1 else 0)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=size)
    return World(rank, size)


def leave(world: World) -> None:
    """Leave the process group :func:`join` joined."""
    if not world.alone and dist.is_initialized():
        dist.destroy_process_group()


def any_of(flag: bool, world: World, device: torch.device) -> bool:
    """Whether ``flag`` holds on any rank (SIGTERM reached one: every rank stops at the same
    step, or the others would wait on it forever)."""
    if world.alone:
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def from_first(value: T, world: World) -> T:
    """Rank 0's ``value`` on every rank (picklable): what rank 0 alone decided or measured
    (the checkpoint to resume from, the epoch's validation), so the ranks' states stay one."""
    if world.alone:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def same_parameters(model: nn.Module, world: World) -> None:
    """Rank 0's parameters and buffers on every rank, as DistributedDataParallel broadcasts
    them when it wraps a model: the ranks start from one set of weights."""
    if world.alone:
        return
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)
