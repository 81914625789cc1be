"""A digest of the user's own files that a task's data job reads: a ``source:`` path.

A task whose ``source`` (params.yaml's ``data.<profile>.<task>.source``) names a folder or file
of the user's (a copy they already have: the LRA release folder, ``aclImdb/``, Multi30K's six
text files) is built from those bytes, so an edit to them must plan the task's data job again,
as an edit to its code or parameters does. :func:`source_digest` is one sha256 over every file
there (its path relative to the source, then its sha256), None for a task that downloads,
generates or makes a stand-in of its data (its data job's code and parameters say all).

Each file is hashed again only when its path, size, modification or change time, inode or
device changed since it was last hashed (``data/<profile>/raw/.<task>.source.json``), so a
workflow parse stats the folder and hashes nothing it has seen. An edit of the same size with
its modification time put back (``touch -r``) still moves the change time, which no one can
set back, so it is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pdelab.data.store import file_key, sha256_file
from pdelab.records.atomic import write_text

ABSENT = "absent"  # what a source path that does not exist is hashed as (its data job fails)


def local_source(config: dict[str, Any], profile: str, task: str) -> Path | None:
    """The file or folder of the user's that a task's data job reads (its ``source`` when that
    is a path), or None when the job downloads, generates or makes its data."""
    from pdelab.spec.data import data_spec

    spec = data_spec(config, profile, task)
    source = str(spec.source)
    if source in type(spec).sources.made or source == "download":
        return None
    return Path(source).expanduser()


def cache_path(profile: str, task: str) -> Path:
    """Where the hashes of a task's source files are kept, beside its raw folder (DVC's
    output, so not in it)."""
    return Path("data") / profile / "raw" / f".{task}.source.json"


def source_digest(config: dict[str, Any], profile: str, task: str) -> str | None:
    """One sha256 over the relative path and the bytes of every file the task's data job reads
    from a ``source:`` path of the user's; None when the task downloads or makes its data.

    ``config``: params.yaml as loaded (pdelab.spec.config.load_params, or the workflow's
    config). A path that does not exist has a digest too (of its absence), so a parse does
    not fail there: the data check (pdelab.data.sources.cannot_build) names it."""
    path = local_source(config, profile, task)
    if path is None:
        return None
    return digest_of(path, cache_path(profile, task))


def source_files(path: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to ``path``, in POSIX form; the file) for every file under ``path``, or
    for ``path`` itself when it is a file; linked folders followed once each."""
    if path.is_file():
        yield path.name, path
        return
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path, followlinks=True):
        st = os.stat(root)
        if (st.st_dev, st.st_ino) in seen:  # a link back up the tree
            dirs.clear()
            continue
        seen.add((st.st_dev, st.st_ino))
        for name in files:
            file = Path(root) / name
            if file.is_file():
                yield file.relative_to(path).as_posix(), file


def digest_of(path: Path, cache: Path) -> str:
    """The digest of ``path``'s files, hashing only those whose stat key is not in ``cache``
    with its hash (the cache is written back with what was found)."""
    if not path.exists():
        return hashlib.sha256(f"{ABSENT}\0{path}".encode()).hexdigest()
    known = read_cache(cache)
    found: dict[str, list[Any]] = {}
    digest = hashlib.sha256()
    for relative, file in sorted(source_files(path)):
        where = str(file.absolute())
        key = file_key(file)
        entry = known.get(where)
        hashed = entry[1] if entry and entry[0] == key else sha256_file(file)
        found[where] = [key, hashed]
        digest.update(f"{relative}\0{hashed}\n".encode())
    if found != known:
        with contextlib.suppress(OSError):  # not writable: hashed again next time
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text(cache, json.dumps(found, sort_keys=True))
    return digest.hexdigest()


def read_cache(cache: Path) -> dict[str, list[Any]]:
    try:
        found = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
