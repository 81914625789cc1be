"""What a pinned file is: a :class:`Source` (a URL and its checksums) or a
:class:`DebPackage` (a Debian package file and its sha256).

Declarations only, no transfer: the catalogue (catalogue.py) and the data modules read these to
name files and layouts, and a module that only names a pinned file (a task's spec, a reader of
its prepared arrays) does not import the code that downloads it (download.py, debian.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """A pinned remote file.

    A source is pinned by its ``sha256``, its ``md5`` or both; every pinned digest is checked.
    Some datasets only publish an MD5 (torchtext's pins, for instance): that still catches
    corrupt and truncated transfers and changed files, though not a deliberate collision, so
    when only ``md5`` is pinned :func:`fetch` prints the sha256 so it can be pinned as well.
    A source with neither is refused unless ``allow_unpinned=True`` (and then its digest is
    printed). ``size`` (bytes) is optional and checked when given.
    """

    url: str
    sha256: str | None
    filename: str
    size: int | None = None
    md5: str | None = None

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None or self.md5 is not None

    def pins(self) -> dict[str, str]:
        """``{algorithm: expected hex digest}`` of every pinned checksum."""
        return {
            name: value
            for name, value in (("sha256", self.sha256), ("md5", self.md5))
            if value is not None
        }


@dataclass(frozen=True)
class DebPackage:
    """One pinned Debian package file.

    ``files`` optionally pins files inside it (path as in the package, without the leading
    "./", to sha256), so that the same files taken from an installed copy of the package can
    be verified too.
    """

    name: str
    version: str
    arch: str
    sha256: str
    size: int
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """The file name ``apt-get download`` gives it (an epoch's ':' written as %3a)."""
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"

    @property
    def spec(self) -> str:
        """``NAME=VERSION``, as apt-get and apt-cache take it."""
        return f"{self.name}={self.version}"
