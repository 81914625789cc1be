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

Loss = tuple[Tensor, int, int]  # (mean loss, correct predictions, items)


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
    arrays = {k: torch.from_numpy(v).to(device) for k, v in split.batch(index).items()}
    return arrays, arrays.pop("labels")


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
        loss_sum, correct, items = 0.0, 0, 0
        for index in batches(len(split), batch_size, order):
            inputs, labels = to_device(split, index, device)
            loss, right, n = self.loss(model, inputs, labels, False)
            loss_sum += loss.item() * n
            correct, items = correct + right, items + n
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
