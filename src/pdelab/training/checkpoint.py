"""Checkpoints a run can trust: written atomically, checked by sha256, loaded with
``weights_only=True``, the previous one kept; and a clean stop on SIGTERM.

    save(obj, out / "checkpoint.pt")                 # the last one becomes checkpoint.prev.pt
    found = load_latest(out / "checkpoint.pt", device)   # (obj, path), or None: start afresh

Why a digest beside the file: ``torch.load`` notices a truncated file, but a byte flipped
inside a tensor's payload loads without complaint and silently changes the run. Each save
lists the sha256 and size of the newest checkpoints in ``checkpoint.sha256.json``, written
atomically *before* the new file is renamed into place, so after a kill at any moment every
checkpoint on disk is one the run wrote (its digest is listed) or a damaged one. No fsync:
a file torn by a power cut fails its digest like any other, and the previous one is used.

Why ``weights_only=True``: a checkpoint from a shared results folder must not be able to
run code when loaded, so a checkpoint holds tensors, dicts, lists, tuples, numbers, strings
and None only (RNG states included, see :func:`rng_state`). :func:`save` refuses anything
else, at save time rather than at resume: it walks the object (:func:`refused`) instead of
loading its bytes back (:func:`refused_by_loading`, the reference, which pays a whole load at
every save); a test holds the two to the same verdicts.

Why SIGTERM is caught (:class:`StopOnSigterm`): it is what a cluster sends at a time limit,
seconds before SIGKILL; the training loop checks the flag after every step and checkpoints
there, so a long epoch's work is not lost (see pdelab.training.train).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import signal
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pdelab.records.atomic import atomic_path, write_text
from pdelab.records.run import check_identity

KEEP = 3  # digests listed: the new file, the one rotated to .prev, and the one before it
EXIT_STOPPED = 128 + signal.SIGTERM  # 143: the shell's status of a job ended by SIGTERM


class CorruptCheckpoint(Exception):
    """A checkpoint that cannot be trusted or loaded; ``reason`` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"checkpoint {path} is unusable: {reason}")
        self.path, self.reason = path, reason


class Stopped(Exception):
    """The run was asked to stop (SIGTERM) and checkpointed; the command exits with
    :data:`EXIT_STOPPED` and the same command resumes it."""

    exit_status = EXIT_STOPPED


def previous(path: Path) -> Path:
    """Where the last good checkpoint goes when a new one is saved: checkpoint.prev.pt."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def digests_path(path: Path) -> Path:
    """The digest list shared by a checkpoint and its previous one: checkpoint.sha256.json."""
    return path.with_name(f"{path.stem.removesuffix('.prev')}.sha256.json")


# what weights_only loading rebuilds, by exact type: a subclass (a namedtuple, say) pickles
# as its own class, which it refuses
LOADABLE = {torch.Tensor, torch.nn.Parameter, torch.Size, torch.dtype, torch.device}
LOADABLE |= {type(None), bool, int, float, complex, str, bytes, bytearray}
MAPPINGS = {dict, OrderedDict}
COLLECTIONS = {list, tuple, set}


def refused(obj: Any, where: str = "checkpoint") -> str | None:
    """The first part of obj that weights_only loading would refuse, named by its path and
    type; None when it would load."""
    kind = type(obj)
    if kind in LOADABLE:
        return None
    if kind in MAPPINGS:
        for key, value in obj.items():
            if found := refused(key, f"a key of {where}") or refused(value, f"{where}[{key!r}]"):
                return found
        return None
    if kind in COLLECTIONS:
        for i, value in enumerate(obj):
            if found := refused(value, f"{where}[{i}]"):
                return found
        return None
    return f"{where} is a {kind.__module__}.{kind.__qualname__}"


def refused_by_loading(obj: Any) -> str | None:
    """The reference for :func:`refused`: torch's own reason for refusing to load obj's bytes
    with weights_only=True, or None when they load."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        return refusal(error)
    return None


def serialize(obj: Any) -> bytes:
    """``torch.save``'s bytes of obj, which must load back with ``weights_only=True``."""
    if problem := refused(obj):
        raise TypeError(
            "a checkpoint must load with weights_only=True, so it may hold only tensors, "
            f"dicts, lists, tuples, numbers, strings and None: {problem}"
        )
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def refusal(error: Exception) -> str:
    """The line of torch's weights_only error that names what was refused."""
    lines = str(error).splitlines()
    named = [x.strip() for x in lines if "WeightsUnpickler error" in x]
    return (named or lines or [type(error).__name__])[0].split(". ")[0]


def listed(path: Path) -> list[dict[str, Any]]:
    """The digests recorded for ``path`` (newest first); [] if there is no record."""
    record = digests_path(path)
    try:
        return list(json.loads(record.read_text())["checkpoints"])
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as error:
        reason = f"its digest list {record.name} is unreadable ({error})"
        raise CorruptCheckpoint(path, reason) from error


def save(obj: Any, path: Path, *, rotate: bool = True) -> None:
    """Write obj to path atomically, listing its digest first; with ``rotate`` the file it
    replaces is kept as :func:`previous`."""
    data = serialize(obj)
    entry = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    try:
        older = [e for e in listed(path) if e != entry]
    except CorruptCheckpoint:
        older = []  # an unreadable list vouches for nothing; the new one starts it again
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
        record = {"file": path.name, "checkpoints": [entry, *older][:KEEP]}
        write_text(digests_path(path), json.dumps(record, indent=1) + "\n")
        if rotate and path.exists():
            os.replace(path, previous(path))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path) -> None:
    """Raise :class:`CorruptCheckpoint` unless path is a checkpoint this run wrote: its size
    (free), then its sha256, must match one in its digest list."""
    if not path.exists():
        raise CorruptCheckpoint(path, "it does not exist")
    entries = listed(path)
    if not entries:
        raise CorruptCheckpoint(
            path, f"there is no digest list ({digests_path(path).name}) to check it against"
        )
    size = path.stat().st_size
    sizes = sorted({int(e["bytes"]) for e in entries})
    if size not in sizes:
        expected = " or ".join(f"{s:,}" for s in sizes)
        raise CorruptCheckpoint(
            path, f"it has {size:,} bytes, the run wrote {expected} (truncated or replaced)"
        )
    digest = file_sha256(path)
    if digest not in {e["sha256"] for e in entries}:
        raise CorruptCheckpoint(
            path, f"its sha256 {digest[:16]}... is none the run wrote (bytes changed on disk)"
        )


def load(path: Path, map_location: torch.device | str = "cpu") -> Any:
    """A verified checkpoint, unpickled with ``weights_only=True``."""
    verify(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CorruptCheckpoint(
            path, f"weights_only loading refused it ({refusal(error)})"
        ) from error
    except (RuntimeError, EOFError, OSError) as error:
        raise CorruptCheckpoint(path, f"torch.load failed ({refusal(error)})") from error


def save_best(weights: Mapping[str, Any], ident: Mapping[str, Any], path: Path) -> None:
    """The best-validation weights with the identity of the run they belong to
    (pdelab.records.run.identity), which :func:`load_best` checks."""
    save({"identity": dict(ident), "model": weights}, path, rotate=False)


def load_best(
    path: Path, ident: Mapping[str, Any], map_location: torch.device | str = "cpu"
) -> dict[str, Any]:
    """The weights :func:`save_best` wrote, verified, and only if they are the run ``ident``'s:
    another run's best.pt (with its digest list) in this folder raises ForeignRecord, naming
    both runs and the file."""
    saved = load(path, map_location)
    found = saved.get("identity") if isinstance(saved, dict) and "model" in saved else None
    check_identity(path, found, ident)
    return saved["model"]


def load_latest(path: Path, map_location: torch.device | str = "cpu") -> tuple[Any, Path] | None:
    """(checkpoint, the file it came from): path, else its previous one, else None. Each
    file passed over is named on stderr with the reason, and a damaged current one is moved
    aside to ``*.corrupt.pt`` (kept for a look), so the next save cannot rotate it over the
    good previous one."""
    candidates = [p for p in (path, previous(path)) if p.exists()]
    for i, candidate in enumerate(candidates):
        try:
            return load(candidate, map_location), candidate
        except CorruptCheckpoint as bad:
            then = (
                f"falling back to {candidates[i + 1]}"
                if i + 1 < len(candidates)
                else "starting from scratch"
            )
            print(f"{bad}; {then}", file=sys.stderr)
            if candidate == path:
                os.replace(path, path.with_name(f"{path.stem}.corrupt{path.suffix}"))
    return None


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every generator's state (torch, CUDA's, numpy's global, Python's ``random``) in a form
    ``weights_only`` loads: tensors, lists and numbers."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set every generator to a state :func:`rng_state` took."""
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    keys = n["keys"].cpu().numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if "cuda" in state:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


class StopOnSigterm:
    """Within the ``with`` block, SIGTERM sets :attr:`requested` instead of ending the
    process, so the loop can checkpoint at its next safe point; the previous handler comes
    back afterwards. Outside the main thread (where signals cannot be caught) it is inert."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __enter__(self) -> StopOnSigterm:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
