"""Checkpoints (pdelab.training.checkpoint) and the training job's use of them: SIGTERM checkpoints
and exits 143, and the same command resumes to the uninterrupted run's records; a truncated
or byte-flipped checkpoint gives way to the previous one (or a fresh start), saying so; a
checkpoint that would run code when unpickled is refused."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pdelab.data.store import CorruptDataError
from pdelab.records import provenance, run_store
from pdelab.records.run import ForeignRecord, run_dir
from pdelab.records.run_store import INTERRUPTED
from pdelab.spec.config import load_params, resolve
from pdelab.training import checkpoint
from pdelab.training import train as training
from pdelab.training.checkpoint import CorruptCheckpoint, Stopped
from pdelab.training.train import BEST, CHECKPOINT, train
from tests.test_warm import stop_server

COMPARED = ["train_loss", "train_acc", "val_loss", "val_acc", "lr"]
RESULT_KEYS = ["test_acc", "test_loss", "best_val_acc", "best_epoch", "epochs_run", "status"]


# ----------------------------------------------------------------------------- the files


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_byte(path: Path) -> None:
    """Same size, one byte changed in the middle (inside a tensor's payload, which
    torch.load would read without complaint)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {"truncated": (truncate, "bytes, the run wrote"), "flipped": (flip_byte, "sha256")}


def test_save_rotates_and_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    for step in (1, 2, 3):
        checkpoint.save({"step": step, "w": torch.full((4,), float(step))}, path)
    assert checkpoint.load(path)["step"] == 3
    assert checkpoint.load(checkpoint.previous(path))["step"] == 2
    record = json.loads(checkpoint.digests_path(path).read_text())
    assert record["checkpoints"][0]["sha256"] == checkpoint.file_sha256(path)
    assert len(record["checkpoints"]) == checkpoint.KEEP


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_detected_and_the_previous_one_used(tmp_path: Path, damage, capsys) -> None:
    path = tmp_path / "checkpoint.pt"
    checkpoint.save({"step": 1, "w": torch.ones(1000)}, path)
    checkpoint.save({"step": 2, "w": torch.zeros(1000)}, path)
    harm, reason = DAMAGE[damage]
    harm(path)
    with pytest.raises(CorruptCheckpoint, match=reason):
        checkpoint.verify(path)
    loaded, used = checkpoint.load_latest(path)
    assert loaded["step"] == 1 and used == checkpoint.previous(path)
    err = capsys.readouterr().err
    assert f"checkpoint {path} is unusable" in err and reason in err
    assert f"falling back to {checkpoint.previous(path)}" in err
    assert not path.exists() and (tmp_path / "checkpoint.corrupt.pt").exists()  # kept aside


def test_a_flipped_payload_byte_loads_unless_the_digest_is_checked(tmp_path: Path) -> None:
    """Why the digest: torch.load alone takes the damaged weights."""
    path = tmp_path / "checkpoint.pt"
    checkpoint.save({"w": torch.zeros(10_000)}, path)
    flip_byte(path)
    assert torch.load(path, weights_only=True)["w"].abs().sum() > 0  # silently wrong
    with pytest.raises(CorruptCheckpoint, match="sha256"):
        checkpoint.load(path)


def test_both_damaged_means_a_fresh_start(tmp_path: Path, capsys) -> None:
    path = tmp_path / "checkpoint.pt"
    for step in (1, 2):
        checkpoint.save({"step": step}, path)
    truncate(path)
    flip_byte(checkpoint.previous(path))
    assert checkpoint.load_latest(path) is None
    assert "starting from scratch" in capsys.readouterr().err


def test_a_checkpoint_without_its_digest_list_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"step": 1}, path)
    with pytest.raises(CorruptCheckpoint, match="no digest list"):
        checkpoint.load(path)


class RunsCode:
    """Unpickling this would create a file: what a hostile checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_checkpoint_holding_an_arbitrary_object_is_refused(tmp_path: Path) -> None:
    """Even with a matching digest list (anyone who can write the folder can write both),
    weights_only loading refuses to unpickle it, and nothing runs."""
    path, marker = tmp_path / "checkpoint.pt", tmp_path / "ran"
    torch.save({"model": {}, "payload": RunsCode(marker)}, path)
    data = path.read_bytes()
    entry = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    checkpoint.digests_path(path).write_text(json.dumps({"checkpoints": [entry]}))
    with pytest.raises(CorruptCheckpoint, match="weights_only loading refused it"):
        checkpoint.load(path)
    assert not marker.exists()
    with pytest.raises(TypeError, match="weights_only=True"):  # and save never writes one
        checkpoint.save({"payload": RunsCode(marker)}, tmp_path / "other.pt")
    assert not (tmp_path / "other.pt").exists() and not marker.exists()


Pair = collections.namedtuple("Pair", "a b")


def training_state() -> dict:
    """What a training checkpoint holds: model, optimizer, schedule and RNG states."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    rng = checkpoint.rng_state(torch.device("cpu"))
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "rng": rng,
        "history": [{"loss": math.nan}],
    }


@pytest.mark.parametrize(
    "value",
    [
        training_state(),
        torch.ones(2, dtype=torch.bfloat16),
        torch.nn.Parameter(torch.ones(1)),
        [torch.Size([2]), torch.float32, torch.device("cpu"), None, True, 1, 1.5, 1j, "s"],
        {1: {2}, (1, 2): b"x", "o": collections.OrderedDict(a=bytearray(b"y"))},
        np.zeros(3),
        np.float64(1.0),
        Pair(1, 2),
        collections.defaultdict(int),
        frozenset({1}),
        slice(1),
        {"deep": [1, (2, {"x": RunsCode(Path("never"))})]},
    ],
    ids=lambda v: type(v).__name__,
)
def test_the_walk_refuses_exactly_what_weights_only_loading_refuses(value) -> None:
    """checkpoint.refused (what save checks) against the reference, a weights_only load."""
    walked, loaded = checkpoint.refused({"x": value}), checkpoint.refused_by_loading({"x": value})
    assert (walked is None) == (loaded is None), (walked, loaded)


def test_rng_states_round_trip_through_weights_only_loading(tmp_path: Path) -> None:
    def draws() -> tuple:
        return (torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random())

    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    checkpoint.save({"rng": checkpoint.rng_state(torch.device("cpu"))}, tmp_path / "r.pt")
    expected = draws()
    checkpoint.restore_rng(checkpoint.load(tmp_path / "r.pt")["rng"])
    assert draws() == expected


# ----------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def workdir(tiny_workdir, tmp_path_factory) -> Path:
    return tiny_workdir(tmp_path_factory.mktemp("ckpt"))


def tiny_run(workdir: Path, seed: int = 0):
    return resolve(load_params(workdir / "params.yaml"), "listops", "baseline", seed)


def fit(workdir: Path, out: str, seed: int = 0) -> pd.DataFrame:
    """Train in process, in the folder whose relative data paths the spec names."""
    with contextlib.chdir(workdir):
        return train(tiny_run(workdir, seed), out, track=False, progress=False, threads=1)


@pytest.fixture(scope="module")
def reference(workdir: Path) -> tuple[pd.DataFrame, pd.Series]:
    """The uninterrupted run every interrupted one must equal."""
    history = fit(workdir, "full")
    return history, pd.read_parquet(workdir / "full" / "result.parquet").iloc[0]


def assert_equals_reference(workdir: Path, out: str, reference, history=None) -> pd.Series:
    full_history, full = reference
    history = pd.read_parquet(workdir / out / "metrics.parquet") if history is None else history
    pd.testing.assert_frame_equal(history[COMPARED], full_history[COMPARED])
    result = pd.read_parquet(workdir / out / "result.parquet").iloc[0]
    for key in RESULT_KEYS:
        assert result[key] == full[key], key
    return result


def test_sigterm_mid_epoch_checkpoints_and_resumes_exactly(
    workdir: Path, reference, monkeypatch, capsys
) -> None:
    step = training.train_step
    seen = {"calls": 0}

    def terminated_in_the_middle_of_epoch_2(s, index):
        per_epoch = math.ceil(len(s.data["train"]) / s.run.train.batch_size)
        seen["calls"] += 1
        seen["at"] = per_epoch // 2
        if seen["calls"] == per_epoch + seen["at"]:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(s, index)

    monkeypatch.setattr(training, "train_step", terminated_in_the_middle_of_epoch_2)
    with pytest.raises(Stopped, match="stopped by SIGTERM after step") as stopped:
        fit(workdir, "sigterm")
    monkeypatch.setattr(training, "train_step", step)
    assert f"after step {seen['at']} of epoch 2;" in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
    saved = checkpoint.load(workdir / "sigterm" / CHECKPOINT)["state"]
    assert saved["epoch"] == 1 and saved["partial"]["step"] == seen["at"] > 0
    assert not (workdir / "sigterm" / "result.parquet").exists()

    history = fit(workdir, "sigterm")
    assert f"resuming from step {seen['at']} of epoch 2" in capsys.readouterr().err
    assert bool(assert_equals_reference(workdir, "sigterm", reference, history)["resumed"])


class Killed(Exception):
    """Stands in for a job killed right after an epoch's checkpoint."""


def killed_after_epoch_3(workdir: Path, out: str, monkeypatch, seed: int = 0) -> None:
    record = training.record_epoch

    def record_then_die(s, row, *args) -> None:
        record(s, row, *args)
        if row["epoch"] == 3:
            raise Killed

    monkeypatch.setattr(training, "record_epoch", record_then_die)
    with pytest.raises(Killed):
        fit(workdir, out, seed)
    monkeypatch.setattr(training, "record_epoch", record)


@pytest.mark.parametrize(
    "copied", [[BEST, "best.sha256.json"], [CHECKPOINT, "checkpoint.sha256.json"]]
)
def test_another_runs_checkpoint_stops_the_job_naming_both_runs(
    workdir: Path, monkeypatch, copied
) -> None:
    """Seed 1's best.pt (or checkpoint) with its digest list, copied into seed 0's folder:
    the job stops, naming the file and both runs, instead of reporting seed 1's numbers."""
    mine, theirs = f"own-{copied[0]}", f"other-{copied[0]}"
    killed_after_epoch_3(workdir, mine, monkeypatch, seed=0)
    killed_after_epoch_3(workdir, theirs, monkeypatch, seed=1)
    for name in copied:
        (workdir / mine / name).write_bytes((workdir / theirs / name).read_bytes())
    with pytest.raises(ForeignRecord) as stop:
        fit(workdir, mine, seed=0)
    said = str(stop.value)
    assert f"{Path(mine) / copied[0]} belongs to listops/baseline/seed1" in said
    assert "not to listops/baseline/seed0" in said and "train the run again" in said
    assert not (workdir / mine / "result.parquet").exists()


def test_a_checkpoint_of_code_since_edited_is_not_resumed(
    workdir: Path, reference, monkeypatch, capsys
) -> None:
    """A run killed, then a source file it executes edited: the job trains afresh with the new
    code instead of finishing the old code's run."""
    killed_after_epoch_3(workdir, "edited-code", monkeypatch)
    before = provenance.code_digest(tiny_run(workdir))
    monkeypatch.setattr(provenance, "code_digest", lambda run: "e" * 16)
    capsys.readouterr()
    fit(workdir, "edited-code")
    err = capsys.readouterr().err
    assert f"is of other code ({before} -> {'e' * 16}); starting afresh" in err
    assert not bool(assert_equals_reference(workdir, "edited-code", reference)["resumed"])


def test_a_same_size_corruption_of_the_data_stops_the_job(tmp_path: Path, workdir: Path) -> None:
    """One flipped bit in train.labels.npy (its size unchanged): the job stops before
    training, naming the file and the repair, instead of training on it under the manifest's
    hash."""
    work = tmp_path / "work"
    shutil.copytree(workdir, work, ignore=shutil.ignore_patterns("own-*", "other-*", "full"))
    labels = next(work.glob("data/smoke/prepared/listops/train.labels.npy"))
    data = bytearray(labels.read_bytes())
    data[-1] ^= 0x01
    labels.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=r"train\.labels\.npy fails its checksum.*dvc"):
        fit(work, "corrupt")
    assert not (work / "corrupt" / "result.parquet").exists()


@pytest.mark.parametrize(
    ("damage", "files", "said"),
    [
        ("truncated", [CHECKPOINT], "falling back to"),
        ("flipped", [CHECKPOINT], "falling back to"),
        ("flipped", [CHECKPOINT, "checkpoint.prev.pt"], "starting from scratch"),
        ("truncated", [BEST], "starting from scratch"),
    ],
)
def test_a_damaged_checkpoint_gives_way_and_the_run_still_equals_the_uninterrupted_one(
    workdir: Path, reference, monkeypatch, capsys, damage, files, said
) -> None:
    out = f"damaged-{damage}-{len(files)}-{files[0]}"
    killed_after_epoch_3(workdir, out, monkeypatch)
    for name in files:
        DAMAGE[damage][0](workdir / out / name)
    capsys.readouterr()
    fit(workdir, out)
    err = capsys.readouterr().err
    assert f"checkpoint {Path(out) / files[-1]} is unusable" in err
    assert DAMAGE[damage][1] in err and said in err
    result = assert_equals_reference(workdir, out, reference)
    if said == "falling back to":
        assert "resuming from epoch 2 of" in err and bool(result["resumed"])
    else:
        assert "resuming" not in err and not bool(result["resumed"])


def train_command(launcher: list[str], out: str) -> list[str]:
    args = ["--task", "listops", "--variant", "baseline", "--seed", "0", "--out", out]
    return [sys.executable, "-m", *launcher, "pdelab.training.train", *args, "--threads", "1"] + [
        "--no-mlflow",
        "--no-progress",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [[], ["pdelab.runtime.warm"]], ids=["cold", "warm"])
def test_the_command_stopped_by_sigterm_exits_143_and_the_rerun_resumes(
    workdir: Path, reference, tmp_path: Path, launcher
) -> None:
    out = f"cli-{'warm' if launcher else 'cold'}"
    env = {**os.environ, "PDELAB_WARM_SOCKET": str(tmp_path / "w.sock"), "PDELAB_WARM": "1"}
    env |= {"PDELAB_RETRAIN": "1"}  # the reference's run is kept: train, not put back
    env.pop("SLURM_JOB_ID", None)
    try:
        job = subprocess.Popen(
            train_command(launcher, out), cwd=workdir, env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while not (workdir / out / CHECKPOINT).exists():  # past epoch 1 of 6
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=120)
        assert job.returncode == checkpoint.EXIT_STOPPED == 143, err
        assert "stopped by SIGTERM" in err and "Run the same command again" in err
        assert not (workdir / out / "result.parquet").exists()

        again = subprocess.run(
            train_command(launcher, out), cwd=workdir, env=env, capture_output=True, text=True
        )
    finally:
        stop_server(env)
    assert again.returncode == 0 and "resuming from" in again.stderr, again.stderr
    assert bool(assert_equals_reference(workdir, out, reference)["resumed"])


def test_an_unfinished_run_set_aside_by_a_params_change_resumes_when_they_return(
    workdir: Path, reference, monkeypatch, capsys
) -> None:
    """Killed after epoch 3, then its params changed: the other version trains in the folder
    while the unfinished one is kept in the store; with the params back, the job takes it
    back and resumes where it stopped, equal to the uninterrupted run."""
    run = tiny_run(workdir)
    folder = str(run_dir(run.profile, run.task, run.variant, run.seed))  # where the store keeps
    killed_after_epoch_3(workdir, folder, monkeypatch)
    other = dataclasses.replace(run, train=dataclasses.replace(run.train, lr=run.train.lr / 3))
    capsys.readouterr()
    with contextlib.chdir(workdir):
        train(other, folder, track=False, progress=False, threads=1)
    assert "its unfinished training is set aside in" in capsys.readouterr().err
    kept = list(
        (workdir / run_store.STORE_DIR).glob(f"smoke/listops/baseline/seed0/*/{INTERRUPTED}")
    )
    assert len(kept) == 1 and (kept[0] / CHECKPOINT).exists()
    history = fit(workdir, folder)
    err = capsys.readouterr().err
    assert "took back this version's unfinished training" in err and "resuming from epoch 3" in err
    assert bool(assert_equals_reference(workdir, folder, reference, history)["resumed"])
    assert not kept[0].exists()
