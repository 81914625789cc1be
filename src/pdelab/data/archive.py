"""Unpack an archive safely: hostile members are refused before anything is written.

A downloaded archive is untrusted input. :func:`extract` checks every member first (no
absolute or ``..`` paths, no links leading outside, no writes through a symlink, no device or
special files), then extracts into a temporary sibling folder that is renamed into place only
when complete, so a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

from pdelab.data.errors import FetchError, UnsafeArchiveError


def extract(archive: Path, dest: Path) -> Path:
    """Unpack a .tar, .tar.gz/.tgz, gzipped tar (``lra_release.gz``) or .zip into ``dest``.

    Every member is checked first (see :class:`UnsafeArchiveError`); extraction then happens in
    a temporary sibling folder that is renamed to ``dest`` only when complete, so ``dest`` is
    either absent or whole. Hence an existing non-empty ``dest`` is returned as is.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.is_dir() and any(dest.iterdir()):
        return dest
    if dest.is_dir():
        dest.rmdir()
    elif dest.exists():
        raise FetchError(f"{dest}: exists and is not a folder; cannot extract {archive} there")
    if not archive.is_file():
        raise FetchError(f"{archive}: no such archive")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extracting-", dir=dest.parent))
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, tmp)
        elif _is_tar(archive):
            _extract_tar(archive, tmp)
        else:
            raise FetchError(f"{archive}: not a tar (plain or gzip/bz2/xz) or zip archive")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _is_tar(path: Path) -> bool:
    try:
        with tarfile.open(path, "r:*"):
            return True
    except (tarfile.TarError, OSError, EOFError):
        return False


def _parts(name: str) -> list[str]:
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def _check_name(archive: Path, name: str) -> tuple[str, ...]:
    """Reject absolute or parent-relative member names; return the normalised parts."""
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path; refusing")
    parts = _parts(norm)
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} contains '..'; refusing")
    return tuple(parts)


def _resolve_inside(base: tuple[str, ...], target: str) -> tuple[str, ...] | None:
    """Lexically resolve ``target`` relative to folder ``base``; None if it leaves the root."""
    stack = list(base)
    for part in _parts(target):
        if part == "..":
            if not stack:
                return None
            stack.pop()
        else:
            stack.append(part)
    return tuple(stack)


def _under_link(parts: tuple[str, ...], links: set[tuple[str, ...]]) -> bool:
    return any(parts[:i] in links for i in range(1, len(parts)))


def _check_tar_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    names = {m.name: _check_name(archive, m.name) for m in members}
    symlinks = {names[m.name] for m in members if m.issym()}
    for m in members:
        parts = names[m.name]
        if not (m.isfile() or m.isdir() or m.islnk() or m.issym()):
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} is a device or special file; refusing"
            )
        # Writing through a symlink member could land anywhere: refuse it outright, which
        # also makes the lexical link checks below exact.
        if _under_link(parts, symlinks):
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} would be written through a symlink; refusing"
            )
        if m.issym():
            link = m.linkname.replace("\\", "/")
            resolved = None if link.startswith("/") else _resolve_inside(parts[:-1], link)
            if resolved is None or _under_link(resolved + ("",), symlinks):
                raise UnsafeArchiveError(
                    f"{archive}: symlink {m.name!r} -> {m.linkname!r} points outside the "
                    "extraction folder; refusing"
                )
        elif m.islnk():
            link = m.linkname.replace("\\", "/")
            resolved = None if link.startswith("/") else _resolve_inside((), link)
            if resolved is None or not resolved or _under_link(resolved + ("",), symlinks):
                raise UnsafeArchiveError(
                    f"{archive}: hard link {m.name!r} -> {m.linkname!r} points outside the "
                    "extraction folder; refusing"
                )


def _extract_tar(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:*") as tf:
        members = tf.getmembers()
        _check_tar_members(archive, members)
        try:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(target, members=members, filter="data")
            else:  # pragma: no cover - Python < 3.11.4
                tf.extractall(target, members=members)
        except tarfile.FilterError as err:
            raise UnsafeArchiveError(f"{archive}: {err}; refusing") from err


def _extract_zip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            parts = _check_name(archive, info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                link = zf.read(info).decode("utf-8", "replace")
                if link.startswith("/") or _resolve_inside(parts[:-1], link) is None:
                    raise UnsafeArchiveError(
                        f"{archive}: symlink {info.filename!r} -> {link!r} points outside the "
                        "extraction folder; refusing"
                    )
            elif mode and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)):
                raise UnsafeArchiveError(
                    f"{archive}: member {info.filename!r} is a device or special file; refusing"
                )
        root = target.resolve()
        for info in zf.infolist():
            out = (target / info.filename).resolve()
            if out != root and root not in out.parents:
                raise UnsafeArchiveError(
                    f"{archive}: member {info.filename!r} resolves outside the target; refusing"
                )
        zf.extractall(target)
