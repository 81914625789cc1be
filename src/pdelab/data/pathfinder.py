"""Pathfinder (Linsley et al. 2018, as used by the Long Range Arena): generator and reader.

An image shows two *target* contours and a few *distractor* contours, each a chain of short
line segments ("paddles") with small gaps between them, plus two marker discs. The label says
whether both markers sit on the two ends of the same target contour (1) or one on each target
contour (0). Solving it needs integrating the contour across the whole image, which is why LRA
uses it (flattened to a 1,024-token sequence at 32x32).

Generation follows the recipe of Linsley et al. (``snakes2.py`` in drewlinsley/pathfinder) with
the 32x32 settings LRA lists in ``lra_benchmarks/data/pathfinder.py``: paddle length 2, paddle
margin 1, thickness 0.5, marker radius 1.5, padding 1, seed distance 7, continuity 1.0,
``distractor_length = contour_length // 3`` and ``20 // distractor_length`` distractors. As in
the original, every contour grows paddle by paddle from a seed paddle: the next paddle starts
``margin`` past a pivot placed ``margin`` beyond the previous paddle's end, its direction is
drawn with weight ``cos(min(|turn| * continuity, pi/2))**2`` (turns of 90 degrees or more at
continuity 1 are impossible), and a candidate is rejected when it comes closer than
``clearance = 2 * margin`` to any paddle already drawn (other contours, or earlier paddles of
its own contour except the one it continues). The two target seeds are exactly ``seed_distance``
apart near the image centre and the targets grow in lock step; a pair that runs into a dead end
is discarded and regrown, as in the original. Difficulty is the number of paddles per target:
6, 9 and 14 for the three LRA levels.

One level is pdelab's own and not in the release: ``small10_contour_length_1`` (see
:data:`LEVEL_SETTINGS`) draws 10x10 images (100 tokens) whose targets are single short paddles,
with up to two one-paddle distractors, for CPU smoke runs. Its positives have both markers on one
paddle, so the two discs nearly touch: a local cue that a one-layer Transformer learns in a few
hundred steps (with contours of 2-3 paddles at 12x12 or 16x16 it stayed at chance that long).
It is written under the same ``pathfinder32/<difficulty>`` layout as the others.

This is a re-implementation in numpy, not the original code: candidates are filtered exactly
(distance between segments) instead of by dilated raster masks, and lines are anti-aliased
analytically. Pixel statistics therefore differ slightly from the released images; the task
structure (what makes an example positive, contour lengths, density) is the same.

On disk it writes the layout of the LRA release, so the real data and the generated data are
read by the same :func:`read_pathfinder`::

    <root>/<difficulty>/imgs/<batch>/sample_<i>.png      8-bit grayscale
    <root>/<difficulty>/metadata/<batch>.npy             one row per image

Despite the ``.npy`` suffix the released metadata files are text: one line per image, fields
separated by single spaces, as Linsley's rows ``[imgs/<batch>, sample_<i>.png, i, label,
continuity, contour_length, distractor_length, paddle_length, paddle_thickness, margin,
n_contrasts]``; LRA's loader reads ``row[0]/row[1]`` as the image path and ``row[3]`` as the
label. We write the same text format; the reader also accepts binary ``np.save`` arrays (what
the original generator writes when run by hand).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from PIL import Image

from pdelab.data.progress import Progress

DIFFICULTIES: dict[str, int] = {
    "curv_baseline": 6,
    "curv_contour_length_9": 9,
    "curv_contour_length_14": 14,
    "small10_contour_length_1": 1,  # pdelab's own, not in the LRA release
}
# The settings besides the contour length of the levels that are not LRA's 32x32 ones.
LEVEL_SETTINGS: dict[str, dict[str, Any]] = {
    "small10_contour_length_1": {
        "image_size": 10,
        "paddle_length": 1.0,
        "seed_distance": 4.0,
        "distractor_length": 1,
        "num_distractors": 2,
    },
}


@dataclass(frozen=True)
class PathfinderParams:
    """Generation settings; the defaults are LRA's 32x32 ones (contour length aside)."""

    contour_length: int = 6
    image_size: int = 32
    paddle_length: float = 2.0
    paddle_margin: float = 1.0
    paddle_thickness: float = 0.5
    marker_radius: float = 1.5
    padding: int = 1
    seed_distance: float = 7.0
    continuity: float = 1.0
    contrast: float = 1.5  # LRA: snake contrast 2 x paddle contrast 0.75
    distractor_length: int | None = None  # default contour_length // 3
    num_distractors: int | None = None  # default 20 // distractor_length
    max_contour_retries: int = 4

    @classmethod
    def for_difficulty(cls, difficulty: str) -> PathfinderParams:
        if difficulty not in DIFFICULTIES:
            raise ValueError(
                f"unknown Pathfinder difficulty {difficulty!r}; expected one of "
                f"{', '.join(DIFFICULTIES)}"
            )
        return cls(contour_length=DIFFICULTIES[difficulty], **LEVEL_SETTINGS.get(difficulty, {}))

    def describe(self) -> str:
        """The level in words, for the manifest of data generated at it."""
        return (
            f"{self.image_size}x{self.image_size} images, target contours of "
            f"{self.contour_length} paddle(s) of length {self.paddle_length:g}, "
            f"up to {self.n_distractors} distractor(s) of {self.n_distractor_paddles} paddle(s)"
        )

    @property
    def n_distractor_paddles(self) -> int:
        return self.distractor_length or max(1, self.contour_length // 3)

    @property
    def n_distractors(self) -> int:
        if self.num_distractors is not None:
            return self.num_distractors
        return 20 // self.n_distractor_paddles

    @property
    def clearance(self) -> float:
        # The original rejects a paddle whose margin-dilated mask overlaps another's, i.e.
        # centre lines closer than about 2 * margin.
        return 2 * self.paddle_margin


@dataclass(frozen=True, eq=False)
class Contour:
    """One contour: ``paddles[k]`` runs from ``paddles[k, 0]`` to ``paddles[k, 1]``.

    Coordinates are (row, col) in pixels, pixel ``(i, j)`` covering ``[i, i+1) x [j, j+1)``.
    ``path`` is the polyline through every paddle and the pivot between consecutive paddles,
    i.e. the contour with its gaps closed (what a human traces). ``marked_start`` and
    ``marked_end`` say which ends carry a marker disc.
    """

    paddles: np.ndarray
    path: np.ndarray
    target: bool
    marked_start: bool = False
    marked_end: bool = False

    @property
    def start(self) -> np.ndarray:
        return self.paddles[0, 0]

    @property
    def end(self) -> np.ndarray:
        return self.paddles[-1, 1]


class PathfinderExample(NamedTuple):
    image: np.ndarray  # uint8 (H, W)
    label: int  # 1: markers on the same contour
    contours: list[Contour]  # the two targets first, then the distractors


def marker_points(contours: list[Contour]) -> np.ndarray:
    """The two marker centres (2, 2), taken from the contour ends that carry them."""
    points = [c.start for c in contours if c.marked_start]
    points += [c.end for c in contours if c.marked_end]
    return np.array(points)


# --------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------


class _Canvas:
    """What is drawn so far, as the *body* of every paddle, for vectorised clearance checks.

    A paddle's body is the paddle extended by half a margin at both ends. Bodies of different
    paddles are kept ``clearance`` apart, so paddles are too, and the traced paths of different
    contours (paddles joined through their pivots, which lie a margin beyond the paddle ends)
    stay at least ``clearance - margin`` apart: contours never touch, not even across a gap.
    Points are complex numbers ``col + 1j * row`` here, which keeps the numpy calls few.
    """

    def __init__(self, params: PathfinderParams) -> None:
        self.p = params
        self.a = np.empty(64, dtype=complex)
        self.ab = np.empty(64, dtype=complex)
        self.abci = np.empty(64, dtype=complex)
        self.count = 0
        self.lo = params.padding + 0.5
        self.hi = params.image_size - params.padding - 0.5
        self.ext = params.paddle_margin / 2
        body = params.paddle_length + 2 * self.ext
        # Candidates are checked at sample points at most 0.5 px apart along their body; the
        # distance to a segment is 1-Lipschitz, so requiring clearance + half the spacing at
        # the samples guarantees clearance everywhere on the body.
        n = max(2, math.ceil(body / 0.5) + 1)
        self.samples = np.linspace(0.0, 1.0, n)
        self.threshold = params.clearance + body / (n - 1) / 2
        # Bodies starting farther than this from a candidate's pivot cannot come close.
        self.radius = params.paddle_length + 2 * params.paddle_margin + self.threshold + body
        # Candidate turns: directions one pixel of arc apart on the circle the new paddle end
        # lies on (radius ``head``), shifted by a random phase per step so that the reachable
        # angles are not a fixed grid; only turns that can get a non-zero weight are kept.
        # Tabulated for 256 phases (about 0.1 degree apart) to keep the inner loop short.
        self.head = params.paddle_length + params.paddle_margin
        n_turns = max(8, math.ceil(2 * math.pi * self.head))
        step = 2 * math.pi / n_turns
        grid = np.arange(n_turns) * step - math.pi
        limit = math.pi / 2 / max(params.continuity, 1e-9)
        grid = grid[(grid + step > -limit) & (grid < limit)]
        self.turns = grid[None, :] + (np.arange(256)[:, None] + 0.5) / 256 * step
        self.weights = np.cos(np.minimum(np.abs(self.turns) * params.continuity, math.pi / 2)) ** 2
        self.rotations = np.exp(1j * self.turns)

    def add(self, a: complex, b: complex) -> int:
        """Record paddle a-b (its body); return its index."""
        u = (b - a) / max(abs(b - a), 1e-12)
        a, b = a - self.ext * u, b + self.ext * u
        if self.count == len(self.a):
            self.a = np.concatenate([self.a, np.empty_like(self.a)])
            self.ab = np.concatenate([self.ab, np.empty_like(self.ab)])
            self.abci = np.concatenate([self.abci, np.empty_like(self.abci)])
        self.a[self.count] = a
        self.ab[self.count] = b - a
        # conj(ab) / |ab|^2, so that the projection parameter is one product away.
        self.abci[self.count] = (b - a).conjugate() / max(abs(b - a) ** 2, 1e-12)
        self.count += 1
        return self.count - 1

    def inside(self, z: np.ndarray) -> np.ndarray:
        return (z.real >= self.lo) & (z.real <= self.hi) & (z.imag >= self.lo) & (z.imag <= self.hi)

    def inside_point(self, z: complex, margin: float = 0.0) -> bool:
        lo, hi = self.lo + margin, self.hi - margin
        return lo <= z.real <= hi and lo <= z.imag <= hi

    def clear(
        self, anchor: complex, a: np.ndarray, b: np.ndarray, units: np.ndarray, skip: int = -1
    ) -> np.ndarray:
        """Which candidate paddles ``a[c]``-``b[c]`` (direction ``units[c]``, all within a
        paddle and a margin of ``anchor``) keep their body clear of all recorded bodies."""
        if self.count == 0:
            return np.ones(len(a), dtype=bool)
        near = np.abs(self.a[: self.count] - anchor) <= self.radius
        if 0 <= skip < self.count:
            near[skip] = False
        idx = np.flatnonzero(near)
        if len(idx) == 0:
            return np.ones(len(a), dtype=bool)
        start = a - self.ext * units
        body = (b - a) + 2 * self.ext * units
        points = start[:, None, None] + body[:, None, None] * self.samples[None, :, None]
        w = points - self.a[idx]
        t = np.minimum(np.maximum((w * self.abci[idx]).real, 0.0), 1.0)
        d = np.abs(w - t * self.ab[idx])
        return d.min(axis=(1, 2)) >= self.threshold


class _Snake:
    """A contour being grown: paddles and pivots (complex), direction, last canvas index."""

    def __init__(self, a: complex, b: complex, angle: float, index: int) -> None:
        self.paddles = [(a, b)]
        self.pivots: list[complex] = []
        self.angle = angle
        self.index = index


def _seed_paddle(canvas: _Canvas, tail: complex, angle: float) -> _Snake | None:
    u = np.array([complex(math.cos(angle), math.sin(angle))])
    a = np.array([tail])
    b = a + canvas.p.paddle_length * u
    if not (canvas.inside(a)[0] and canvas.inside(b)[0] and canvas.clear(tail, a, b, u)[0]):
        return None
    return _Snake(tail, complex(b[0]), angle, canvas.add(tail, complex(b[0])))


def _extend(rng: np.random.Generator, canvas: _Canvas, snake: _Snake) -> bool:
    """Add one paddle with continuity-weighted turning; False if no admissible paddle."""
    p = canvas.p
    heading = complex(math.cos(snake.angle), math.sin(snake.angle))
    pivot = snake.paddles[-1][1] + p.paddle_margin * heading
    phase, pick = rng.random(2)
    row = int(phase * len(canvas.turns))
    units = heading * canvas.rotations[row]
    a = pivot + p.paddle_margin * units
    b = pivot + canvas.head * units
    ok = canvas.clear(pivot, a, b, units, skip=snake.index)
    # As in the original, the new paddle's far end must lie in the frame (its near end may
    # stick out by less than a margin). Far from the borders that holds for every candidate.
    if not canvas.inside_point(pivot, margin=canvas.head):
        ok &= canvas.inside(b)
    cumulative = np.cumsum(canvas.weights[row] * ok)
    if cumulative[-1] <= 1e-12:
        return False
    k = int(np.searchsorted(cumulative, pick * cumulative[-1], side="right"))
    k = min(k, len(cumulative) - 1)
    snake.paddles.append((complex(a[k]), complex(b[k])))
    snake.pivots.append(pivot)
    snake.angle = math.remainder(snake.angle + float(canvas.turns[row, k]), 2 * math.pi)
    snake.index = canvas.add(complex(a[k]), complex(b[k]))
    return True


def _rowcol(z: np.ndarray) -> np.ndarray:
    return np.stack([z.imag, z.real], axis=-1)


def _to_contour(snake: _Snake, target: bool) -> Contour:
    paddles = _rowcol(np.array(snake.paddles, dtype=complex))
    path = _rowcol(np.array([snake.paddles[0][0], *snake.pivots, snake.paddles[-1][1]]))
    return Contour(paddles=paddles, path=path, target=target)


def _polar(rng: np.random.Generator, radius: float = 1.0) -> complex:
    angle = rng.uniform(-math.pi, math.pi)
    return radius * complex(math.cos(angle), math.sin(angle))


def _uniform_point(rng: np.random.Generator, lo: float, hi: float) -> complex:
    col, row = rng.uniform(lo, hi, size=2)
    return complex(col, row)


def _two_targets(rng: np.random.Generator, canvas: _Canvas) -> list[_Snake] | None:
    p = canvas.p
    tries = p.max_contour_retries + 1
    first = None
    for _ in range(tries):
        # First seed near the centre: at least 2 * seed_distance from every border (as in
        # the original), so that the second seed, seed_distance away, fits in the frame.
        lo = min(2 * p.seed_distance, p.image_size / 2 - 1)
        tail = _uniform_point(rng, lo, p.image_size - lo)
        first = _seed_paddle(canvas, tail, rng.uniform(-math.pi, math.pi))
        if first is not None:
            break
    if first is None:
        return None
    second = None
    for _ in range(tries):
        tail = first.paddles[0][0] + _polar(rng, p.seed_distance)
        second = _seed_paddle(canvas, tail, rng.uniform(-math.pi, math.pi))
        if second is not None:
            break
    if second is None:
        return None
    snakes = [first, second]
    for _ in range(p.contour_length - 1):
        for snake in snakes:
            if not _extend(rng, canvas, snake):
                return None
    return snakes


def _distractor(rng: np.random.Generator, canvas: _Canvas) -> _Snake | None:
    p = canvas.p
    for _ in range(p.max_contour_retries + 1):
        start = canvas.count
        tail = _uniform_point(rng, canvas.lo, canvas.hi)
        snake = _seed_paddle(canvas, tail, rng.uniform(-math.pi, math.pi))
        if snake is None:
            continue
        if all(_extend(rng, canvas, snake) for _ in range(p.n_distractor_paddles - 1)):
            return snake
        canvas.count = start
    return None  # like the original, a distractor that does not fit is left out


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def render(contours: list[Contour], params: PathfinderParams) -> np.ndarray:
    """Draw paddles (anti-aliased, width ``paddle_thickness``) and marker discs as uint8."""
    size = params.image_size
    width = params.paddle_thickness
    reach = 0.5 + width / 2  # pixel centres farther than this from a paddle stay dark
    paddles = np.concatenate([c.paddles for c in contours])  # (K, 2, 2) (row, col)
    # Each paddle only touches a small window of pixels: evaluate those, then max-combine.
    span = math.ceil(params.paddle_length + 2 * reach) + 2
    offsets = np.indices((span, span)).reshape(2, -1).T  # (W, 2)
    corner = np.floor(paddles.min(axis=1) - reach - 0.5).astype(int)  # (K, 2)
    pixels = np.clip(corner[:, None, :] + offsets[None], 0, size - 1)  # (K, W, 2)
    centres = pixels[..., 1] + 0.5 + 1j * (pixels[..., 0] + 0.5)
    a = (paddles[:, 0, 1] + 1j * paddles[:, 0, 0])[:, None]
    ab = (paddles[:, 1, 1] + 1j * paddles[:, 1, 0])[:, None] - a
    w = centres - a
    t = np.clip((w * ab.conj()).real / np.maximum(np.abs(ab) ** 2, 1e-12), 0.0, 1.0)
    d = np.abs(w - t * ab)
    # Box-filtered coverage of a line of that width by a unit pixel at distance d.
    coverage = params.contrast * np.clip(reach - d, 0.0, min(width, 1.0))
    image = np.zeros((size, size))
    np.maximum.at(image, (pixels[..., 0], pixels[..., 1]), coverage)
    markers = marker_points(contours)
    if len(markers):
        rows, cols = np.indices((size, size)) + 0.5
        dm = np.min([np.hypot(rows - r, cols - c) for r, c in markers], axis=0)
        image = np.maximum(image, np.clip(params.marker_radius + 0.5 - dm, 0.0, 1.0))
    return np.round(np.clip(image, 0.0, 1.0) * 255).astype(np.uint8)


# --------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------


def _rng(seed: int, contour_length: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, contour_length, 1, index])


def balanced_labels(n: int, seed: int, contour_length: int = 0) -> np.ndarray:
    """Exactly ``n // 2`` positives (one more at random when n is odd), in seeded order."""
    rng = np.random.default_rng([seed, contour_length, 0])
    positives = n // 2 + (int(rng.integers(2)) if n % 2 else 0)
    labels = np.zeros(n, dtype=np.int64)
    labels[:positives] = 1
    return rng.permutation(labels)


def make_example(
    label: int,
    *,
    seed: int = 0,
    index: int = 0,
    difficulty: str = "curv_baseline",
    params: PathfinderParams | None = None,
) -> PathfinderExample:
    """One example, a pure function of (seed, index, label, params).

    :func:`generate_pathfinder` writes ``make_example(labels[i], seed=seed, index=i, ...)`` as
    image ``i``, so any stored image can be regenerated with its contours for inspection.
    """
    if label not in (0, 1):
        raise ValueError(f"label must be 0 or 1, got {label!r}")
    params = params or PathfinderParams.for_difficulty(difficulty)
    rng = _rng(seed, params.contour_length, index)
    for _ in range(1000):
        canvas = _Canvas(params)
        targets = _two_targets(rng, canvas)
        if targets is not None:
            break
    else:  # pragma: no cover - only for impossible settings
        raise RuntimeError(f"could not place two target contours with {params}")
    distractors = [_distractor(rng, canvas) for _ in range(params.n_distractors)]
    contours = [_to_contour(s, True) for s in targets]
    contours += [_to_contour(s, False) for s in distractors if s is not None]
    # One marker on the start (the seed end) of a random target; the other on the far end of
    # the same target (positive) or of the other target (negative).
    origin = int(rng.integers(2))
    other = origin if label == 1 else 1 - origin
    contours[origin] = replace(contours[origin], marked_start=True)
    contours[other] = replace(contours[other], marked_end=True)
    return PathfinderExample(render(contours, params), int(label), contours)


# --------------------------------------------------------------------------------------------
# On-disk layout (same as the LRA release)
# --------------------------------------------------------------------------------------------


def _metadata_row(batch: int, j: int, label: int, p: PathfinderParams) -> list[str]:
    return [
        f"imgs/{batch}",
        f"sample_{j}.png",
        str(j),
        str(label),
        str(p.continuity),
        str(p.contour_length),
        str(p.n_distractor_paddles),
        str(p.paddle_length),
        str(p.paddle_thickness),
        str(p.paddle_margin),
        "1",
    ]


def generate_pathfinder(
    root: Path,
    difficulty: str,
    n: int,
    seed: int,
    batch_size: int = 1000,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``n`` examples to ``root/difficulty`` in the LRA release layout; return that path.

    Images are numbered per batch folder like the release (``imgs/<b>/sample_<j>.png`` with
    ``j`` restarting at 0). The folder is built next to its final place and renamed into it,
    so an interrupted run leaves nothing that looks complete.
    """
    if n < 0 or batch_size < 1:
        raise ValueError(f"need n >= 0 and batch_size >= 1, got n={n}, batch_size={batch_size}")
    params = PathfinderParams.for_difficulty(difficulty)
    out = Path(root) / difficulty
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out}: already exists; pass overwrite=True to replace it")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{difficulty}.generating-", dir=out.parent))
    try:
        labels = balanced_labels(n, seed, params.contour_length)
        (tmp / "metadata").mkdir()
        # LRA's 200,000 images of a level take minutes: the data job's log shows how far it is
        with Progress(f"pathfinder {difficulty}", n, "images") as progress:
            for batch, start in enumerate(range(0, n, batch_size)):
                folder = tmp / "imgs" / str(batch)
                folder.mkdir(parents=True)
                lines = []
                for j, i in enumerate(range(start, min(start + batch_size, n))):
                    ex = make_example(int(labels[i]), seed=seed, index=i, params=params)
                    Image.fromarray(ex.image).save(folder / f"sample_{j}.png")
                    lines.append(" ".join(_metadata_row(batch, j, ex.label, params)) + "\n")
                    progress.update()
                (tmp / "metadata" / f"{batch}.npy").write_text("".join(lines))
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _read_metadata(path: Path) -> list[list[str]]:
    """Rows of a metadata file: release text format, or a binary ``np.save`` string array."""
    with open(path, "rb") as f:
        binary = f.read(6) == b"\x93NUMPY"
    if binary:
        array = np.atleast_2d(np.load(path, allow_pickle=False))
        return [[str(x) for x in row] for row in array]
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def _batch_key(path: Path) -> tuple[int, int, str]:
    return (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.stem)


def read_pathfinder(
    root: Path, difficulty: str, *, skip_unreadable: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (N, H, W) and labels int64 (N,) from the LRA release layout.

    ``root`` is the folder holding the difficulty folders (``lra_release/pathfinder32`` for the
    real release). Order: metadata files by batch number, rows in file order. The real release
    has at least one unreadable image (``curv_baseline/imgs/0/sample_172.png``, which other
    LRA loaders blacklist); ``skip_unreadable=True`` drops such images with a warning.
    """
    root = Path(root)
    base = root / difficulty
    expected = (
        f"expected {base}/metadata/<batch>.npy and {base}/imgs/<batch>/sample_<i>.png, "
        f"where root is the folder holding {', '.join(DIFFICULTIES)} (for the LRA release: "
        "lra_release/pathfinder32)"
    )
    if not (base / "metadata").is_dir():
        found = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        raise FileNotFoundError(
            f"{base / 'metadata'}: not found; {expected}. "
            f"{root} contains: {', '.join(found[:20]) or 'nothing (or does not exist)'}"
        )
    meta_files = sorted((base / "metadata").glob("*.npy"), key=_batch_key)
    if not meta_files:
        raise FileNotFoundError(f"{base / 'metadata'}: no <batch>.npy files; {expected}")
    images: list[np.ndarray] = []
    labels: list[int] = []
    for meta in meta_files:
        for lineno, row in enumerate(_read_metadata(meta), start=1):
            if len(row) < 4:
                raise ValueError(
                    f"{meta}:{lineno}: metadata row has {len(row)} fields, expected at least 4 "
                    f"(imgs/<batch> sample_<i>.png <i> <label> ...): {row}"
                )
            path = base / row[0] / row[1]
            label = int(row[3])
            if label not in (0, 1):
                raise ValueError(f"{meta}:{lineno}: label {row[3]!r} is not 0 or 1")
            try:
                with Image.open(path) as img:
                    pixels = np.asarray(img.convert("L"), dtype=np.uint8)
            except (OSError, ValueError) as err:
                if not skip_unreadable:
                    raise FileNotFoundError(
                        f"{path}: cannot read image listed in {meta}:{lineno} ({err}); pass "
                        "skip_unreadable=True to drop unreadable images"
                    ) from err
                warnings.warn(f"skipping unreadable Pathfinder image {path}", stacklevel=2)
                continue
            if images and pixels.shape != images[0].shape:
                raise ValueError(
                    f"{path}: image is {pixels.shape}, but earlier ones are {images[0].shape}"
                )
            images.append(pixels)
            labels.append(label)
    if not images:
        raise FileNotFoundError(f"{base}: metadata lists no readable images; {expected}")
    return np.stack(images), np.asarray(labels, dtype=np.int64)
