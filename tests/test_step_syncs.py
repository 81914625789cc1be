"""No host sync inside a training step: one model of each (task kind, mechanism family) of the
paper profile (pdelab.plan.compile_check.select), shrunk for a CPU, takes steps on padded and
unpadded batches while pdelab.plan.host_syncs counts every read a GPU would wait for; there
must be none. Across an epoch the only reads are the log interval's
(pdelab.training.step_metrics)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT
from pdelab.data.store import PAD_ID, PIXEL_VOCAB
from pdelab.plan import compile_check
from pdelab.plan.host_syncs import SyncCounter
from pdelab.plan.shapes import SyntheticSplit, synthetic_session
from pdelab.spec.config import load_params
from pdelab.training import step_metrics
from pdelab.training.session import Session
from pdelab.training.step import train_step

BATCH, STEPS = 4, 6
SELECTED = compile_check.select(load_params(ROOT / "params.yaml"), "paper")


class HalfPadded(SyntheticSplit):
    """Synthetic batches whose odd batches have their second half padded at uneven lengths,
    so that a step which asks whether its batch is padded shows (images are never padded:
    pdelab.models.factory.unpadded)."""

    def batch(self, index: np.ndarray) -> dict[str, np.ndarray]:
        arrays = super().batch(index)
        if int(index[0]) // self.batch_size % 2 == 0 or self.shape.vocab == PIXEL_VOCAB:
            return arrays
        for row in range(len(index) // 2, len(index)):
            for ids, mask in (("ids", "mask"), ("ids2", "mask2"), ("src", "src_mask")):
                if ids in arrays:
                    keep = 1 + row % max(1, arrays[ids].shape[1] - 1)
                    arrays[ids][row, keep:] = PAD_ID
                    if mask in arrays:
                        arrays[mask][row, keep:] = False
            for key in ("tgt", "labels"):
                if key in arrays and arrays[key].ndim == 2:
                    arrays[key][row, 2:] = PAD_ID
        return arrays


def small_session(one: compile_check.Selected) -> Session:
    run, shape = compile_check.shrunk(one.model)
    run = replace(run, train=replace(run.train, precision="fp32", batch_size=BATCH))
    s = synthetic_session(run, shape, BATCH, STEPS, torch.device("cpu"), STEPS)
    s.data["train"] = HalfPadded(shape, run, BATCH, STEPS)
    s.model.train()
    return s


@pytest.mark.parametrize("one", SELECTED, ids=[f"{s.kind}:{s.family}" for s in SELECTED])
def test_a_training_step_reads_nothing_back(one: compile_check.Selected) -> None:
    s = small_session(one)
    train_step(s, np.arange(0, BATCH))  # the first step makes AdamW's state
    with SyncCounter() as syncs:
        for k in (1, 2):  # padded, then unpadded
            train_step(s, np.arange(k * BATCH, (k + 1) * BATCH))
    assert syncs.sites == [], f"{one.name}: host syncs in a step"


def test_an_epoch_reads_its_numbers_once_per_log_interval(monkeypatch) -> None:
    from pdelab.training.train import train_epoch

    monkeypatch.setattr(step_metrics, "LOG_EVERY", 2)
    s = small_session(SELECTED[0])
    with SyncCounter() as syncs:
        loss, acc = train_epoch(s, 1, progress=False)
    where = {site.split()[0].split(":")[0] for site in syncs.sites}
    readers = {site.split()[1] for site in syncs.sites}
    assert where <= {"strategy.py", "step_metrics.py"} and readers <= {"read"}, syncs.sites
    assert len([x for x in syncs.sites if "strategy.py" in x]) == STEPS // 2 + 1  # 3 + the end
    assert np.isfinite(loss) and 0 <= acc <= 1


def test_a_non_finite_loss_still_ends_the_run_as_diverged(monkeypatch) -> None:
    """Caught at the next read, not at the step: the epoch returns None as before."""
    from pdelab.training.train import train_epoch

    s = small_session(SELECTED[0])
    with torch.no_grad():
        next(s.model.parameters()).fill_(float("nan"))
    assert train_epoch(s, 1, progress=False) is None


def test_the_selection_covers_every_task_kind() -> None:
    kinds = {s.kind for s in SELECTED}
    assert {"classification", "pair classification", "lm", "translation"} <= kinds, kinds
    assert Path(ROOT / "params.yaml").exists()
