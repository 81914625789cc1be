"""GPUs of their own for concurrently running jobs: a slot pool of lock files.

``snakemake --cores all --resources gpu=4`` on a 4-GPU node runs four training jobs at once,
but Snakemake only counts GPUs; it does not say which one a job should use, so every job
would open ``cuda:0``. Here each job, before torch touches CUDA, takes an exclusive
``fcntl.flock`` on the lock file of one visible GPU and narrows ``CUDA_VISIBLE_DEVICES`` to
it. The kernel releases a flock when its process exits, however it exits (SIGKILL
included), so a killed job never leaks its GPU and no cleanup is needed.

A job on several GPUs (``gpu=N``: N processes of torchrun) takes N slots at once, all or none:
a job that held some while it waited for the rest could wait on another that holds the rest
and waits for its. pdelab.runtime.gpu_job takes them before torchrun starts, narrows
``CUDA_VISIBLE_DEVICES`` to the N, and hands their record down in :data:`GIVEN` so that the
trainer in each process claims nothing more and records them.

Visible GPUs, first found wins: ``PDELAB_GPUS`` (a comma-separated list: tests fake a node
with it), ``CUDA_VISIBLE_DEVICES``, then the UUIDs ``nvidia-smi`` lists. Nothing is claimed
under SLURM (``SLURM_JOB_ID``: the scheduler has assigned the job its device already), for a
CPU profile, or where no GPU is visible.

Device order. nvidia-smi numbers GPUs in PCI bus order, CUDA by default fastest first
(``CUDA_DEVICE_ORDER``), so on a node of mixed GPUs an ordinal can name one GPU in nvidia-smi
and another in CUDA. A pool found through nvidia-smi is therefore named by GPU UUID, which
CUDA_VISIBLE_DEVICES accepts and which names one physical GPU under either order: the lock
file and the device the job opens are the same GPU, and a ``CUDA_DEVICE_ORDER`` the user set
is left as it is. A pool the user gave (CUDA_VISIBLE_DEVICES, PDELAB_GPUS) is narrowed to one
of its own entries and the order is not touched either, so an ordinal keeps meaning the GPU
it meant in the user's list; setting ``PCI_BUS_ID`` there would move it on a mixed node. The
slot records the order in force. torch is not asked: ``torch.cuda.device_count`` falls back
to ``cudaGetDeviceCount`` when NVML fails, which initialises CUDA before the slot narrows
CUDA_VISIBLE_DEVICES.

A job that finds every slot held (more jobs than GPUs: ``--resources gpu=N`` above the GPU
count, or another workflow on the same node) waits up to ``PDELAB_GPU_WAIT_S`` seconds
(default 300), then stops with a message naming the holders. The lock files live in a
per-user folder (``PDELAB_GPU_SLOT_DIR``, else ``$XDG_RUNTIME_DIR/pdelab-gpu-slots``, else
``/tmp/pdelab-gpu-slots-<uid>``). Only the standard library is imported: the slot must be
taken before torch initialises CUDA, which reads ``CUDA_VISIBLE_DEVICES`` once.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WAIT_S = 300.0
POLL_S = 0.5
# the slots a parent (pdelab.runtime.gpu_job) holds for this process
GIVEN = "PDELAB_GPU_SLOTS_GIVEN"
_HELD: list[Slot] = []  # the slots of this process, kept open (and locked) until it exits


class SlotsBusy(RuntimeError):
    """Every visible GPU is held by another job for longer than the wait allows."""


@dataclass
class Slot:
    """A held GPU: its position in the pool, its CUDA id, and the locked file."""

    index: int
    device: str  # the id CUDA_VISIBLE_DEVICES names: an ordinal or a GPU UUID
    pool: tuple[str, ...]
    lock_path: Path
    fd: int
    device_order: str = "FASTEST_FIRST"  # CUDA_DEVICE_ORDER in force: how an ordinal reads

    def record(self) -> dict[str, object]:
        """What run.json keeps of the slot."""
        return {
            "index": self.index,
            "cuda_visible_devices": self.device,
            "cuda_device_order": self.device_order,
            "pool": list(self.pool),
            "lock": str(self.lock_path),
        }

    def release(self) -> None:
        """Give the GPU back before the process exits (exiting does it too)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as ids for CUDA_VISIBLE_DEVICES (see the module doc)."""
    env = os.environ if env is None else env
    if env.get("PDELAB_GPUS") is not None:
        return _split(env["PDELAB_GPUS"])
    if env.get("CUDA_VISIBLE_DEVICES") is not None:
        # "-1" or "" hide every GPU; a list stops at its first invalid entry, as CUDA reads it
        ids = _split(env["CUDA_VISIBLE_DEVICES"])
        return [] if not ids or ids[0].startswith("-") else ids
    return smi_uuids(env)


def smi_uuids(env: dict[str, str] | None = None) -> list[str]:
    """The UUIDs of the GPUs nvidia-smi lists (names that do not depend on the device order);
    none where nvidia-smi is missing or fails (no driver)."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().startswith("GPU-")]


def no_gpu_here(device: str | None, profile: str, trains: int) -> str | None:
    """Why ``trains`` training jobs of a run profile cannot run on this machine: it asks for
    ``device: cuda`` and no GPU is visible here. The workflow asks before any job starts, so
    the run stops once, naming the fix, instead of each job failing alone."""
    if device != "cuda" or visible_gpus():
        return None
    return (
        f"run profile {profile} trains on device: cuda, and no GPU is visible on this machine "
        f"(nvidia-smi lists none; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
        f"), so none of its {trains} training jobs would run. Run it on a GPU machine, on a "
        f"cluster (--workflow-profile workflow/profiles/slurm), or set "
        f"profiles.{profile}.device: auto in params.yaml to train on the CPU (slow)"
    )


def slot_dir(env: dict[str, str] | None = None) -> Path:
    """The per-user folder of the lock files (created, private)."""
    env = os.environ if env is None else env
    if env.get("PDELAB_GPU_SLOT_DIR"):
        path = Path(env["PDELAB_GPU_SLOT_DIR"])
    elif env.get("XDG_RUNTIME_DIR"):
        path = Path(env["XDG_RUNTIME_DIR"]) / "pdelab-gpu-slots"
    else:
        path = Path(f"/tmp/pdelab-gpu-slots-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def lock_file(folder: Path, device: str) -> Path:
    """The lock file of one GPU id (a UUID's characters made safe for a file name)."""
    return folder / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', device)}.lock"


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # for the message of a job that finds none free
    return fd


def _holders(paths: list[Path]) -> str:
    held = []
    for path in paths:
        try:
            held.append(f"{path.name} (pid {path.read_text().strip() or '?'})")
        except OSError:
            held.append(path.name)
    return ", ".join(held)


def _lock_free(pool: list[str], paths: list[Path], count: int) -> list[Slot]:
    """``count`` free GPUs of the pool, locked, or none (the ones locked on the way are let
    go again)."""
    got: list[Slot] = []
    for index, (device, path) in enumerate(zip(pool, paths, strict=True)):
        fd = _try_lock(path)
        if fd is not None:
            got.append(Slot(index, device, tuple(pool), path, fd))
            if len(got) == count:
                return got
    for slot in got:
        slot.release()
    return []


def busy_message(pool: list[str], paths: list[Path], count: int, wait_s: float) -> str:
    """Why a job found too few free GPUs, naming the holders."""
    if count == 1:
        return (
            f"all {len(pool)} GPUs ({','.join(pool)}) are held by other jobs: "
            f"{_holders(paths)}. Run at most {len(pool)} at once "
            f"(snakemake --resources gpu={len(pool)}), or set PDELAB_GPU_WAIT_S to wait "
            f"longer than {wait_s:g} s"
        )
    held = [path for path in paths if _is_held(path)]
    return (
        f"{count} GPUs asked, {len(pool) - len(held)} of {len(pool)} ({','.join(pool)}) free: "
        f"{_holders(held)}. Let `snakemake --resources gpu={len(pool)}` count the GPUs every "
        f"job asks for, or set PDELAB_GPU_WAIT_S to wait longer than {wait_s:g} s"
    )


def _is_held(path: Path) -> bool:
    fd = _try_lock(path)
    if fd is None:
        return True
    os.close(fd)
    return False


def acquire_many(pool: list[str], folder: Path, count: int, wait_s: float) -> list[Slot]:
    """Lock ``count`` free GPUs of ``pool`` at once, all or none, polling until ``wait_s``
    has passed: a job that kept some while waiting for the rest could deadlock with another
    doing the same."""
    if not pool:
        raise ValueError("no GPU to take a slot of: the pool is empty")
    if not 1 <= count <= len(pool):
        raise ValueError(f"{count} GPUs asked of a pool of {len(pool)} ({','.join(pool)})")
    paths = [lock_file(folder, device) for device in pool]
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        if got := _lock_free(pool, paths, count):
            return got
        if time.monotonic() >= deadline:
            raise SlotsBusy(busy_message(pool, paths, count, wait_s))
        if not told:
            what = f"all {len(pool)} GPUs" if count == 1 else f"fewer than {count} GPUs free"
            print(f"pdelab.runtime.gpu_slots: {what} busy; waiting", file=sys.stderr)
            told = True
        time.sleep(POLL_S)


def claim(device: str, env: dict[str, str] | None = None, count: int = 1) -> Slot | None:
    """Take ``count`` GPUs for this process and narrow ``CUDA_VISIBLE_DEVICES`` to them;
    returns the first, or None where the job needs no slot (cpu, SLURM, no GPU visible, or
    slots a parent holds for it: :data:`GIVEN`). Call before torch initialises CUDA. A
    second call in the same process returns the slot it holds."""
    env = os.environ if env is None else env
    if _HELD:
        return _HELD[0]
    if device == "cpu" or "SLURM_JOB_ID" in env or GIVEN in env:
        return None
    pool = visible_gpus(env)
    if not pool:
        return None
    wait_s = float(env.get("PDELAB_GPU_WAIT_S", DEFAULT_WAIT_S))
    slots = acquire_many(pool, slot_dir(env), count, wait_s)
    order = env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST"  # CUDA's default
    for slot in slots:
        slot.device_order = order
    # CUDA_DEVICE_ORDER untouched: see the module doc
    env["CUDA_VISIBLE_DEVICES"] = ",".join(slot.device for slot in slots)
    _HELD.extend(slots)
    return slots[0]


def held_all() -> list[Slot]:
    """Every slot this process holds."""
    return list(_HELD)


def record_of(slots: list[Slot]) -> dict[str, object] | None:
    """What run.json keeps of a job's slots: one slot's record as it is; several, each one's
    under ``slots`` with the devices the job saw."""
    if not slots:
        return None
    if len(slots) == 1:
        return slots[0].record()
    return {
        "cuda_visible_devices": ",".join(slot.device for slot in slots),
        "cuda_device_order": slots[0].device_order,
        "pool": list(slots[0].pool),
        "slots": [slot.record() for slot in slots],
    }


def held_record(env: dict[str, str] | None = None) -> dict[str, object] | None:
    """The record of the GPUs this job was given on a node: the slots this process holds, or
    those its parent holds for it (:data:`GIVEN`); None where it was given none."""
    env = os.environ if env is None else env
    if _HELD:
        return record_of(_HELD)
    if env.get(GIVEN):
        return json.loads(env[GIVEN])
    return None


def main(argv: list[str] | None = None) -> None:
    """``python -m pdelab.runtime.gpu_slots``: the pool this process sees and who holds each GPU."""
    del argv
    pool = visible_gpus()
    if not pool:
        print("no GPU visible (PDELAB_GPUS, CUDA_VISIBLE_DEVICES, nvidia-smi)")
        return
    folder = slot_dir()
    for device in pool:
        path = lock_file(folder, device)
        fd = _try_lock(path)
        if fd is None:
            print(f"GPU {device}: held, {_holders([path])}")
        else:
            os.close(fd)
            print(f"GPU {device}: free")


if __name__ == "__main__":
    main()
