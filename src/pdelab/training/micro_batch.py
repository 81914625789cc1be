"""Exact gradient accumulation: one optimiser step on the paper's batch, taken as micro-batches.

Why: a paper's batch that does not fit a card is still the paper's experiment; a smaller batch
is another one. So a run keeps its ``train.batch_size`` (the accumulation window: one optimiser
step, one step of the schedule, one clipping) and may compute it ``micro_batch`` examples at a
time, the gradients summed before the step.

Why the gradient is the full batch's: each task kind's loss is a mean over its items (examples
for classification, real target tokens for language modelling and translation; every target
position where translation's loss counts padding). A micro-batch's mean loss is weighted by its
share of the window's items (:func:`weight`), so the summed gradient is that of the mean over
the whole window; the mean of the micro-batches' means would weigh an item of a micro-batch
with few real tokens more. The last, shorter window of an epoch is divided by what it holds.

Why the micro-batches are slices of the window's arrays: the window is batched once, padded to
its longest member as the full batch is, so every example reaches the model exactly as in the
full batch (a mechanism along the token axis sees the same padding).

How a run is executed is not what it is: :class:`Execution` is never part of a run's spec or
identity (pdelab.records.run), so a card with less memory retrains nothing; run.json and MLflow
record it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from pdelab.spec.config import RunSpec
    from pdelab.training.strategy import Batches

PLAN_DATA = Path("results/plan.json")  # the cost plan's data (pdelab.plan.render.plan_data)


@dataclass(frozen=True)
class Execution:
    """How one run's steps are computed. ``micro_batch``: examples per forward and backward
    pass (0: the whole batch at once); ``checkpoint_blocks``: the encoder's and decoder's
    blocks recompute their activations in the backward pass (torch.utils.checkpoint);
    ``compile``: the forward and loss through torch.compile (pdelab.training.compiled: off,
    default, or reduce-overhead for CUDA graphs)."""

    micro_batch: int = 0
    checkpoint_blocks: bool = False
    compile: str = "off"

    def __post_init__(self) -> None:
        from pdelab.training.compiled import check_mode

        if self.micro_batch < 0:
            raise ValueError(f"micro_batch must be >= 0 (0: the whole batch): {self.micro_batch}")
        check_mode(self.compile)

    def micro(self, batch_size: int) -> int:
        """Examples per micro-batch for a window of ``batch_size``."""
        return min(self.micro_batch or batch_size, batch_size)

    def accumulation_steps(self, batch_size: int) -> int:
        """Micro-batches in a full window."""
        return math.ceil(batch_size / self.micro(batch_size))

    def record(self, batch_size: int, processes: int = 1) -> dict[str, Any]:
        """What run.json keeps (and MLflow, through result.parquet's numbers): with several
        ``processes`` (pdelab.training.distributed) each takes its share of a window, at most
        ``ceil(batch_size / processes)`` examples, in micro-batches of its own."""
        share = math.ceil(batch_size / processes)
        return asdict(self) | {
            "micro_batch": self.micro(share),
            "accumulation_steps": self.accumulation_steps(share),
            "processes": processes,
        }


def weight(items: int, window_items: int, micro_batches: int) -> float:
    """A micro-batch's mean loss is scaled by its share of the window's items, so the summed
    gradient is that of the mean over the whole window."""
    return items / window_items


def window_arrays(split: Batches, index: np.ndarray) -> dict[str, np.ndarray]:
    """The whole window's arrays, padded as one batch of ``index``."""
    return split.batch(index)


def on_cpu(arrays: dict[str, np.ndarray]) -> tuple[dict[str, Tensor], Tensor]:
    """(inputs, labels) of the whole window as CPU tensors sharing the arrays' memory: to
    count its items."""
    inputs = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return inputs, inputs.pop("labels")


def slices(arrays: dict[str, np.ndarray], micro: int) -> list[dict[str, np.ndarray]]:
    """Each micro-batch's arrays: consecutive row slices of the window's arrays."""
    n = len(arrays["labels"])
    return [
        {k: v[start : start + micro] for k, v in arrays.items()} for start in range(0, n, micro)
    ]


def planned(run: RunSpec, card_gb: float | None, path: Path = PLAN_DATA) -> Execution | None:
    """The execution the cost plan chose for ``run`` on its card (pdelab.plan.card_fit), where the
    plan's data file covers the run, of its profile, for this card (``card_gb``: the
    profile's declared one; None: the plan's, made where the jobs run); else None."""
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if doc.get("profile") != run.profile or doc.get("card_gib") is None:
        return None
    if card_gb is not None and float(doc["card_gib"]) != card_gb:
        return None
    for job in doc.get("jobs", []):
        if (job["task"], job["variant"], job["seed"]) == (run.task, run.variant, run.seed):
            if "micro_batch" not in job or job["batch"] != run.train.batch_size:
                return None
            return Execution(int(job["micro_batch"]), bool(job["checkpoint_blocks"]))
    return None
