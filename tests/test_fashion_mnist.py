"""Task fashion_mnist32: Debian's Fashion-MNIST padded to 32x32, from a tiny package built here.

The fixture is in the real formats: IDX files (big-endian header, uint8 pixels), gzip'd, inside
a .deb at the package's own path, handed out by the fake apt-get of test_debian.py.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdelab.data import fashion_mnist
from pdelab.data.catalogue import DEBIAN
from pdelab.data.errors import ChecksumError, FetchError
from pdelab.data.fashion_mnist import FOLDER, PACKAGE, FashionMnistSpec, read_idx
from pdelab.data.store import PIXEL_VOCAB, load_split
from pdelab.spec.data import TASK_DATA, data_spec
from tests.test_debian import FakeApt, deb_bytes, pin

N_TRAIN, N_TEST = 30, 12


def idx(array: np.ndarray) -> bytes:
    """An uint8 array as an IDX file: 0, 0, type 0x08, ndim, big-endian sizes, values."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def fixture_files(seed: int = 0) -> dict[str, bytes]:
    """The four gzip'd IDX files: random 28x28 images (no zero pixel, so padding shows), each
    label 0-9 in turn."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        images_name, labels_name = fashion_mnist.FILES[split]
        out[images_name] = gzip.compress(idx(rng.integers(1, 256, (n, 28, 28))), mtime=0)
        out[labels_name] = gzip.compress(idx(np.arange(n) % 10), mtime=0)
    return out


@pytest.fixture
def apt(tmp_path, monkeypatch) -> FakeApt:
    return FakeApt(tmp_path / "fake-apt", monkeypatch)


@pytest.fixture
def package(monkeypatch, apt) -> dict[str, bytes]:
    """Pin the fixture package in DEBIAN and let the fake apt hand it out; returns its files."""
    files = fixture_files()
    data = deb_bytes({f"{FOLDER}/{name}": content for name, content in files.items()})
    pins = {f"{FOLDER}/{n}": hashlib.sha256(c).hexdigest() for n, c in files.items()}
    fixture = pin(PACKAGE, data, version=DEBIAN[PACKAGE].version)
    fixture = replace(fixture, files=pins)
    monkeypatch.setitem(DEBIAN, PACKAGE, fixture)
    apt.offer(fixture, data)
    return files


def build(tmp_path: Path, **fields) -> dict:
    spec = FashionMnistSpec(**{"n_train": 20, "n_val": 5, "n_test": 8, **fields})
    fashion_mnist.fetch(spec, tmp_path / "raw")
    return fashion_mnist.prepare(spec, tmp_path / "raw", tmp_path / "prepared")


def test_download_pads_to_32_and_keeps_every_pixel(tmp_path, package, apt) -> None:
    manifest = build(tmp_path)
    assert apt.calls() == [f"download {DEBIAN[PACKAGE].spec}"]
    assert manifest["task"] == "fashion_mnist32" and manifest["num_classes"] == 10
    assert manifest["image_shape"] == [32, 32, 1] and manifest["vocab"] == list(PIXEL_VOCAB)
    assert manifest["kind"] == "classification"
    assert "CIFAR-10" in manifest["stand_in"]
    assert {s["examples"] for s in manifest["splits"].values()} == {20, 5, 8}
    train = read_idx(tmp_path / "raw" / "fashion-mnist" / "train-images-idx3-ubyte.gz")
    labels = read_idx(tmp_path / "raw" / "fashion-mnist" / "train-labels-idx1-ubyte.gz")
    assert train.shape == (N_TRAIN, 28, 28) and labels.tolist() == [i % 10 for i in range(30)]
    seen = []
    for split in ("train", "val", "test"):
        data = load_split(tmp_path / "prepared", split, verify=True)
        images = np.asarray(data.tokens).reshape(len(data), 32, 32).astype(int) - 2
        assert (data.lengths() == 1024).all()  # 16 x 16 patches of 2 x 2 and a class token: 257
        assert (images[:, :2] == 0).all() and (images[:, -2:] == 0).all()
        assert (images[:, :, :2] == 0).all() and (images[:, :, -2:] == 0).all()
        assert (images[:, 2:30, 2:30] > 0).all()  # the 28x28 image, untouched, in the middle
        seen.append(images[:, 2:30, 2:30])
    # every training and validation image is one of the file's, with its label, none twice
    rows = {img.tobytes(): i for i, img in enumerate(train.astype(int))}
    used = [rows[img.tobytes()] for img in np.concatenate(seen[:2])]
    assert len(set(used)) == 25
    train_split = load_split(tmp_path / "prepared", "train")
    assert train_split.labels.tolist() == [labels[i] for i in used[:20]]


def test_builds_are_deterministic_and_seeded(tmp_path, package) -> None:
    first = build(tmp_path / "a")["content_hash"]
    assert build(tmp_path / "b")["content_hash"] == first
    assert build(tmp_path / "c", seed=1)["content_hash"] != first


def test_installed_files_are_verified(tmp_path, package) -> None:
    installed = tmp_path / "usr-share-datasets"
    installed.mkdir()
    for name, content in package.items():
        (installed / name).write_bytes(content)
    assert build(tmp_path / "ok", source=str(installed))["splits"]["test"]["examples"] == 8
    broken = bytearray(package["t10k-images-idx3-ubyte.gz"])
    broken[-9] ^= 0xFF
    (installed / "t10k-images-idx3-ubyte.gz").write_bytes(bytes(broken))
    with pytest.raises(ChecksumError) as err:
        build(tmp_path / "bad", source=str(installed))
    message = str(err.value)
    assert "t10k-images-idx3-ubyte.gz" in message and "use source 'download'" in message


def test_the_package_file_itself_or_its_folder(tmp_path, package, apt) -> None:
    deb = apt.store / DEBIAN[PACKAGE].spec
    folder = tmp_path / "debs"
    folder.mkdir()
    (folder / DEBIAN[PACKAGE].filename).write_bytes(deb.read_bytes())
    a = build(tmp_path / "a", source=str(folder))["content_hash"]
    b = build(tmp_path / "b", source=str(folder / DEBIAN[PACKAGE].filename))["content_hash"]
    assert a == b and apt.calls() == []
    with pytest.raises(FetchError, match=r"must be 'download', the package file"):
        build(tmp_path / "c", source=str(tmp_path / "nowhere"))


def test_bad_idx_files_name_the_problem(tmp_path) -> None:
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(b"\x89PNG\r\n")
    with pytest.raises(ValueError, match=r"not an IDX file"):
        read_idx(path)
    path.write_bytes(idx(np.zeros((3, 28, 28)))[:-5])
    with pytest.raises(ValueError, match=r"shape \(3, 28, 28\).*truncated or corrupt"):
        read_idx(path)
    path.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"corrupt gzip"):
        read_idx(path)
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    for name, content in fixture_files().items():
        (folder / name).write_bytes(content)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx(np.arange(5))))
    with pytest.raises(ValueError, match=r"expected 12 labels 0-9"):
        fashion_mnist.read_split(folder, "test")


def test_project_blocks(params) -> None:
    assert TASK_DATA.get("fashion_mnist32").module is fashion_mnist
    smoke = data_spec(params, "smoke", "fashion_mnist32")
    paper = data_spec(params, "paper", "fashion_mnist32")
    assert smoke.n_train >= 1000 and smoke.n_test >= 400 and smoke.source == "download"
    assert (paper.n_train + paper.n_val, paper.n_test) == (60_000, 10_000)
