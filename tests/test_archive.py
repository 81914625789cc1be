"""pdelab.data.archive: hostile archives are refused and leave nothing behind; benign ones,
links inside included, extract whole."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from pdelab.data.archive import extract
from pdelab.data.errors import UnsafeArchiveError
from pdelab.data.release import find_dir


def special_tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w") as tf:
        ok = tarfile.TarInfo("ok.txt")
        ok.size = 2
        tf.addfile(ok, io.BytesIO(b"ok"))
        for info in members:
            data = b"evil" if info.isfile() else b""
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


HOSTILE = {
    "parent": lambda root: [member("../evil.txt")],
    "nested-parent": lambda root: [member("data/../../evil.txt")],
    "absolute": lambda root: [member(str(root / "abs-evil.txt"))],
    "symlink-out": lambda root: [member("link", tarfile.SYMTYPE, "../../outside")],
    "symlink-absolute": lambda root: [member("link", tarfile.SYMTYPE, "/etc")],
    "write-through-symlink": lambda root: [member("d", tarfile.SYMTYPE, "."), member("d/x.txt")],
    "hardlink-out": lambda root: [member("hard", tarfile.LNKTYPE, "../outside.txt")],
    "device": lambda root: [member("dev", tarfile.CHRTYPE)],
    "fifo": lambda root: [member("pipe", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("data_filter", [True, False], ids=["with-filter", "checks-only"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tar_is_refused_and_leaves_nothing(tmp_path, monkeypatch, case, data_filter):
    if not data_filter:  # the explicit checks must hold on their own
        monkeypatch.delattr(tarfile, "data_filter")
    (tmp_path / "in").mkdir()
    archive = special_tar(tmp_path / "in" / "bad.tar", *HOSTILE[case](tmp_path))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UnsafeArchiveError, match="refusing"):
        extract(archive, work / "out")
    assert list(work.iterdir()) == []  # no destination, no temporary folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "work"]  # nothing escaped


def test_hostile_zip_is_refused(tmp_path):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ok.txt", "ok")
        zf.writestr("../evil.txt", "evil")
    with pytest.raises(UnsafeArchiveError, match=r"'\.\./evil\.txt'"):
        extract(archive, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.zip"]


def test_benign_archives_with_inside_links_and_zip_extract(tmp_path):
    tar = special_tar(
        tmp_path / "good.tar",
        member("data/real.txt"),
        member("data/alias.txt", tarfile.SYMTYPE, "real.txt"),
        member("data/hard.txt", tarfile.LNKTYPE, "data/real.txt"),
    )
    out = extract(tar, tmp_path / "tar-out")
    assert (out / "data" / "alias.txt").is_symlink()
    assert (out / "data" / "alias.txt").read_bytes() == b"evil"
    assert (out / "data" / "hard.txt").read_bytes() == b"evil"

    archive = tmp_path / "good.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("listops-1000/basic_test.tsv", "Source\tTarget\n")
    out = extract(archive, tmp_path / "zip-out")
    assert find_dir(out, "listops-1000") == out / "listops-1000"
    # Extraction is atomic, so an existing destination is complete and returned as is.
    assert extract(archive, out) == out
