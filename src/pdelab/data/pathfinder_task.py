"""The Pathfinder task of the Long Range Arena: data spec, fetch and prepare.

LRA's Pathfinder is ``pathfinder32/curv_contour_length_14`` of its release ("pathfinder32_hard";
``curv_baseline`` and ``curv_contour_length_9`` are the easier levels): 32x32 grayscale images,
label 1 when the two markers lie on one contour. Each image becomes 1,024 tokens, its pixel
intensities row by row, intensity v -> token v + 2; 2 classes. The generator's own
``small10_contour_length_1`` level (10x10, 100 tokens; not in the release) serves CPU smoke runs.

LRA splits one difficulty 80/10/10 (tfds ``[:80%]``, ``[80%:90%]``, ``[90%:]``). Here a seeded
permutation of the examples is cut into train, val and test, with ``round(n * val_fraction)``
and ``round(n * test_fraction)`` examples in val and test. For real data ``n`` is a cap: the
first ``n`` of the permutation are used, or all of them when the release has fewer (the
release's curv_baseline has 199,999 readable images of 200,000: one, ``imgs/0/sample_172.png``,
is broken and skipped with a warning, as other LRA loaders do).

``source``: "standin" or "generate" (pdelab's generator, :mod:`pdelab.data.pathfinder`, which
writes the release layout), "download" (``lra_release.gz``, not pinned by checksum, so it also
needs ``allow_unpinned: true``), that archive, or a folder holding ``pathfinder32/<difficulty>``
(or that ``pathfinder32`` folder itself). ``fetch`` puts ``pathfinder32/<difficulty>`` into
raw_dir (generated or copied) and ``prepare`` reads it with :func:`read_pathfinder`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pdelab.data.pathfinder import (
    DIFFICULTIES,
    LEVEL_SETTINGS,
    PathfinderParams,
    generate_pathfinder,
    read_pathfinder,
)
from pdelab.data.release import locate_release
from pdelab.data.sources import Sources
from pdelab.data.store import PIXEL_VOCAB, pixel_tokens, write_prepared

GENERATED = ("standin", "generate")
STAND_IN = "pdelab's Pathfinder generator stands in for the LRA release images"


@dataclass(frozen=True)
class PathfinderSpec:
    """Data parameters; the defaults are the paper's (LRA's hard level, 200,000 images)."""

    sources: ClassVar[Sources] = Sources(
        made=GENERATED,
        downloads=("lra_release",),
        layout="pathfinder32/<difficulty>/{metadata,imgs} (the LRA release layout)",
    )

    source: str = "download"
    difficulty: str = "curv_contour_length_14"
    n: int = 200_000
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    allow_unpinned: bool = False
    seed: int = 0


def _check(spec: PathfinderSpec) -> None:
    if spec.difficulty not in DIFFICULTIES:
        raise ValueError(
            f"pathfinder difficulty {spec.difficulty!r}: expected one of {', '.join(DIFFICULTIES)}"
        )
    if spec.difficulty in LEVEL_SETTINGS and spec.source not in GENERATED:
        raise ValueError(
            f"pathfinder difficulty {spec.difficulty!r} is pdelab's own level, not in the LRA "
            f"release: set source to {' or '.join(GENERATED)}"
        )
    fractions = (spec.val_fraction, spec.test_fraction)
    if min(fractions) < 0 or sum(fractions) >= 1:
        raise ValueError(
            f"pathfinder val_fraction and test_fraction must be >= 0 and sum to < 1, got "
            f"{spec.val_fraction} and {spec.test_fraction}"
        )


def fetch(spec: PathfinderSpec, raw_dir: Path) -> None:
    """Fill ``raw_dir/pathfinder32/<difficulty>``: generated, or copied from the release."""
    _check(spec)
    root = raw_dir / "pathfinder32"
    shutil.rmtree(root, ignore_errors=True)
    if spec.source in GENERATED:
        generate_pathfinder(root, spec.difficulty, spec.n, spec.seed)
        return
    src = locate_release(
        spec.source,
        raw_dir,
        spec.sources.downloads[0],
        "pathfinder32",
        f"{spec.difficulty}/metadata",
        spec.sources.layout_of(spec),
        allow_unpinned=spec.allow_unpinned,
    )
    shutil.copytree(src / spec.difficulty, root / spec.difficulty)


def prepare(spec: PathfinderSpec, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Pixel tokens (1,024 per image at LRA's levels) split 80/10/10 (by default) by a seeded
    permutation."""
    _check(spec)
    real = spec.source not in GENERATED
    images, labels = read_pathfinder(
        raw_dir / "pathfinder32", spec.difficulty, skip_unreadable=real
    )
    level = PathfinderParams.for_difficulty(spec.difficulty)
    size = level.image_size
    if images.shape[1:] != (size, size):
        raise ValueError(
            f"pathfinder {spec.difficulty}: expected {size}x{size} images, got {images.shape[1:]}"
        )
    order = np.random.default_rng(spec.seed).permutation(len(labels))[: spec.n]
    n_val, n_test = round(len(order) * spec.val_fraction), round(len(order) * spec.test_fraction)
    parts = np.split(order, [len(order) - n_val - n_test, len(order) - n_test])
    tokens = pixel_tokens(images)
    splits = {
        split: (tokens[index], labels[index])
        for split, index in zip(("train", "val", "test"), parts, strict=True)
    }
    info = {"task": "pathfinder", "difficulty": spec.difficulty}
    if not real:
        own = spec.difficulty in LEVEL_SETTINGS
        info["stand_in"] = f"{STAND_IN} (its own level: {level.describe()})" if own else STAND_IN
    return write_prepared(out_dir, splits, PIXEL_VOCAB, 2, info)
