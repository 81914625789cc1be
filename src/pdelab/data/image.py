"""Sequential grayscale CIFAR-10 (Krizhevsky 2009), as in the Long Range Arena.

LRA converts each 32x32 RGB image with ``tf.image.rgb_to_grayscale`` and reads the 1,024
intensities row by row; 10 classes. That function works in float32: x / 255 per channel,
weighted by (0.2989, 0.5870, 0.1140), then multiplied by 255.5 and *truncated* (TF's
``convert_image_dtype``), i.e. gray = floor(sum(w * x) * 255.5 / 255), not rounded: pure green
(0, 255, 0) gives 149, where rounding 149.69 would give 150. :func:`grayscale` does the same
(identical to TensorFlow 2.21's output on all 2**24 RGB triples; rounding differs on 25%).
Intensity v is token v + 2.

LRA trains on tfds ``train[:90%]`` and validates on ``train[90%:]`` (45,000 / 5,000) and tests
on the 10,000 test images. We take val as the last ``n_val`` images of ``data_batch_1..5`` in
order; tfds stores the training images in another order, so the same sizes but not the same
images. Smaller ``n_train`` / ``n_test`` keep a seeded sample, in file order.

``source``: "download" (the pinned cifar-10-python.tar.gz), that archive or a folder holding
``cifar-10-batches-py/`` (pickled dicts: ``b"data"`` (N, 3072) uint8, the R, G and B planes of
each image; ``b"labels"``), or "standin". ``fetch`` copies the six batches into raw_dir, the
stand-in is written as such batches (R = G = B, which the conversion maps back exactly), and
``prepare`` reads them. The pickles are loaded with an unpickler that admits numpy arrays only.

Stand-in: scikit-learn's ``load_digits`` (:data:`STAND_IN`), shuffled by ``seed``; its first
``n_train``, next ``n_val`` and next ``n_test`` images form the splits (1,797 in all, so an
80/10/10 split is 1,437 / 180 / 180).

``side`` (default 32, the paper's) reads every ``32 / side``-th pixel of every ``32 / side``-th
row, so an image is ``side * side`` tokens. The stand-in's digits are upscaled to 32x32 by
nearest neighbour, so ``side: 8`` gives back load_digits' native 8x8 images exactly (64
tokens), which a small model can learn on a CPU in seconds.
"""

from __future__ import annotations

import io
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data.errors import ArchiveLayoutError
from pdelab.data.release import locate_release
from pdelab.data.sources import Sources
from pdelab.data.store import PIXEL_VOCAB, pixel_tokens, subset, write_prepared

BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)
STAND_IN = (
    "scikit-learn's load_digits (1,797 real 8x8 handwritten digit images, 17 gray levels), "
    "upscaled to 32x32 by nearest neighbour with intensities scaled to 0-255, stands in for "
    "CIFAR-10"
)
STAND_IN_NATIVE = (
    "scikit-learn's load_digits (1,797 real 8x8 handwritten digit images, 17 gray levels) at "
    "its native 8x8 (64 tokens), intensities scaled to 0-255, stands in for CIFAR-10"
)
EXPECTED = "cifar-10-batches-py/{data_batch_1..5,test_batch} (the CIFAR-10 python version)"


@dataclass(frozen=True)
class ImageSpec:
    """Data parameters; the defaults are the paper's (LRA's CIFAR-10 split)."""

    sources: ClassVar[Sources] = Sources(downloads=("cifar10",), layout=EXPECTED)

    source: str = "download"
    n_train: int = 45_000
    n_val: int = 5_000
    n_test: int = 10_000
    side: int = 32  # pixels per row and column read (a divisor of 32)
    seed: int = 0

    def check(self) -> None:
        """A side that tiles 32 pixels (ValueError naming the key)."""
        if self.side < 1 or 32 % self.side:
            raise ValueError(f"side: must divide 32 (1, 2, 4, 8, 16 or 32), got {self.side}")


def grayscale(data: np.ndarray) -> np.ndarray:
    """(N, 3072) RGB-planar uint8 -> (N, 1024) uint8, as tf.image.rgb_to_grayscale computes it."""
    rgb = data.reshape(len(data), 3, 1024).astype(np.float32) * np.float32(1 / 255)
    gray = rgb[:, 0] * WEIGHTS[0] + rgb[:, 1] * WEIGHTS[1] + rgb[:, 2] * WEIGHTS[2]
    return (gray * np.float32(255.5)).astype(np.uint8)


class _ArrayUnpickler(pickle.Unpickler):
    """Loads dicts, lists, bytes and numpy arrays, and refuses any other class."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Grayscale images (N, 1024) uint8 and labels (N,) of one CIFAR-10 python batch."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; expected {EXPECTED}")
    try:
        batch = _ArrayUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a CIFAR-10 python batch ({err!r})") from err
    if (
        data.dtype != np.uint8
        or data.shape != (len(labels), 3072)
        or not np.isin(labels, range(10)).all()
    ):
        raise ValueError(
            f"{path}: expected b'data' uint8 (N, 3072) and N labels 0-9, got {data.dtype} "
            f"{data.shape} and {len(labels)} labels"
        )
    return grayscale(data), labels


def write_batch(path: Path, gray: np.ndarray, labels: np.ndarray) -> None:
    """A CIFAR-10 python batch whose three planes are all ``gray`` (N, 1024) uint8."""
    data = np.tile(gray.reshape(len(gray), 1024), (1, 3))
    batch = {b"batch_label": path.name.encode(), b"labels": [int(y) for y in labels], b"data": data}
    path.write_bytes(pickle.dumps(batch, protocol=2))


def write_standin(spec: ImageSpec, root: Path) -> None:
    """load_digits, upscaled and shuffled, as train+val batches (val last) and a test batch."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    wanted = spec.n_train + spec.n_val + spec.n_test
    if wanted > len(digits.target):
        raise ValueError(
            f"image stand-in: n_train + n_val + n_test = {wanted}, but load_digits has "
            f"{len(digits.target)} images (80/10/10 is 1437/180/180)"
        )
    gray = np.round(digits.images * (255 / 16)).astype(np.uint8).repeat(4, 1).repeat(4, 2)
    order = np.random.default_rng(spec.seed).permutation(len(gray))
    train, test = order[: spec.n_train + spec.n_val], order[spec.n_train + spec.n_val : wanted]
    root.mkdir(parents=True)
    for name, part in zip(BATCHES, np.array_split(train, len(BATCHES)), strict=True):
        write_batch(root / name, gray[part], digits.target[part])
    write_batch(root / "test_batch", gray[test], digits.target[test])


def fetch(spec: ImageSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/cifar-10-batches-py``: the stand-in, or the six real batches."""
    dest = raw_dir / "cifar-10-batches-py"
    shutil.rmtree(dest, ignore_errors=True)
    if spec.source == "standin":
        write_standin(spec, dest)
        return
    key = spec.sources.downloads[0]
    src = locate_release(spec.source, raw_dir, key, "cifar-10-batches-py", BATCHES[0], EXPECTED)
    dest.mkdir(parents=True)
    for name in (*BATCHES, "test_batch"):
        if not (src / name).is_file():
            raise ArchiveLayoutError(f"{src / name}: missing; expected {EXPECTED}")
        shutil.copyfile(src / name, dest / name)


def subsample(images: np.ndarray, side: int) -> np.ndarray:
    """(N, 1024) 32x32 images -> (N, side * side): every ``32 // side``-th pixel of every
    ``32 // side``-th row (the identity at side 32)."""
    check_side(side)
    step = 32 // side
    return images.reshape(-1, 32, 32)[:, ::step, ::step].reshape(len(images), side * side)


def check_side(side: int) -> None:
    """Reject a ``side`` that does not tile 32 pixels (it would drop pixels unevenly)."""
    if side < 1 or 32 % side:
        raise ValueError(f"image: side must divide 32 (1, 2, 4, 8, 16 or 32), got {side}")


def prepare(spec: ImageSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Pixel tokens (``side ** 2`` per image, 1,024 by default); val is the last ``n_val``
    training images."""
    check_side(spec.side)  # before reading any batch
    root = raw_dir / "cifar-10-batches-py"
    batches = [read_batch(root / name) for name in BATCHES]
    images, labels = (
        np.concatenate([b[0] for b in batches]),
        np.concatenate([b[1] for b in batches]),
    )
    test_images, test_labels = read_batch(root / "test_batch")
    if spec.n_val > len(labels):
        raise ValueError(
            f"image: n_val = {spec.n_val}, but there are {len(labels)} training images"
        )
    rng = np.random.default_rng(spec.seed)
    pool = len(labels) - spec.n_val
    index = {
        "train": subset(pool, spec.n_train, rng, "image train"),
        "val": np.arange(pool, len(labels)),
    }
    splits = {
        split: (pixel_tokens(subsample(images[i], spec.side)), labels[i])
        for split, i in index.items()
    }
    test = subset(len(test_labels), spec.n_test, rng, "image test")
    splits["test"] = (pixel_tokens(subsample(test_images[test], spec.side)), test_labels[test])
    info: dict[str, Any] = {"task": "image"} | ({"side": spec.side} if spec.side != 32 else {})
    if spec.source == "standin":
        info["stand_in"] = STAND_IN if spec.side == 32 else STAND_IN_NATIVE
    return write_prepared(out_dir, splits, PIXEL_VOCAB, 10, info)
