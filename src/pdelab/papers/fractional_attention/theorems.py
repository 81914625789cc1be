"""Fractional Neural Attention's theory read against itself and against the standard results it
cites: Theorem 2 beside Lemma 1 (its proof), Eq. 12's Poisson kernel, the claim that alpha in
[2, d_M + 1] gives the standard Laplacian, Proposition 1, and the abstract's theoretical claim of
larger spectral gaps. Each finding is computed here (numpy and scipy, no trained model), so it
holds in any profile.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, special

from pdelab.papers.fractional_attention.spectrum import EPS, circle_scores
from pdelab.report.claims import FAILS, HOLDS, INCONSISTENT, NO_EXPERIMENT, Claim, finding

# The paper's words (copied from it; a test checks each is verbatim).
THEORY_QUOTES = {
    "theorem_2": "the infinitesimal generator of FNA converges to the operator",
    "lemma_1": "The infinitesimal generator from the normalization scheme in the main text yields",
    "poisson": "For example, it simplifies to the well-known Poisson kernel when  $\\alpha = 1$",
    "local": "When  $\\alpha \\in [2, d_{\\mathcal{M}} + 1]$ , the operator reduces to the "
    "standard (local) Laplacian",
    "proposition_1": "self-attention (equation 1) and FNA (equation 13) with query and key "
    "projection matrices  $\\mathbf{W}_Q$  and  $\\mathbf{W}_K$  are equivalent to using an "
    "alternative pair of query/key projection matrices  $\\tilde{\\mathbf{W}}_Q = "
    "\\mathbf{I}$  and  $\\tilde{\\mathbf{W}}_K = \\mathbf{W}_Q^\\top \\mathbf{W}_K \\in O(d)$",
    "gaps": "Theoretically, we show that FNA’s dynamics are governed by the fractional "
    "diffusion equation, and that the resulting attention networks exhibit larger spectral "
    "gaps and shorter path lengths",
}
GENERATOR_ALPHAS = (1.2, 2.0)  # Fig 2a's multiscale alpha and the local one
FREQUENCIES = (1, 2, 3)  # cos(k theta) on S^1, well inside the grid's resolved band
N_CIRCLE = 500  # Fig 2a's points on S^1
POISSON_T = 0.5  # any t > 0: the divergence of Eq. 12's mass does not depend on it
POISSON_RADII = (1e2, 1e4, 1e6)
ABOVE_TWO = (2.0, 2.5, 3.0, 4.0)  # alpha on [2, d_M + 1] (d_M >= 3 reaches 4)
TOKENS, WIDTH = 64, 8  # Proposition 1's check: tokens and d


def generator_quotients(
    alpha: float, frequencies: tuple[int, ...] = FREQUENCIES, n: int = N_CIRCLE
) -> dict[int, float]:
    """Eq. 15's generator of FNA, (N_R(C) f - f) / t with t = eps^(alpha/2) and kappa =
    sqrt(eps) (Fig 2a's construction, n distinct points: a uniform density on S^1), applied
    to f = cos(k theta): its Rayleigh quotient <Hf, f> / <f, f> per frequency k. Theorem 2's
    uniform-grid case predicts +k^alpha; Lemma 1's -c k^alpha with c > 0."""
    scores = circle_scores(alpha, n=n, endpoint=False)
    attention = scores / scores.sum(axis=1, keepdims=True)
    theta = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
    t = EPS ** (alpha / 2)
    out = {}
    for k in frequencies:
        f = np.cos(k * theta)
        out[k] = float(((attention @ f - f) / t) @ f / (f @ f))
    return out


def theorem_2_finding() -> Claim:
    """Theorem 2 (Eq. 18) and Lemma 1 (Eq. 27, which its proof rests on) state the generator
    with opposite signs and with and without the constant c; the generator computed on S^1 has
    Lemma 1's sign, and c is not 1."""
    parts = []
    for alpha in GENERATOR_ALPHAS:
        q = generator_quotients(alpha)
        values = ", ".join(f"{v:+.3g}" for v in q.values())
        cs = ", ".join(f"{-v / k**alpha:.3g}" for k, v in q.items())
        parts.append(f"alpha = {alpha:g}: {values} (so c = {cs})")
    ks = ", ".join(str(k) for k in FREQUENCIES)
    ours = (
        "Eq. 27 is -c times Eq. 18: Lemma 1 has the opposite sign and a constant c (Eq. 28's "
        "diffusion coefficient) that Theorem 2 drops, though Theorem 2's proof is Lemma 1. "
        "Eq. 15's generator computed on S^1 (Fig 2a's construction, 500 evenly spaced points, "
        "a uniform density) has the Rayleigh quotient on cos(k theta), "
        f"k = {ks}: {'; '.join(parts)}. It is negative, -c k^alpha, as in Lemma 1, where "
        "Theorem 2's uniform-grid case gives +k^alpha; Eq. 6 (d_t rho + (-Delta)^(alpha/2) "
        "rho = 0) also needs the generator -(-Delta)^(alpha/2), so Theorem 2's 'recovering the "
        "fractional diffusion as in equation 6' holds with Lemma 1's sign only. The proof's "
        "step (*) also drops c: it expands 1 / (rho - eps c (-Delta)^(alpha/2) rho) as "
        "(1 / rho)(1 + eps (-Delta)^(alpha/2) rho / rho), the next line restoring c."
    )
    return finding(
        "Theorem 2's generator (Eq. 18) is Lemma 1's (Eq. 27), which proves it",
        "Theorem 2, Eq. 18; Methods, Lemma 1, Eq. 27",
        f"{THEORY_QUOTES['theorem_2']} / {THEORY_QUOTES['lemma_1']}",
        "Eq. 18: H[f] = ((-Delta)^(alpha/2)(f rho) - f (-Delta)^(alpha/2) rho) / rho; Eq. 27: "
        "H f = -c ((-Delta)^(alpha/2)(f rho) - f (-Delta)^(alpha/2) rho) / rho",
        ours,
        INCONSISTENT,
        "Theorem 2 states the generator with the opposite sign to Lemma 1 and without its "
        "constant c; the generator computed on the circle has Lemma 1's sign and a c that is "
        "not 1.",
    )


def poisson_masses(t: float = POISSON_T, radii: tuple[float, ...] = POISSON_RADII) -> dict:
    """In d = 1 (c~_1 = 1 / pi), the mass over |x| < R of the standard Poisson kernel
    (1 / (pi t))(1 + x^2 / t^2)^-1 and of Eq. 12 as printed, (1 / (pi t))(1 + |x| / t^2)^-1,
    in closed form: (2 / pi) arctan(R / t) -> 1 against (2 t / pi) log(1 + R / t^2) -> inf."""
    return {
        r: ((2 / math.pi) * math.atan(r / t), (2 * t / math.pi) * math.log1p(r / t**2))
        for r in radii
    }


def radial_mass(d: int, radius: float, squared: bool, t: float = POISSON_T) -> float:
    """The mass over the ball of radius R in R^d of the Poisson kernel, standard (squared
    distance) or as Eq. 12 prints it: c~_d / t^d times the surface of the unit sphere times
    the integral of r^(d-1) (1 + r^s / t^s')^-((d+1)/2) dr (by quadrature on log r)."""
    c = special.gamma((d + 1) / 2) / math.pi ** ((d + 1) / 2)
    sphere = 2 * math.pi ** (d / 2) / special.gamma(d / 2)

    def integrand(u: float) -> float:
        r = math.exp(u)
        z = (r / t) ** 2 if squared else r / t**2
        return r**d * (1 + z) ** (-(d + 1) / 2)

    value, _ = integrate.quad(integrand, -30.0, math.log(radius), limit=400)
    return c / t**d * sphere * value


def poisson_finding() -> Claim:
    """Eq. 12 is the Poisson kernel with an unsquared distance: it then decays as
    |x - y|^-(d+1)/2, not as Eq. 10's |x - y|^-(d+alpha) at alpha = 1, and has infinite mass in
    every dimension, so it is no density."""
    masses = poisson_masses()
    one = ", ".join(f"R = {r:.0e}: {s:.3f} vs {p:.2f}" for r, (s, p) in masses.items())
    far = POISSON_RADII[-1]
    higher = ", ".join(
        f"d = {d}: {radial_mass(d, far, True):.3f} vs {radial_mass(d, far, False):.3g}"
        for d in (2, 3)
    )
    ours = (
        "The standard Poisson kernel, the alpha = 1 heat kernel, is (c~_d / t^d)(1 + "
        "||x - y||^2 / t^2)^(-(d+1)/2) = c~_d t / (t^2 + ||x - y||^2)^((d+1)/2): the distance "
        "is squared. As printed, Eq. 12 decays as ||x - y||^(-(d+1)/2), not as Eq. 10's "
        "(1 + z)^-(d + alpha) = z^-(d+1) at alpha = 1, and its mass is infinite in every "
        "dimension (its radial integrand grows as r^((d-3)/2)). Mass over |x| < R at "
        f"t = {POISSON_T:g}, standard vs printed, d = 1 (closed form): {one}; at R = "
        f"{far:.0e} (quadrature): {higher}."
    )
    return finding(
        "Eq. 12 is the well-known Poisson kernel (alpha = 1)",
        "Eq. 12",
        THEORY_QUOTES["poisson"],
        "k_t(x, y) = (c~_d / t^d)(1 + ||x - y|| / t^2)^(-(d+1)/2), c~_d = Gamma((d+1)/2) / "
        "pi^((d+1)/2)",
        ours,
        INCONSISTENT,
        "Eq. 12 does not square the distance: as printed it is not the Poisson kernel, "
        "contradicts Eq. 10's tail at alpha = 1 and is not a probability density.",
    )


def heat_kernel_1d(x: float, alpha: float) -> float:
    """The kernel of exp(-(-Delta)^(alpha/2)) on R at t = 1: (1 / pi) int_0^inf
    exp(-xi^alpha) cos(xi x) d xi (the inverse Fourier transform of its symbol)."""
    value, _ = integrate.quad(
        lambda s: math.exp(-(s**alpha)), 0.0, 50.0, weight="cos", wvar=x, limit=200
    )
    return value / math.pi


def normalising_constant(d: int, alpha: float) -> float:
    """Eq. 7's c_{d,alpha} = alpha 2^(alpha-1) Gamma((d+alpha)/2) / (pi^(d/2) Gamma(1-alpha/2));
    0 where Gamma(1 - alpha/2) has a pole (alpha = 2, 4, ...)."""
    gamma = special.gamma(1 - alpha / 2)
    if not math.isfinite(gamma):
        return 0.0
    return alpha * 2 ** (alpha - 1) * special.gamma((d + alpha) / 2) / (math.pi ** (d / 2) * gamma)


def local_laplacian_finding() -> Claim:
    """By its own definitions (Eq. 22, spectral; Eq. 7, the singular integral), (-Delta)^(alpha/2)
    is the Laplacian at alpha = 2 alone: above 2 it raises each eigenvalue to another power, Eq.
    7's constant changes sign, and its heat kernel is no longer positive."""
    xs = np.linspace(0.0, 10.0, 201)
    minima = {a: min(heat_kernel_1d(float(x), a) for x in xs) for a in ABOVE_TWO}
    powers = ", ".join(f"{2**a:.3g} (alpha = {a:g})" for a in ABOVE_TWO)
    consts = ", ".join(f"{normalising_constant(1, a):+.3g} (alpha = {a:g})" for a in ABOVE_TWO)
    kernels = ", ".join(f"{m:+.3g} (alpha = {a:g})" for a, m in minima.items())
    ours = (
        "By Eq. 22, (-Delta)^(alpha/2) multiplies the eigenfunction of -Delta with eigenvalue "
        "lambda by lambda^(alpha/2); on S^1, cos(2 theta) by 2^alpha, against the Laplacian's "
        f"2^2 = 4: {powers}. So on [2, d_M + 1] it equals -Delta only at alpha = 2; above 2 it "
        "is an operator of order alpha, non-local unless alpha is an even integer, and then "
        "a power of the Laplacian (Delta^2 at alpha = 4), not the Laplacian. Eq. 7 does not "
        "extend either: its constant c_{1,alpha} is "
        f"{consts}, and its integral diverges at y = x for alpha >= 2. The kernel of "
        "exp(-(-Delta)^(alpha/2)) on R has minimum over |x| <= 10 of "
        f"{kernels}: negative above 2, so it is not a heat kernel by the Methods' own "
        "positivity condition."
    )
    return finding(
        "The fractional Laplacian reduces to the standard Laplacian for alpha in [2, d_M + 1]",
        "Sec. Fractional diffusion (after Eq. 7)",
        THEORY_QUOTES["local"],
        "alpha in [2, d_M + 1]: the standard (local) Laplacian",
        ours,
        FAILS,
        "By the paper's own definition of the fractional Laplacian (Eq. 22) it is the standard "
        "Laplacian at alpha = 2 only; for alpha > 2 it is a different operator.",
    )


def _orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def proposition_1_gaps(seed: int = 0, n: int = TOKENS, d: int = WIDTH) -> dict[str, float]:
    """The largest deviation, over n tokens, between the scores with (W_Q, W_K) in O(d) and with
    Proposition 1's (I, W_Q^T W_K): Euclidean distance (FNA, R^d), dot product (self-attention),
    geodesic distance on S^(d-1); Q = K (W~_K = I); and the distance with a W_Q that is not
    orthogonal, where the proposition's assumption fails."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w_q, w_k = _orthogonal(rng, d), _orthogonal(rng, d)
    w_t = w_q.T @ w_k

    def dist(q: np.ndarray, k: np.ndarray) -> np.ndarray:
        return np.linalg.norm(q[:, None, :] - k[None, :, :], axis=-1)

    sphere = x / np.linalg.norm(x, axis=1, keepdims=True)

    def geodesic(q: np.ndarray, k: np.ndarray) -> np.ndarray:
        return np.arccos(np.clip(q @ k.T, -1.0, 1.0))

    skew = w_q + 0.5 * rng.standard_normal((d, d))
    return {
        "distance": float(np.abs(dist(x @ w_q.T, x @ w_k.T) - dist(x, x @ w_t.T)).max()),
        "dot product": float(np.abs((x @ w_q.T) @ (x @ w_k.T).T - x @ (x @ w_t.T).T).max()),
        "sphere": float(
            np.abs(
                geodesic(sphere @ w_q.T, sphere @ w_k.T) - geodesic(sphere, sphere @ w_t.T)
            ).max()
        ),
        "Q = K": float(np.abs(w_q.T @ w_q - np.eye(d)).max()),
        "not orthogonal": float(
            np.abs(dist(x @ skew.T, x @ w_k.T) - dist(x, x @ (skew.T @ w_k).T)).max()
        ),
    }


# A deviation this small is rounding (float64 over d = 8 and 64 tokens); the assumption's
# failure is of order 1.
ROUNDING = 1e-9


def proposition_1_finding() -> Claim:
    """Proposition 1 is an identity of orthogonal matrices: ||W_Q x - W_K y|| = ||x - W_Q^T
    W_K y|| since W_Q^T preserves norms; the dot product needs no orthogonality at all. Its
    proof's algebra is checked line by line by computing each side."""
    gaps = proposition_1_gaps()
    holds = all(v < ROUNDING for k, v in gaps.items() if k != "not orthogonal")
    shown = ", ".join(f"{k} {v:.1e}" for k, v in gaps.items())
    ours = (
        f"Largest deviation over {TOKENS} random tokens in d = {WIDTH}, random W_Q, W_K in "
        f"O(d), between the scores with (W_Q, W_K) and with (I, W_Q^T W_K): {shown}. The "
        "identity holds to rounding for FNA's Euclidean distance, self-attention's dot product "
        "and the geodesic on S^(d-1), and W~_K = I under Q = K; with a W_Q that is not "
        "orthogonal it fails, as the assumption requires. The proof's lines follow from "
        "||W x|| = ||x|| for W in O(d); for self-attention the dot product identity needs no "
        "orthogonality (W~_K then is not in O(d))."
    )
    return finding(
        "Proposition 1: under Assumption 1, (W_Q, W_K) is equivalent to (I, W_Q^T W_K)",
        "Proposition 1; Methods, its proof",
        THEORY_QUOTES["proposition_1"],
        "W~_Q = I, W~_K = W_Q^T W_K in O(d); W~_Q = W~_K = I under Assumption 2",
        ours,
        HOLDS if holds else FAILS,
        "" if holds else "the identity does not hold to rounding",
    )


def spectral_gap_finding() -> Claim:
    """The abstract's "theoretically, we show ... larger spectral gaps": no result of the paper
    is about spectral gaps, so the claim is unsupported as theory."""
    return finding(
        "Theory shows FNA's attention networks have larger spectral gaps",
        "Abstract",
        THEORY_QUOTES["gaps"],
        "no theorem; the gaps are drawn on trained models in Fig. 5a (figure only)",
        "The paper's only results are Proposition 1 (the projections), Theorem 2 and Lemma 1 "
        "(the generator's limit); none concerns the spectral gap or path lengths. The "
        "Mechanistic section says a larger gap 'suggests' a smaller mixing time and measures "
        "gaps of trained models (Fig. 5a, judged in this report's run rows).",
        NO_EXPERIMENT,
        "Unsupported: the claim is stated as a theoretical result, and no theorem, lemma or "
        "derivation in the paper concerns spectral gaps.",
    )


def theory_findings() -> list[Claim]:
    """The theory findings in the paper's order."""
    return [
        local_laplacian_finding(),
        poisson_finding(),
        proposition_1_finding(),
        theorem_2_finding(),
        spectral_gap_finding(),
    ]
