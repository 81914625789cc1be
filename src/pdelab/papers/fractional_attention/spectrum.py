"""Fig 2a of Fractional Neural Attention: FNA on the circle S^1 has the fractional Laplacian's
spectrum, lambda_j ~ j^alpha for alpha < 2 and j^2 at alpha = 2.

The construction follows the official notebook (_schematics/schematic_manifolds.ipynb, cell 2)
step by step, with the paper's Methods for the constants:

1. n = 500 points theta = linspace(0, 2 pi, n) on S^1; the endpoint is included, so the first
   and last points coincide (``endpoint=False`` gives n distinct points);
2. geodesic distances arccos(x_i . x_j), diagonal 0 (intrinsic dimension d = 1);
3. scores C = Phi_alpha(dist / kappa) with W_Q = W_K = I, H = 1, kappa = sqrt(eps), eps = 1e-4,
   diagonal kept;
4. eigenvalues eta_j of the attention N_R(C), through the symmetric conjugate, sorted
   descending (graphs.markov_spectrum);
5. lambda_j = -log(eta_j) / t with t = eps^(alpha/2), since N_R(C) ~ exp(-t (-Delta)^(alpha/2)).

The eigenfunctions on S^1 come in cos/sin pairs of one frequency k, so the sorted spectrum is a
staircase: j = 1 is the constant (lambda = 0), j = 2k and 2k + 1 share frequency k. Fitting
every j bends the log-log slope up at small j (2.09 instead of 2.00 at alpha = 2 over
j <= 50); :func:`fit_slope` therefore fits the first of each pair, the even j = 2k, for which
j^s and k^s differ by a constant factor only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdelab.papers.fractional_attention.graphs import markov_spectrum

N_POINTS = 500  # Fig 2a
EPS = 1e-4  # Methods: kappa = sqrt(eps), eps = 1e-4
# The fit's index range: the first 25 frequencies (j = 2k, k <= 25), whose wavelengths span
# >= 20 grid spacings and >= 25 kernel widths; above them the finite grid's spectrum bends
# away from any power law (the paper: "the discrepancy increases with the eigenvalue").
FIT_RANGE = (2, 50)
# A fitted slope agrees with its law when within 0.1 of the exponent: an eighth of the 0.8
# that separates j^1.2 from j^2 in Fig 2a, and above the slope's spread over other fit ranges
# at alpha = 1.2 (j = 2-20, 10-50, 2-100 stay within 0.07 of the stated range's).
TOLERANCE = 0.1


def profile(z: np.ndarray | float, alpha: float, d: int = 1) -> np.ndarray:
    """The profile of the FNA kernel, the score as a function of the scaled distance z >= 0:

        Phi_alpha(z) = (1 + z)^-(d + alpha)    for alpha < 2 (Eq. 10, heavy tailed),
        Phi_alpha(z) = exp(-z^(alpha/(alpha-1)))  for alpha >= 2 (Eq. 9), exp(-z^2) at 2,

    d the manifold's intrinsic dimension (d_H in a Transformer head, 1 on S^1). The power law's
    tail z^-(d+alpha) is the jump kernel of the fractional Laplacian; the Gaussian's is local."""
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    z = np.asarray(z, dtype=float)
    if alpha < 2:
        return (1.0 + z) ** -(d + alpha)
    return np.exp(-(z ** (alpha / (alpha - 1.0))))


def circle_points(n: int = N_POINTS, endpoint: bool = True) -> np.ndarray:
    """(n, 2) points at angles linspace(0, 2 pi, n) on the unit circle."""
    theta = np.linspace(0.0, 2.0 * np.pi, n, endpoint=endpoint)
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def geodesic_distances(points: np.ndarray) -> np.ndarray:
    """arccos of the Gram matrix of unit vectors, diagonal 0. The Gram matrix is clipped to
    [-1, 1]: rounding puts some diagonal entries above 1, where the official notebook's arccos
    returns NaN before it overwrites the diagonal; off the diagonal clipping changes nothing."""
    gram = np.clip(points @ points.T, -1.0, 1.0)
    dist = np.arccos(gram)
    np.fill_diagonal(dist, 0.0)
    return dist


def circle_scores(
    alpha: float, n: int = N_POINTS, eps: float = EPS, endpoint: bool = True
) -> np.ndarray:
    """FNA scores C on S^1 with W_Q = W_K = I, kappa = sqrt(eps), d = 1 (steps 1-3)."""
    dist = geodesic_distances(circle_points(n, endpoint))
    return profile(dist / np.sqrt(eps), alpha, d=1)


def laplacian_eigenvalues(
    alpha: float, n: int = N_POINTS, eps: float = EPS, endpoint: bool = True
) -> np.ndarray:
    """lambda_j = -log(eta_j) / eps^(alpha/2), j = 1..n, eta sorted descending (steps 4-5).

    A non-positive eta (the duplicated endpoint makes one eigenvalue 0 up to rounding) has no
    lambda: NaN."""
    eta = markov_spectrum(circle_scores(alpha, n, eps, endpoint), vectors=False).eigenvalues
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = -np.log(eta) / eps ** (alpha / 2)
    return np.where(eta > 0, lam, np.nan)


@dataclass(frozen=True)
class SlopeFit:
    """lambda_j ~ prefactor * j^slope by least squares in log-log over j in [lo, hi]."""

    slope: float
    prefactor: float
    lo: int
    hi: int
    pairs_only: bool


def fit_slope(
    lam: np.ndarray, lo: int = FIT_RANGE[0], hi: int = FIT_RANGE[1], pairs_only: bool = True
) -> SlopeFit:
    """The log-log slope of lambda_j against j (1-based) over lo <= j <= hi.

    pairs_only fits the even j only (one eigenvalue per cos/sin pair, see the module note);
    pairs_only=False fits every j, as a reader of the figure would."""
    if not 2 <= lo < hi <= len(lam):
        raise ValueError(f"need 2 <= lo < hi <= {len(lam)}, got lo={lo}, hi={hi}")
    j = np.arange(lo, hi + 1)
    if pairs_only:
        j = j[j % 2 == 0]
    y = lam[j - 1]
    ok = np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        raise ValueError(f"fewer than two positive eigenvalues in j = {lo}..{hi}")
    slope, intercept = np.polyfit(np.log(j[ok]), np.log(y[ok]), 1)
    return SlopeFit(float(slope), float(np.exp(intercept)), lo, hi, pairs_only)


def local_slopes(lam: np.ndarray, pairs_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(j, d log lambda / d log j) between consecutive fitted indices: where the spectrum
    follows a power law and where it bends away."""
    j = np.arange(2, len(lam) + 1)
    if pairs_only:
        j = j[j % 2 == 0]
    y = lam[j - 1]
    ok = np.isfinite(y) & (y > 0)
    j, y = j[ok], y[ok]
    slope = np.diff(np.log(y)) / np.diff(np.log(j))
    return np.sqrt(j[1:] * j[:-1]), slope
