"""One optimizer step, and nothing read back to the host while it runs.

A step queues its work on the device and returns at once: its loss, correct predictions and
items stay device tensors (pdelab.training.step_metrics sums them and reads them once per log
interval), and so does whether its loss was finite. A GPU then runs steps back to back instead
of waiting for the host after each (a ``.item()`` or an ``if`` on a device value stalls the
queue; the small jobs of the paper profile spent most of a step so). What changes: a
non-finite loss is no longer caught before its update. Its run is diverged all the same, at
the next read (the end of the log interval), and keeps no weights of those steps: its test is
taken at the best-validation checkpoint as before (pdelab.training.train).

With a micro-batch smaller than the batch the gradients of its micro-batches are summed first,
each weighted by its share of the window's items, so the step is the full batch's
(pdelab.training.micro_batch); with several processes each computes its share of the window
and their gradients are summed (pdelab.training.distributed). Clipping, the optimizer and the
schedule then step once. The cost plan and the rehearsal time this very function.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from pdelab.data.store import PAD_ID
from pdelab.training import distributed, micro_batch
from pdelab.training.precision import autocast
from pdelab.training.session import Session
from pdelab.training.shape_buckets import bucket_length
from pdelab.training.strategy import arrays_to_device


class StepResult(NamedTuple):
    """A step's (mean loss, correct, items, finite, summed loss), all on the device; items
    may be a Python int where the batch alone decides it. ``loss_sum`` (float64) is this
    process's share of the epoch's loss sum: mean x items alone, mean share x the window's
    items with several processes (their shares of the mean add up to the window's)."""

    loss: Tensor
    correct: Tensor | int
    items: Tensor | int
    finite: Tensor
    loss_sum: Tensor


def window_parts(
    s: Session, index: np.ndarray
) -> tuple[list[tuple[dict[str, Tensor], Tensor]], list[int], int | None]:
    """The step's (inputs, labels) parts on the device, each part's items and the window's
    (None where one part is the whole batch: no weighing). Items are counted on the host
    arrays, before the copy, so counting reads nothing back."""
    world, include_pad = s.world, s.run.train.loss_includes_pad
    micro = s.execution.micro(len(index))
    arrays = micro_batch.window_arrays(s.data["train"], index)
    if s.execution.compile != "off":  # shapes that repeat: one compiled graph per bucket
        arrays = bucketed(arrays, s.task_kind.token_caps(s.run, s.manifest))
    if world.alone and micro >= len(index):
        inputs = arrays_to_device(arrays, s.device)
        return [(inputs, inputs.pop("labels"))], [1], None
    window = s.task_kind.loss_items(*micro_batch.on_cpu(arrays), include_pad)
    mine = {k: v[distributed.share(len(index), world)] for k, v in arrays.items()}
    slices = micro_batch.slices(mine, micro)
    counts = [s.task_kind.loss_items(*micro_batch.on_cpu(p), include_pad) for p in slices]
    parts = []
    for part in slices:
        inputs = arrays_to_device(part, s.device)
        parts.append((inputs, inputs.pop("labels")))
    return parts, counts, window


def bucketed(arrays: dict[str, np.ndarray], caps: dict[str, int]) -> dict[str, np.ndarray]:
    """Each token array padded along its token axis to its length bucket
    (pdelab.training.shape_buckets): ids and labels with PAD_ID, masks with False. Every
    mechanism masks its padding, so the loss and gradients are the unbucketed batch's to
    rounding (tests/test_compiled.py, float64)."""
    out = {}
    for name, array in arrays.items():
        cap = caps.get(name)
        if cap is None or array.ndim != 2 or array.shape[1] >= cap:
            out[name] = array
            continue
        extra = bucket_length(array.shape[1], cap) - array.shape[1]
        fill = False if array.dtype == np.bool_ else PAD_ID
        out[name] = np.pad(array, ((0, 0), (0, extra)), constant_values=fill)
    return out


def train_step(s: Session, index: np.ndarray) -> StepResult:
    """One optimizer step on the training items ``index`` (see the module docstring)."""
    parts, counts, window = window_parts(s, index)
    include_pad = s.run.train.loss_includes_pad
    total = torch.zeros((), device=s.device)
    correct: Tensor | int = 0
    seen: Tensor | int = 0
    finite = torch.ones((), dtype=torch.bool, device=s.device)
    zeroed = False
    for (inputs, labels), items in zip(parts, counts, strict=True):
        if not items:
            continue  # nothing to score: no loss, no gradient
        with autocast(s.device, s.run.train.precision):  # bf16: pdelab.training.precision
            loss, right, n = s.forward_loss(s.model, inputs, labels, include_pad)
        finite = finite & torch.isfinite(loss.detach())
        if not zeroed:  # the last step's gradients stay until the first loss (pdelab.plan.counting)
            s.optimizer.zero_grad(set_to_none=True)
            zeroed = True
        if window is None:
            loss.backward()
            total = loss.detach()
        else:
            scale = micro_batch.weight(items, window, len(parts))
            (loss * scale).backward()
            total = total + loss.detach() * scale  # the window's mean, as the full batch's
        correct, seen = correct + right, seen + n
    if not zeroed:  # nothing scored here (a rank's empty share): no gradient of its own
        s.optimizer.zero_grad(set_to_none=True)
    distributed.sum_gradients(s.model, s.world)
    nn.utils.clip_grad_norm_(s.model.parameters(), s.run.train.grad_clip)
    s.optimizer.step()
    s.schedule.step()
    per_item = total.double()
    loss_sum = per_item * (seen if s.world.alone or window is None else window)
    return StepResult(total, correct, seen, finite, loss_sum)
