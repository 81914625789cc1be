"""What can go wrong while getting a real dataset, one class per cause.

Downloading (download.py), unpacking (archive.py) and finding the data in an unpacked release
(release.py) all raise a subclass of :class:`FetchError`, so a caller can catch one class, and
every message says what to do next. ``python -m pdelab.data`` catches it and prints the message
with the task's data status (pdelab.data.sources: the params.yaml key and the layout that take
a copy the user already has) instead of a traceback.
"""

from __future__ import annotations


class FetchError(RuntimeError):
    """Base class: anything that went wrong while fetching or unpacking a dataset."""


class NetworkError(FetchError):
    """The server could not be reached (no network, DNS failure, refused, timed out)."""


class HTTPStatusError(FetchError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, url: str) -> None:
        super().__init__(message)
        self.status = status
        self.url = url


class ChecksumError(FetchError):
    """The bytes on disk are not the pinned ones (corrupt transfer or stale pin)."""


class SizeMismatchError(ChecksumError):
    """The file has a different size than the pinned one."""


class TruncatedDownloadError(FetchError):
    """The server closed the connection before sending Content-Length bytes."""


class UnpinnedSourceError(FetchError):
    """The source has no checksum pin and the caller did not allow unpinned downloads."""


class UnsafeArchiveError(FetchError):
    """An archive member would be written outside the target or is a special file."""


class ArchiveLayoutError(FetchError):
    """An extracted archive does not contain the expected folder (or contains it twice)."""


class SourceNotFoundError(ArchiveLayoutError):
    """The path a task's ``source`` names does not exist (a typo, or a disk not mounted)."""
