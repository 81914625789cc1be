"""Layer I of where-to-add-pde-diffusion, checked numerically against pdelab's operator.

Each function builds the operators pdelab actually runs (``neumann_laplacian`` /
``diffusion_step``) in float64 and compares them with the paper's closed forms (Sec. 3.2, 4.1,
App. A.3.3, App. B), returning numbers or DataFrames; theory_report draws and tabulates them
(``python -m pdelab.papers.diffusion_positions.theory_report --out FIG.png --table TABLE.md``).

What the numbers show (the tests in tests/test_theory.py assert each of these):

* Spectrum (Lemma B.1): eig(Delta_N) = -4 sin^2(pi k / 2L) to ~1e-14.
* Contraction (Thm B.2): on the zero-mean subspace
  kappa(alpha, L) = max_{k>=1} |1 - 4 alpha sin^2(pi k / 2L)| = 1 - 4 alpha sin^2(pi / 2L) for
  every alpha in [0, 1/2], because the two candidate extremes k = 1 and k = L - 1 satisfy
  sin^2(pi/2L) + sin^2(pi (L-1)/2L) = 1. So the paper's kappa = 1 + alpha lambda_1 (Eq. 28) is
  right, although its Eq. 27 (0 <= 1 - 4 alpha <= mu_k) only holds for alpha <= 1/4: the top
  multiplier 1 - 4 alpha cos^2(pi / 2L) is negative once alpha > 1 / (4 cos^2(pi / 2L)) (-> 1/4
  as L grows), so the highest modes flip sign, while still |mu_k| < 1. kappa < 1 for all alpha
  in (0, 1/2] and L >= 2; ||S_alpha||_2 = 1 (the constant mode).
* Energy (Thm B.4): E(S x) <= E(x) for every sampled x, single scale; multi-scale with the
  paper's even split (0.16, 0.16, 0.16) also never raises the stride-1 energy E. But Cor. 4.5 is
  not true for every budget: sup_x E(S x) / E(x) > 1 for a stride-2-only step and for a
  stride-4-heavy split such as (0.04, 0.04, 0.40) (the boundary rows of the strided graph
  Laplacians do not commute with Delta_N). What every budget does dissipate is the operator's
  own energy -1/2 <x, sum_k alpha_k Delta_{h_k} x> (tests/test_diffusion.py).
* Frequency response (App. A.3.3): in the interior each stride multiplies cos(omega i) by
  1 - 4 alpha sin^2(omega h / 2) (the paper's H(omega, h) with the alpha it leaves out), to
  ~1e-15. A stride h is a comb, not a low-pass: it passes omega = 2 pi m / h untouched, so h = 2
  and h = 4 alone leave the Nyquist mode (-1)^i unchanged; the multi-scale sum damps it through
  its h = 1 term. Band means of |H|^2 lie in [0, 1], so the paper's Table 11 (values up to 2.81)
  is not a table of |H|^2 and is not reproduced here.
* Replicate padding (an open question): the common strided implementation, pad h copies
  of each endpoint and apply x_{i+h} - 2 x_i + x_{i-h}, equals pdelab's graph Laplacian for
  h = 1, but for h >= 2 it is NOT symmetric and I + alpha R_h is NOT non-expansive under
  alpha < 1/2: ||.||_2 > 1 at every tested alpha in [0.01, 0.499] and L in [4, 256]; at worst
  1.14 (h = 2), 1.41 (h = 3), 1.58 (h = 4) on short sequences and still 1.06 / 1.15 / 1.25 at
  L = 256 (a boundary effect that does not vanish with L), and up to 1.29 / 1.62 / 1.58 over
  repeated steps. It stays row-stochastic (||.||_inf = 1: a maximum principle; spectral
  radius 1), but its column sums reach 1 + (h - 1) alpha: the endpoint tokens are
  over-weighted and the mean is not conserved. The symmetric graph Laplacian pdelab uses is
  non-expansive (||.||_2 = 1 up to rounding) at every tested point, for h = 1..4.
* Roughness bound (Eq. 37/39): ||Delta_N z|| <= sqrt(2 E(z)) as printed is off by a factor
  up to 2; the sharp constant is 2 cos(pi / 2L), i.e. ||Delta_N z|| <= sqrt(8 E(z)) as Eq. 39's
  own derivation (lambda^2 <= -4 lambda) gives. Reported by ``roughness_bound_check``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from pdelab.models.diffusion import diffusion_step, dirichlet_energy, laplacian_matrix

F64 = torch.float64
BUDGET = 0.48  # the paper's multi-scale budget (Sec. 5.3), split evenly over h = 1, 2, 4
MULTISCALE = ((1, 2, 4), (BUDGET / 3,) * 3)
ALPHAS = (0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.45, 0.49, 0.499, 0.5)
LENGTHS = (2, 3, 5, 8, 16, 64, 256)
REPLICATE_ALPHAS = (0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.45, 0.49, 0.499)
REPLICATE_LENGTHS = (4, 5, 8, 16, 64, 256)
ENERGY_CONFIGS: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {
    "h=1, a=0.1": ((1,), (0.1,)),
    "h=1, a=0.25": ((1,), (0.25,)),
    "h=1, a=0.49": ((1,), (0.49,)),
    "h=1,2,4, a=0.16 each": MULTISCALE,
    "h=1,2,4, a=(0.04,0.04,0.40)": ((1, 2, 4), (0.04, 0.04, 0.40)),
    "h=2, a=0.1": ((2,), (0.1,)),
}
FREQUENCY_CONFIGS: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {
    "h=1": ((1,), (BUDGET,)),
    "h=2": ((2,), (BUDGET,)),
    "h=4": ((4,), (BUDGET,)),
    "multi-scale": MULTISCALE,
}
BANDS = ("Low", "Mid-L", "Mid-H", "High")  # quarters of [0, pi], low to high


# -- operators --------------------------------------------------------------------------------


def neumann_eigenvalues(length: int) -> np.ndarray:
    """Lemma B.1's closed form lambda_k = -4 sin^2(pi k / 2L), ascending."""
    k = np.arange(length)
    return np.sort(-4 * np.sin(np.pi * k / (2 * length)) ** 2)


def step_matrix(length: int, strides: Sequence[int], alphas: Sequence[float]) -> Tensor:
    """Dense S_alpha = I + sum_k alpha_k Delta_{N, h_k} (float64)."""
    op = torch.eye(length, dtype=F64)
    for a, h in zip(alphas, strides, strict=True):
        op = op + a * laplacian_matrix(length, h)
    return op


def replicate_laplacian(x: Tensor, stride: int) -> Tensor:
    """The common strided Laplacian on (B, L, D): pad `stride` copies of each endpoint
    ('replicate'), then x_{i+h} - 2 x_i + x_{i-h}. Equals neumann_laplacian for stride 1."""
    h = stride
    padded = F.pad(x.transpose(1, 2), (h, h), mode="replicate").transpose(1, 2)
    return padded[:, : -2 * h] - 2 * padded[:, h:-h] + padded[:, 2 * h :]


def replicate_laplacian_matrix(length: int, stride: int) -> Tensor:
    """Dense (L, L) matrix R of replicate_laplacian: (R x)_i = row i . x. Channel j of the
    identity is the unit signal e_j, so the output's column j is R e_j."""
    eye = torch.eye(length, dtype=F64)
    return replicate_laplacian(eye.unsqueeze(0), stride)[0]


def spectral_norm(op: Tensor) -> float:
    """||op||_2 = sqrt(max eig(op^T op)); symmetric eigh is several times faster than an SVD."""
    return math.sqrt(float(torch.linalg.eigvalsh(op.T @ op).max()))


# -- Lemma B.1 --------------------------------------------------------------------------------


def spectrum_check(lengths: Sequence[int] = LENGTHS) -> pd.DataFrame:
    """Max |eig(Delta_N) - closed form| per L."""
    rows = []
    for n in lengths:
        numeric = torch.linalg.eigvalsh(laplacian_matrix(n, 1)).numpy()
        rows.append(
            {"L": n, "max_abs_error": float(np.abs(numeric - neumann_eigenvalues(n)).max())}
        )
    return pd.DataFrame(rows)


# -- Theorem B.2 ------------------------------------------------------------------------------


def kappa_closed_form(alpha: float, length: int) -> float:
    """kappa(alpha, L) = max_{k>=1} |1 - 4 alpha sin^2(pi k / 2L)| (Thm B.2, with |.|)."""
    k = np.arange(1, length)
    return float(np.abs(1 - 4 * alpha * np.sin(np.pi * k / (2 * length)) ** 2).max())


def contraction_check(
    alphas: Sequence[float] = ALPHAS, lengths: Sequence[int] = LENGTHS
) -> pd.DataFrame:
    """||S_alpha||_2 and kappa = ||S_alpha P_perp||_2 (P_perp removes the mean) vs closed forms.

    kappa_paper is Eq. 28's 1 + alpha lambda_1; min_mu the smallest multiplier
    1 - 4 alpha cos^2(pi / 2L), negative for alpha > 1 / (4 cos^2(pi / 2L)) (Eq. 27 says >= 0).
    """
    rows = []
    for n in lengths:
        centre = torch.eye(n, dtype=F64) - torch.full((n, n), 1.0 / n, dtype=F64)
        for a in alphas:
            op = step_matrix(n, (1,), (a,))
            kappa = spectral_norm(op @ centre)
            closed = kappa_closed_form(a, n)
            rows.append(
                {
                    "alpha": a,
                    "L": n,
                    "norm": spectral_norm(op),
                    "kappa": kappa,
                    "kappa_closed": closed,
                    "kappa_paper": 1 - 4 * a * math.sin(math.pi / (2 * n)) ** 2,
                    "abs_error": abs(kappa - closed),
                    "min_mu": float(torch.linalg.eigvalsh(op).min()),
                }
            )
    return pd.DataFrame(rows)


# -- Theorem B.4 ------------------------------------------------------------------------------


def energy_gain(
    length: int,
    strides: Sequence[int],
    alphas: Sequence[float],
    energy_stride: int = 1,
    padding: str = "graph",
) -> float:
    """sup_x E_h(S x) / E_h(x) over non-constant x, E_h(x) = -1/2 <x, Delta_h x> (h = 1: the
    paper's E). Exact: the largest generalised eigenvalue of (S^T M S, M), M = -Delta_h.
    ``padding``: "graph" (pdelab's symmetric strided Laplacians) or "replicate" (App. B)."""
    build = replicate_step_matrix if padding == "replicate" else step_matrix
    op = build(length, strides, alphas)
    m = -laplacian_matrix(length, energy_stride)
    w, v = torch.linalg.eigh(m)
    keep = w > 1e-10
    half = v[:, keep] / torch.sqrt(w[keep])  # M^{-1/2} on range(M)
    return float(torch.linalg.eigvalsh(half.T @ op.T @ m @ op @ half).max())


def replicate_step_matrix(length: int, strides: Sequence[int], alphas: Sequence[float]) -> Tensor:
    """Dense I + sum_k alpha_k R_{h_k}: the step under the replicate padding of App. B, Eq. 17
    and A.1.4, each stride padding h copies of each endpoint (:func:`replicate_laplacian`)."""
    op = torch.eye(length, dtype=F64)
    for a, h in zip(alphas, strides, strict=True):
        op = op + a * replicate_laplacian_matrix(length, h)
    return op


def random_budgets(
    count: int, strides: int = 3, seed: int = 0, budget: float = 0.5
) -> list[tuple[float, ...]]:
    """``count`` budgets alpha with sum(alpha) uniform in [0, budget), split at random."""
    rng = np.random.default_rng(seed)
    return [
        tuple(float(a) for a in rng.dirichlet(np.ones(strides)) * rng.uniform(0, budget))
        for _ in range(count)
    ]


def replicate_energy_search(
    length: int = 64, strides: Sequence[int] = (1, 2, 4), count: int = 1500, seed: int = 0
) -> float:
    """The largest worst-case stride-1 energy gain sup E(S x) / E(x) of the replicate-padded
    step over ``count`` random budgets sum(alpha) < 1/2 (as :func:`energy_gain`, in numpy
    with M^{-1/2} and each R_h formed once)."""
    m = -laplacian_matrix(length, 1).numpy()
    w, v = np.linalg.eigh(m)
    keep = w > 1e-10
    half = v[:, keep] / np.sqrt(w[keep])
    blocks = [replicate_laplacian_matrix(length, h).numpy() for h in strides]
    best = -math.inf
    for alphas in random_budgets(count, len(strides), seed):
        op = np.eye(length) + sum(a * r for a, r in zip(alphas, blocks, strict=True))
        b = op @ half
        best = max(best, float(np.linalg.eigvalsh(b.T @ m @ b).max()))
    return best


def energy_dissipation_check(
    configs: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = ENERGY_CONFIGS,
    length: int = 64,
    dim: int = 8,
    samples: int = 256,
    seed: int = 0,
) -> pd.DataFrame:
    """E(S x) <= E(x) on random x (white noise and random walks) next to the exact worst case."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(samples, length, dim, generator=gen, dtype=F64)
    x = torch.cat([noise, noise.cumsum(dim=1)])  # rough and smooth inputs
    rows = []
    for name, (strides, alphas) in configs.items():
        y = diffusion_step(x, torch.tensor(alphas, dtype=F64), strides)
        ratio = dirichlet_energy(y) / dirichlet_energy(x)
        rows.append(
            {
                "config": name,
                "samples": len(x),
                "fraction_dissipating": float((ratio <= 1 + 1e-12).double().mean()),
                "max_sampled_ratio": float(ratio.max()),
                "worst_case_gain": energy_gain(length, strides, alphas),
            }
        )
    return pd.DataFrame(rows)


def energy_decay(
    configs: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] | None = None,
    length: int = 64,
    dim: int = 8,
    samples: int = 64,
    steps: int = 50,
    seed: int = 0,
) -> pd.DataFrame:
    """E(S^t x) / E(x) for t = 0..steps (mean and max over random x), and whether every
    sample's energy was non-increasing at every step."""
    configs = ENERGY_CONFIGS if configs is None else configs
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(samples, length, dim, generator=gen, dtype=F64)
    rows = []
    for name, (strides, alphas) in configs.items():
        a = torch.tensor(alphas, dtype=F64)
        x, e0 = x0, dirichlet_energy(x0)
        prev = e0
        monotone = True
        for t in range(steps + 1):
            e = dirichlet_energy(x)
            monotone &= bool((e <= prev * (1 + 1e-12)).all())
            ratio = e / e0
            rows.append(
                {
                    "config": name,
                    "step": t,
                    "mean_ratio": float(ratio.mean()),
                    "max_ratio": float(ratio.max()),
                    "monotone": monotone,
                }
            )
            prev, x = e, diffusion_step(x, a, strides)
    return pd.DataFrame(rows)


def energy_gain_table(
    configs: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = ENERGY_CONFIGS,
    lengths: Sequence[int] = (5, 8, 16, 64, 256),
) -> pd.DataFrame:
    """Worst-case stride-1 energy gain sup E(S x) / E(x) per config (rows) and L (columns)."""
    data = {f"L={n}": [energy_gain(n, s, a) for s, a in configs.values()] for n in lengths}
    return pd.DataFrame(data, index=pd.Index(list(configs), name="config"))


# -- Appendix A.3.3 ---------------------------------------------------------------------------


def frequency_response_closed(
    omega: np.ndarray, strides: Sequence[int], alphas: Sequence[float]
) -> np.ndarray:
    """1 - sum_k 4 alpha_k sin^2(omega h_k / 2): S's multiplier on cos(omega i)."""
    omega = np.asarray(omega, dtype=np.float64)
    return 1 - sum(4 * a * np.sin(omega * h / 2) ** 2 for a, h in zip(alphas, strides, strict=True))


def frequency_response(
    strides: Sequence[int],
    alphas: Sequence[float],
    omegas: np.ndarray | None = None,
    length: int = 512,
) -> pd.DataFrame:
    """Measure the multiplier of pdelab's step on cos(omega i + 0.3), least squares over the
    interior (every node at least max(h) from both ends, where the stencil is the periodic
    one), and the residual showing cos(omega i) is an eigenfunction there."""
    omegas = np.linspace(0, np.pi, 65) if omegas is None else np.asarray(omegas)
    i = torch.arange(length, dtype=F64)
    signals = torch.stack([torch.cos(float(w) * i + 0.3) for w in omegas], dim=-1)
    out = diffusion_step(signals.unsqueeze(0), torch.tensor(alphas, dtype=F64), strides)[0]
    lo, hi = max(strides), length - max(strides)
    x, y = signals[lo:hi], out[lo:hi]
    numeric = (x * y).sum(0) / (x * x).sum(0)
    residual = (y - numeric * x).abs().max(0).values
    closed = frequency_response_closed(omegas, strides, alphas)
    return pd.DataFrame(
        {
            "omega": omegas,
            "numeric": numeric.numpy(),
            "closed": closed,
            "abs_error": np.abs(numeric.numpy() - closed),
            "residual": residual.numpy(),
        }
    )


def band_energy(strides: Sequence[int], alphas: Sequence[float], points: int = 4096) -> dict:
    """Mean |H(omega)|^2 over each quarter of [0, pi] (Low .. High)."""
    edges = np.linspace(0, np.pi, len(BANDS) + 1)
    out = {}
    for name, lo, hi in zip(BANDS, edges[:-1], edges[1:], strict=True):
        h = frequency_response_closed(np.linspace(lo, hi, points), strides, alphas)
        out[name] = float(np.mean(h**2))
    return out


# -- replicate padding vs the symmetric graph Laplacian ---------------------------------------


def replicate_padding_check(
    strides: Sequence[int] = (1, 2, 3, 4),
    alphas: Sequence[float] = REPLICATE_ALPHAS,
    lengths: Sequence[int] = REPLICATE_LENGTHS,
    powers: int = 32,
) -> pd.DataFrame:
    """I + alpha R_h (replicate-padded) vs I + alpha Delta_h (pdelab's graph Laplacian).

    For each (h, L, alpha): symmetry, ||.||_2 of both, the excess over 1, the replicate
    operator's spectral radius, ||.||_inf (max row sum), ||.||_1 (max column sum) and
    max over n = 1, 2, 4, ..., powers of ||(I + alpha R_h)^n||_2 (growth of repeated steps).
    """
    rows = []
    for h in strides:
        for n in lengths:
            if h >= n:
                continue
            graph, rep = laplacian_matrix(n, h), replicate_laplacian_matrix(n, h)
            for a in alphas:
                g_op = torch.eye(n, dtype=F64) + a * graph
                r_op = torch.eye(n, dtype=F64) + a * rep
                r_norm = power_norm = spectral_norm(r_op)
                power = r_op
                for _ in range(int(math.log2(powers))):  # n = 2, 4, ..., powers
                    power = power @ power
                    power_norm = max(power_norm, spectral_norm(power))
                rows.append(
                    {
                        "h": h,
                        "L": n,
                        "alpha": a,
                        "graph_symmetric": bool(torch.equal(graph, graph.T)),
                        "graph_norm": spectral_norm(g_op),
                        "replicate_symmetric": bool(torch.allclose(rep, rep.T)),
                        "replicate_norm": r_norm,
                        "excess": r_norm - 1,
                        "replicate_radius": float(torch.linalg.eigvals(r_op).abs().max()),
                        "replicate_inf_norm": float(torch.linalg.matrix_norm(r_op, ord=np.inf)),
                        "replicate_one_norm": float(torch.linalg.matrix_norm(r_op, ord=1)),
                        "replicate_max_power_norm": power_norm,
                    }
                )
    return pd.DataFrame(rows)


def replicate_padding_summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per stride: how far the replicate-padded step goes beyond non-expansive."""
    rows = []
    for h, part in table.groupby("h"):
        worst = part.loc[part["excess"].idxmax()]
        rows.append(
            {
                "h": int(h),
                "replicate symmetric": bool(part["replicate_symmetric"].all()),
                "expansive (share of grid)": float((part["excess"] > 1e-12).mean()),
                "min ||I+aR||_2": float(part["replicate_norm"].min()),
                "max ||I+aR||_2": float(worst["replicate_norm"]),
                "at (alpha, L)": f"({worst['alpha']}, {int(worst['L'])})",
                "max ||I+aR||_2, L=256": float(
                    part.loc[part["L"] == part["L"].max(), "replicate_norm"].max()
                ),
                "max spectral radius": float(part["replicate_radius"].max()),
                "max ||I+aR||_inf": float(part["replicate_inf_norm"].max()),
                "max ||I+aR||_1": float(part["replicate_one_norm"].max()),
                "max ||(I+aR)^n||_2": float(part["replicate_max_power_norm"].max()),
                "max ||I+aDelta_h||_2 (pdelab)": float(part["graph_norm"].max()),
            }
        )
    return pd.DataFrame(rows)


# -- Eq. 37 / 39 ------------------------------------------------------------------------------


def roughness_bound_check(lengths: Sequence[int] = LENGTHS) -> pd.DataFrame:
    """sup_z ||Delta_N z|| / sqrt(2 E(z)) = sqrt(max -lambda_k) = 2 cos(pi / 2L) (> 1: Eq. 37's
    printed constant 1 is too small; sqrt(8 E) bounds it)."""
    rows = []
    for n in lengths:
        lap = laplacian_matrix(n, 1)
        w, v = torch.linalg.eigh(-lap)
        keep = w > 1e-10
        half = v[:, keep] / torch.sqrt(w[keep])
        sup = math.sqrt(float(torch.linalg.eigvalsh(half.T @ lap.T @ lap @ half).max()))
        rows.append({"L": n, "sup_ratio": sup, "closed": 2 * math.cos(math.pi / (2 * n))})
    return pd.DataFrame(rows)
