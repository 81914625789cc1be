"""Several processes on one batch (pdelab.training.distributed): two CPU processes (gloo), each
taking its share of every batch in micro-batches, train the parameters of one process on the full
batch (float64, dropout off), their gradients summed before each optimizer step; and the same
through the trainer, launched as the train rule launches a job on 2 GPUs (torchrun
--standalone --nproc-per-node 2): equal weights, rank 0 alone writing, an exact resume."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist

from conftest import ROOT
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


# -- a real tiny run, through the trainer, launched as the train rule launches it ------------

# Loaded by every interpreter of a launch (torchrun's, each rank's; PYTHONPATH puts it first),
# it sets what the test asks for in the environment: float64 weights; gradients not summed
# across the ranks (what the equality must catch); a SIGTERM to one rank at its n-th optimizer
# step (a kill between steps); and a log, per rank, of every file written under a folder.
SITECUSTOMIZE = """
import os

if os.environ.get("TEST_FLOAT64"):
    import torch

    torch.set_default_dtype(torch.float64)
if "RANK" in os.environ and (os.environ.get("TEST_NO_SUM") or os.environ.get("TEST_SIGTERM_AT")):
    import signal

    from pdelab.training import distributed

    summing, steps = distributed.sum_gradients, []
    rank, at = (os.environ.get("TEST_SIGTERM_AT") or "-1:0").split(":")

    def sum_gradients(model, world):
        steps.append(1)
        if rank == os.environ["RANK"] and len(steps) == int(at):
            os.kill(os.getpid(), signal.SIGTERM)  # this rank alone
        if not os.environ.get("TEST_NO_SUM"):
            summing(model, world)

    distributed.sum_gradients = sum_gradients
if os.environ.get("TEST_WRITES"):
    import sys
    import threading

    root = os.path.realpath(os.environ["TEST_WRITES_UNDER"])
    log = os.path.join(os.environ["TEST_WRITES"], f"rank{os.environ.get('RANK', '-')}.log")
    busy = threading.local()
    WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def written(event, args):
        if event == "open":
            return [args[0]] if isinstance(args[2], int) and args[2] & WRITING else []
        if event in ("os.rename", "os.remove", "os.mkdir", "os.rmdir", "sqlite3.connect"):
            return list(args[:2] if event == "os.rename" else args[:1])
        return []

    def hook(event, args):
        if getattr(busy, "on", False):
            return
        paths = [p for p in written(event, args) if isinstance(p, (str, os.PathLike))]
        paths = [os.path.realpath(os.fspath(p)) for p in paths]
        paths = [p for p in paths if p == root or p.startswith(root + os.sep)]
        if paths:
            busy.on = True
            try:
                with open(log, "a") as f:
                    f.write(f"{event} {' '.join(paths)}\\n")
            finally:
                busy.on = False

    sys.addaudithook(hook)
"""


@pytest.fixture(scope="module")
def work(tiny_workdir, tmp_path_factory) -> Path:
    """The tiny ListOps task's prepared data (480 training sequences, conftest's tiny_workdir)
    and a sitecustomize."""
    folder = tiny_workdir(tmp_path_factory.mktemp("ddp"))
    (folder / "site").mkdir()
    (folder / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def tiny_run(work: Path, **train):
    """The run the tests train: dropout off, the plan's spec changed by ``train``."""
    from pdelab.spec.config import load_params, resolve

    run = resolve(load_params(work / "params.yaml"), "listops", "baseline", 0)
    model = replace(run.model, dim=16, layers=1, heads=2, mlp_dim=32, dropout=0.0)
    model = replace(model, attention_dropout=0.0)
    return replace(run, model=model, train=replace(run.train, lr=1e-3, warmup_steps=2, **train))


def launch(
    work: Path,
    run,
    out: str,
    processes: int,
    gpus: int = 0,
    extra: tuple[str, ...] = (),
    **env: str,
) -> subprocess.Popen:
    """The train rule's command for ``run``'s plan (pdelab.runtime.cluster.train_launch: torchrun's
    ``processes`` after pdelab.runtime.gpu_job took ``gpus`` slots, or one process started by
    pdelab.runtime.warm, here cold), its outputs and its log in the folder ``out``."""
    from pdelab.runtime import cluster
    from tests.test_train import write_plan

    folder = work / f"{out}-plan"
    folder.mkdir(exist_ok=True)
    plan, digest = write_plan(folder, run)
    command = [sys.executable if a == "python" else a
               for a in shlex.split(cluster.train_launch(processes, gpus))]  # fmt: skip
    command += ["--plan", str(plan), "--plan-digest", digest, "--out", out]
    command += ["--tracking", "batch", "--threads", str(processes), "--no-progress", *extra]
    path = os.pathsep.join([str(work / "site"), str(ROOT / "src"), str(ROOT)])
    environ = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "RANK")}
    environ |= {"PYTHONPATH": path, "PDELAB_WARM": "0", "PDELAB_GPU_WAIT_S": "0"} | env
    environ |= {"PDELAB_RETRAIN": "1"}  # an earlier run of the same spec is kept: train it
    return subprocess.Popen(
        command, cwd=work, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """The model in a run's last checkpoint (after its last optimizer step)."""
    from pdelab.training import checkpoint

    return checkpoint.load(folder / "checkpoint.pt")["model"]


@pytest.mark.slow  # torchrun starts two training processes
def test_two_processes_under_torchrun_train_the_one_process_run(work: Path) -> None:
    """Launched as a CPU run profile's train rule launches a job the plan put on 2 GPUs
    (gloo), a real run through the trainer: after 3 optimizer steps on windows of 176, 176
    and 128 (float64, dropout off) the weights are the one process's full-batch run's; with
    the gradients not summed across the ranks they are not. Rank 0 alone wrote the records,
    the checkpoints and MLflow; run.json records the 2 processes, the spec holds no trace."""
    run = tiny_run(work, batch_size=176, epochs=1)
    logs = work / "writes"
    logs.mkdir()
    watched = {"TEST_WRITES": str(logs), "TEST_WRITES_UNDER": str(work)}
    mlflow = {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    finished(launch(work, run, "one", 1, TEST_FLOAT64="1"))
    two = launch(
        work, run, "two", 2, extra=("--tracking", "live"), TEST_FLOAT64="1", **watched, **mlflow
    )
    finished(two)
    one_w, two_w = weights(work / "one"), weights(work / "two")
    assert {t.dtype for t in one_w.values()} == {torch.float64}
    assert max(float((one_w[k] - two_w[k]).abs().max()) for k in one_w) < 1e-12
    alone = launch(work, run, "unsummed", 2, TEST_FLOAT64="1", TEST_NO_SUM="1")
    finished(alone)
    unsummed = weights(work / "unsummed")
    assert max(float((one_w[k] - unsummed[k]).abs().max()) for k in one_w) > 1e-6

    records = [json.loads((work / d / "run.json").read_text()) for d in ("one", "two")]
    assert (
        records[1]["spec"] == records[0]["spec"]
        and records[1]["identity"] == records[0]["identity"]
    )
    assert [r["execution"]["processes"] for r in records] == [1, 2]
    assert records[1]["execution"]["micro_batch"] == 88  # each process's share of 176
    assert records[1]["result"]["processes"] == 2 and records[1]["result"]["mlflow_run_id"]
    # who wrote what under the work folder: rank 0 every file of the run and MLflow's store,
    # rank 1 nothing (torchrun's own process neither)
    by_rank = {p.name: p.read_text().splitlines() for p in logs.iterdir()}
    assert set(by_rank) == {"rank0.log"}, by_rank.keys()
    wrote = {Path(line.split()[-1]).name for line in by_rank["rank0.log"]}
    made = {"run.json", "metrics.parquet", "result.parquet", "checkpoint.pt", "best.pt"}
    assert made | {"mlflow.db"} <= wrote
    assert made <= {p.name for p in (work / "two").iterdir()}


@pytest.mark.slow  # torchrun starts two training processes
def test_a_two_process_run_stopped_between_steps_resumes_to_the_uninterrupted_run(
    work: Path, tmp_path: Path
) -> None:
    """Launched as a CUDA run profile's train rule launches a job on 2 GPUs (pdelab.runtime.gpu_job
    takes 2 of a faked node's slots, then torchrun; no CUDA here, so gloo on the CPU), in
    micro-batches of 3 on each process's 16 of a batch of 32: a SIGTERM that reaches rank 1
    alone at its 20th step stops both ranks after that step (step 5 of epoch 2), checkpointed;
    the same command resumes there, and its records equal the uninterrupted run's."""
    run = replace(tiny_run(work, batch_size=32, epochs=2), device="auto")
    gpus = {"PDELAB_GPUS": "5,6", "PDELAB_GPU_SLOT_DIR": str(tmp_path / "slots")}
    micro = ("--micro-batch", "3")
    finished(launch(work, run, "full", 2, 2, micro, **gpus))
    stopped = launch(work, run, "stopped", 2, 2, micro, TEST_SIGTERM_AT="1:20", **gpus)
    _, err = stopped.communicate(timeout=600)
    assert stopped.returncode != 0, "the run finished without stopping"
    assert err.count("stopped by SIGTERM after step 5 of epoch 2") == 2  # both ranks, one step
    from pdelab.training import checkpoint

    saved = checkpoint.load(work / "stopped" / "checkpoint.pt")
    assert saved["state"]["partial"]["step"] == 5 and saved["state"]["epoch"] == 1
    assert not (work / "stopped" / "run.json").exists()
    err = finished(launch(work, run, "stopped", 2, 2, micro, **gpus))
    assert err.count("resuming from step 5 of epoch 2") == 1  # rank 0 says it

    cols = ["train_loss", "train_acc", "val_loss", "val_acc", "lr"]
    frames = [pd.read_parquet(work / d / "metrics.parquet")[cols] for d in ("full", "stopped")]
    pd.testing.assert_frame_equal(*frames)
    results = [pd.read_parquet(work / d / "result.parquet").iloc[0] for d in ("full", "stopped")]
    for key in ("test_acc", "test_loss", "best_val_acc", "best_epoch", "epochs_run"):
        assert results[0][key] == results[1][key], key
    assert bool(results[1]["resumed"]) and not bool(results[0]["resumed"])
    record = json.loads((work / "stopped" / "run.json").read_text())
    assert record["execution"] == {
        "micro_batch": 3,
        "checkpoint_blocks": False,
        "compile": "off",
        "accumulation_steps": 6,
        "processes": 2,
    }
    assert record["gpu_slot"]["cuda_visible_devices"] == "5,6"  # the job's 2 slots
    assert [s["index"] for s in record["gpu_slot"]["slots"]] == [0, 1]
    assert record["result"]["device"] == "cpu"
