"""GPU slots on a faked 4-GPU node (PDELAB_GPUS): concurrent jobs get distinct GPUs, a job
beyond the pool waits or fails naming the holders, a killed holder frees its GPU, and
nothing is claimed under SLURM or on a CPU profile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from pdelab.runtime import gpu_slots

# a job: claim a slot, print the GPU it was given, then hold it until told to go (a file)
HOLDER = """
import os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
try:
    slot = gpu_slots.claim(sys.argv[1])
except gpu_slots.SlotsBusy as err:
    print("BUSY", err, flush=True)
    sys.exit(3)
print("SLOT", os.environ.get("CUDA_VISIBLE_DEVICES"), slot and slot.index, flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
"""


def env_for(tmp_path: Path, gpus: str = "0,1,2,3", wait_s: float = 0.0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")}
    env |= {
        "PDELAB_GPUS": gpus,
        "PDELAB_GPU_SLOT_DIR": str(tmp_path / "slots"),
        "PDELAB_GPU_WAIT_S": str(wait_s),
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", ""),
    }
    return env


def start(env: dict[str, str], release: Path, device: str = "cuda") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, device, str(release)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_line(proc: subprocess.Popen) -> list[str]:
    line = proc.stdout.readline().split()
    assert line, proc.stderr.read()
    return line


def test_four_concurrent_jobs_get_four_gpus_and_a_fifth_fails_naming_the_holders(tmp_path):
    env, release = env_for(tmp_path), tmp_path / "go"
    holders = [start(env, release) for _ in range(4)]
    try:
        lines = [first_line(p) for p in holders]
        assert all(line[0] == "SLOT" for line in lines)
        assert sorted(line[1] for line in lines) == ["0", "1", "2", "3"]  # each its own GPU
        assert sorted(int(line[2]) for line in lines) == [0, 1, 2, 3]
        fifth = start(env, release)
        out, _ = fifth.communicate(timeout=30)
        assert fifth.returncode == 3, out
        assert "all 4 GPUs (0,1,2,3) are held" in out and "--resources gpu=4" in out
        assert all(f"pid {p.pid}" in out for p in holders)  # the message names each holder
    finally:
        release.touch()
        for p in holders:
            p.wait(timeout=30)


def test_a_waiting_job_gets_the_gpu_a_finished_job_released(tmp_path):
    env, release, later = env_for(tmp_path, "0,1"), tmp_path / "go", tmp_path / "go-later"
    holders = [start(env, release) for _ in range(2)]
    try:
        [first_line(p) for p in holders]
        waiting = start(env_for(tmp_path, "0,1", wait_s=60), later)
        time.sleep(1.0)
        assert waiting.poll() is None  # still waiting: both GPUs held
        release.touch()  # the two holders finish
        line = first_line(waiting)
        assert line[0] == "SLOT" and line[1] in ("0", "1")
        assert "busy; waiting" in waiting.stderr.readline()
    finally:
        release.touch()
        later.touch()
        for p in [*holders, waiting]:
            p.wait(timeout=30)


def test_a_killed_holder_frees_its_gpu(tmp_path):
    env, release = env_for(tmp_path, "7"), tmp_path / "go"
    holder = start(env, release)
    assert first_line(holder)[:2] == ["SLOT", "7"]
    blocked = start(env, release)
    assert first_line(blocked)[0] == "BUSY"
    blocked.wait(timeout=30)
    os.kill(holder.pid, signal.SIGKILL)  # no handler, no cleanup: the kernel drops the flock
    holder.wait(timeout=30)
    after = start(env, release)
    try:
        assert first_line(after)[:2] == ["SLOT", "7"]
    finally:
        release.touch()
        after.wait(timeout=30)


@pytest.mark.parametrize(
    ("device", "extra", "why"),
    [
        ("cpu", {}, "a CPU profile needs no GPU"),
        ("cuda", {"SLURM_JOB_ID": "42"}, "SLURM has assigned the device"),
        ("cuda", {"PDELAB_GPUS": ""}, "no GPU visible"),
        ("auto", {"PDELAB_GPUS": ""}, "no GPU visible"),
    ],
)
def test_no_slot_is_claimed(tmp_path, device, extra, why):
    env = env_for(tmp_path) | extra
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = start(env, tmp_path / "go", device)
    (tmp_path / "go").touch()
    out, err = proc.communicate(timeout=30)
    assert out.split()[:3] == ["SLOT", "None", "None"], (why, out, err)


def test_visible_gpus_reads_the_fake_then_cuda_visible_devices():
    assert gpu_slots.visible_gpus({"PDELAB_GPUS": "0, 2,3"}) == ["0", "2", "3"]
    assert gpu_slots.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd34"}) == [
        "GPU-ab12",
        "GPU-cd34",
    ]
    assert gpu_slots.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert gpu_slots.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_the_slot_narrows_cuda_visible_devices_to_the_gpu_not_its_position(tmp_path):
    """Under CUDA_VISIBLE_DEVICES=4,5 the job sees GPU 5 as its only device, not "1"."""
    env = env_for(tmp_path)
    del env["PDELAB_GPUS"]
    env["CUDA_VISIBLE_DEVICES"] = "4,5"
    release = tmp_path / "go"
    first = start(env, release)
    second = start(env, release)
    try:
        got = sorted(first_line(p)[1] for p in (first, second))
        assert got == ["4", "5"]
    finally:
        release.touch()
        first.wait(timeout=30)
        second.wait(timeout=30)


def test_lock_files_of_uuids_are_safe_names(tmp_path):
    assert gpu_slots.lock_file(tmp_path, "GPU-1a/2b:3").name == "gpu-GPU-1a_2b_3.lock"


def test_the_warm_server_leaves_cuda_uninitialised():
    """A warm job is a fork of the server: had the server initialised CUDA, the job could
    neither pick its GPU (CUDA reads CUDA_VISIBLE_DEVICES once) nor use CUDA at all."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA build with a GPU: a CPU build never initialises CUDA")
    code = (
        "import importlib, torch\n"
        "from pdelab.runtime.warm import PRELOAD\n"
        "for m in PRELOAD: importlib.import_module(m)\n"
        "print(torch.cuda.is_initialized())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_training_jobs_warm_and_cold_take_distinct_slots_and_record_them(tiny_workdir, tmp_path):
    """The training command claims its slot before torch starts CUDA, in a cold interpreter
    and in a fork of the warm server alike, and run.json records it. ``device: auto`` on a
    faked 2-GPU pool: each job is given a GPU, and trains on the CPU (no CUDA here)."""
    import json

    import yaml

    from tests.test_warm import stop_server

    work = tiny_workdir(tmp_path)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["profiles"]["smoke"]["device"] = "auto"
    params["profiles"]["smoke"]["overrides"]["train"]["epochs"] = 1
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = env_for(tmp_path, "5,6", wait_s=0) | {
        "PDELAB_WARM_SOCKET": str(tmp_path / "w.sock"),
        "PDELAB_WARM": "1",
        "PDELAB_WARM_IDLE": "30",
    }
    args = ["--task", "listops", "--variant", "baseline", "--seed", "0", "--threads", "1"]
    args += ["--no-progress", "--tracking", "batch"]
    release = tmp_path / "go"
    holder = start(env, release)  # a third job holds GPU 5 meanwhile
    blocker = None
    try:
        assert first_line(holder)[:2] == ["SLOT", "5"]
        for name, launcher in (("cold", []), ("warm", ["pdelab.runtime.warm"])):
            command = [
                sys.executable,
                "-m",
                *launcher,
                "pdelab.training.train",
                *args,
                "--out",
                name,
            ]
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            record = json.loads((work / name / "run.json").read_text())
            assert record["gpu_slot"]["cuda_visible_devices"] == "6", name  # 5 is held
            assert record["gpu_slot"]["pool"] == ["5", "6"]
            assert record["timing"]["warm"] is (name == "warm")
            assert record["result"]["device"] == "cpu"
        # with both GPUs held, the job stops before training, naming the holders
        blocker = start(env, release)
        assert first_line(blocker)[:2] == ["SLOT", "6"]
        command = [
            sys.executable,
            "-m",
            "pdelab.runtime.warm",
            "pdelab.training.train",
            *args,
            "--out",
            "no",
        ]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        assert done.returncode != 0 and "all 2 GPUs (5,6) are held" in done.stderr
        assert not (work / "no" / "result.parquet").exists()
    finally:
        release.touch()
        for proc in (holder, blocker):
            if proc is not None:
                proc.wait(timeout=30)
        stop_server(env)


UUIDS = ["GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-9f8e7d6c-6666-7777-8888-999900001111"]


def fake_smi(tmp_path: Path, body: str) -> Path:
    """A folder holding an ``nvidia-smi`` script that logs its arguments and runs ``body``."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path / "smi-calls"}"\n{body}\n')
    smi.chmod(0o755)
    return folder


@pytest.mark.parametrize("order", [None, "FASTEST_FIRST", "PCI_BUS_ID"])
def test_a_pool_from_nvidia_smi_is_named_by_uuid_whatever_the_device_order(
    tmp_path, monkeypatch, order
):
    """nvidia-smi's index is a PCI-bus ordinal and CUDA's default order is fastest first, so
    the job is given a UUID (one physical GPU under either order) and the order is left as
    the user set it, or unset."""
    monkeypatch.setattr(gpu_slots, "_HELD", [])
    lines = "\\n".join(UUIDS)
    env = {"PATH": str(fake_smi(tmp_path, f"printf '{lines}\\n'")), "PDELAB_GPU_WAIT_S": "0"}
    env["PDELAB_GPU_SLOT_DIR"] = str(tmp_path / "slots")
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    before = dict(env)
    other = gpu_slots._try_lock(gpu_slots.lock_file(gpu_slots.slot_dir(env), UUIDS[0]))
    assert other is not None  # another job holds the first GPU
    slot = gpu_slots.claim("cuda", env)
    assert slot is not None
    try:
        assert env == before | {"CUDA_VISIBLE_DEVICES": UUIDS[1]}
        assert slot.record() == {
            "index": 1,
            "cuda_visible_devices": UUIDS[1],
            "cuda_device_order": order or "FASTEST_FIRST",
            "pool": UUIDS,
            "lock": str(tmp_path / "slots" / f"gpu-{UUIDS[1]}.lock"),
        }
        assert (tmp_path / "smi-calls").read_text() == "--query-gpu=uuid --format=csv,noheader\n"
    finally:
        slot.release()
        os.close(other)


@pytest.mark.parametrize("order", [None, "FASTEST_FIRST", "PCI_BUS_ID"])
def test_a_given_list_is_narrowed_under_its_own_device_order(tmp_path, monkeypatch, order):
    """CUDA_VISIBLE_DEVICES=4,5 names its GPUs in the order in force; narrowing to "4" keeps
    that order (PCI_BUS_ID set here would move ordinal 4 on a mixed node), and nvidia-smi is
    not asked."""
    monkeypatch.setattr(gpu_slots, "_HELD", [])
    env = {"PATH": str(fake_smi(tmp_path, "exit 1")), "CUDA_VISIBLE_DEVICES": "4,5"}
    env["PDELAB_GPU_SLOT_DIR"] = str(tmp_path / "slots")
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    before = dict(env)
    slot = gpu_slots.claim("cuda", env)
    assert slot is not None
    try:
        assert env == before | {"CUDA_VISIBLE_DEVICES": "4"}
        assert slot.record()["cuda_device_order"] == (order or "FASTEST_FIRST")
        assert not (tmp_path / "smi-calls").exists()
    finally:
        slot.release()


def test_no_gpu_is_visible_without_a_working_nvidia_smi_and_torch_is_not_asked(
    tmp_path, monkeypatch
):
    """No nvidia-smi, or one that fails (no driver): no pool, and torch's device count (which
    may initialise CUDA before the slot narrows CUDA_VISIBLE_DEVICES) is never called."""

    class Untouchable:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"torch.{name} was asked for the GPUs")

    monkeypatch.setitem(sys.modules, "torch", Untouchable())  # a warm job has torch loaded
    empty = tmp_path / "empty"
    empty.mkdir()
    assert gpu_slots.visible_gpus({"PATH": str(empty)}) == []
    failing = fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed: no driver'; exit 9")
    assert gpu_slots.visible_gpus({"PATH": str(failing)}) == []
    garbage = fake_smi(tmp_path, "echo 'No devices were found'")
    assert gpu_slots.visible_gpus({"PATH": str(garbage)}) == []


# -- pdelab.runtime.gpu_job: the slot of a job that touches CUDA without the trainer
# -----------------

# what a step timing sees: the GPU it was given, and whether its slot's lock is still held
# (another open of the same file cannot lock it while the job runs); then it waits
GPU_JOB = """
import fcntl, os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
held = None
if cvd:
    fd = os.open(gpu_slots.lock_file(gpu_slots.slot_dir(), cvd), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = False
    except BlockingIOError:
        held = True
print("JOB", cvd, held, os.getpid(), flush=True)
while not Path(sys.argv[1]).exists():
    time.sleep(0.05)
"""


def start_gpu_job(env: dict[str, str], release: Path, gpus: int = 1) -> subprocess.Popen:
    """``python -m pdelab.runtime.gpu_job GPUS python -c GPU_JOB``, as the CUDA rules' shell
    runs it."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pdelab.runtime.gpu_job",
            str(gpus),
            sys.executable,
            "-c",
            GPU_JOB,
            str(release),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_gpu_job_takes_a_slot_beside_a_training_job_and_holds_it_as_itself(tmp_path):
    """A timing started next to a training job gets the other GPU, the job process itself
    (pdelab.runtime.gpu_job exec'd into it: the same pid) holds the lock, and the lock goes with
    it."""
    env, release = env_for(tmp_path, "0,1"), tmp_path / "go"
    trainer = start(env, release)
    assert first_line(trainer)[:2] == ["SLOT", "0"]
    timing = start_gpu_job(env, release)
    try:
        job, cvd, held, pid = first_line(timing)
        assert (job, cvd, held, int(pid)) == ("JOB", "1", "True", timing.pid)
        assert "pdelab.runtime.gpu_job: GPU 1 (slot 1)" in timing.stderr.readline()
    finally:
        release.touch()
        trainer.wait(timeout=30)
        timing.wait(timeout=30)
    free = gpu_slots._try_lock(gpu_slots.lock_file(tmp_path / "slots", "1"))
    assert free is not None  # released when the job ended
    os.close(free)


def test_a_gpu_job_does_not_share_the_gpu_of_a_training_job(tmp_path):
    """One GPU, held by a training job: the timing does not open it beside the training; it
    stops (after PDELAB_GPU_WAIT_S) naming the holder and running nothing."""
    env, release = env_for(tmp_path, "0"), tmp_path / "go"
    trainer = start(env, release)
    try:
        assert first_line(trainer)[:2] == ["SLOT", "0"]
        timing = start_gpu_job(env, release)
        out, err = timing.communicate(timeout=30)
        assert timing.returncode != 0 and out == ""  # the command never started
        assert "all 1 GPUs (0) are held" in err and f"pid {trainer.pid}" in err
    finally:
        release.touch()
        trainer.wait(timeout=30)


@pytest.mark.parametrize(
    ("gpus", "extra", "why"),
    [
        (0, {}, "a CPU run profile declares gpu=0"),
        (1, {"SLURM_JOB_ID": "42"}, "SLURM has assigned the device"),
        (1, {"PDELAB_GPUS": ""}, "no GPU visible"),
    ],
)
def test_a_gpu_job_runs_its_command_as_it_is_without_a_slot(tmp_path, gpus, extra, why):
    env = env_for(tmp_path) | extra
    release = tmp_path / "go"
    release.touch()
    job = start_gpu_job(env, release, gpus)
    out, err = job.communicate(timeout=30)
    assert job.returncode == 0 and out.split()[:3] == ["JOB", "None", "None"], (why, out, err)


def test_a_gpu_job_from_nvidia_smi_is_given_a_gpu_by_uuid(tmp_path):
    """On a real node the pool comes from nvidia-smi (faked here): the job gets a UUID."""
    env = env_for(tmp_path)
    del env["PDELAB_GPUS"]
    lines = "\\n".join(UUIDS)
    smi = fake_smi(tmp_path, f"printf '{lines}\\n'")
    env["PATH"] = f"{smi}{os.pathsep}{env['PATH']}"
    release = tmp_path / "go"
    release.touch()
    job = start_gpu_job(env, release)
    out, err = job.communicate(timeout=30)
    assert out.split()[:3] == ["JOB", UUIDS[0], "True"], err


def test_a_gpu_job_refuses_a_bad_call(tmp_path):
    env = env_for(tmp_path)
    for argv in (["5", "true"], ["one", "true"], ["1"]):  # 5 GPUs of a pool of 4
        out = subprocess.run(
            [sys.executable, "-m", "pdelab.runtime.gpu_job", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode != 0 and "pdelab.runtime.gpu_job" in out.stderr, argv


# -- one job on several GPUs: pdelab.runtime.gpu_job N takes N slots at once, before torchrun
# ---------

# what a job on several GPUs sees: its GPUs, whether each one's lock is held (by the job), and
# the record its processes are handed; then it waits
MULTI_JOB = """
import fcntl, json, os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
held = []
for device in filter(None, (cvd or "").split(",")):
    fd = os.open(gpu_slots.lock_file(gpu_slots.slot_dir(), device), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(False)
    except BlockingIOError:
        held.append(True)
given = os.environ.get(gpu_slots.GIVEN)
print(json.dumps({"cvd": cvd, "held": held, "pid": os.getpid(), "given": given}), flush=True)
while not Path(sys.argv[1]).exists():
    time.sleep(0.05)
"""


def start_multi_job(env: dict[str, str], release: Path, gpus: int) -> subprocess.Popen:
    """``python -m pdelab.runtime.gpu_job N python -c MULTI_JOB``, as the train rule starts
    torchrun."""
    command = [sys.executable, "-m", "pdelab.runtime.gpu_job", str(gpus), sys.executable, "-c"]
    return subprocess.Popen(
        [*command, MULTI_JOB, str(release)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def seen(proc: subprocess.Popen) -> dict:
    import json

    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def test_a_job_on_two_gpus_takes_two_slots_and_hands_them_to_its_processes(tmp_path):
    """A job of gpu=2 beside a training job on GPU 0 gets GPUs 1 and 2, holds both locks as
    itself (exec), and hands their record down so that the trainer in each of torchrun's
    processes claims nothing more (it would wait on its own job's locks) and records them."""
    import json

    env, release = env_for(tmp_path), tmp_path / "go"
    trainer = start(env, release)
    assert first_line(trainer)[:2] == ["SLOT", "0"]
    job = start_multi_job(env, release, 2)
    try:
        found = seen(job)
        assert (found["cvd"], found["held"], found["pid"]) == ("1,2", [True, True], job.pid)
        given = json.loads(found["given"])
        assert given["cuda_visible_devices"] == "1,2" and given["pool"] == ["0", "1", "2", "3"]
        assert [s["index"] for s in given["slots"]] == [1, 2]
        assert (
            "GPU 1 (slot 1)" in job.stderr.readline() and "GPU 2 (slot 2)" in job.stderr.readline()
        )
        child = {**env, gpu_slots.GIVEN: found["given"], "CUDA_VISIBLE_DEVICES": "1,2"}
        del child["PDELAB_GPUS"]
        assert gpu_slots.claim("cuda", child) is None  # a process of the job: nothing more
        assert gpu_slots.held_record(child) == given
    finally:
        release.touch()
        trainer.wait(timeout=30)
        job.wait(timeout=30)
    for device in ("1", "2"):  # both released when the job ended
        free = gpu_slots._try_lock(gpu_slots.lock_file(tmp_path / "slots", device))
        assert free is not None
        os.close(free)


def test_a_job_waiting_for_two_gpus_holds_none_of_them_meanwhile(tmp_path):
    """All or none: with one of two GPUs free, a 2-GPU job waits without keeping it (a job
    that kept one while it waited could deadlock with another doing the same), so a 1-GPU
    job started after it takes that GPU; once both are free, the waiting job gets them."""
    env, release, later = env_for(tmp_path, "0,1"), tmp_path / "go", tmp_path / "go-later"
    first = start(env, release)
    assert first_line(first)[:2] == ["SLOT", "0"]
    waiting = start_multi_job(env_for(tmp_path, "0,1", wait_s=60), later, 2)
    second = None
    try:
        assert "fewer than 2 GPUs free busy; waiting" in waiting.stderr.readline()
        second = start(env, release)
        assert first_line(second)[:2] == ["SLOT", "1"]  # the free GPU was not kept
        release.touch()  # both 1-GPU jobs end
        found = seen(waiting)
        assert (found["cvd"], found["held"]) == ("0,1", [True, True])
    finally:
        release.touch()
        later.touch()
        for proc in (first, second, waiting):
            if proc is not None:
                proc.wait(timeout=30)


def test_a_job_on_two_gpus_stops_naming_the_holders_when_too_few_are_free(tmp_path):
    env, release = env_for(tmp_path, "0,1"), tmp_path / "go"
    holder = start(env, release)
    try:
        assert first_line(holder)[:2] == ["SLOT", "0"]
        job = start_multi_job(env, release, 2)
        out, err = job.communicate(timeout=30)
        assert job.returncode != 0 and out == ""  # the command never started
        assert "2 GPUs asked, 1 of 2 (0,1) free" in err and f"pid {holder.pid}" in err
        assert "--resources gpu=2" in err
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_under_slurm_a_job_on_two_gpus_runs_as_slurm_gave_them(tmp_path):
    """SLURM allocated the job's GPUs (--gpus=2) and set CUDA_VISIBLE_DEVICES: no slot."""
    env = env_for(tmp_path) | {"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "0,1"}
    release = tmp_path / "go"
    release.touch()
    job = start_multi_job(env, release, 2)
    found = seen(job)
    job.wait(timeout=30)
    assert (found["cvd"], found["held"], found["given"]) == ("0,1", [False, False], None)
