"""A task's ``source:`` folder of the user's own files has a content digest
(pdelab.data.source_digest), so an edit to those files can plan its data job again; the files
are hashed again only when their stat key changed, and a same-size edit with its modification
time put back is still seen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pdelab.data import source_digest as sd
from pdelab.data.source_digest import source_digest

FILES = {
    f"{split}.{lang}": f"{split} sentence {lang}\n"
    for split in ("train", "val", "test")
    for lang in ("en", "de")
}


def params_for(source: str, task: str = "multi30k") -> dict:
    """params.yaml's shape for one task of run profile smoke."""
    return {"profile": "smoke", "data": {"smoke": {task: {"source": source}}}}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    """A folder of Multi30K's six text files, in a project folder (the cwd)."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "copies/multi30k"
    root.mkdir(parents=True)
    for name, text in FILES.items():
        (root / name).write_text(text)
    return root


def counting(monkeypatch) -> list[str]:
    """The names of the files the digest hashes from now on."""
    hashed: list[str] = []
    real = sd.sha256_file
    monkeypatch.setattr(sd, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    return hashed


def test_a_download_or_a_stand_in_has_no_source_digest(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert source_digest(params_for("download"), "smoke", "multi30k") is None
    assert source_digest(params_for("standin"), "smoke", "multi30k") is None
    assert source_digest(params_for("generate", "listops"), "smoke", "listops") is None


def test_a_same_size_edit_with_its_date_put_back_changes_the_digest(
    folder: Path, monkeypatch
) -> None:
    params = params_for(str(folder))
    first = source_digest(params, "smoke", "multi30k")
    assert first is not None and len(first) == 64
    hashed = counting(monkeypatch)
    assert source_digest(params, "smoke", "multi30k") == first
    assert hashed == []  # unchanged files are not hashed again
    path = folder / "val.de"
    st = path.stat()
    path.write_text(FILES["val.de"].upper())  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # as `touch -r` would put it back
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    second = source_digest(params, "smoke", "multi30k")
    assert second != first and hashed == ["val.de"]


def test_the_digest_covers_names_and_new_files_and_is_the_content_s(
    folder: Path, tmp_path: Path
) -> None:
    params = params_for(str(folder))
    first = source_digest(params, "smoke", "multi30k")
    (folder / "val.de").rename(folder / "val.de.bak")
    renamed = source_digest(params, "smoke", "multi30k")
    (folder / "val.de.bak").rename(folder / "val.de")
    assert renamed != first and source_digest(params, "smoke", "multi30k") == first
    (folder / "extra").mkdir()
    (folder / "extra/notes.txt").write_text("x")
    assert source_digest(params, "smoke", "multi30k") not in (first, renamed)
    (folder / "extra/notes.txt").unlink()
    (folder / "extra").rmdir()
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    for name, text in FILES.items():
        (copy / name).write_text(text)
    assert source_digest(params_for(str(copy)), "smoke", "multi30k") == first  # same bytes


def test_a_file_source_and_a_missing_one_have_digests(folder: Path, tmp_path: Path) -> None:
    archive = tmp_path / "lra_release.gz"
    archive.write_bytes(b"\x1f\x8b data")
    params = params_for(str(archive), "retrieval")
    first = source_digest(params, "smoke", "retrieval")
    archive.write_bytes(b"\x1f\x8b DATA")
    assert source_digest(params, "smoke", "retrieval") not in (None, first)
    gone = source_digest(params_for(str(tmp_path / "nowhere")), "smoke", "multi30k")
    assert gone is not None and gone != source_digest(params_for(str(folder)), "smoke", "multi30k")
