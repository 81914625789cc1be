"""GPUs for concurrently running jobs: whole GPUs, or shares of one sized by memory.

``snakemake --cores all --resources gpu=4`` on a 4-GPU node runs four training jobs at once,
but Snakemake only counts GPUs; it does not say which one a job should use, so every job
would open ``cuda:0``. Here each job, before torch touches CUDA, becomes a *tenant* of one
visible GPU and narrows ``CUDA_VISIBLE_DEVICES`` to it. A tenant is a file of the slot folder,
``gpu-<id>@<pid>-<tag>.tenant``, that the job holds ``fcntl.flock``'d for as long as it lives
and that names its share of the GPU (none: the whole GPU). The kernel releases a flock when
its process exits, however it exits (SIGKILL included), so a killed job never keeps its GPU:
the next claim finds its file unlocked and removes it.

Shares. A job the cost plan says needs a fraction of a card (its planned peak with the
allocator's reserve and its CUDA context, pdelab.plan.card_fit.share_mib) is given that share
in ``PDELAB_GPU_SHARE_MIB`` by the train rule (:func:`planned_share`), and shares a GPU with
other such jobs: a GPU runs as many as fit its memory with pdelab.plan.card_fit.SAFETY of it
left free (an 80 GB GPU four jobs of 18 GB, a 24 GB GPU one). Memory, not a count of slots, is
what a claim checks: with k slot files per GPU (k from each job's own share) jobs of different
shares would each count slots of their own k and together overfill the GPU. A claim reads the
GPU's live tenants and adds its own while it holds the folder's ``claims.lock``, so two claims
never both take the last room of a GPU; that lock is held for milliseconds, a tenancy for the
job's life. A shared job goes to the GPU with the fewest tenants, then the most memory free
(co-tenants share the GPU's compute: spreading first), a whole-GPU job to the first GPU
without tenants. Where the
memory of a GPU of the pool is unknown the share cannot be checked, and the job takes a whole
GPU, as does a job whose share is more than a GPU holds.

A job on several GPUs (``gpu=N``: N processes of torchrun) takes N whole GPUs at once, all or
none: a job that held some while it waited for the rest could wait on another that holds the
rest and waits for its. pdelab.runtime.gpu_job takes them before torchrun starts, narrows
``CUDA_VISIBLE_DEVICES`` to the N, and hands their record down in :data:`GIVEN` so that the
trainer in each process claims nothing more and records them.

Visible GPUs, first found wins: ``PDELAB_GPUS`` (a comma-separated list, each entry an id with
its memory in GB if known, ``0:80,1:24``: tests fake a node with it), ``CUDA_VISIBLE_DEVICES``,
then the UUIDs ``nvidia-smi`` lists. Their memory: ``PDELAB_GPUS``' own, else nvidia-smi's
``memory.total`` per UUID (an ordinal of CUDA_VISIBLE_DEVICES names one GPU or another by the
device order, so ordinals only where every GPU has the same memory); nvidia-smi is asked for
memory only by a job with a share. Nothing is claimed under SLURM (``SLURM_JOB_ID``: the
scheduler has assigned the job its device, or its shard of one), for a CPU profile, or where
no GPU is visible.

MPS. Co-tenants of a GPU are time-sliced by the driver unless NVIDIA's Multi-Process Service
runs there (``nvidia-cuda-mps-control`` installed and its pipe folder, ``CUDA_MPS_PIPE_DIRECTORY``
else /tmp/nvidia-mps, holding the daemon's ``control`` pipe); then their kernels run at once.
The record says which; no daemon is started here.

Device order. nvidia-smi numbers GPUs in PCI bus order, CUDA by default fastest first
(``CUDA_DEVICE_ORDER``), so on a node of mixed GPUs an ordinal can name one GPU in nvidia-smi
and another in CUDA. A pool found through nvidia-smi is therefore named by GPU UUID, which
CUDA_VISIBLE_DEVICES accepts and which names one physical GPU under either order: the tenant
file and the device the job opens are the same GPU, and a ``CUDA_DEVICE_ORDER`` the user set
is left as it is. A pool the user gave (CUDA_VISIBLE_DEVICES, PDELAB_GPUS) is narrowed to one
of its own entries and the order is not touched either, so an ordinal keeps meaning the GPU
it meant in the user's list; setting ``PCI_BUS_ID`` there would move it on a mixed node. The
slot records the order in force. torch is not asked: ``torch.cuda.device_count`` falls back
to ``cudaGetDeviceCount`` when NVML fails, which initialises CUDA before the slot narrows
CUDA_VISIBLE_DEVICES.

A job that finds no room (more jobs than the GPUs hold: ``--resources`` above what the node
has, or another workflow on the same node) waits up to ``PDELAB_GPU_WAIT_S`` seconds (default
300), then stops with a message naming the tenants. The slot folder is per user
(``PDELAB_GPU_SLOT_DIR``, else ``$XDG_RUNTIME_DIR/pdelab-gpu-slots``, else
``/tmp/pdelab-gpu-slots-<uid>``). Only the standard library is imported (pdelab.plan.card_fit is
arithmetic): the slot must be taken before torch initialises CUDA, which reads
``CUDA_VISIBLE_DEVICES`` once.

What the train rule asks for (:func:`planned_share`, workflow/rules/train.smk's resources):
``gpu``, the whole GPUs (SLURM's ``--gpus``); ``gpu_percent``, hundredths of a GPU for
Snakemake's count (``snakemake --resources gpu_percent=400`` on a 4-GPU node runs as many
shared jobs as the plan's jobs per GPU allow); ``gpu_share_mib``, the share it hands the claim.
On SLURM a shared job takes a whole GPU unless the cluster splits its GPUs into ``shard``
GRES and ``PDELAB_SLURM_GPU_SHARDS`` says how many per GPU: then it asks ``--gres=shard:n``
(:func:`shards_of`) of the GPU partition instead of ``--gpus=1``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

DEFAULT_WAIT_S = 300.0
POLL_S = 0.5
# the slots a parent (pdelab.runtime.gpu_job) holds for this process
GIVEN = "PDELAB_GPU_SLOTS_GIVEN"
SHARE = "PDELAB_GPU_SHARE_MIB"  # this job's share of a GPU (MiB), set by the train rule
CLAIMS = "claims.lock"  # held while a claim reads the tenants and adds its own
MIB_PER_GB = 1024  # the plan's GB are GiB (card_gib), nvidia-smi's memory is in MiB
MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"
_HELD: list[Slot] = []  # the slots of this process, kept open (and locked) until it exits


class SlotsBusy(RuntimeError):
    """No visible GPU has room for the job for longer than the wait allows."""


SAFETY = 0.05  # share of a card left free beyond the modelled allocator reserve and context


def usable_mib(card_mib: float) -> int:
    """What jobs may take of a card of ``card_mib`` MiB together: all but :data:`SAFETY`."""
    return math.floor(card_mib * (1 - SAFETY))


# co-tenants of one GPU at most: memory alone would put 70 small jobs on an 80 GB card, but
# they share its compute, and what k jobs gain over one is yet to be measured on a GPU
# (benchmarks/gpu_check.sh: jobs per GPU)
MAX_JOBS_PER_GPU = 8


def jobs_per_gpu(share: int, card_mib: float) -> int:
    """How many jobs of ``share`` MiB one card of ``card_mib`` MiB runs at once, at most
    :data:`MAX_JOBS_PER_GPU` (0: not even one; pdelab.runtime.gpu_slots then gives the job
    the whole GPU)."""
    if share <= 0:
        raise ValueError(f"a job's GPU share must be > 0 MiB, got {share}")
    return min(MAX_JOBS_PER_GPU, usable_mib(card_mib) // share)


def shards_of(share: int, card_mib: float, shards_per_gpu: int) -> int:
    """The SLURM ``shard`` GRES a job of ``share`` MiB asks for on a cluster that splits each
    GPU into ``shards_per_gpu`` shards: its part of the usable memory, rounded up, so that
    jobs whose shards fit one GPU together fit its memory, whatever their mix of shares (a
    shard count is all SLURM checks: it does not see memory)."""
    return max(1, math.ceil(shards_per_gpu * share / usable_mib(card_mib)))


@dataclass(frozen=True)
class Tenant:
    """A live job on one GPU: its process and its share (None: the whole GPU)."""

    device: str
    pid: int
    share_mib: int | None
    path: Path

    def label(self) -> str:
        what = "whole GPU" if self.share_mib is None else f"{self.share_mib} MiB"
        return f"pid {self.pid} ({what})"


@dataclass
class Slot:
    """A held GPU: its position in the pool, its CUDA id, the locked tenant file, and the
    job's share of it with the co-tenants it found there."""

    index: int
    device: str  # the id CUDA_VISIBLE_DEVICES names: an ordinal or a GPU UUID
    pool: tuple[str, ...]
    lock_path: Path
    fd: int
    device_order: str = "FASTEST_FIRST"  # CUDA_DEVICE_ORDER in force: how an ordinal reads
    share_mib: int | None = None  # None: the whole GPU
    memory_mib: int | None = None  # the GPU's memory, where a share was checked against it
    co_tenants: tuple[Tenant, ...] = ()  # the jobs already on the GPU when it was claimed
    mps: str | None = None  # the MPS pipe folder where MPS serves the GPU's jobs

    def record(self) -> dict[str, object]:
        """What run.json keeps of the slot."""
        out: dict[str, object] = {
            "index": self.index,
            "cuda_visible_devices": self.device,
            "cuda_device_order": self.device_order,
            "pool": list(self.pool),
            "lock": str(self.lock_path),
            "share_mib": self.share_mib,
            "mps": self.mps,
        }
        if self.share_mib is not None and self.memory_mib is not None:
            out |= {
                "memory_mib": self.memory_mib,
                "jobs_per_gpu": jobs_per_gpu(self.share_mib, self.memory_mib),
                "co_tenants": [{"pid": t.pid, "share_mib": t.share_mib} for t in self.co_tenants],
                "sharing": "mps" if self.mps else "time-sliced",
            }
        return out

    def release(self) -> None:
        """Give the GPU back before the process exits (exiting does it too)."""
        if self.fd >= 0:
            self.lock_path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = -1


# -- the pool and its memory ----------------------------------------------------------------


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _fake_entries(value: str) -> list[tuple[str, int | None]]:
    """``PDELAB_GPUS``' entries: (id, memory in MiB or None), from ``id`` or ``id:GB``."""
    entries = []
    for item in _split(value):
        device, _, gb = item.partition(":")
        try:
            entries.append((device.strip(), round(float(gb) * MIB_PER_GB) if gb else None))
        except ValueError:
            raise ValueError(f"PDELAB_GPUS: {item!r} is not ID or ID:GB") from None
    return entries


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as ids for CUDA_VISIBLE_DEVICES (see the module doc)."""
    env = os.environ if env is None else env
    if env.get("PDELAB_GPUS") is not None:
        return [device for device, _ in _fake_entries(env["PDELAB_GPUS"])]
    if env.get("CUDA_VISIBLE_DEVICES") is not None:
        # "-1" or "" hide every GPU; a list stops at its first invalid entry, as CUDA reads it
        ids = _split(env["CUDA_VISIBLE_DEVICES"])
        return [] if not ids or ids[0].startswith("-") else ids
    return smi_uuids(env)


def smi_gpus(env: dict[str, str] | None = None) -> list[tuple[str, int]]:
    """(UUID, memory in MiB) of each GPU nvidia-smi lists; none where nvidia-smi is missing
    or fails (no driver)."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        uuid, _, memory = (part.strip() for part in line.partition(","))
        if uuid.startswith("GPU-"):
            found.append((uuid, int(memory) if memory.isdigit() else 0))
    return found


def smi_uuids(env: dict[str, str] | None = None) -> list[str]:
    """The UUIDs of the GPUs nvidia-smi lists (names that do not depend on the device order)."""
    return [uuid for uuid, _ in smi_gpus(env)]


def pool_memory(pool: list[str], env: dict[str, str] | None = None) -> dict[str, int] | None:
    """Each pool GPU's memory in MiB, or None where that of any one is unknown."""
    env = os.environ if env is None else env
    if env.get("PDELAB_GPUS") is not None:
        known = {d: m for d, m in _fake_entries(env["PDELAB_GPUS"]) if m}
    else:
        listed = dict(smi_gpus(env))
        same = set(listed.values())
        known = {}
        for device in pool:
            named = [m for uuid, m in listed.items() if uuid.startswith(device)]
            if device.startswith("GPU-") and len(named) == 1:
                known[device] = named[0]  # a UUID, or a unique prefix of one (CUDA takes both)
            elif device.isdigit() and len(same) == 1:
                known[device] = next(iter(same))  # an ordinal: any GPU, all alike
    if not all(known.get(device) for device in pool):
        return None
    return {device: known[device] for device in pool}


def mps_pipe(env: dict[str, str] | None = None) -> str | None:
    """The pipe folder of a running MPS control daemon, or None (no MPS: co-tenants are
    time-sliced)."""
    env = os.environ if env is None else env
    if not shutil.which("nvidia-cuda-mps-control", path=env.get("PATH")):
        return None
    folder = env.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DEFAULT
    return folder if Path(folder, "control").exists() else None


def requested_share(env: dict[str, str] | None = None) -> int | None:
    """The job's share of a GPU in MiB (:data:`SHARE`), or None: the whole GPU."""
    env = os.environ if env is None else env
    value = (env.get(SHARE) or "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"{SHARE}={value!r}: expected the job's share of a GPU in MiB")
    return int(value) or None  # 0: the whole GPU


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


# -- tenants: the slot folder ---------------------------------------------------------------


def slot_dir(env: dict[str, str] | None = None) -> Path:
    """The per-user folder of the tenant files (created, private)."""
    env = os.environ if env is None else env
    if env.get("PDELAB_GPU_SLOT_DIR"):
        path = Path(env["PDELAB_GPU_SLOT_DIR"])
    elif env.get("XDG_RUNTIME_DIR"):
        path = Path(env["XDG_RUNTIME_DIR"]) / "pdelab-gpu-slots"
    else:
        path = Path(f"/tmp/pdelab-gpu-slots-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def safe_name(device: str) -> str:
    """A GPU id as part of a file name (a UUID's or MIG id's characters made safe)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", device)


@contextmanager
def claims_locked(folder: Path) -> Iterator[None]:
    """Hold the folder's claim lock: one claim at a time reads and adds tenants."""
    fd = os.open(folder / CLAIMS, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _held_by_someone(path: Path) -> bool:
    """Whether a process holds the tenant file's flock (its job lives)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def tenants(folder: Path, device: str, prune: bool = False) -> list[Tenant]:
    """The live jobs on one GPU; ``prune`` (under :func:`claims_locked`) removes the files of
    dead ones."""
    live = []
    for path in sorted(folder.glob(f"gpu-{safe_name(device)}@*.tenant")):
        if not _held_by_someone(path):
            if prune:
                path.unlink(missing_ok=True)
            continue
        try:
            doc = json.loads(path.read_text())
            live.append(Tenant(device, int(doc["pid"]), doc["share_mib"], path))
        except (OSError, ValueError, KeyError, TypeError):  # being written: read as whole
            live.append(Tenant(device, 0, None, path))
    return live


def _add_tenant(folder: Path, device: str, share_mib: int | None) -> tuple[Path, int]:
    """A tenant file of this process on ``device``, locked (call under :func:`claims_locked`)."""
    prefix = f"gpu-{safe_name(device)}@{os.getpid()}-"
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tenant", dir=folder)
    fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while a reader probes it (microseconds)
    os.write(fd, json.dumps({"pid": os.getpid(), "share_mib": share_mib}).encode())
    return Path(name), fd


def room_mib(memory_mib: int, on_it: list[Tenant]) -> int:
    """What a GPU has left for a share: its usable memory less its tenants' shares (none
    where a tenant holds it whole)."""
    if any(t.share_mib is None for t in on_it):
        return 0
    return usable_mib(memory_mib) - sum(t.share_mib or 0 for t in on_it)


def choose(
    pool: list[str],
    live: dict[str, list[Tenant]],
    count: int,
    share_mib: int | None,
    memory: dict[str, int] | None,
) -> list[int]:
    """The pool positions a claim takes, or none: ``count`` GPUs without tenants (whole), or
    of the GPUs with room for the share (and fewer than MAX_JOBS_PER_GPU tenants) the one with
    the fewest tenants, then the most room (spread before packing)."""
    if share_mib is None or memory is None:
        free = [i for i, device in enumerate(pool) if not live[device]]
        return free[:count] if len(free) >= count else []
    room = {i: room_mib(memory[device], live[device]) for i, device in enumerate(pool)}
    fitting = [
        i for i, left in room.items() if left >= share_mib and len(live[pool[i]]) < MAX_JOBS_PER_GPU
    ]
    return [min(fitting, key=lambda i: (len(live[pool[i]]), -room[i], i))] if fitting else []


def _holders(pool: list[str], live: dict[str, list[Tenant]]) -> str:
    return "; ".join(
        f"GPU {device}: {', '.join(t.label() for t in live[device])}"
        for device in pool
        if live[device]
    )


def busy_message(
    pool: list[str],
    live: dict[str, list[Tenant]],
    count: int,
    wait_s: float,
    share_mib: int | None = None,
    memory: dict[str, int] | None = None,
) -> str:
    """Why a job found no room, naming the tenants."""
    n, names = len(pool), ",".join(pool)
    longer = f"or set PDELAB_GPU_WAIT_S to wait longer than {wait_s:g} s"
    if share_mib is not None and memory is not None:
        left = ", ".join(f"{d}: {max(0, room_mib(memory[d], live[d]))}" for d in pool)
        return (
            f"no GPU of {n} ({names}) has {share_mib} MiB free (MiB left, {left}): "
            f"{_holders(pool, live)}. Let `snakemake --resources gpu_percent={100 * n}` count "
            f"the shares (`pdelab plan`: jobs per GPU), {longer}"
        )
    if count == 1:
        return (
            f"all {n} GPUs ({names}) are held by other jobs: {_holders(pool, live)}. Run at "
            f"most {n} at once (snakemake --resources gpu={n}), {longer}"
        )
    free = sum(not live[device] for device in pool)
    return (
        f"{count} GPUs asked, {free} of {n} ({names}) free: {_holders(pool, live)}. Let "
        f"`snakemake --resources gpu={n}` count the GPUs every job asks for, {longer}"
    )


def acquire_many(
    pool: list[str],
    folder: Path,
    count: int,
    wait_s: float,
    share_mib: int | None = None,
    memory: dict[str, int] | None = None,
) -> list[Slot]:
    """Become a tenant of ``count`` whole GPUs of ``pool`` at once, all or none, or of one
    GPU's ``share_mib`` (``memory``: each GPU's MiB), polling until ``wait_s`` has passed: a
    job that kept some GPUs while waiting for the rest could deadlock with another doing the
    same."""
    if not pool:
        raise ValueError("no GPU to take a slot of: the pool is empty")
    if not 1 <= count <= len(pool):
        raise ValueError(f"{count} GPUs asked of a pool of {len(pool)} ({','.join(pool)})")
    if share_mib is not None and (count > 1 or memory is None):
        share_mib = None  # several GPUs, or memory unknown: whole GPUs
    if share_mib is not None and memory and share_mib > max(map(usable_mib, memory.values())):
        share_mib = None  # more than any GPU holds: the job runs alone
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        with claims_locked(folder):
            live = {device: tenants(folder, device, prune=True) for device in pool}
            if chosen := choose(pool, live, count, share_mib, memory):
                slots = []
                for i in chosen:
                    path, fd = _add_tenant(folder, pool[i], share_mib)
                    size = memory[pool[i]] if share_mib is not None and memory else None
                    slot = Slot(i, pool[i], tuple(pool), path, fd, share_mib=share_mib)
                    slot.memory_mib, slot.co_tenants = size, tuple(live[pool[i]])
                    slots.append(slot)
                return slots
        if time.monotonic() >= deadline:
            raise SlotsBusy(busy_message(pool, live, count, wait_s, share_mib, memory))
        if not told:
            if share_mib is not None:
                what = f"no GPU has {share_mib} MiB free"
            else:
                what = f"all {len(pool)} GPUs busy" if count == 1 else f"fewer than {count} free"
            print(f"pdelab.runtime.gpu_slots: {what}; waiting", file=sys.stderr)
            told = True
        time.sleep(POLL_S)


def claim(device: str, env: dict[str, str] | None = None, count: int = 1) -> Slot | None:
    """Take ``count`` whole GPUs, or one GPU's share (:data:`SHARE` in ``env``), for this
    process and narrow ``CUDA_VISIBLE_DEVICES`` to them; returns the first, or None where the
    job needs no slot (cpu, SLURM, no GPU visible, or slots a parent holds for it:
    :data:`GIVEN`). Call before torch initialises CUDA. A second call in the same process
    returns the slot it holds."""
    env = os.environ if env is None else env
    if _HELD:
        return _HELD[0]
    if device == "cpu" or "SLURM_JOB_ID" in env or GIVEN in env:
        return None
    pool = visible_gpus(env)
    if not pool:
        return None
    wait_s = float(env.get("PDELAB_GPU_WAIT_S", DEFAULT_WAIT_S))
    share = requested_share(env) if count == 1 else None
    memory = pool_memory(pool, env) if share is not None else None
    slots = acquire_many(pool, slot_dir(env), count, wait_s, share, memory)
    order = env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST"  # CUDA's default
    mps = mps_pipe(env)
    for slot in slots:
        slot.device_order, slot.mps = order, mps
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


# -- what the train rule asks for --------------------------------------------------------------

PLAN_FILE = Path("results/plan.json")  # the cost plan's data (pdelab.plan.render.plan_data)
SLURM_PARTITIONS = Path("workflow/profiles/slurm/partitions.yaml")
SHARDS = "PDELAB_SLURM_GPU_SHARDS"  # the shard GRES per GPU of the cluster: opts SLURM in
SHARD_PARTITION = "PDELAB_SLURM_SHARD_PARTITION"  # default: partitions.yaml's GPU partition
SHARING = "PDELAB_GPU_SHARING"  # "0": every job takes whole GPUs
PERCENT = 100  # one GPU in Snakemake's count (resources: gpu_percent)


@dataclass(frozen=True)
class GpuShare:
    """How one training job holds GPUs, as its rule declares it: ``gpu`` whole GPUs
    (SLURM's ``--gpus``), ``percent`` hundredths of GPUs in Snakemake's count, ``mib`` its
    share of one GPU (0: whole GPUs), and on a sharded SLURM cluster its ``gres`` and the
    ``partition`` that has the shards."""

    gpu: int
    percent: int
    mib: int = 0
    gres: str | None = None
    partition: str | None = None
    jobs_per_gpu: int = field(default=1, compare=False)


@lru_cache(maxsize=4)
def _plan_doc(path: str, mtime_ns: int) -> dict[str, Any]:
    del mtime_ns  # part of the cache key: a rewritten plan is read again
    doc = json.loads(Path(path).read_text())
    doc["by_key"] = {(str(j["task"]), str(j["variant"]), str(j["seed"])): j for j in doc["jobs"]}
    return doc


def plan_doc(path: Path = PLAN_FILE) -> dict[str, Any] | None:
    """The cost plan's data, with its jobs by (task, variant, seed); None where absent."""
    try:
        return _plan_doc(str(path), path.stat().st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def shard_partition(env: dict[str, str], partitions: Path = SLURM_PARTITIONS) -> str:
    """The partition a shard job goes to (the plugin routes a job without ``gpu`` to one
    without GPUs): :data:`SHARD_PARTITION`, else partitions.yaml's with the most GPUs."""
    if env.get(SHARD_PARTITION):
        return env[SHARD_PARTITION]
    import yaml  # only where a SLURM run shares GPUs

    try:
        found = yaml.safe_load(partitions.read_text())["partitions"]
        with_gpus = {name: int((p or {}).get("max_gpu", 0)) for name, p in found.items()}
    except (OSError, KeyError, TypeError, ValueError, AttributeError):
        return "gpu"
    best = max(with_gpus, key=with_gpus.__getitem__, default="gpu")
    return best if with_gpus.get(best) else "gpu"


def planned_share(
    profile: str,
    key: tuple[str, str, str],
    gpus: int,
    card_gb: float | None,
    path: Path = PLAN_FILE,
    env: dict[str, str] | None = None,
) -> GpuShare:
    """What a training job of ``key`` (task, variant, seed), on ``gpus`` GPUs
    (pdelab.runtime.cluster.train_gpus), declares: a share of one GPU where the cost plan
    of the run profile, made for the profile's card (``card_gb``, None: undeclared), has its
    share and at least two such jobs fit the card; else its whole GPUs."""
    env = os.environ if env is None else env
    whole = GpuShare(gpus, PERCENT * gpus)
    if gpus != 1 or env.get(SHARING) == "0":
        return whole
    doc = plan_doc(path)
    if doc is None or doc.get("profile") != profile or not doc.get("card_gib"):
        return whole
    if card_gb is not None and float(doc["card_gib"]) != card_gb:
        return whole  # the trainer runs the paper's batch, not the plan's micro-batch
    row = doc["by_key"].get(key)
    if row is None or int(row.get("gpus", 1)) != 1 or not row.get("gpu_share_mib"):
        return whole
    share, card_mib = int(row["gpu_share_mib"]), float(doc["card_gib"]) * MIB_PER_GB
    k = jobs_per_gpu(share, card_mib)
    if k < 2:
        return whole
    shards = int(env.get(SHARDS) or 0)
    if shards > 0:
        gres = f"shard:{shards_of(share, card_mib, shards)}"
        return GpuShare(0, PERCENT // k, share, gres, shard_partition(env), k)
    return GpuShare(1, PERCENT // k, share, jobs_per_gpu=k)


def main(argv: list[str] | None = None) -> None:
    """``python -m pdelab.runtime.gpu_slots``: the pool this process sees and its tenants."""
    del argv
    pool = visible_gpus()
    if not pool:
        print("no GPU visible (PDELAB_GPUS, CUDA_VISIBLE_DEVICES, nvidia-smi)")
        return
    folder = slot_dir()
    memory = pool_memory(pool) or {}
    mps = mps_pipe()
    print(f"MPS: {'running, pipes in ' + mps if mps else 'not running (time-sliced)'}")
    for device in pool:
        on_it = tenants(folder, device)
        size = f", {memory[device]} MiB" if device in memory else ""
        print(f"GPU {device}{size}: {', '.join(t.label() for t in on_it) or 'free'}")


if __name__ == "__main__":
    main()
