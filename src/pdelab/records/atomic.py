"""Atomic file writes: a file is written under a temporary name beside its target and renamed
over it only when complete, so a process killed at any moment leaves the old file or the new
one, never half of one (``os.replace`` is atomic within a file system).

    with atomic_path(out) as tmp:
        fig.savefig(tmp)

The temporary name keeps the target's suffix (writers such as matplotlib pick the format by
it) and carries the process id, so two writers of one target never share a temporary file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path to write; renamed to ``path`` on success, removed on failure."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path | str, text: str) -> None:
    """``Path.write_text``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
