"""Pathfinder generator: task semantics, geometry rules, determinism and the release layout.

Connectivity is checked independently of the generator's own rendering: the returned contour
paths (paddles plus the pivots between them, i.e. the contour with its gaps closed) of *all*
contours are rasterised here at 8x resolution and flood-filled with 4-connectivity from one
marker. Positive examples must reach the other marker; negative ones must not.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pdelab.data.pathfinder import (
    DIFFICULTIES,
    PathfinderParams,
    balanced_labels,
    generate_pathfinder,
    make_example,
    marker_points,
    read_pathfinder,
)

SCALE = 8  # sub-pixels per pixel for the test raster
HALF_WIDTH = 0.11  # > sqrt(2)/2 / SCALE, so a rasterised segment is 4-connected


def examples(difficulty: str, n: int, seed: int = 0) -> list:
    labels = balanced_labels(n, seed, DIFFICULTIES[difficulty])
    return [
        make_example(int(labels[i]), seed=seed, index=i, difficulty=difficulty) for i in range(n)
    ]


def point_segment(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ab = b - a
    t = np.clip(((p - a) * ab).sum(-1) / max(float((ab * ab).sum()), 1e-12), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[..., None] * ab), axis=-1)


def segment_distance(a1, b1, a2, b2) -> float:
    """Exact distance between two segments in the plane."""

    def cross(o, p, q):
        return (p[0] - o[0]) * (q[1] - o[1]) - (p[1] - o[1]) * (q[0] - o[0])

    if cross(a1, b1, a2) * cross(a1, b1, b2) < 0 and cross(a2, b2, a1) * cross(a2, b2, b1) < 0:
        return 0.0
    return float(
        min(
            point_segment(a1, a2, b2),
            point_segment(b1, a2, b2),
            point_segment(a2, a1, b1),
            point_segment(b2, a1, b1),
        )
    )


def rasterise(contours, size: int = 32) -> np.ndarray:
    """Sub-pixels within HALF_WIDTH of any contour path."""
    mask = np.zeros((size * SCALE, size * SCALE), dtype=bool)
    for contour in contours:
        for a, b in zip(contour.path[:-1], contour.path[1:], strict=True):
            lo = np.floor((np.minimum(a, b) - HALF_WIDTH) * SCALE).astype(int).clip(0)
            hi = np.ceil((np.maximum(a, b) + HALF_WIDTH) * SCALE).astype(int) + 1
            rows, cols = np.mgrid[lo[0] : hi[0], lo[1] : hi[1]]
            centres = np.stack([rows, cols], axis=-1) / SCALE + 0.5 / SCALE
            near = point_segment(centres, a, b) <= HALF_WIDTH
            mask[rows[near], cols[near]] = True
    return mask


def cell(point: np.ndarray) -> tuple[int, int]:
    r, c = np.floor(point * SCALE).astype(int)
    return int(r), int(c)


def flood(mask: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """4-connected flood fill of ``mask`` from ``start``."""
    seen = np.zeros_like(mask)
    seen[start] = True
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            inside = 0 <= nr < mask.shape[0] and 0 <= nc < mask.shape[1]
            if inside and mask[nr, nc] and not seen[nr, nc]:
                seen[nr, nc] = True
                queue.append((nr, nc))
    return seen


# --------------------------------------------------------------------------------------------
# Task semantics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100, 1001])
def test_labels_balanced(n):
    labels = balanced_labels(n, seed=3)
    assert labels.dtype == np.int64 and len(labels) == n
    assert set(labels.tolist()) <= {0, 1}
    if n % 2 == 0:
        assert labels.sum() == n // 2
    else:
        assert labels.sum() in (n // 2, n // 2 + 1)
    if n >= 100:  # shuffled, not sorted
        assert 0 < np.abs(np.diff(labels)).sum() < n - 1


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_markers_connected_exactly_for_positives(difficulty):
    for ex in examples(difficulty, 60, seed=5):
        markers = marker_points(ex.contours)
        assert markers.shape == (2, 2)
        mask = rasterise(ex.contours)
        start, goal = cell(markers[0]), cell(markers[1])
        assert mask[start] and mask[goal]
        reached = flood(mask, start)
        assert reached[goal] == (ex.label == 1), (difficulty, ex.label)


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_markers_sit_on_target_ends(difficulty):
    for ex in examples(difficulty, 24, seed=6):
        targets = [c for c in ex.contours if c.target]
        assert len(targets) == 2 and ex.contours[:2] == targets
        assert not any(c.marked_start or c.marked_end for c in ex.contours[2:])
        with_start = [i for i, c in enumerate(targets) if c.marked_start]
        with_end = [i for i, c in enumerate(targets) if c.marked_end]
        assert len(with_start) == 1 and len(with_end) == 1
        if ex.label == 1:
            assert with_start == with_end  # both ends of one contour
        else:
            assert with_start != with_end  # one marker on each target contour


def test_image_shows_the_returned_contours_and_markers():
    for ex in examples("curv_contour_length_9", 12, seed=7):
        image = ex.image
        assert image.shape == (32, 32) and image.dtype == np.uint8
        for point in marker_points(ex.contours):
            r, c = np.floor(point).astype(int)
            assert image[r, c] >= 250  # marker disc centre is saturated
        paddles = np.concatenate([c.paddles for c in ex.contours])
        all_centres = np.indices((32, 32)).reshape(2, -1).T + 0.5
        for a, b in paddles:
            close = point_segment(all_centres, a, b) <= 0.75
            assert image.reshape(-1)[close].max() > 60  # every paddle is drawn
        # ... and nothing else is: lit pixels are near a paddle or a marker.
        centres = np.stack(np.nonzero(image), axis=-1) + 0.5
        to_paddle = np.min([point_segment(centres, a, b) for a, b in paddles], axis=0)
        to_marker = np.min(
            [np.linalg.norm(centres - m, axis=-1) for m in marker_points(ex.contours)], axis=0
        )
        near_paddle = to_paddle <= 0.5 + 0.25 + 1e-9  # half a pixel + half the thickness
        near_marker = to_marker <= 1.5 + 0.5 + 1e-9  # marker radius + half a pixel
        assert (near_paddle | near_marker).all()


# --------------------------------------------------------------------------------------------
# Geometry rules of Linsley et al.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_growth_rules(difficulty):
    params = PathfinderParams.for_difficulty(difficulty)
    for ex in examples(difficulty, 10, seed=8):
        first, second = ex.contours[:2]
        # Target seeds a fixed distance apart.
        assert math.isclose(
            np.linalg.norm(first.start - second.start), params.seed_distance, abs_tol=1e-9
        )
        for contour in ex.contours:
            lengths = np.linalg.norm(contour.paddles[:, 1] - contour.paddles[:, 0], axis=-1)
            assert np.allclose(lengths, params.paddle_length)
            # Far ends inside the padded frame (pixel centres), near ends within the image.
            lo, hi = params.padding + 0.5, params.image_size - params.padding - 0.5
            assert ((contour.paddles[:, 1] >= lo) & (contour.paddles[:, 1] <= hi)).all()
            assert ((contour.paddles >= 0) & (contour.paddles <= params.image_size)).all()
            # Continuity: each turn is below 90 degrees (weight cos^2 vanishes there).
            d = contour.paddles[:, 1] - contour.paddles[:, 0]
            cos_turn = (d[1:] * d[:-1]).sum(-1) / params.paddle_length**2
            assert (cos_turn > 0).all()
            # Gaps: consecutive paddles are separated by the margin on each side of a pivot.
            gaps = np.linalg.norm(contour.paddles[1:, 0] - contour.paddles[:-1, 1], axis=-1)
            assert (gaps > 0.99 * math.sqrt(2) * params.paddle_margin).all()
            assert (gaps <= 2 * params.paddle_margin + 1e-9).all()
        # Overlap rejection: paddles of different contours are at least 2 margins apart (as
        # in the original), and so are non-adjacent paddles of one contour; the traced paths
        # (gaps closed) of different contours never touch.
        margin = params.paddle_margin
        for i, ci in enumerate(ex.contours):
            for k, (a1, b1) in enumerate(ci.paddles):
                for a2, b2 in ci.paddles[k + 2 :]:
                    assert segment_distance(a1, b1, a2, b2) >= 2 * margin - 1e-9
            for cj in ex.contours[i + 1 :]:
                paddle_gap = min(
                    segment_distance(a1, b1, a2, b2)
                    for a1, b1 in ci.paddles
                    for a2, b2 in cj.paddles
                )
                assert paddle_gap >= 2 * margin - 1e-9
                path_gap = min(
                    segment_distance(a1, b1, a2, b2)
                    for a1, b1 in zip(ci.path[:-1], ci.path[1:], strict=True)
                    for a2, b2 in zip(cj.path[:-1], cj.path[1:], strict=True)
                )
                assert path_gap >= margin - 1e-9


def test_difficulty_levels_give_longer_contours():
    mean_lengths = []
    for difficulty in ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14"):
        exs = examples(difficulty, 6, seed=9)
        n_paddles = DIFFICULTIES[difficulty]
        distractor_paddles = n_paddles // 3
        for ex in exs:
            assert [len(c.paddles) for c in ex.contours[:2]] == [n_paddles, n_paddles]
            assert all(len(c.paddles) == distractor_paddles for c in ex.contours[2:])
        mean_lengths.append(
            np.mean(
                [
                    np.linalg.norm(np.diff(c.path, axis=0), axis=-1).sum()
                    for ex in exs
                    for c in ex.contours[:2]
                ]
            )
        )
    assert mean_lengths[0] < mean_lengths[1] < mean_lengths[2]
    # Path: seed paddle + margin, then paddle + 2 margins per step, the last one + margin.
    assert np.allclose(mean_lengths, [4 * n - 2 for n in (6, 9, 14)])


# --------------------------------------------------------------------------------------------
# Determinism and the on-disk layout
# --------------------------------------------------------------------------------------------


def tree_bytes(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_same_seed_same_bytes_different_seed_different(tmp_path):
    a = tree_bytes(generate_pathfinder(tmp_path / "a", "curv_baseline", 12, seed=1, batch_size=5))
    b = tree_bytes(generate_pathfinder(tmp_path / "b", "curv_baseline", 12, seed=1, batch_size=5))
    c = tree_bytes(generate_pathfinder(tmp_path / "c", "curv_baseline", 12, seed=2, batch_size=5))
    assert a == b
    assert a.keys() == c.keys()
    pngs = [k for k in a if k.endswith(".png")]
    assert len(pngs) == 12
    assert sum(a[k] != c[k] for k in pngs) >= 10


def test_layout_round_trips_through_reader(tmp_path):
    n, seed = 11, 4
    out = generate_pathfinder(tmp_path, "curv_contour_length_9", n, seed=seed, batch_size=4)
    assert out == tmp_path / "curv_contour_length_9"
    assert sorted(p.name for p in (out / "imgs").iterdir()) == ["0", "1", "2"]
    assert sorted(p.name for p in (out / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    # Metadata rows as in the release: text, space separated, row[0]/row[1] = image path,
    # row[3] = label; image numbers restart in each batch folder.
    rows = [line.split() for line in (out / "metadata" / "1.npy").read_text().splitlines()]
    assert [r[:3] for r in rows] == [["imgs/1", f"sample_{j}.png", str(j)] for j in range(4)]
    assert all(len(r) == 11 and r[5] == "9" for r in rows)
    with Image.open(out / "imgs" / "2" / "sample_2.png") as img:
        assert img.mode == "L" and img.size == (32, 32)

    images, labels = read_pathfinder(tmp_path, "curv_contour_length_9")
    assert images.shape == (n, 32, 32) and images.dtype == np.uint8
    assert labels.dtype == np.int64
    expected = balanced_labels(n, seed, 9)
    assert labels.tolist() == expected.tolist()
    metadata_labels = [
        int(line.split()[3])
        for b in range(3)
        for line in (out / "metadata" / f"{b}.npy").read_text().splitlines()
    ]
    assert labels.tolist() == metadata_labels
    for i in (0, 5, 10):
        regenerated = make_example(
            int(expected[i]), seed=seed, index=i, difficulty="curv_contour_length_9"
        )
        assert np.array_equal(images[i], regenerated.image)


def test_reader_orders_batches_numerically(tmp_path):
    generate_pathfinder(tmp_path, "curv_baseline", 12, seed=0, batch_size=1)  # batches 0..11
    images, labels = read_pathfinder(tmp_path, "curv_baseline")
    for i in (2, 10, 11):
        ex = make_example(int(labels[i]), seed=0, index=i, difficulty="curv_baseline")
        assert np.array_equal(images[i], ex.image)


def test_reader_accepts_binary_npy_metadata_and_skips_unreadable(tmp_path):
    """Linsley's generator writes np.save arrays; the release has one broken image."""
    base = tmp_path / "curv_baseline"
    (base / "imgs" / "0").mkdir(parents=True)
    (base / "metadata").mkdir()
    for j, value in enumerate((10, 200)):
        Image.fromarray(np.full((32, 32), value, dtype=np.uint8)).save(
            base / "imgs" / "0" / f"sample_{j}.png"
        )
    (base / "imgs" / "0" / "sample_2.png").write_bytes(b"")  # like the release's sample_172
    rows = [
        ["imgs/0", f"sample_{j}.png", str(j), str(j % 2), "1.0", "6", "2", "2", "0.5", "1", "1"]
        for j in range(3)
    ]
    np.save(base / "metadata" / "0.npy", np.array(rows))
    with pytest.raises(FileNotFoundError, match=r"sample_2\.png.*skip_unreadable"):
        read_pathfinder(tmp_path, "curv_baseline")
    with pytest.warns(UserWarning, match="sample_2.png"):
        images, labels = read_pathfinder(tmp_path, "curv_baseline", skip_unreadable=True)
    assert images[:, 0, 0].tolist() == [10, 200] and labels.tolist() == [0, 1]


def test_reader_names_the_expected_layout(tmp_path):
    generate_pathfinder(tmp_path / "pathfinder32", "curv_baseline", 2, seed=0)
    # Pointing one level too high: the error says what was expected and what is there.
    with pytest.raises(FileNotFoundError) as err:
        read_pathfinder(tmp_path, "curv_baseline")
    message = str(err.value)
    assert "metadata/<batch>.npy" in message and "imgs/<batch>/sample_<i>.png" in message
    assert "pathfinder32" in message
    (tmp_path / "pathfinder32" / "curv_baseline" / "metadata" / "0.npy").write_text(
        "imgs/0 sample_0.png\n"
    )
    with pytest.raises(ValueError, match="2 fields"):
        read_pathfinder(tmp_path / "pathfinder32", "curv_baseline")


def test_generate_refuses_to_clobber_and_rejects_unknown_levels(tmp_path):
    generate_pathfinder(tmp_path, "curv_baseline", 2, seed=0)
    with pytest.raises(FileExistsError):
        generate_pathfinder(tmp_path, "curv_baseline", 2, seed=0)
    generate_pathfinder(tmp_path, "curv_baseline", 4, seed=0, overwrite=True)
    assert read_pathfinder(tmp_path, "curv_baseline")[0].shape == (4, 32, 32)
    with pytest.raises(ValueError, match="curv_contour_length_14"):
        generate_pathfinder(tmp_path, "curv_contour_length_20", 2, seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curv_baseline"]


def test_small_level_draws_short_contours_on_a_small_image():
    params = PathfinderParams.for_difficulty("small10_contour_length_1")
    assert params.image_size == 10 and params.paddle_length == 1.0
    for ex in examples("small10_contour_length_1", 20, seed=3):
        assert ex.image.shape == (10, 10)
        assert [len(c.paddles) for c in ex.contours[:2]] == [1, 1]
        assert len(ex.contours) <= 2 + params.n_distractors
        gap = np.linalg.norm(np.diff(marker_points(ex.contours), axis=0))
        if ex.label == 1:  # both markers on one paddle
            assert gap == pytest.approx(params.paddle_length)
        else:
            assert gap > params.paddle_length
