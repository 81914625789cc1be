"""Several processes on one batch (pdelab.training.distributed): two CPU processes (gloo), each
taking its share of every batch in micro-batches, train the parameters of one process on the full
batch (float64, dropout off), their gradients summed before each optimizer step."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from pdelab.training import distributed
from pdelab.training.distributed import World, joined, share
from tests.test_micro_batch import trained

CASES = [("listops", "after_embedding", False), ("multi30k", "mt_fna", False)]


def rank_of(
    rank: int, size: int, rendezvous: str, task: str, variant: str, pad: bool, summing: bool
) -> dict[str, np.ndarray]:
    """One rank's parameters after the steps (run in a process of its own); without
    ``summing`` each rank steps on its own share's gradients (what the test must catch)."""
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=size)
    try:
        import tests.test_micro_batch as helpers

        build = helpers.session

        def joined_session(*args):  # the same session, computing its share of each batch
            return replace(build(*args), world=joined())

        helpers.session = joined_session
        if not summing:
            distributed.sum_gradients = lambda model, world: None
        s, _ = trained(task, variant, pad, 3)
        assert s.world == World(rank, size)
        return {k: p.detach().numpy().copy() for k, p in s.model.named_parameters()}
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "variant", "include_pad"), CASES)
def test_two_processes_train_the_full_batch_s_parameters(
    task, variant, include_pad, tmp_path: Path
) -> None:
    torch.set_default_dtype(torch.float64)
    try:
        full, _ = trained(task, variant, include_pad, 0)
    finally:
        torch.set_default_dtype(torch.float32)
    expected = {k: p.detach().numpy() for k, p in full.model.named_parameters()}

    def largest(summing: bool) -> float:
        rendezvous = str(tmp_path / f"rendezvous{summing}")
        with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
            what = (rendezvous, task, variant, include_pad, summing)
            ranks = [f.result() for f in [pool.submit(rank_of, r, 2, *what) for r in range(2)]]
        return max(float(np.abs(r[k] - v).max()) for r in ranks for k, v in expected.items())

    assert largest(summing=True) < 1e-12
    assert largest(summing=False) > 1e-6  # each rank on its own share: the check can fail


def test_each_rank_takes_its_consecutive_share() -> None:
    rows = [share(7, World(r, 3)) for r in range(3)]
    assert [(s.start, s.stop) for s in rows] == [(0, 3), (3, 5), (5, 7)]
    assert [share(1, World(r, 2)).stop - share(1, World(r, 2)).start for r in range(2)] == [1, 0]
