"""pdelab.data.download against a local HTTP server (127.0.0.1 only, the ``server`` fixture of
conftest.py), and the downloaded release unpacked (archive.py) and searched (release.py)."""

from __future__ import annotations

import hashlib
import io
import re
import socket
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pdelab.data.archive import extract
from pdelab.data.catalogue import PINNED
from pdelab.data.download import Source, fetch, hub_file
from pdelab.data.errors import (
    ArchiveLayoutError,
    ChecksumError,
    FetchError,
    HTTPStatusError,
    NetworkError,
    SizeMismatchError,
    SourceNotFoundError,
    TruncatedDownloadError,
    UnpinnedSourceError,
)
from pdelab.data.pathfinder import read_pathfinder
from pdelab.data.release import find_dir
from pdelab.data.sources import unreachable
from pdelab.data.store import sha256_file


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Fixtures in the real formats
# --------------------------------------------------------------------------------------------

LISTOPS_ROWS = [
    ("( ( ( [MAX 2 ) 9 ) ] )", 9),
    ("( ( ( ( [MIN 4 ) 7 ) ( ( [SM 3 ) 1 ) ] ) ] )", 4),
]
RETRIEVAL_TSV = b"1\taan/P00-1001\taan/P00-1002\tfirst paper text\tsecond paper text\n"


def png_bytes() -> bytes:
    pixels = np.zeros((32, 32), dtype=np.uint8)
    pixels[5:8, 5:20] = 255
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def lra_files(prefix: str) -> dict[str, bytes]:
    tsv = "Source\tTarget\n" + "".join(f"{s}\t{t}\n" for s, t in LISTOPS_ROWS)
    files = {
        f"{prefix}listops-1000/basic_{split}.tsv": tsv.encode()
        for split in ("train", "val", "test")
    }
    pf = f"{prefix}pathfinder32/curv_baseline"
    files[f"{pf}/imgs/0/sample_0.png"] = png_bytes()
    # The release's metadata ".npy" files are text, one space-separated row per image.
    files[f"{pf}/metadata/0.npy"] = b"imgs/0 sample_0.png 0 1 1.0 6 2 2 0.5 1 1\n"
    # Incompressible filler so that partial transfers and resumes span many chunks.
    files[f"{prefix}filler.bin"] = np.random.default_rng(0).bytes(96 * 1024)
    return files


def tar_bytes(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def lra_release(server) -> Source:
    """``lra_release.gz``: a gzipped tar despite its name, nested like the real release."""
    return server.serve("/lra_release.gz", tar_bytes(lra_files("lra_release/")))


# --------------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------------


def test_good_download_verifies_extracts_and_finds_listops(tmp_path, server, lra_release):
    path = fetch(lra_release, tmp_path / "dl", timeout=5)  # with the progress bar
    assert path == tmp_path / "dl" / "lra_release.gz"
    assert sha256_file(path) == lra_release.sha256
    assert not (tmp_path / "dl" / "lra_release.gz.part").exists()

    root = extract(path, tmp_path / "lra")
    listops = find_dir(root, "listops-1000")
    assert listops == root / "lra_release" / "listops-1000"
    train = (listops / "basic_train.tsv").read_text().splitlines()
    assert train[0] == "Source\tTarget"
    assert train[1].split("\t") == [LISTOPS_ROWS[0][0], str(LISTOPS_ROWS[0][1])]
    # The Pathfinder part of the release drops into the Pathfinder reader.
    images, labels = read_pathfinder(find_dir(root, "pathfinder32"), "curv_baseline")
    assert images.shape == (1, 32, 32) and labels.tolist() == [1]
    assert images[0, 6, 10] == 255 and images[0, 20, 20] == 0
    # No leftovers from the temporary extraction folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl", "lra"]


def test_find_dir_at_either_nesting_and_reports_what_it_found(tmp_path, server):
    flat = server.serve("/flat.tar.gz", tar_bytes(lra_files("")))
    root = extract(fetch(flat, tmp_path / "dl", progress=False, timeout=5), tmp_path / "flat")
    assert find_dir(root, "listops-1000") == root / "listops-1000"
    assert find_dir(root, "pathfinder32/curv_*") == root / "pathfinder32" / "curv_baseline"
    assert find_dir(root / "listops-1000", "listops-1000") == root / "listops-1000"

    with pytest.raises(ArchiveLayoutError, match=r"no folder matches 'retrieval'.*listops-1000"):
        find_dir(root, "retrieval")
    (root / "lra_release" / "listops-1000").mkdir(parents=True)
    with pytest.raises(ArchiveLayoutError, match=r"2 folders match") as err:
        find_dir(root, "listops-1000")
    assert "lra_release/listops-1000" in str(err.value)


def test_find_dir_tells_a_missing_path_from_a_file(tmp_path):
    with pytest.raises(SourceNotFoundError, match=r"nowhere: does not exist"):
        find_dir(tmp_path / "nowhere", "listops-1000")
    (tmp_path / "a.tsv").write_text("x")
    with pytest.raises(ArchiveLayoutError, match=r"a file, not a folder") as err:
        find_dir(tmp_path / "a.tsv", "listops-1000")
    assert not isinstance(err.value, SourceNotFoundError)


def test_existing_verified_file_needs_no_network(tmp_path, server, lra_release):
    fetch(lra_release, tmp_path, progress=False, timeout=5)
    offline = Source(
        url=f"http://127.0.0.1:{closed_port()}/lra_release.gz",
        sha256=lra_release.sha256,
        filename=lra_release.filename,
    )
    n_requests = len(server.requests)
    assert fetch(offline, tmp_path, progress=False, timeout=5) == tmp_path / "lra_release.gz"
    assert len(server.requests) == n_requests


def test_resume_sends_range_and_completes(tmp_path, server, lra_release):
    data = server.routes["/lra_release.gz"].data
    cut = len(data) // 3
    (tmp_path / "lra_release.gz.part").write_bytes(data[:cut])
    path = fetch(lra_release, tmp_path, progress=False, timeout=5)
    assert server.requests == [("/lra_release.gz", f"bytes={cut}-")]
    assert path.read_bytes() == data
    assert not (tmp_path / "lra_release.gz.part").exists()


def test_part_the_server_cannot_continue_is_restarted(tmp_path, server, lra_release):
    data = server.routes["/lra_release.gz"].data
    (tmp_path / "lra_release.gz.part").write_bytes(data + b"extra")  # server answers 416
    path = fetch(lra_release, tmp_path, progress=False, timeout=5)
    assert server.requests == [
        ("/lra_release.gz", f"bytes={len(data) + 5}-"),
        ("/lra_release.gz", None),
    ]
    assert path.read_bytes() == data


def test_server_ignoring_range_restarts_from_scratch(tmp_path, server):
    data = tar_bytes(lra_files("lra_release/"))
    source = server.serve("/norange.tar.gz", data, mode="norange")
    (tmp_path / "norange.tar.gz.part").write_bytes(data[:1000])
    path = fetch(source, tmp_path, progress=False, timeout=5)
    assert server.requests[-1] == ("/norange.tar.gz", "bytes=1000-")  # asked, got a 200
    assert path.read_bytes() == data  # appended instead of restarted would not match


def test_checksum_mismatch_is_clear_and_leaves_no_file(tmp_path, server, lra_release):
    actual = lra_release.sha256
    wrong = Source(url=lra_release.url, sha256="0" * 64, filename=lra_release.filename)
    with pytest.raises(ChecksumError) as err:
        fetch(wrong, tmp_path, progress=False, timeout=5)
    message = str(err.value)
    assert "0" * 64 in message and actual in message
    assert "corrupt" in message and "stale" in message
    assert list(tmp_path.iterdir()) == []  # neither the final name nor a .part


def test_corrupt_partial_file_is_detected_and_removed(tmp_path, server, lra_release):
    part = tmp_path / "lra_release.gz.part"
    part.write_bytes(b"garbage!" * 100)
    with pytest.raises(ChecksumError):
        fetch(lra_release, tmp_path, progress=False, timeout=5)
    assert list(tmp_path.iterdir()) == []
    # ... so the next attempt starts from scratch and succeeds.
    assert fetch(lra_release, tmp_path, progress=False, timeout=5).exists()
    assert server.requests[-1] == ("/lra_release.gz", None)


def test_size_mismatch(tmp_path, server, lra_release):
    sized = Source(lra_release.url, lra_release.sha256, lra_release.filename, size=10**6)
    with pytest.raises(SizeMismatchError, match=r"expected 1000000"):
        fetch(sized, tmp_path, progress=False, timeout=5)
    assert list(tmp_path.iterdir()) == []


def test_truncated_transfer_keeps_part_then_resumes(tmp_path, server):
    data = tar_bytes(lra_files("lra_release/"))
    source = server.serve("/cut.tar.gz", data, mode="truncate")
    with pytest.raises(TruncatedDownloadError) as err:
        fetch(source, tmp_path, progress=False, timeout=5)
    half = len(data) // 2
    assert "truncated" in str(err.value)
    assert f"{half} of {len(data)} bytes" in str(err.value)
    assert not (tmp_path / "cut.tar.gz").exists()
    assert (tmp_path / "cut.tar.gz.part").stat().st_size == half

    server.routes["/cut.tar.gz"].mode = "normal"
    path = fetch(source, tmp_path, progress=False, timeout=5)
    assert server.requests[-1] == ("/cut.tar.gz", f"bytes={half}-")
    assert path.read_bytes() == data


def test_connection_refused_names_url_and_manual_route(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/lra_release.gz"
    source = Source(url=url, sha256="0" * 64, filename="lra_release.gz")
    with pytest.raises(NetworkError) as err:
        fetch(source, tmp_path, progress=False, timeout=5)
    message = str(err.value)
    assert url in message and "by hand" in message
    # where a copy goes (the download folder), not a Python call
    assert f"put it at {tmp_path / 'lra_release.gz'}" in message and "fetch(" not in message
    assert not (tmp_path / "lra_release.gz").exists()


def test_unreachable_names_why_and_finds_an_open_port(server, lra_release, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert unreachable(lra_release.url, timeout=5) is None
    why = unreachable(f"http://127.0.0.1:{closed_port()}/x", timeout=5)
    assert why is not None and "refused" in why.lower()


def test_http_error_names_status_and_url(tmp_path, server):
    source = Source(url=server.url("/missing.tar"), sha256="0" * 64, filename="missing.tar")
    with pytest.raises(HTTPStatusError) as err:
        fetch(source, tmp_path, progress=False, timeout=5)
    assert err.value.status == 404
    assert "404" in str(err.value) and source.url in str(err.value)
    assert not (tmp_path / "missing.tar").exists()


def test_unpinned_source_refused_unless_allowed(tmp_path, server, capsys):
    data = RETRIEVAL_TSV
    pinned = server.serve("/new_aan_pairs.train.tsv", data)
    unpinned = Source(url=pinned.url, sha256=None, filename=pinned.filename)
    with pytest.raises(UnpinnedSourceError, match="allow_unpinned: true"):
        fetch(unpinned, tmp_path, progress=False, timeout=5)
    assert server.requests == []  # refused before touching the network
    path = fetch(unpinned, tmp_path, progress=False, timeout=5, allow_unpinned=True)
    assert path.read_bytes() == data
    assert hashlib.sha256(data).hexdigest() in capsys.readouterr().out


def test_headerless_tsv_downloads_but_is_no_archive(tmp_path, server):
    source = server.serve("/new_aan_pairs.train.tsv", RETRIEVAL_TSV)
    path = fetch(source, tmp_path / "dl", progress=False, timeout=5)
    assert path.read_bytes().split(b"\t")[0] == b"1"  # first line is data, not a header
    with pytest.raises(FetchError, match="not a tar"):
        extract(path, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl"]


def test_local_path_is_verified_then_adopted(tmp_path, server, lra_release):
    data = server.routes["/lra_release.gz"].data
    mine = tmp_path / "mine.gz"
    mine.write_bytes(data)
    path = fetch(lra_release, tmp_path / "dl", local_path=mine)
    assert path.read_bytes() == data and server.requests == []

    bad = tmp_path / "bad.gz"
    bad.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ChecksumError, match=lra_release.sha256):
        fetch(lra_release, tmp_path / "dl2", local_path=bad)
    assert bad.exists()  # the user's file is never deleted
    assert not (tmp_path / "dl2" / "lra_release.gz").exists()


def test_pins():
    assert PINNED["lra_release"].url == (
        "https://storage.googleapis.com/long-range-arena/lra_release.gz"
    )
    assert PINNED["lra_release"].sha256 is None  # unknown: must not be invented
    for key in ("imdb", "cifar10"):
        assert re.fullmatch(r"[0-9a-f]{64}", PINNED[key].sha256)
    with pytest.raises(UnpinnedSourceError):
        fetch(PINNED["lra_release"], Path("/nonexistent/never-created"))
    shard = hub_file("org/listops", "data/train-00000-of-00001.parquet", "0123abc", None)
    assert shard.url == (
        "https://huggingface.co/datasets/org/listops/resolve/0123abc/"
        "data/train-00000-of-00001.parquet"
    )
    assert shard.filename == "org--listops--train-00000-of-00001.parquet"
