"""A card to fit: for one training job and one GPU's memory, the micro-batch, accumulation steps
and block checkpointing that keep the paper's batch and fit the card.

Why: a paper's batch is its experiment, and a smaller one is another experiment; but a step
need not hold the whole batch at once. With exact accumulation (pdelab.training.micro_batch) a job
trains the same parameters at any micro-batch, so the plan picks, per job, the largest
micro-batch whose estimated peak (pdelab.plan.counting's fake-tensor count of one step at that
batch) fits the card with :data:`SAFETY` of it to spare, and the accumulation steps that make
the paper's batch. Where one example does not fit, the encoder's and decoder's blocks are
checkpointed (their activations recomputed in the backward pass), and the search runs again.

The peak grows with the batch, so a bisection finds the largest fitting micro-batch in
log2(batch) counts; the counts are cached like every other step count of the plan.

Several jobs per card: a job whose pass needs a fraction of a card leaves the rest idle, so
a GPU runs as many as fit its memory (:func:`jobs_per_gpu`) with the same :data:`SAFETY` of
it left free. A job's share is what its pass takes of a card (:func:`share_mib`: the peak
with the allocator's reserve and its own CUDA context); pdelab.runtime.gpu_slots gives jobs
shares of one GPU by the same arithmetic, and ``pdelab plan`` shows the jobs per GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# the arithmetic of sharing a GPU lives with the slots that enforce it (the runtime layer)
from pdelab.runtime.gpu_slots import SAFETY

GIB = 2**30
MIB = 2**20
CUDA_CONTEXT_GIB = 1.0  # CUDA context, cuBLAS/cuDNN workspaces: outside torch's allocations
RESERVED_OVER_ALLOCATED = 1.10  # the caching allocator's reserve over what it hands out

# peak bytes of one training step at (micro-batch, checkpointed blocks)
PeakOf = Callable[[int, bool], int]


def need_bytes(peak_bytes: int) -> float:
    """What a step of ``peak_bytes`` takes of a card: the caching allocator's reserve over its
    tensors and the CUDA context its process opens."""
    return peak_bytes * RESERVED_OVER_ALLOCATED + CUDA_CONTEXT_GIB * GIB


def fits(peak_bytes: int, card_gib: float, safety: float = 0.0) -> bool:
    """Whether a step's peak fits a card: with the allocator's reserve, the CUDA context and
    ``safety`` of the card left free."""
    return need_bytes(peak_bytes) <= card_gib * (1 - safety) * GIB


def share_mib(peak_bytes: int) -> int:
    """A job's share of a GPU, in whole MiB (nvidia-smi's unit): what a pass of
    ``peak_bytes`` takes of the card (:func:`need_bytes`), rounded up."""
    return math.ceil(need_bytes(peak_bytes) / MIB)


@dataclass(frozen=True)
class Fit:
    """How one job runs on one card: ``micro_batch`` examples per pass, ``accumulation_steps``
    passes per optimizer step, block checkpointing, and the peak of a pass. ``fits`` is False
    where even one example with checkpointing does not fit (then the peak is that one's)."""

    card_gib: float
    batch_size: int
    micro_batch: int
    checkpoint_blocks: bool
    peak_bytes: int
    fits: bool

    @property
    def accumulation_steps(self) -> int:
        return math.ceil(self.batch_size / self.micro_batch)

    def per_process(self, processes: int) -> tuple[int, int]:
        """(micro-batch, accumulation steps) of each of ``processes`` computing its share of
        the batch (pdelab.training.distributed): a share smaller than the micro-batch is one pass,
        which fits since the peak grows with the batch."""
        share = math.ceil(self.batch_size / processes)
        micro = min(self.micro_batch, share)
        return micro, math.ceil(share / micro)

    @property
    def label(self) -> str:
        """A job's fit in a table cell: "32 x 4", "+ckpt", or "-" where it does not fit."""
        if not self.fits:
            return "-"
        text = f"{self.micro_batch} x {self.accumulation_steps}"
        return text + (" +ckpt" if self.checkpoint_blocks else "")


def largest(peak_of: PeakOf, batch: int, card_gib: float, checkpointed: bool) -> int:
    """The largest micro-batch in [1, batch] whose peak fits (0: not even one example)."""
    if fits(peak_of(batch, checkpointed), card_gib, SAFETY):
        return batch
    if not fits(peak_of(1, checkpointed), card_gib, SAFETY):
        return 0
    low, high = 1, batch  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        if fits(peak_of(middle, checkpointed), card_gib, SAFETY):
            low = middle
        else:
            high = middle
    return low


def choose(peak_of: PeakOf, batch: int, card_gib: float) -> Fit:
    """The job's fit on a card of ``card_gib``: the largest micro-batch without checkpointing,
    else with it, else the one example with checkpointing that does not fit."""
    for checkpointed in (False, True):
        micro = largest(peak_of, batch, card_gib, checkpointed)
        if micro:
            return Fit(card_gib, batch, micro, checkpointed, peak_of(micro, checkpointed), True)
    return Fit(card_gib, batch, 1, True, peak_of(1, True), False)
