"""An epoch's running sums and step times, kept on the device and read once per log interval.

Each step adds its loss, correct predictions, items and whether its loss was finite to device
tensors (pdelab.training.strategy.StepSums) without reading them; :meth:`EpochMeter.read`
reads them back in one transfer every :data:`LOG_EVERY` steps, at the end of the epoch and
before a checkpoint, and is the only host sync of training outside evaluation. Step times come
from CUDA events on a GPU (recorded in the stream, read at the same point), from the host's
clock on a CPU, where every step ends before the next begins.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from pdelab.training import distributed
from pdelab.training.distributed import World
from pdelab.training.session import Partial
from pdelab.training.step import StepResult
from pdelab.training.strategy import StepSums

LOG_EVERY = 100  # steps between reads: a diverged run wastes at most these


class StepClock:
    """Each step's duration: CUDA events in the stream (no sync to record them), or the host's
    clock on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.start_s = 0.0
        self.times: list[float] = []
        self.open: torch.cuda.Event | None = None

    def start(self) -> None:
        if self.cuda:
            self.open = torch.cuda.Event(enable_timing=True)
            self.open.record()
        else:
            self.start_s = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            assert self.open is not None
            self.pending.append((self.open, end))
        else:
            self.times.append(time.perf_counter() - self.start_s)

    def read(self) -> list[float]:
        """The seconds of the steps since the last read (the events have completed: the
        caller has just synchronised)."""
        self.times += [a.elapsed_time(b) / 1000 for a, b in self.pending]
        self.pending, done, self.times = [], self.times, []
        return done


class EpochMeter:
    """The sums of an epoch's steps since its start (or since a resumed checkpoint's
    ``Partial``), on the device."""

    def __init__(self, part: Partial, device: torch.device, world: World) -> None:
        self.device, self.world, self.steps = device, world, part["step"]
        # on from what a checkpoint of this epoch had counted, in the same order as an
        # uninterrupted epoch adds its steps (a resumed run's numbers are the same)
        start = (part["loss_sum"], part["correct"], part["seen"])
        self.sums = StepSums(device, start if world.alone else (0.0, 0, 0))
        self.base = part if not world.alone else Partial(step=0, loss_sum=0.0, correct=0, seen=0)
        self.finite: Tensor = torch.ones((), dtype=torch.bool, device=device)
        self.clock = StepClock(device)

    def add(self, step: StepResult) -> None:
        """A step's numbers, added without reading them."""
        self.sums.add_sum(step.loss_sum, step.correct, step.items)
        self.finite = self.finite & step.finite
        self.steps += 1

    def due(self) -> bool:
        """Whether this step ends a log interval."""
        return self.steps % LOG_EVERY == 0

    def read(self) -> Partial | None:
        """The epoch's progress as of now (summed over the run's processes), or None where
        a loss was not finite: the one host sync of an interval."""
        loss_sum, correct, seen = self.sums.read()
        finite = distributed.all_of(bool(self.finite), self.world, self.device)
        if not self.world.alone:
            loss_sum, correct, seen = distributed.summed(
                [loss_sum, correct, seen], self.world, self.device
            )
        if not finite:
            return None
        return Partial(
            step=self.steps,
            loss_sum=self.base["loss_sum"] + loss_sum,
            correct=self.base["correct"] + int(correct),
            seen=self.base["seen"] + int(seen),
        )
