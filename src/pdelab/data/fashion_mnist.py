"""Fashion-MNIST padded to 32x32: the offline stand-in for CIFAR-10 in FNA's ViT experiment.

Fractional Neural Attention trains a ViT with 2x2 patches on CIFAR-10's 32x32 images, i.e. 256
patches plus a class token (257 tokens). Fashion-MNIST (Xiao et al. 2017: 60,000 training and
10,000 test images of 10 classes of clothing, 28x28, 8-bit gray) ships in Debian as
``dataset-fashion-mnist``, so it can be had wherever Debian's archive can. Each image is padded
with PAD zero pixels on every side to 32x32, so the same ViT sees the same 257 tokens; the
classes are balanced, so chance and the majority rate are both 10%.

``source``: "download" (``apt-get download`` of the package pinned in
:data:`pdelab.data.catalogue.DEBIAN`, kept in ``raw_dir/../downloads``), the ``.deb`` itself, or
a folder holding it or the four IDX files (``/usr/share/datasets/fashion-mnist`` where the
package is installed). The package and each of the four files are checked against their pins.
``fetch`` writes the four ``*-ubyte.gz`` files into ``raw_dir/fashion-mnist``; ``prepare``
reads only those.

Splits: validation is a seeded slice of ``n_val`` training images, training a seeded sample of
``n_train`` of the rest, test a seeded sample of ``n_test`` test images (all in file order).
Storage: pixel v is token v + 2 (store.PIXEL_VOCAB), 1,024 tokens per image, row by row.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np

from pdelab.data import debian
from pdelab.data.catalogue import DEBIAN
from pdelab.data.errors import ChecksumError, FetchError, SourceNotFoundError
from pdelab.data.sources import Sources
from pdelab.data.store import PIXEL_VOCAB, pixel_tokens, split_train_val, subset, write_prepared

PACKAGE = "dataset-fashion-mnist"
FOLDER = "usr/share/datasets/fashion-mnist"
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
LABELS = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
SIDE, PAD = 28, 2  # 28 + 2 * 2 = 32, CIFAR-10's side
STAND_IN = (
    "Fashion-MNIST (Debian's dataset-fashion-mnist: real 28x28 grayscale photographs of 10 "
    "classes of clothing) padded with 2 black pixels on each side to 32x32 stands in for "
    "CIFAR-10's 32x32 colour photographs"
)
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass(frozen=True)
class FashionMnistSpec:
    """Data parameters; the defaults use every image (5,000 training images for validation)."""

    sources: ClassVar[Sources] = Sources(
        made=(),
        package=PACKAGE,
        layout=f"{DEBIAN[PACKAGE].filename} or the four files "
        f"{', '.join(n for pair in FILES.values() for n in pair)} (such as /{FOLDER} where "
        f"{PACKAGE} is installed)",
    )

    source: str = "download"
    n_train: int = 55_000
    n_val: int = 5_000
    n_test: int = 10_000
    seed: int = 0


def names() -> list[str]:
    return [name for pair in FILES.values() for name in pair]


def _verified(name: str, data: bytes, where: object) -> bytes:
    """``data`` if it has the pinned sha256 of IDX file ``name``; else a ChecksumError."""
    package = DEBIAN[PACKAGE]
    expected = package.files[f"{FOLDER}/{name}"]
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ChecksumError(
            f"{where}: sha256 {actual}, but {name} of {package.spec} is pinned at {expected}. "
            "It is corrupt or from another release of Fashion-MNIST: use source 'download' "
            f"(`apt-get download {package.spec}`) or reinstall the package."
        )
    return data


def source_files(source: str, raw_dir: Path) -> dict[str, bytes]:
    """The four IDX files named by ``source``, each checked against its pin."""
    package = DEBIAN[PACKAGE]
    cache = raw_dir.parent / "downloads"
    path = Path(source).expanduser()
    if source == "download" or path.is_file():
        deb = debian.fetch_deb(package, cache, None if source == "download" else path)
    elif path.is_dir() and (path / package.filename).is_file():
        deb = debian.fetch_deb(package, cache, path)
    elif path.is_dir() and all((path / name).is_file() for name in names()):
        return {name: _verified(name, (path / name).read_bytes(), path / name) for name in names()}
    else:
        missing = "" if path.exists() else f" ({path} does not exist)"
        raise (FetchError if path.exists() else SourceNotFoundError)(
            f"fashion_mnist32: source {source!r} must be 'download', the package file "
            f"{package.filename}, or a folder holding {FashionMnistSpec.sources.layout}{missing}"
        )
    members = debian.deb_members(deb, f"{FOLDER}/*-ubyte.gz")
    found = {PurePosixPath(member).name: data for member, data in members.items()}
    missing = [name for name in names() if name not in found]
    if missing:
        raise FetchError(f"{deb}: {', '.join(missing)} missing under {FOLDER}")
    return {name: _verified(name, found[name], f"{deb}: {name}") for name in names()}


def fetch(spec: FashionMnistSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/fashion-mnist`` with the four verified IDX files."""
    dest = raw_dir / "fashion-mnist"
    shutil.rmtree(dest, ignore_errors=True)
    files = source_files(spec.source, raw_dir)
    dest.mkdir(parents=True)
    for name, data in files.items():
        (dest / name).write_bytes(data)


def read_idx(path: Path) -> np.ndarray:
    """The array in an IDX file (gzip'd or plain): two zero bytes, a type byte, the number of
    dimensions, each dimension as a big-endian uint32, then the values in C order."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; run the fetch stage first")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"{path}: a corrupt gzip file ({err})") from err
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in IDX_TYPES:
        raise ValueError(
            f"{path}: not an IDX file (it must start with two zero bytes and a type byte "
            f"among {sorted(IDX_TYPES)}, got {raw[:4]!r})"
        )
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(IDX_TYPES[raw[2]])
    body = raw[4 + 4 * ndim :]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(body) != expected:
        raise ValueError(
            f"{path}: its header says shape {shape} ({expected} bytes of data), but the file "
            f"holds {len(body)}; it is truncated or corrupt: fetch it again"
        )
    return np.frombuffer(body, dtype=dtype).reshape(shape)


def read_split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) uint8 and labels (N,) int64 of "train" or "test"."""
    images_file, labels_file = FILES[split]
    images, labels = read_idx(root / images_file), read_idx(root / labels_file)
    if images.ndim != 3 or images.shape[1:] != (SIDE, SIDE) or images.dtype != np.uint8:
        raise ValueError(
            f"{root / images_file}: expected uint8 images (N, {SIDE}, {SIDE}), got "
            f"{images.dtype} {images.shape}"
        )
    if labels.shape != (len(images),) or not np.isin(labels, range(len(LABELS))).all():
        raise ValueError(
            f"{root / labels_file}: expected {len(images)} labels 0-9 (one per image), got "
            f"shape {labels.shape}"
        )
    return images, labels.astype(np.int64)


def pad(images: np.ndarray) -> np.ndarray:
    """(N, 28, 28) -> (N, 32, 32): PAD zero (black) pixels on every side."""
    return np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD)))


def prepare(spec: FashionMnistSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """1,024 pixel tokens per padded image; val is a seeded slice of the training images."""
    root = raw_dir / "fashion-mnist"
    images, labels = read_split(root, "train")
    test_images, test_labels = read_split(root, "test")
    rng = np.random.default_rng(spec.seed)
    index = split_train_val(len(labels), spec.n_train, spec.n_val, rng, "fashion_mnist32")
    test = subset(len(test_labels), spec.n_test, rng, "fashion_mnist32 test")
    splits = {s: (pixel_tokens(pad(images[i])), labels[i]) for s, i in index.items()}
    splits["test"] = (pixel_tokens(pad(test_images[test])), test_labels[test])
    package = DEBIAN[PACKAGE]
    info = {
        "task": "fashion_mnist32",
        "kind": "classification",
        "image_shape": [SIDE + 2 * PAD, SIDE + 2 * PAD, 1],
        "padding": PAD,
        "labels": list(LABELS),
        "source_package": {"name": package.name, "version": package.version},
        "stand_in": STAND_IN,
    }
    return write_prepared(out_dir, splits, PIXEL_VOCAB, len(LABELS), info)
