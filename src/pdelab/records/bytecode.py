"""Bytecode checked against its source's hash (PEP 552), so a job never runs stale code.

Python trusts a ``.pyc`` whose recorded source size and modification time match the source: an
edit of the same size with its date put back (``touch -r``, ``rsync -t``, a restore) runs the
old bytecode while the run records the new source's digest. A checked-hash ``.pyc`` records the
source's hash instead, which the import checks every time; once one is written, Python keeps
writing checked-hash bytecode for that file. :func:`hash_checked` rewrites every other ``.pyc``
of the package that way; the workflow calls it when it parses, before any job starts.
"""

from __future__ import annotations

import importlib.util
import py_compile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the pdelab package
CHECKED_HASH = 0b11  # PEP 552 flags: hash-based, checked against the source


def is_hash_checked(source: Path) -> bool:
    """Whether the ``.pyc`` Python would load for ``source`` is checked against its hash."""
    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as cached:
            header = cached.read(8)
    except OSError:
        return False
    magic, flags = header[:4], int.from_bytes(header[4:8], "little")
    return magic == importlib.util.MAGIC_NUMBER and flags == CHECKED_HASH


def hash_checked(package: Path = PACKAGE) -> list[Path]:
    """Write checked-hash bytecode for every module of ``package`` whose ``.pyc`` is missing or
    trusts dates; returns those modules. A module that does not compile is left to the job that
    imports it, which reports the error."""
    rewritten = []
    for source in sorted(package.rglob("*.py")):
        if is_hash_checked(source):
            continue
        try:
            py_compile.compile(
                str(source),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
        except (py_compile.PyCompileError, OSError):
            continue
        rewritten.append(source)
    return rewritten
