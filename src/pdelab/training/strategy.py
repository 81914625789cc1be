"""The torch side of a task kind: the :class:`Strategy` the trainer calls at each point where
task kinds differ, so pdelab.training.train holds one loop for all of them.

A strategy loads a task's splits, builds its model (through pdelab.models.factory), scores a
batch (mean loss, correct predictions, items: examples or real target tokens), evaluates a
split, picks the score that selects the best epoch, and adds its own history and test
columns. The defaults here are shared by the task kinds whose splits are token sequences of
pdelab.data.store (classification, language modelling).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from pdelab.data.store import SPLITS, Split, load_split
from pdelab.spec.config import RunSpec

# metrics.parquet's columns of every task kind, after (seed, variant, task)
HISTORY_COLUMNS = (
    "epoch",
    "train_loss",
    "train_acc",
    "val_loss",
    "val_acc",
    "val_ppl",
    "lr",
    "epoch_time_s",
)

# (mean loss, correct predictions, items): the counts may stay on the device (a tensor), so
# that scoring a batch reads nothing back to the host
Loss = tuple[Tensor, Tensor | int, Tensor | int]


class Batches(Protocol):
    """A split as the trainer batches it: pdelab.data.store.Split, or a task kind's own."""

    def __len__(self) -> int: ...

    def lengths(self) -> np.ndarray: ...

    def batch(self, index: np.ndarray) -> dict[str, np.ndarray]: ...


class Trained(Protocol):
    """What a strategy reads of a run after training (pdelab.training.train.Session)."""

    run: RunSpec
    device: torch.device
    manifest: dict[str, Any]
    data: dict[str, Batches]
    model: nn.Module

    @property
    def ok(self) -> bool: ...

    def validate(self, split: str) -> dict[str, float]: ...


def widened(logits: Tensor) -> Tensor:
    """Logits in float32 at least for the loss (bf16 autocast leaves them in bf16); float64
    stays float64, so a float64 run's loss and gradients keep their precision."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def batches(n: int, batch_size: int, order: np.ndarray | None = None) -> list[np.ndarray]:
    """Index arrays of consecutive batches over ``order`` (default: 0..n-1)."""
    index = np.arange(n) if order is None else order
    return [index[i : i + batch_size] for i in range(0, n, batch_size)]


def to_device(
    split: Batches, index: np.ndarray, device: torch.device
) -> tuple[dict[str, Tensor], Tensor]:
    """(model inputs, labels) of one batch."""
    arrays = arrays_to_device(split.batch(index), device)
    return arrays, arrays.pop("labels")


def arrays_to_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, Tensor]:
    """A batch's arrays on ``device``; to a GPU through pinned memory and without waiting
    for the copy (the kernels that read them are queued behind it on the same stream)."""
    if device.type != "cuda":
        return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    pinned = {k: torch.from_numpy(v).pin_memory() for k, v in arrays.items()}
    return {k: v.to(device, non_blocking=True) for k, v in pinned.items()}


class StepSums:
    """Running sums of (mean loss x items, correct, items) over batches, kept on the device
    so that adding a batch reads nothing back; :meth:`read` is the one host sync. The loss
    sum is float64, as Python's float sum of each batch's ``loss.item() * n`` was, and it
    goes on from ``start`` (a resumed epoch's sums) in the same order."""

    def __init__(self, device: torch.device, start: tuple[float, int, int] = (0.0, 0, 0)) -> None:
        self.loss_sum = torch.tensor(start[0], dtype=torch.float64, device=device)
        self.correct = torch.tensor(start[1], dtype=torch.int64, device=device)
        self.items = torch.tensor(start[2], dtype=torch.int64, device=device)

    def add(self, loss: Tensor, correct: Tensor | int, items: Tensor | int) -> None:
        """A batch's mean ``loss`` over its ``items``."""
        self.add_sum(loss.detach().double() * items, correct, items)

    def add_sum(self, loss_sum: Tensor, correct: Tensor | int, items: Tensor | int) -> None:
        """A batch's summed loss (float64)."""
        self.loss_sum = self.loss_sum + loss_sum
        self.correct = self.correct + correct
        self.items = self.items + items

    def read(self) -> tuple[float, int, int]:
        """(loss sum, correct, items) as Python numbers: one transfer."""
        loss_sum, correct, items = torch.stack(
            [self.loss_sum, self.correct.double(), self.items.double()]
        ).tolist()
        return loss_sum, int(correct), int(items)


def load_splits(run: RunSpec, manifest: dict[str, Any]) -> dict[str, Split]:
    """The three token splits of pdelab.data.store, memory-mapped."""
    return {s: load_split(run.data_dir, s, manifest=manifest) for s in SPLITS}


class Strategy:
    """What one task kind does where the trainer's steps differ; subclasses define
    :meth:`build_model` and :meth:`loss`, and override the rest where they differ."""

    history_columns: tuple[str, ...] = HISTORY_COLUMNS
    result_columns: tuple[str, ...] = ()  # result.parquet's own columns, after the common ones

    def load_data(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, Batches]:
        """The train, val and test splits."""
        return load_splits(run, manifest)

    def build_model(self, run: RunSpec, manifest: dict[str, Any]) -> nn.Module:
        """The network, sized by the manifest (called through pdelab.models.factory)."""
        raise NotImplementedError

    def loss(
        self, model: nn.Module, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool
    ) -> Loss:
        """(mean loss, correct predictions, items) of one batch; ``include_pad``:
        train.loss_includes_pad (only translation accepts it, pdelab.spec.task_kinds)."""
        raise NotImplementedError

    def token_caps(self, run: RunSpec, manifest: dict[str, Any]) -> dict[str, int]:
        """The longest each of a batch's token arrays may be (its length bucket's cap,
        pdelab.training.shape_buckets): the task's longest sequence."""
        longest = max(s["max_length"] for s in manifest["splits"].values())
        return dict.fromkeys(("ids", "mask", "ids2", "mask2"), longest)

    def loss_items(self, inputs: dict[str, Tensor], labels: Tensor, include_pad: bool) -> int:
        """What :meth:`loss` averages over in this batch (examples here): an accumulation
        window weighs each micro-batch's mean by its share of them (pdelab.training.micro_batch)."""
        return len(labels)

    @torch.no_grad()
    def evaluate(
        self,
        model: nn.Module,
        split: Batches,
        batch_size: int,
        device: torch.device,
        manifest: dict[str, Any],
    ) -> dict[str, float]:
        """Loss and accuracy per item; batches of similar length keep padding (and time) low."""
        model.eval()
        order = np.argsort(split.lengths(), kind="stable")
        sums = StepSums(device)  # on the device, read once at the end
        for index in batches(len(split), batch_size, order):
            inputs, labels = to_device(split, index, device)
            sums.add(*self.loss(model, inputs, labels, False))
        loss_sum, correct, items = sums.read()
        return {"loss": loss_sum / items, "acc": correct / items}

    def score(self, val: dict[str, float]) -> float:
        """The validation score that selects the best epoch (higher is better)."""
        return -val["loss"]

    def history_extras(self, val: dict[str, float]) -> dict[str, float]:
        """An epoch's values of the history columns beyond HISTORY_COLUMNS."""
        return {}

    def untested(self, data: dict[str, Batches], manifest: dict[str, Any]) -> dict[str, Any]:
        """The task kind's test columns before (or without) a test: NaN, or what needs no
        model."""
        return {}

    def test_metrics(self, s: Trained, test: dict[str, Any]) -> dict[str, Any]:
        """The test columns once the best weights are loaded and ``test`` holds the test
        split's evaluation (when the run did not diverge)."""
        return test
