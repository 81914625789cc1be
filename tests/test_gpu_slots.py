"""GPU slots on a faked node (PDELAB_GPUS): concurrent jobs get distinct GPUs, or shares of
one sized by memory (an 80 GB GPU runs four 18 GB jobs, a 24 GB one a single one), a job
beyond what the GPUs hold waits or fails naming the holders, a killed holder frees its GPU or
share, and nothing is claimed under SLURM or on a CPU profile."""

from __future__ import annotations

import json
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
import json, os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
try:
    slot = gpu_slots.claim(sys.argv[1])
except gpu_slots.SlotsBusy as err:
    print("BUSY", err, flush=True)
    sys.exit(3)
print("SLOT", os.environ.get("CUDA_VISIBLE_DEVICES"), slot and slot.index, flush=True)
print(json.dumps(gpu_slots.held_record()), flush=True)
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
        "PDELAB_RETRAIN": "1",  # each job trains (a run kept earlier is not put back)
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
        assert "all 2 GPUs busy; waiting" in waiting.stderr.readline()
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


def test_tenant_files_of_uuids_are_safe_names():
    assert gpu_slots.safe_name("GPU-1a/2b:3") == "GPU-1a_2b_3"
    assert gpu_slots.safe_name("MIG-GPU-1a/1/0") == "MIG-GPU-1a_1_0"


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


# nvidia-smi's answer on a node of an 80 GB and a 24 GB GPU
SMI_LISTS = f"printf '{UUIDS[0]}, 81920\\n{UUIDS[1]}, 24576\\n'"


def hold(folder: Path, device: str, share_mib: int | None = None) -> int:
    """This process as a tenant of ``device`` (another job, for the claim under test): the
    tenant file's descriptor, locked until closed."""
    with gpu_slots.claims_locked(folder):
        return gpu_slots._add_tenant(folder, device, share_mib)[1]


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
    env = {"PATH": str(fake_smi(tmp_path, SMI_LISTS)), "PDELAB_GPU_WAIT_S": "0"}
    env["PDELAB_GPU_SLOT_DIR"] = str(tmp_path / "slots")
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    before = dict(env)
    other = hold(gpu_slots.slot_dir(env), UUIDS[0])  # another job holds the first GPU
    slot = gpu_slots.claim("cuda", env)
    assert slot is not None
    try:
        assert env == before | {"CUDA_VISIBLE_DEVICES": UUIDS[1]}
        record = slot.record()
        assert record.pop("lock").startswith(str(tmp_path / "slots" / f"gpu-{UUIDS[1]}@"))
        assert record == {
            "index": 1,
            "cuda_visible_devices": UUIDS[1],
            "cuda_device_order": order or "FASTEST_FIRST",
            "pool": UUIDS,
            "share_mib": None,  # no share asked: the whole GPU
            "mps": None,
        }
        calls = (tmp_path / "smi-calls").read_text()
        assert calls == "--query-gpu=uuid,memory.total --format=csv,noheader,nounits\n"
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
import os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
held = None
if cvd:  # this process (gpu_job exec'd into it) is the GPU's tenant
    held = any(t.pid == os.getpid() for t in gpu_slots.tenants(gpu_slots.slot_dir(), cvd))
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
    assert gpu_slots.tenants(tmp_path / "slots", "1") == []  # released when the job ended


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
    smi = fake_smi(tmp_path, SMI_LISTS)
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
import json, os, sys, time
from pathlib import Path
from pdelab.runtime import gpu_slots
cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
held = []
for device in filter(None, (cvd or "").split(",")):
    mine = [t for t in gpu_slots.tenants(gpu_slots.slot_dir(), device) if t.pid == os.getpid()]
    held.append(bool(mine) and all(t.share_mib is None for t in mine))  # whole, and its own
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
        assert gpu_slots.tenants(tmp_path / "slots", device) == []


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
        assert "fewer than 2 free; waiting" in waiting.stderr.readline()
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


# -- shares of one GPU, sized by memory: PDELAB_GPU_SHARE_MIB, PDELAB_GPUS entries ID:GB
# -----------

SHARE_18GB = 18 * 1024  # MiB: four fit an 80 GB GPU with 5 % of it free, one a 24 GB GPU


def sharing(tmp_path: Path, gpus: str, share_mib: int | None, wait_s: float = 0.0) -> dict:
    env = env_for(tmp_path, gpus, wait_s)
    return env | ({gpu_slots.SHARE: str(share_mib)} if share_mib is not None else {})


def slot_of(proc: subprocess.Popen) -> tuple[list[str], dict]:
    """A holder's first line (SLOT, its GPU, its index) and its slot's record."""
    line = first_line(proc)
    return line, json.loads(proc.stdout.readline())


def stop(release: Path, *procs: subprocess.Popen | None) -> None:
    release.touch()
    for proc in procs:
        if proc is not None:
            proc.wait(timeout=30)


@pytest.mark.parametrize(("gb", "fit"), [(80, 4), (24, 1)])
def test_a_gpu_runs_as_many_jobs_as_fit_its_memory_and_the_next_fails(tmp_path, gb, fit):
    """18 GB jobs on one faked GPU: an 80 GB GPU holds four at once, a 24 GB GPU one; each
    records its share, the GPU's memory, the jobs per GPU and the co-tenants it found; the
    job after them fails (no wait) naming each tenant and its share."""
    env, release = sharing(tmp_path, f"0:{gb}", SHARE_18GB), tmp_path / "go"
    holders, found = [], []
    try:
        for _ in range(fit):  # one after the other: each finds the ones before it
            holders.append(start(env, release))
            line, record = slot_of(holders[-1])
            assert line[:3] == ["SLOT", "0", "0"]
            found.append(record)
        assert all(p.poll() is None for p in holders)  # all of them hold the GPU at once
        assert [r["share_mib"] for r in found] == [SHARE_18GB] * fit
        assert [(r["memory_mib"], r["jobs_per_gpu"]) for r in found] == [(gb * 1024, fit)] * fit
        assert [[t["pid"] for t in r["co_tenants"]] for r in found] == [
            [p.pid for p in holders[:i]] for i in range(fit)
        ]
        assert all(r["sharing"] == "time-sliced" and r["mps"] is None for r in found)
        extra = start(env, release)
        out, _ = extra.communicate(timeout=30)
        assert extra.returncode == 3, out
        assert f"no GPU of 1 (0) has {SHARE_18GB} MiB free" in out
        assert all(f"pid {p.pid} ({SHARE_18GB} MiB)" in out for p in holders)
        assert "--resources gpu_percent=100" in out
    finally:
        stop(release, *holders)


def test_four_jobs_hold_shares_concurrently_and_a_fifth_waits_for_one_to_end(tmp_path):
    """Started together, four 18 GB jobs share the 80 GB GPU; a fifth, allowed to wait, gets
    the share the first to end gives back (a killed job's, here: no cleanup needed)."""
    env, release = sharing(tmp_path, "0:80", SHARE_18GB), tmp_path / "go"
    holders = [start(env, release) for _ in range(4)]
    fifth = None
    try:
        assert {tuple(slot_of(p)[0][:2]) for p in holders} == {("SLOT", "0")}
        fifth = start(sharing(tmp_path, "0:80", SHARE_18GB, wait_s=60), release)
        assert "no GPU has 18432 MiB free; waiting" in fifth.stderr.readline()
        assert fifth.poll() is None
        os.kill(holders[0].pid, signal.SIGKILL)
        line, record = slot_of(fifth)
        assert line[:2] == ["SLOT", "0"]
        assert sorted(t["pid"] for t in record["co_tenants"]) == sorted(p.pid for p in holders[1:])
    finally:
        stop(release, *holders, fifth)


def test_jobs_of_different_shares_never_overfill_a_gpu(tmp_path):
    """36 + 18 + 18 GB fit an 80 GB GPU (76 GB usable) and a further 18 GB does not, though
    each job alone would count four or two of its kind per GPU (slot counts per share would
    let it in)."""
    release = tmp_path / "go"
    big = start(sharing(tmp_path, "0:80", 2 * SHARE_18GB), release)
    small = []
    try:
        assert slot_of(big)[1]["jobs_per_gpu"] == 2
        small = [start(sharing(tmp_path, "0:80", SHARE_18GB), release) for _ in range(2)]
        assert all(slot_of(p)[0][:2] == ["SLOT", "0"] for p in small)
        extra = start(sharing(tmp_path, "0:80", SHARE_18GB), release)
        out, _ = extra.communicate(timeout=30)
        assert extra.returncode == 3 and "(MiB left, 0: 4096)" in out, out
    finally:
        stop(release, big, *small)


def test_shared_jobs_spread_over_the_gpus_before_they_pack(tmp_path):
    """Co-tenants share a GPU's compute: two jobs on a node of two 80 GB GPUs get one each;
    on a 40 GB and an 80 GB GPU, the first goes to the one with more room, the second to the
    other (no tenant yet), the third to the one with more room again."""
    release = tmp_path / "go"
    for gpus, expected in (("0:80,1:80", ["0", "1"]), ("0:40,1:80", ["1", "0", "1"])):
        env, jobs = sharing(tmp_path, gpus, SHARE_18GB), []
        try:
            for _ in expected:  # one after the other: each sees the ones before it
                jobs.append(start(env, release))
                assert slot_of(jobs[-1])[0][0] == "SLOT"
            assert [t.device for t in tenants_of(tmp_path, gpus)] == sorted(expected)
        finally:
            stop(release, *jobs)
        release.unlink()


def tenants_of(tmp_path: Path, gpus: str) -> list[gpu_slots.Tenant]:
    """The live tenants of every GPU of a faked pool, GPU by GPU."""
    folder = tmp_path / "slots"
    return [
        t
        for d in gpu_slots.visible_gpus({"PDELAB_GPUS": gpus})
        for t in gpu_slots.tenants(folder, d)
    ]


def test_whole_gpu_jobs_and_shares_exclude_each_other(tmp_path):
    """A job without a share (a timing) or on several GPUs takes GPUs without tenants; a
    share never joins a GPU held whole."""
    release = tmp_path / "go"
    shared = start(sharing(tmp_path, "0:80,1:80", SHARE_18GB), release)
    whole = multi = None
    try:
        assert slot_of(shared)[0][:2] == ["SLOT", "0"]
        whole = start(sharing(tmp_path, "0:80,1:80", None), release)
        line, record = slot_of(whole)
        assert line[:2] == ["SLOT", "1"] and record["share_mib"] is None
        assert "jobs_per_gpu" not in record
        multi = start_multi_job(env_for(tmp_path, "0:80,1:80"), release, 2)
        out, err = multi.communicate(timeout=30)
        assert multi.returncode != 0 and "2 GPUs asked, 0 of 2 (0,1) free" in err
        late = start(sharing(tmp_path, "0:80,1:80", SHARE_18GB), release)
        line, _ = slot_of(late)
        assert line[:2] == ["SLOT", "0"]  # beside the other share, not on the whole-held GPU
        stop(release, late)
    finally:
        stop(release, shared, whole, multi)


@pytest.mark.parametrize(
    ("gpus", "share", "why"),
    [
        ("0,1", SHARE_18GB, "memory unknown: the share cannot be checked"),
        ("0:16", SHARE_18GB, "more than the GPU holds: the job runs alone"),
        ("0:80", 0, "a share of 0: the whole GPU"),
    ],
)
def test_a_share_that_cannot_be_checked_takes_the_whole_gpu(tmp_path, gpus, share, why):
    release = tmp_path / "go"
    first = start(sharing(tmp_path, gpus, share), release)
    try:
        line, record = slot_of(first)
        assert line[:2] == ["SLOT", "0"] and record["share_mib"] is None, why
        second = start(sharing(tmp_path, gpus.split(",")[0], SHARE_18GB), release)
        out, _ = second.communicate(timeout=30)
        assert second.returncode == 3 and "whole GPU" in out, (why, out)
    finally:
        stop(release, first)


def test_a_bad_share_is_refused():
    with pytest.raises(ValueError, match="PDELAB_GPU_SHARE_MIB='18GB'"):
        gpu_slots.requested_share({gpu_slots.SHARE: "18GB"})
    with pytest.raises(ValueError, match="ID:GB"):
        gpu_slots.visible_gpus({"PDELAB_GPUS": "0:lots"})


def test_mps_is_noted_where_its_daemon_runs(tmp_path):
    """``nvidia-cuda-mps-control`` installed and its pipe folder holding ``control``: the
    record says the co-tenants run under MPS (nothing is started here)."""
    pipes = tmp_path / "mps"
    pipes.mkdir()
    (tmp_path / "bin").mkdir()
    control = tmp_path / "bin" / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\nexit 0\n")
    control.chmod(0o755)
    env = sharing(tmp_path, "0:80", SHARE_18GB) | {"CUDA_MPS_PIPE_DIRECTORY": str(pipes)}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    assert gpu_slots.mps_pipe(env) is None  # installed, no daemon: time-sliced
    (pipes / "control").touch()
    assert gpu_slots.mps_pipe(env) == str(pipes)
    release = tmp_path / "go"
    job = start(env, release)
    try:
        _, record = slot_of(job)
        assert (record["sharing"], record["mps"]) == ("mps", str(pipes))
    finally:
        stop(release, job)


def test_the_memory_of_a_pool_from_nvidia_smi(tmp_path):
    """By UUID (or a unique prefix of one); ordinals only where every GPU has the same
    memory (an ordinal's GPU depends on the device order); unknown otherwise."""
    path = str(fake_smi(tmp_path, SMI_LISTS))
    assert gpu_slots.smi_gpus({"PATH": path}) == [(UUIDS[0], 81920), (UUIDS[1], 24576)]
    assert gpu_slots.pool_memory(UUIDS, {"PATH": path}) == {UUIDS[0]: 81920, UUIDS[1]: 24576}
    assert gpu_slots.pool_memory(["GPU-9f8e"], {"PATH": path}) == {"GPU-9f8e": 24576}
    assert gpu_slots.pool_memory(["0"], {"PATH": path}) is None  # 80 or 24 GB: unknown
    (tmp_path / "same").mkdir()
    same = str(fake_smi(tmp_path / "same", f"printf '{UUIDS[0]}, 81920\\n{UUIDS[1]}, 81920\\n'"))
    assert gpu_slots.pool_memory(["0", "1"], {"PATH": same}) == {"0": 81920, "1": 81920}
    fake = {"PDELAB_GPUS": "0:80,1:24.5"}
    assert gpu_slots.pool_memory(["0", "1"], fake) == {"0": 81920, "1": 25088}
    assert gpu_slots.pool_memory(["0", "1"], {"PDELAB_GPUS": "0:80,1"}) is None


def test_the_slot_module_imports_no_torch():
    """It runs before torch initialises CUDA, in a job's first milliseconds."""
    code = "import sys, pdelab.runtime.gpu_slots; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# -- what the train rule declares: gpu_slots.planned_share from the cost plan's data
# -----------


def plan_file(tmp_path: Path, card_gib: float | None = 80, **job: object) -> Path:
    """A plan.json (pdelab.plan.render.plan_data's keys) of one job, listops/baseline/0."""
    row = {"task": "listops", "variant": "baseline", "seed": 0, "gpus": 1} | job
    doc = {"profile": "paper", "card_gib": card_gib, "cards": {}, "jobs": [row]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    return path


KEY = ("listops", "baseline", "0")


def test_a_job_the_plan_fits_four_times_on_its_card_asks_for_a_quarter_gpu(tmp_path):
    path = plan_file(tmp_path, gpu_share_mib=SHARE_18GB)
    share = gpu_slots.planned_share("paper", KEY, 1, None, path, env={})
    assert share == gpu_slots.GpuShare(gpu=1, percent=25, mib=SHARE_18GB)
    assert share.jobs_per_gpu == 4
    assert gpu_slots.planned_share("paper", KEY, 1, 80.0, path, env={}) == share  # its card


@pytest.mark.parametrize(
    ("gpus", "card_gb", "plan", "env", "why"),
    [
        (0, None, {}, {}, "a CPU profile: no GPU"),
        (2, None, {}, {}, "a job on two GPUs takes them whole"),
        (1, 40.0, {}, {}, "the plan is for another card: the trainer runs the whole batch"),
        (1, None, {"card_gib": None}, {}, "a plan without a card"),
        (1, None, {"gpu_share_mib": 50 * 1024}, {}, "one per GPU: nothing to share"),
        (1, None, {"gpus": 2}, {}, "the plan puts it on two GPUs"),
        (1, None, {}, {gpu_slots.SHARING: "0"}, "sharing turned off"),
    ],
)
def test_a_job_takes_whole_gpus_where_the_plan_does_not_share_them(
    tmp_path, gpus, card_gb, plan, env, why
):
    card = plan.pop("card_gib", 80)
    path = plan_file(tmp_path, card, **({"gpu_share_mib": SHARE_18GB} | plan))
    share = gpu_slots.planned_share("paper", KEY, gpus, card_gb, path, env=env)
    assert share == gpu_slots.GpuShare(gpus, 100 * gpus), why
    other = gpu_slots.planned_share("smoke", KEY, 1, None, path, env={})
    assert other == gpu_slots.GpuShare(1, 100)  # another profile's plan
    absent = gpu_slots.planned_share("paper", KEY, 1, None, tmp_path / "none.json", env={})
    assert absent == gpu_slots.GpuShare(1, 100)


def test_on_a_sharded_slurm_cluster_a_shared_job_asks_for_shards_of_the_gpu_partition(tmp_path):
    """PDELAB_SLURM_GPU_SHARDS=8 (the cluster's shards per GPU): no whole GPU (gpu=0), the
    shards of its memory share (2 of 8: four per GPU), in the partition with GPUs (the plugin
    would send a job without ``gpu`` to one without)."""
    path = plan_file(tmp_path, gpu_share_mib=SHARE_18GB)
    env = {gpu_slots.SHARDS: "8"}
    partitions = ROOT / "workflow/profiles/slurm/partitions.yaml"
    assert gpu_slots.shard_partition(env, partitions) == "gpu"
    share = gpu_slots.planned_share("paper", KEY, 1, None, path, env=env)
    assert share == gpu_slots.GpuShare(0, 25, SHARE_18GB, "shard:2", "gpu")
    named = env | {gpu_slots.SHARD_PARTITION: "a100"}
    assert gpu_slots.planned_share("paper", KEY, 1, None, path, env=named).partition == "a100"
    other = tmp_path / "partitions.yaml"
    other.write_text("partitions:\n  small: {}\n  big: {max_gpu: 4}\n  bigger: {max_gpu: 8}\n")
    assert gpu_slots.shard_partition({}, other) == "bigger"


# -- the scheduler: Snakemake starts as many jobs as the shares allow, and each gets its share
# -----------

# a job as the train rule declares its GPU (workflow/rules/train.smk, common.smk's
# train_gpu_share): it claims its share, notes when it held it, and holds it a while
SHARED_WORKFLOW = """
import json, os, time
from pdelab.runtime import gpu_slots

JOBS = range(5)

def share(wc):
    return gpu_slots.planned_share("paper", ("listops", "baseline", wc.seed), 1, None)

rule all:
    input: expand("held/{seed}.json", seed=JOBS)

rule job:
    output: "held/{seed}.json"
    resources:
        gpu=lambda wc: share(wc).gpu,
        gpu_percent=lambda wc: share(wc).percent,
        gpu_share_mib=lambda wc: share(wc).mib,
    shell: "PDELAB_GPU_SHARE_MIB={resources.gpu_share_mib} python -c \\"$HOLD\\" {output}"
"""

HOLD = """
import json, sys, time
from pdelab.runtime import gpu_slots
slot = gpu_slots.claim("cuda")
start = time.time()
time.sleep(2.0)
record = {"record": gpu_slots.held_record(), "start": start, "end": time.time()}
open(sys.argv[1], "w").write(json.dumps(record))
"""


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


@pytest.mark.slow
@pytest.mark.parametrize(("gb", "at_once", "share"), [(80, 4, SHARE_18GB), (24, 1, None)])
def test_snakemake_runs_as_many_jobs_per_gpu_as_the_plan_fits(tmp_path, gb, at_once, share):
    """Five 18 GB jobs on one faked GPU, ``snakemake --resources gpu_percent=100``: on an
    80 GB card (the plan's) four run at once on GPU 0, each with its share, and none waits
    in its claim (Snakemake's count and the claims agree); on a 24 GB card one at a time,
    each on the whole GPU."""
    work = tmp_path / "wf"
    (work / "results").mkdir(parents=True)
    (work / "Snakefile").write_text(SHARED_WORKFLOW)
    rows = [
        {
            "task": "listops",
            "variant": "baseline",
            "seed": s,
            "gpus": 1,
            "gpu_share_mib": SHARE_18GB,
        }
        for s in range(5)
    ]
    doc = {"profile": "paper", "card_gib": gb, "cards": {}, "jobs": rows}
    (work / "results/plan.json").write_text(json.dumps(doc))
    env = env_for(tmp_path, f"0:{gb}", wait_s=60) | {"HOLD": HOLD}
    command = ["snakemake", "--cores", "8", "--resources", "gpu_percent=100", "--quiet", "rules"]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "waiting" not in done.stderr  # no job was started beyond what the GPU holds
    held = [json.loads((work / f"held/{s}.json").read_text()) for s in range(5)]
    assert all(h["record"]["cuda_visible_devices"] == "0" for h in held)
    assert all(h["record"]["share_mib"] == share for h in held)
    assert most_at_once([(h["start"], h["end"]) for h in held]) == at_once
