"""Find a dataset inside a release on disk, fetching and unpacking the release when asked to.

Releases nest their folders differently across versions (the LRA release holds
``lra_release/listops-1000`` or ``listops-1000``), and users may hand over the archive or a
folder they unpacked themselves; :func:`locate_release` accepts all of these and names what it
expected when it finds nothing.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from pdelab.data.archive import extract
from pdelab.data.catalogue import PINNED
from pdelab.data.download import Source, fetch
from pdelab.data.errors import ArchiveLayoutError, SourceNotFoundError, UnpinnedSourceError


def find_dir(root: Path, pattern: str, *, max_depth: int = 4) -> Path:
    """The one folder under ``root`` whose path ends with glob ``pattern``.

    The LRA release nests differently across versions (``lra_release/listops-1000`` vs
    ``listops-1000``), so ``find_dir(root, "listops-1000")`` finds it at any depth up to
    ``max_depth``; ``pattern`` may have several parts (``"pathfinder32/curv_*"``). The search
    does not descend into matches or beyond ``max_depth`` (the Pathfinder image folders hold
    hundreds of thousands of files). Zero or several matches raise ArchiveLayoutError.
    """
    root = Path(root)
    if not root.exists():
        raise SourceNotFoundError(f"{root}: does not exist (looking for {pattern!r})")
    if not root.is_dir():
        raise ArchiveLayoutError(f"{root}: a file, not a folder (looking for {pattern!r})")
    if "/" not in pattern and fnmatch.fnmatch(root.name, pattern):
        return root
    matches: list[Path] = []
    seen: list[str] = []
    frontier = [root]
    for _depth in range(max_depth):
        next_frontier: list[Path] = []
        for folder in frontier:
            try:
                with os.scandir(folder) as entries:
                    subdirs = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
            for name in subdirs:
                path = folder / name
                rel = PurePosixPath(path.relative_to(root).as_posix())
                seen.append(str(rel))
                if rel.match(pattern):
                    matches.append(path)
                else:
                    next_frontier.append(path)
        frontier = next_frontier
    if len(matches) == 1:
        return matches[0]
    if matches:
        listing = ", ".join(str(m.relative_to(root)) for m in matches)
        raise ArchiveLayoutError(
            f"{root}: {len(matches)} folders match {pattern!r} ({listing}); pass a more "
            "specific pattern"
        )
    shown = ", ".join(seen[:30]) + (f", ... ({len(seen) - 30} more)" if len(seen) > 30 else "")
    raise ArchiveLayoutError(
        f"{root}: no folder matches {pattern!r} within {max_depth} levels; found: "
        f"{shown or 'no folders at all'}"
    )


def copy_files(src: Path, dest: Path, names: Iterable[str], expected: str) -> None:
    """Copy the files ``names`` of a located release into ``dest`` (created), naming any that
    is missing and the layout ``expected``."""
    dest.mkdir(parents=True)
    for name in names:
        if not (src / name).is_file():
            raise ArchiveLayoutError(f"{src / name}: missing; expected {expected}")
        shutil.copyfile(src / name, dest / name)


def locate_release(
    source: str,
    raw_dir: Path,
    key: str,
    pattern: str,
    marker: str,
    expected: str,
    allow_unpinned: bool = False,
) -> Path:
    """The folder of real data named by ``source`` that holds ``marker``.

    ``source`` is "download" (the archive ``PINNED[key]``, fetched and extracted once into
    ``raw_dir/../downloads``, which several tasks share and DVC does not track), that archive
    itself, or a folder: one holding ``marker``, or ``pattern`` at most 4 levels below (when
    ``pattern/marker`` sits right below it, that folder wins, so stray copies such as a zip's
    ``__MACOSX/`` cannot make the layout ambiguous).
    """
    path = Path(source).expanduser()
    try:
        if source != "download" and not path.exists():
            raise SourceNotFoundError(f"{path}: does not exist")
        if source == "download" or path.is_file():
            cache = raw_dir.parent / "downloads"
            local = None if source == "download" else path
            archive = fetch(PINNED[key], cache, local_path=local, allow_unpinned=allow_unpinned)
            path = extract(archive, cache / key)
        if (path / marker).exists():
            found = path
        elif (path / pattern / marker).exists():  # the usual layout: skips stray copies
            found = path / pattern
        else:
            found = find_dir(path, pattern)
        if not (found / marker).exists():
            raise ArchiveLayoutError(f"{found / marker}: not found")
    except ArchiveLayoutError as err:
        raise type(err)(
            f"source {source!r}: expected {expected} ({err}); source must be 'standin', "
            f"'download', the {PINNED[key].filename} archive, or a folder holding that data"
        ) from err
    except UnpinnedSourceError as err:
        pinned = PINNED[key]
        raise UnpinnedSourceError(
            f"{pinned.filename}: no sha256 (or md5) is pinned for {pinned.url}, so its content "
            f"cannot be verified. {unpinned_hint(source, pinned)}"
        ) from err
    return found


def unpinned_hint(source: str, pinned: Source) -> str:
    """What gets an unpinned release in: ``allow_unpinned`` where a file or the network can
    give it, and always the unpacked folder, which needs neither."""
    folder = (
        "Or unpack a copy you have and set the task's source to that folder (a folder is "
        "used as it is, with no checksum)."
    )
    if source == "download":
        return (
            f"To download {pinned.filename} unverified (this needs the network), set "
            f"allow_unpinned: true in the task's data parameters. {folder}"
        )
    return (
        "To use this archive unverified, set allow_unpinned: true in the task's data "
        f"parameters. {folder}"
    )
