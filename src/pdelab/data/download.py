"""Download one pinned file safely: verified checksums, resumable transfers, atomic renames.

Used by users who have internet (the tests only ever contact 127.0.0.1). Everything here is
plain standard library plus tqdm, so fetching never needs ``requests``. Which files exist and
their pins is the catalogue's business (catalogue.py); unpacking them is archive.py's.

Guarantees:

* A file only ever appears under its final name after its sha256 or md5 (and size, when
  pinned) was verified, and it gets there by an atomic rename. Interrupted downloads stay in
  ``<filename>.part`` and the next :func:`fetch` resumes them with an HTTP ``Range`` request.
* Every failure raises a subclass of :class:`~pdelab.data.errors.FetchError` whose message
  says what to do next.

Users who already have a file (or no internet) put it where the download would land (the
workflow's ``data/<profile>/raw/downloads``), or callers pass it with ``fetch(...,
local_path=...)``: either way it is checksummed like a download before it is used.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from pdelab.data.errors import (
    ChecksumError,
    FetchError,
    HTTPStatusError,
    NetworkError,
    SizeMismatchError,
    TruncatedDownloadError,
    UnpinnedSourceError,
)
from pdelab.data.pins import Source
from pdelab.data.store import sha256_file

CHUNK = 1 << 20
USER_AGENT = "pdelab-fetch/0.1 (+urllib)"


def hub_file(repo_id: str, path: str, revision: str, sha256: str | None) -> Source:
    """A file of a dataset-hub (Hugging Face) dataset repository, e.g. a Parquet shard.

    Pin ``revision`` to a commit hash, not a branch, so the bytes cannot change under the pin;
    for files stored with Git LFS the hub shows their sha256 (the LFS object id).
    """
    url = f"https://huggingface.co/datasets/{repo_id}/resolve/{revision}/{path}"
    filename = f"{repo_id.replace('/', '--')}--{PurePosixPath(path).name}"
    return Source(url=url, sha256=sha256, filename=filename)


def fetch(
    source: Source,
    dest_dir: Path,
    *,
    progress: bool = True,
    timeout: float = 60,
    local_path: Path | None = None,
    allow_unpinned: bool = False,
) -> Path:
    """Return ``dest_dir/source.filename``, downloading (or copying ``local_path``) if needed.

    Without network, download the file by hand and pass it as ``local_path``: it is verified
    against the pin and then hard-linked (or copied) into ``dest_dir``. An unpinned source
    (neither sha256 nor md5) is refused unless ``allow_unpinned=True``; it is then fetched
    without verification and its sha256 is printed so that it can be pinned in the catalogue
    (:data:`pdelab.data.catalogue.PINNED`).
    """
    dest_dir = Path(dest_dir)
    final = dest_dir / source.filename
    part = dest_dir / (source.filename + ".part")
    if not source.pinned and not allow_unpinned:
        raise UnpinnedSourceError(
            f"{source.filename}: no sha256 (or md5) is pinned for {source.url}, so its content "
            "cannot be verified. Pin its checksum in pdelab.data.catalogue.PINNED, or allow it "
            "unverified with `allow_unpinned: true` in the task's data parameters (params.yaml); "
            "its sha256 is then printed so that it can be pinned."
        )
    dest_dir.mkdir(parents=True, exist_ok=True)

    if final.exists():
        if not source.pinned:
            print(f"{final}: already present (unpinned, sha256 {sha256_file(final)})")
            return final
        if _matches(final, source):
            return final
        print(f"{final}: present but does not match its pin; fetching it again")
        final.unlink()

    if local_path is not None:
        return _adopt_local(source, Path(local_path), final, part)

    digests = _download(source, part, progress=progress, timeout=timeout)
    _verify(part, digests, source)
    os.replace(part, final)
    return final


def _hashers() -> dict[str, Any]:
    """Fresh sha256 and md5 hash objects (md5 only to check published pins, never to sign)."""
    return {"sha256": hashlib.sha256(), "md5": hashlib.md5(usedforsecurity=False)}


def _hash_file(hashers: dict[str, Any], path: Path) -> None:
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            for h in hashers.values():
                h.update(block)


def file_digests(path: Path) -> dict[str, str]:
    """``{"sha256": ..., "md5": ...}`` of a file, in one pass."""
    hashers = _hashers()
    _hash_file(hashers, path)
    return {name: h.hexdigest() for name, h in hashers.items()}


def _mismatch(source: Source, digests: dict[str, str]) -> tuple[str, str, str] | None:
    """(algorithm, expected, actual) of the first pinned digest that differs, else None."""
    for name, expected in source.pins().items():
        if digests[name] != expected.lower():
            return name, expected, digests[name]
    return None


def _report_unverified(what: object, source: Source, digests: dict[str, str]) -> None:
    """Print the sha256 of a file whose pin is missing or md5 only, so it can be pinned."""
    sha = digests["sha256"]
    if not source.pinned:
        print(f"{what}: sha256 {sha} (unverified: pin it with Source(..., sha256='{sha}'))")
    elif source.sha256 is None:
        print(f"{what}: md5 verified; its sha256 is {sha} (pin it too: Source(..., sha256=...))")


def _matches(path: Path, source: Source) -> bool:
    if source.size is not None and path.stat().st_size != source.size:
        return False
    return _mismatch(source, file_digests(path)) is None


def _verify(path: Path, digests: dict[str, str], source: Source) -> None:
    """Check size and pinned digests of a finished transfer; delete it when it is wrong."""
    size = path.stat().st_size
    if source.size is not None and size != source.size:
        path.unlink()
        raise SizeMismatchError(
            f"{source.filename}: got {size} bytes, expected {source.size} (from {source.url}). "
            "The file is corrupt or the pinned size is stale; the bad file was deleted."
        )
    wrong = _mismatch(source, digests)
    if wrong is not None:
        path.unlink()
        name, expected, actual = wrong
        raise ChecksumError(
            f"{source.filename}: {name} mismatch for {source.url}: expected {expected}, got "
            f"{actual}. The file is corrupt or the pin is stale; the bad file was deleted. "
            "Run the fetch again; if the same digest comes back, the file changed upstream: "
            "check the source and update the pin in pdelab.data.catalogue.PINNED."
        )
    _report_unverified(source.filename, source, digests)


def _adopt_local(source: Source, local: Path, final: Path, part: Path) -> Path:
    if not local.is_file():
        raise FetchError(f"{local}: no such file (given as local_path for {source.filename})")
    size = local.stat().st_size
    if source.size is not None and size != source.size:
        raise SizeMismatchError(
            f"{local}: {size} bytes, expected {source.size} for {source.filename}; "
            "is it the right (complete) file?"
        )
    digests = file_digests(local)
    wrong = _mismatch(source, digests)
    if wrong is not None:
        name, expected, actual = wrong
        raise ChecksumError(
            f"{local}: {name} mismatch for {source.filename}: expected {expected}, got "
            f"{actual}. The file is corrupt, a different version, or the pin is stale: "
            f"download it again from {source.url}."
        )
    _report_unverified(local, source, digests)
    part.unlink(missing_ok=True)
    try:
        os.link(local, part)
    except OSError:
        shutil.copyfile(local, part)
    os.replace(part, final)
    return final


def _no_network(source: Source, reason: object, final: Path) -> NetworkError:
    checked = " (it is checked against its pin)" if source.pinned else ""
    return NetworkError(
        f"cannot reach {source.url} ({reason}). Connect to the internet and run again, or get "
        f"{source.filename} by hand and put it at {final}{checked}."
    )


def _download(source: Source, part: Path, *, progress: bool, timeout: float) -> dict[str, str]:
    """Stream ``source`` into ``part`` (resuming it if present); return its digests."""
    have = part.stat().st_size if part.exists() else 0
    if source.size is not None and have > source.size:
        part.unlink()
        have = 0
    if source.size is not None and have == source.size:
        return file_digests(part)

    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(source.url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and have:
            # Our .part is not a prefix the server recognises: start over once.
            part.unlink()
            return _download(source, part, progress=progress, timeout=timeout)
        raise HTTPStatusError(
            f"HTTP {err.code} {err.reason} for {source.url}", err.code, source.url
        ) from err
    except urllib.error.URLError as err:
        raise _no_network(source, err.reason, part.with_name(source.filename)) from err
    except (TimeoutError, ConnectionError, socket.gaierror) as err:
        raise _no_network(source, err, part.with_name(source.filename)) from err

    with response:
        status = response.status
        length_header = response.headers.get("Content-Length")
        remaining = int(length_header) if length_header is not None else None
        hashers = _hashers()
        if status == 206 and have:
            first = _content_range_start(response.headers.get("Content-Range"))
            if first != have:
                response.close()
                part.unlink()
                return _download(source, part, progress=progress, timeout=timeout)
            _hash_file(hashers, part)
            mode = "ab"
        else:
            if have:
                print(f"{source.filename}: server ignored the Range request; restarting")
            have = 0
            mode = "wb"
        expected_total = have + remaining if remaining is not None else source.size
        received = 0
        bar = tqdm(
            total=expected_total,
            initial=have,
            unit="B",
            unit_scale=True,
            desc=source.filename,
            disable=not progress,
        )
        try:
            with open(part, mode) as out, bar:
                for block in _read_blocks(response):
                    out.write(block)
                    for h in hashers.values():
                        h.update(block)
                    received += len(block)
                    bar.update(len(block))
        except (TimeoutError, ConnectionError, http.client.HTTPException) as err:
            raise NetworkError(
                f"connection to {source.url} lost after {have + received} bytes ({err}); the "
                f"partial file {part} is kept and the next fetch resumes it."
            ) from err
    if remaining is not None and received < remaining:
        raise TruncatedDownloadError(
            f"{source.filename}: transfer truncated: the server closed the connection after "
            f"{have + received} of {have + remaining} bytes ({source.url}). The partial file "
            f"{part} is kept; run fetch again to resume."
        )
    return {name: h.hexdigest() for name, h in hashers.items()}


def _read_blocks(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while True:
        try:
            block = response.read(CHUNK)
        except http.client.IncompleteRead as err:
            if err.partial:
                yield err.partial
            return
        if not block:
            return
        yield block


def _content_range_start(value: str | None) -> int | None:
    # "bytes 100-199/200"
    if not value or not value.startswith("bytes "):
        return None
    try:
        return int(value[6:].split("-", 1)[0])
    except ValueError:
        return None
