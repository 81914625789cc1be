"""Run a job that touches CUDA on a GPU of its own: ``python -m pdelab.runtime.gpu_job N
COMMAND...``.

The step timings and the probes of trained models open CUDA like a training job, but do not
run the trainer, which takes its GPU slot itself (pdelab.runtime.gpu_slots). Without a slot each
would open ``cuda:0`` beside a training job, and a timing would measure two jobs at once. Here, for
``N`` = 1 (the rule's ``gpu`` resource), the slot is taken with pdelab.runtime.gpu_slots (the same
lock files, so a training job and a timing never share a GPU), ``CUDA_VISIBLE_DEVICES`` is
narrowed to it, and this process becomes COMMAND (``exec``) with the lock file still open:
the lock lasts exactly as long as the job, however it ends. ``N`` = 0 (a CPU run profile),
a SLURM job (SLURM gave the job its GPU) or a machine without a visible GPU runs COMMAND as
it is. Only the standard library is imported, before COMMAND's interpreter imports torch.
"""

from __future__ import annotations

import os
import sys

from pdelab.runtime import gpu_slots

USAGE = (
    "usage: python -m pdelab.runtime.gpu_job GPUS COMMAND [ARG...]  (GPUS: the rule's gpu, 0 or 1)"
)


def take(gpus: int, env: dict[str, str] | None = None) -> gpu_slots.Slot | None:
    """The slot for a job that asked for ``gpus`` GPUs (None where it needs or gets none)."""
    if gpus not in (0, 1):
        raise SystemExit(f"pdelab.runtime.gpu_job: {gpus} GPUs asked; a job takes one slot at most")
    return gpu_slots.claim("cuda", env) if gpus else None


def main(argv: list[str] | None = None) -> None:
    """Take the slot, then become the command (the lock file's descriptor stays open)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit(USAGE)
    try:
        slot = take(int(argv[0]))
    except gpu_slots.SlotsBusy as busy:
        raise SystemExit(f"pdelab.runtime.gpu_job: {busy}") from None
    if slot is not None:
        os.set_inheritable(slot.fd, True)  # the lock outlives exec, held by the job itself
        print(f"pdelab.runtime.gpu_job: GPU {slot.device} (slot {slot.index})", file=sys.stderr)
    sys.stderr.flush()
    try:
        os.execvp(argv[1], argv[1:])
    except OSError as error:
        raise SystemExit(f"pdelab.runtime.gpu_job: cannot run {argv[1]!r}: {error}") from None


if __name__ == "__main__":
    main()
