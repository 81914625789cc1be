"""Resuming a run: from its last good checkpoint, and only one of this very run.

A checkpoint after every epoch, and after the current step on SIGTERM (a cluster's time limit),
lets a job started again resume exactly: batch order depends only on (seed, epoch), so on CPU
a resumed run's metrics equal an uninterrupted run's (pdelab.training.checkpoint: verified,
``weights_only``, a damaged one gives way to the previous one). Each checkpoint is tied to its
run's identity (spec and data) and code digest; anything else starts afresh rather than mix
runs. A run whose very version was trained before (a params change reverted) is put back
from the store instead (:func:`restored`, pdelab.records.run_store).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from pdelab.data.store import verified_manifest
from pdelab.records import provenance, run_store
from pdelab.records.run import check_identity, identity, run_dir, spec_sha256
from pdelab.spec.config import RunSpec
from pdelab.training import checkpoint, distributed
from pdelab.training.checkpoint import CorruptCheckpoint
from pdelab.training.session import RunState, Session
from pdelab.training.trained import BEST

CHECKPOINT = "checkpoint.pt"
RETRAIN = "PDELAB_RETRAIN"  # 1: train even a run whose version is kept (snakemake -f)


def resume(s: Session) -> None:
    """Continue from the last good checkpoint (a damaged one gives way to the previous one),
    but only one of this very spec, data and code: anything else (an edited params.yaml,
    re-prepared data, an edited source file the run executes) starts afresh rather than
    mixing runs. A damaged best.pt cannot be rebuilt from a checkpoint, so it too means a
    fresh start, and so does a finished run's checkpoint (its job ran to the end, so a job
    started again was asked to train it again: ``snakemake -f``). A checkpoint or best.pt
    of another run (task, variant or seed) stops the job, naming both (pdelab.records.run).
    With several processes rank 0 alone decides (it alone moves a damaged file aside) and
    the others load the file it chose, so every rank resumes from the same state."""
    found = resumable(s) if s.world.rank == 0 else None
    path = distributed.from_first(None if found is None else str(found[1]), s.world)
    if path is None:
        return
    ckpt = found[0] if found is not None else checkpoint.load(Path(path), s.device)
    state = RunState.from_checkpoint(ckpt["state"])
    s.model.load_state_dict(ckpt["model"])
    s.optimizer.load_state_dict(ckpt["optimizer"])
    s.schedule.load_state_dict(ckpt["schedule"])
    checkpoint.restore_rng(ckpt["rng"])
    s.state, s.resumed = state, True
    part = state.partial
    where = f"step {part['step']} of epoch {state.epoch + 1}" if part else f"epoch {state.epoch}"
    say(s, f"resuming from {where} of {path}")


def resumable(s: Session) -> tuple[dict[str, Any], Path] | None:
    """The checkpoint :func:`resume` continues from, and its file; None to start afresh."""
    found = checkpoint.load_latest(s.out / CHECKPOINT, s.device)
    if found is not None and not of_this_version(s, *found):
        found = None
    if found is None and (back := take_back(s)) is not None:
        say(s, f"took back this version's unfinished training from {back}")
        found = checkpoint.load_latest(s.out / CHECKPOINT, s.device)
    if found is None:
        return None
    ckpt, path = found
    state = RunState.from_checkpoint(ckpt["state"])
    if finished(state, s.run):  # its job ran to the end: running it again is training it again
        print(f"{path} is of a finished run; training it again", file=sys.stderr)
        return None
    if state.best_epoch:
        try:
            checkpoint.load_best(s.out / BEST, run_identity(s), torch.device("cpu"))
        except CorruptCheckpoint as bad:
            print(f"{bad}; starting from scratch", file=sys.stderr)
            return None
    return ckpt, path


def of_this_version(s: Session, ckpt: dict[str, Any], path: Path) -> bool:
    """Whether a checkpoint is of this very version (spec, data and code). One of an earlier
    version of this run (params.yaml, the data or the code changed since) is set aside in the
    store when unfinished, to resume if its params return (pdelab.records.run_store); one of
    another run (task, variant or seed) stops the job, naming both."""
    ours = run_identity(s)
    theirs = identity(json.loads(ckpt["spec"]), ckpt["data_hash"])
    check_identity(path, theirs, {k: ours[k] for k in ("task", "variant", "seed")})
    code = provenance.code_digest(s.run)
    made = ckpt.get("code_digest", "unrecorded")
    if theirs == ours and made == code:
        return True
    why = "another spec or data" if theirs != ours else f"other code ({made} -> {code})"
    if finished(RunState.from_checkpoint(ckpt["state"]), s.run):  # its version is kept
        print(f"{path} is of {why}; starting afresh", file=sys.stderr)
        return False
    if not in_run_folder(s):  # another folder's checkpoint is not the store's to keep
        print(f"{path} is of {why}; starting afresh", file=sys.stderr)
        return False
    key = run_store.version_key(theirs["spec_sha256"], theirs["data_hash"], made)
    aside = run_store.set_aside(s.out, s.run.profile, s.run.task, s.run.variant, s.run.seed, key)
    print(
        f"{path} is of {why}: its unfinished training is set aside in {aside} and resumes "
        "when its params return; starting afresh",
        file=sys.stderr,
    )
    return False


def in_run_folder(s: Session) -> bool:
    """Whether the run trains in its own folder (results/runs/...), whose versions the store
    keeps, rather than in a folder of a caller's choosing."""
    r = s.run
    return Path(s.out).resolve() == run_dir(r.profile, r.task, r.variant, r.seed).resolve()


def take_back(s: Session) -> Path | None:
    """Put this version's set-aside unfinished training back into the run folder."""
    if not in_run_folder(s):
        return None
    code = provenance.code_digest(s.run)
    key = run_store.version_key(spec_sha256(s.run.to_dict()), s.manifest["content_hash"], code)
    return run_store.take_back(s.out, s.run.profile, s.run.task, s.run.variant, s.run.seed, key)


def say(s: Session, line: str) -> None:
    """A line on stderr, from rank 0 alone where several processes train the run."""
    if s.world.rank == 0:
        print(line, file=sys.stderr)


def finished(state: RunState, run: RunSpec) -> bool:
    """Whether a checkpoint's run had nothing left to train (every epoch, its patience spent,
    or diverged): only a job that ran to its end leaves one, so a job that finds it was asked
    to run again (``snakemake -f``), and trains afresh instead of re-reading that end."""
    if state.partial is not None:
        return False
    return not (
        state.epoch < run.train.epochs
        and state.status == "ok"
        and (state.bad_epochs < run.train.patience)
    )


def run_identity(s: Session) -> dict[str, Any]:
    """Whose records these are (pdelab.records.run.identity): every record file carries it."""
    return identity(s.run.to_dict(), s.manifest["content_hash"])


def save_checkpoint(s: Session) -> None:
    """Everything a resume needs, in a form ``weights_only`` loading accepts; the last
    checkpoint is kept as checkpoint.prev.pt (pdelab.training.checkpoint). Rank 0's alone: every
    rank's state is the same."""
    if s.world.rank != 0:
        return
    saved = {
        "spec": s.run.to_json(),
        "data_hash": s.manifest["content_hash"],
        "code_digest": provenance.code_digest(s.run),  # a resume needs the same code
        "model": s.model.state_dict(),
        "optimizer": s.optimizer.state_dict(),
        "schedule": s.schedule.state_dict(),
        "rng": checkpoint.rng_state(s.device),
        "state": asdict(s.state),
    }
    checkpoint.save(saved, s.out / CHECKPOINT)


def restored(run: RunSpec, out: Path) -> bool:
    """Whether the run's version (its spec, the data it would read, its code) is kept in the
    store (pdelab.records.run_store) and was put back into ``out``: a params change reverted
    trains nothing. Its records are checked as they are read back."""
    if distributed.launched() is not None or os.environ.get(RETRAIN) == "1":
        return False  # under torchrun the ranks train; PDELAB_RETRAIN=1 asks to train again
    try:
        manifest = verified_manifest(run.data_dir)
    except (OSError, ValueError):
        return False  # no data yet: the job trains, and says why
    code = provenance.code_digest(run)
    key = run_store.version_key(spec_sha256(run.to_dict()), manifest["content_hash"], code)
    kept = run_store.find(run.profile, run.task, run.variant, run.seed, key)
    if kept is None:
        return False
    run_store.restore(kept, Path(out))
    print(f"pdelab.training.train: restored {kept} (kept version {key}); nothing trained")
    return True
