"""Debian packages as pinned data sources: got with ``apt-get download``, verified, read safely.

Some of the offline data ships inside Debian packages (Fashion-MNIST in ``dataset-fashion-mnist``,
German message catalogues in GNOME's libraries). A :class:`DebPackage` pins one package file
by name, version, architecture, size and sha256, the ``Size`` and ``SHA256`` that
``apt-cache show NAME=VERSION`` lists, so the bytes are the same on every machine.

:func:`fetch_deb` asks apt for the file (``apt-get download``: apt's own archive and proxy
settings, nothing else contacted), or takes a ``.deb`` the user already has, and checks size and
sha256 before the file appears under its final name, as download.py does for a download.
:func:`deb_members` reads chosen regular files out of the package's ``data.tar.*`` into memory:
nothing the archive names is ever written, so no member can land outside the target, and a
link or special file where a data file was expected is refused.

``apt-get download`` needs apt's package lists (``/var/lib/apt/lists``); a machine without
them gets an error that says to run ``apt-get update``. A pinned version that Debian has since
replaced (stable releases replace package versions in their point releases) gets an error that
says how to pin the new one or where to get the old one by hand.
"""

from __future__ import annotations

import fnmatch
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from pdelab.data.download import file_digests
from pdelab.data.errors import ChecksumError, FetchError, SizeMismatchError, UnsafeArchiveError
from pdelab.data.pins import DebPackage

AR_MAGIC = b"!<arch>\n"
AR_HEADER = 60  # name 16, mtime 12, uid 6, gid 6, mode 8, size 10, end marker 2 (b"`\n")


def verify_deb(path: Path, package: DebPackage) -> None:
    """Raise unless ``path`` has the pinned size and sha256 (the message names file and fix)."""
    size = path.stat().st_size
    if size != package.size:
        raise SizeMismatchError(
            f"{path}: {size} bytes, but {package.spec} ({package.arch}) is pinned at "
            f"{package.size}. It is another version or a truncated file: get the pinned one "
            f"with `apt-get download {package.spec}`, or, if Debian's file itself changed, "
            "check `apt-cache show` and update the pin in pdelab.data.catalogue.DEBIAN."
        )
    actual = file_digests(path)["sha256"]
    if actual != package.sha256:
        raise ChecksumError(
            f"{path}: sha256 {actual}, but {package.spec} ({package.arch}) is pinned at "
            f"{package.sha256}. The file is corrupt or not the pinned package: get it again "
            f"with `apt-get download {package.spec}`; if apt itself lists another SHA256 "
            f"(`apt-cache show {package.spec}`), update the pin in pdelab.data.catalogue.DEBIAN."
        )


def fetch_deb(package: DebPackage, cache_dir: Path, local: Path | None = None) -> Path:
    """The verified ``.deb`` of ``package``: ``local`` (a file, or a folder holding it), else
    the copy in ``cache_dir``, else one that ``apt-get download`` puts there. A package file
    got by hand can be put into ``cache_dir`` under its apt name: it is verified and used."""
    if local is not None:
        path = Path(local).expanduser()
        if path.is_dir():
            path = path / package.filename
        if not path.is_file():
            raise FetchError(
                f"{path}: no such file; expected the package file {package.filename} "
                f"(`apt-get download {package.spec}` writes it)"
            )
        verify_deb(path, package)
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / package.filename
    if final.is_file():
        try:
            verify_deb(final, package)
            return final
        except ChecksumError:
            print(f"{final}: does not match its pin; fetching it again")
            final.unlink()
    return apt_download(package, cache_dir)


def apt_download(package: DebPackage, cache_dir: Path) -> Path:
    """``apt-get download NAME=VERSION`` into a temporary folder of ``cache_dir``, then the
    verified file moved to ``cache_dir/package.filename``."""
    if shutil.which("apt-get") is None:
        raise FetchError(
            f"apt-get not found: {package.spec} is fetched with Debian's apt. Install apt "
            f"(Debian or Ubuntu), or get {package.filename} from Debian's archive by hand and "
            f"put it into {cache_dir}."
        )
    with tempfile.TemporaryDirectory(prefix=".apt-download-", dir=cache_dir) as tmp:
        done = subprocess.run(
            ["apt-get", "download", package.spec],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
        said = (done.stderr or done.stdout).strip()
        if done.returncode != 0:
            raise FetchError(_apt_failure(package, said, cache_dir))
        debs = sorted(Path(tmp).glob("*.deb"))
        if len(debs) != 1:
            raise FetchError(
                f"`apt-get download {package.spec}` succeeded but wrote {len(debs)} .deb "
                f"files; expected {package.filename} ({said or 'apt printed nothing'})"
            )
        verify_deb(debs[0], package)
        final = cache_dir / package.filename
        os.replace(debs[0], final)
    return final


def _apt_failure(package: DebPackage, said: str, cache_dir: Path) -> str:
    """The error for a failed ``apt-get download``: what apt said and what to do about it."""
    last = said.splitlines()[-1] if said else "no message"
    by_hand = (
        f"or get {package.filename} by hand (Debian's snapshot archive keeps every version) "
        f"and put it into {cache_dir}"
    )
    if "Unable to locate package" in said or "no installation candidate" in said:
        return (
            f"apt does not know the package {package.name} ({last}): its package lists are "
            "missing or lack Debian's bookworm main. Run `apt-get update` (as root) once and "
            f"fetch again, {by_hand}."
        )
    if "was not found" in said:
        return (
            f"apt's package lists do not hold {package.spec} ({last}): Debian has replaced "
            f"that version. `apt-cache policy {package.name}` lists the versions apt can get; "
            "pin one (its Size and SHA256 from `apt-cache show NAME=VERSION`) in "
            f"pdelab.data.catalogue.DEBIAN, {by_hand}."
        )
    return (
        f"`apt-get download {package.spec}` failed ({last}). Check the network and apt's "
        f"sources, run `apt-get update` if the lists are stale, {by_hand}."
    )


def _ar_members(path: Path) -> dict[str, bytes]:
    """The members of an ``ar`` archive (a .deb is one), by name."""
    data = path.read_bytes()
    if not data.startswith(AR_MAGIC):
        raise FetchError(f"{path}: not a Debian package (no ar archive header)")
    members, at = {}, len(AR_MAGIC)
    while at < len(data):
        header = data[at : at + AR_HEADER]
        if len(header) < AR_HEADER or header[58:60] != b"`\n":
            raise FetchError(f"{path}: corrupt ar member header at byte {at}")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise FetchError(f"{path}: corrupt ar member size at byte {at}") from None
        start = at + AR_HEADER
        if start + size > len(data):
            raise FetchError(f"{path}: truncated (member {name!r} runs past the end)")
        members[name] = data[start : start + size]
        at = start + size + (size % 2)  # members are padded to an even offset
    return members


def deb_members(deb: Path, pattern: str) -> dict[str, bytes]:
    """The regular files of ``deb``'s data archive whose path (without "./") matches the
    glob ``pattern``, read into memory, keyed by that path."""
    members = _ar_members(deb)
    names = [n for n in members if n.startswith("data.tar")]
    if len(names) != 1:
        raise FetchError(f"{deb}: expected one data.tar.* member, found {sorted(members)}")
    if names[0].endswith(".zst"):
        raise FetchError(
            f"{deb}: {names[0]} is zstd-compressed, which Python's tarfile cannot read; "
            "unpack the package with `dpkg-deb -x` and pass the folder instead"
        )
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(members[names[0]]), mode="r:*") as tf:
            for info in tf:
                path = PurePosixPath(info.name.removeprefix("./"))
                if not fnmatch.fnmatchcase(str(path), pattern):
                    continue
                if info.name.startswith("/") or ".." in path.parts:
                    raise UnsafeArchiveError(f"{deb}: member {info.name!r} leaves the package")
                reader = tf.extractfile(info) if info.isfile() else None
                if reader is None:
                    raise UnsafeArchiveError(
                        f"{deb}: member {info.name!r} is a link or special file where a data "
                        "file was expected; refusing"
                    )
                out[str(path)] = reader.read()
    except (tarfile.TarError, EOFError, OSError) as err:
        raise FetchError(f"{deb}: its {names[0]} cannot be read ({err})") from err
    return out
