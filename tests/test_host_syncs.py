"""The host-sync counter finds each kind of read a GPU would wait for, and nothing else; and a
training step of every task kind and mechanism family of the paper profile reads nothing back
to the host (its numbers are read once per log interval, pdelab.training.step_metrics)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from pdelab.plan.host_syncs import SyncCounter

HERE = __file__
x = torch.arange(6.0)
mask = x > 2


def reads(fn: Callable[[], object]) -> list[str]:
    with SyncCounter(root=HERE) as counter:
        fn()
    return counter.sites


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("item", lambda: x.sum().item()),
        ("bool", lambda: bool(x.sum() > 0)),
        ("if", lambda: 1 if (x > 0).any() else 0),
        ("int", lambda: int(x.sum())),
        ("tolist", lambda: x.tolist()),
        ("cpu", lambda: x.cpu()),
        ("boolean index", lambda: x[mask]),
        ("boolean assign", lambda: x.clone().__setitem__(mask, 0.0)),
        ("nonzero", lambda: torch.nonzero(x)),
        ("masked_select", lambda: torch.masked_select(x, mask)),
    ],
)
def test_each_read_back_is_counted(name: str, fn: Callable[[], object]) -> None:
    assert len(reads(fn)) >= 1, name


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("arithmetic", lambda: (x * 2 + 1).sum()),
        ("masked_fill", lambda: x.masked_fill(mask, 0.0)),
        ("where", lambda: torch.where(mask, x, 0.0)),
        ("integer index", lambda: x[torch.tensor([0, 2])]),
        ("slice", lambda: x[1:3]),
        ("host arrays", lambda: torch.from_numpy(np.arange(3))),
    ],
)
def test_device_only_work_is_not_counted(name: str, fn: Callable[[], object]) -> None:
    assert reads(fn) == [], name
