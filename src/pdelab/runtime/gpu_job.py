"""Run a job on GPUs of its own: ``python -m pdelab.runtime.gpu_job N COMMAND...``.

The step timings and the probes of trained models open CUDA like a training job, but do not
run the trainer, which takes its GPU slot itself (pdelab.runtime.gpu_slots). Without a slot each
would open ``cuda:0`` beside a training job, and a timing would measure two jobs at once. A training
job on ``N`` > 1 GPUs (torchrun's N processes, workflow/rules/train.smk) needs its N GPUs taken
before torchrun starts the processes, each of which opens the GPU of its local rank. Here the
``N`` GPUs (the rule's ``gpu`` resource) are taken whole and at once with
pdelab.runtime.gpu_slots (the same tenant files, so a timing never shares a GPU with a training
job, nor a job on several GPUs with anything), ``CUDA_VISIBLE_DEVICES`` is narrowed to them,
their record is handed down (``PDELAB_GPU_SLOTS_GIVEN``: the trainer claims nothing more and
writes it to run.json), and this process becomes COMMAND (``exec``) with the tenant files
still locked: the tenancy lasts exactly as long as the job, however it ends. A one-GPU command
given a share (``PDELAB_GPU_SHARE_MIB``) takes that share of a GPU instead. ``N`` = 0
(a CPU run profile), a SLURM job (SLURM gave the job its GPUs) or a machine without a visible
GPU runs COMMAND as it is. Only the standard library is imported, before COMMAND's interpreter
imports torch.
"""

from __future__ import annotations

import json
import os
import sys

from pdelab.runtime import gpu_slots

USAGE = (
    "usage: python -m pdelab.runtime.gpu_job GPUS COMMAND [ARG...]  (GPUS: the rule's gpu, 0 to N)"
)


def take(gpus: int, env: dict[str, str] | None = None) -> list[gpu_slots.Slot]:
    """The slots for a job that asked for ``gpus`` GPUs (none where it needs or gets none)."""
    env = os.environ if env is None else env
    if gpus < 0:
        raise SystemExit(f"pdelab.runtime.gpu_job: {gpus} GPUs asked")
    if not gpus or gpu_slots.claim("cuda", env, count=gpus) is None:
        return []
    slots = gpu_slots.held_all()
    env[gpu_slots.GIVEN] = json.dumps(gpu_slots.record_of(slots))
    return slots


def main(argv: list[str] | None = None) -> None:
    """Take the slots, then become the command (the lock files' descriptors stay open)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit(USAGE)
    try:
        slots = take(int(argv[0]))
    except (gpu_slots.SlotsBusy, ValueError) as busy:
        raise SystemExit(f"pdelab.runtime.gpu_job: {busy}") from None
    for slot in slots:
        os.set_inheritable(slot.fd, True)  # the lock outlives exec, held by the job itself
        share = f", {slot.share_mib} MiB of it" if slot.share_mib is not None else ""
        print(
            f"pdelab.runtime.gpu_job: GPU {slot.device} (slot {slot.index}{share})", file=sys.stderr
        )
    sys.stderr.flush()
    try:
        os.execvp(argv[1], argv[1:])
    except OSError as error:
        raise SystemExit(f"pdelab.runtime.gpu_job: cannot run {argv[1]!r}: {error}") from None


if __name__ == "__main__":
    main()
