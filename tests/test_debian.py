"""pdelab.data.debian: pinned Debian packages got with apt and read safely.

The tests never reach Debian's archive: a fake ``apt-get`` on PATH answers as the real one does
(it writes the package file into its working folder, or prints apt's error and exits 100), and
the packages are tiny ones built here in the real format (an ``ar`` archive of debian-binary,
control.tar.gz and data.tar.xz), which ``dpkg-deb`` itself reads where it is installed.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from pdelab.data.catalogue import DEBIAN
from pdelab.data.debian import DebPackage, deb_members, fetch_deb
from pdelab.data.errors import ChecksumError, FetchError, SizeMismatchError, UnsafeArchiveError


def tar_of(files: dict[str, bytes], mode: str, links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return out.getvalue()


def ar_of(members: dict[str, bytes]) -> bytes:
    """A System V ``ar`` archive, as dpkg writes .deb files."""
    out = [b"!<arch>\n"]
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
        out += [header.encode(), data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


def deb_bytes(
    files: dict[str, bytes],
    name: str = "fixture",
    links: dict[str, str] | None = None,
    data_member: str = "data.tar.xz",
) -> bytes:
    """A Debian package holding ``files`` (paths without "./") in its data archive."""
    control = f"Package: {name}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@t>\n"
    control += "Description: test fixture\n"
    mode = {"data.tar.xz": "w:xz", "data.tar.gz": "w:gz", "data.tar": "w"}.get(data_member, "w")
    data = tar_of({f"./{path}": content for path, content in files.items()}, mode, links)
    return ar_of(
        {
            "debian-binary": b"2.0\n",
            "control.tar.gz": tar_of({"./control": control.encode()}, "w:gz"),
            data_member: data,
        }
    )


def pin(name: str, data: bytes, version: str = "1.0-1", **files: str) -> DebPackage:
    return DebPackage(
        name=name,
        version=version,
        arch="all",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        files=files,
    )


class FakeApt:
    """``apt-get`` on PATH: ``download NAME=VERSION`` copies the package file it was given
    (under apt's file name) into the working folder, or answers as apt does without it."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin, self.store, self.log = root / "bin", root / "apt-store", root / "apt.log"
        self.bin.mkdir(parents=True)
        self.store.mkdir()
        script = self.bin / "apt-get"
        script.write_text(
            "#!/bin/sh\n"
            f'echo "$@" >> "{self.log}"\n'
            f'if [ "$1" = download ] && [ -f "{self.store}/$2" ]; then\n'
            f'  cp "{self.store}/$2" "$(cat "{self.store}/$2.name")"; exit 0\n'
            "fi\n"
            f'if [ -f "{self.store}/$2.error" ]; then\n'
            f'  cat "{self.store}/$2.error" >&2; exit 100\n'
            "fi\n"
            'echo "E: Unable to locate package ${2%%=*}" >&2; exit 100\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")

    def offer(self, package: DebPackage, data: bytes) -> None:
        """apt can download ``package`` and gets ``data`` (which may differ from the pin)."""
        (self.store / package.spec).write_bytes(data)
        (self.store / f"{package.spec}.name").write_text(package.filename)

    def fail(self, package: DebPackage, message: str) -> None:
        (self.store / f"{package.spec}.error").write_text(message + "\n")

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def apt(tmp_path, monkeypatch) -> FakeApt:
    return FakeApt(tmp_path / "fake-apt", monkeypatch)


FILES = {"usr/share/demo/a.gz": b"first", "usr/share/demo/b.gz": b"second", "usr/doc/x": b"x"}


# --------------------------------------------------------------------------------------------
# Getting the package
# --------------------------------------------------------------------------------------------


def test_apt_download_is_verified_cached_and_named_as_apt_names_it(tmp_path, apt) -> None:
    data = deb_bytes(FILES)
    package = pin("demo", data, version="1:2.0-1")  # an epoch: apt writes it as %3a
    apt.offer(package, data)
    cache = tmp_path / "downloads"
    path = fetch_deb(package, cache)
    assert path == cache / "demo_1%3a2.0-1_all.deb" and path.read_bytes() == data
    assert apt.calls() == ["download demo=1:2.0-1"]
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary folder left
    assert fetch_deb(package, cache) == path  # the verified copy: apt is not asked again
    assert len(apt.calls()) == 1
    assert deb_members(path, "usr/share/demo/*.gz") == {
        "usr/share/demo/a.gz": b"first",
        "usr/share/demo/b.gz": b"second",
    }


def test_checksum_mismatch_names_the_file_and_the_fix(tmp_path, apt, capsys) -> None:
    good = deb_bytes(FILES)
    package = pin("demo", good)
    bad = deb_bytes({**FILES, "usr/share/demo/a.gz": b"FIRST"})  # same size, other bytes
    assert len(bad) == len(good)
    apt.offer(package, bad)
    cache = tmp_path / "downloads"
    with pytest.raises(ChecksumError) as err:
        fetch_deb(package, cache)
    message = str(err.value)
    assert package.filename in message and hashlib.sha256(bad).hexdigest() in message
    assert f"apt-get download {package.spec}" in message
    assert "pdelab.data.catalogue.DEBIAN" in message
    assert list(cache.iterdir()) == []  # nothing kept under the final name
    # A stale copy in the cache is replaced by a good download.
    (cache / package.filename).write_bytes(bad)
    apt.offer(package, good)
    assert fetch_deb(package, cache).read_bytes() == good
    assert "does not match its pin" in capsys.readouterr().out


def test_missing_package_lists_say_apt_get_update(tmp_path, apt) -> None:
    package = pin("demo", b"never served")
    with pytest.raises(FetchError, match=r"Unable to locate package demo") as err:
        fetch_deb(package, tmp_path / "downloads")
    assert "`apt-get update`" in str(err.value) and str(tmp_path / "downloads") in str(err.value)


def test_replaced_version_says_how_to_repin(tmp_path, apt) -> None:
    package = pin("demo", b"old")
    apt.fail(package, "E: Version '1.0-1' for 'demo' was not found")
    with pytest.raises(FetchError) as err:
        fetch_deb(package, tmp_path / "downloads")
    message = str(err.value)
    assert "apt-cache policy demo" in message and "pdelab.data.catalogue.DEBIAN" in message
    assert "snapshot archive" in message


def test_no_apt_at_all(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FetchError, match=r"apt-get not found.*put it into"):
        fetch_deb(pin("demo", b"x"), tmp_path / "downloads")


def test_package_file_got_by_hand_is_verified(tmp_path) -> None:
    data = deb_bytes(FILES)
    package = pin("demo", data)
    folder = tmp_path / "by-hand"
    folder.mkdir()
    (folder / package.filename).write_bytes(data)
    assert fetch_deb(package, tmp_path / "dl", folder) == folder / package.filename
    assert fetch_deb(package, tmp_path / "dl", folder / package.filename).is_file()
    (folder / package.filename).write_bytes(data[:-1])
    with pytest.raises(SizeMismatchError, match=r"bytes, but demo=1.0-1 \(all\) is pinned at"):
        fetch_deb(package, tmp_path / "dl", folder)
    with pytest.raises(FetchError, match=r"no such file; expected the package file"):
        fetch_deb(package, tmp_path / "dl", tmp_path / "elsewhere")


# --------------------------------------------------------------------------------------------
# Reading the package
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_fixture_packages_are_real_debs(tmp_path) -> None:
    path = tmp_path / "demo.deb"
    path.write_bytes(deb_bytes(FILES))
    listing = subprocess.run(["dpkg-deb", "-c", str(path)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert "./usr/share/demo/a.gz" in listing.stdout


@pytest.mark.parametrize("member", ["data.tar.xz", "data.tar.gz", "data.tar"])
def test_members_of_every_data_compression(tmp_path, member) -> None:
    path = tmp_path / "demo.deb"
    path.write_bytes(deb_bytes(FILES, data_member=member))
    assert deb_members(path, "usr/doc/*") == {"usr/doc/x": b"x"}
    assert deb_members(path, "usr/nothing/*") == {}


def test_a_link_where_data_was_expected_is_refused(tmp_path) -> None:
    path = tmp_path / "demo.deb"
    path.write_bytes(deb_bytes(FILES, links={"./usr/share/demo/c.gz": "/etc/passwd"}))
    with pytest.raises(UnsafeArchiveError, match=r"c.gz.*link or special file.*refusing"):
        deb_members(path, "usr/share/demo/*.gz")


def test_not_a_package_and_unreadable_compression(tmp_path) -> None:
    path = tmp_path / "demo.deb"
    path.write_bytes(b"PK\x03\x04 a zip, not a package")
    with pytest.raises(FetchError, match=r"not a Debian package"):
        deb_members(path, "*")
    path.write_bytes(deb_bytes(FILES, data_member="data.tar.zst"))
    with pytest.raises(FetchError, match=r"zstd.*dpkg-deb -x"):
        deb_members(path, "*")
    path.write_bytes(deb_bytes(FILES)[:-200])
    with pytest.raises(FetchError, match=r"truncated"):
        deb_members(path, "*")


def test_catalogue_pins_are_whole() -> None:
    for key, package in DEBIAN.items():
        assert key == package.name and package.arch == "all"
        assert len(package.sha256) == 64 and int(package.sha256, 16) >= 0
        assert package.size > 0 and package.filename.endswith("_all.deb")
