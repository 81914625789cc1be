"""An attention matrix read as a graph (Fig 5 of Fractional Neural Attention), in numpy/scipy.

Tokens are nodes; query i attends to key j along the edge i -> j with weight A_ij. The measures:

* :func:`markov_spectrum`: the eigenpairs of the Markov matrix N_R(C) of a symmetric score
  matrix C, through its symmetric conjugate D^-1/2 C D^-1/2 (Methods, Eqs. 33-35); Fig 2a's
  spectrum and Fig 5b's diffusion map both start here.
* :func:`spectral_gap`: first minus second eigenvalue (Fig 5a).
* :func:`diffusion_map`: the components with the 2nd and 3rd largest eigenvalues (Fig 5b).
* :func:`hop_counts`, :func:`pair_path`, :func:`hop_summary`: shortest paths on edge weights
  1/A_ij, counted in hops (Fig 5c-e).

Where the official code (CKQu1/fractional-attn, nlp-tutorial/attn_graph_v2.py and
attn_graph_final.py) differs from the paper, the paper is the default and the code an option;
each docstring names the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.sparse.csgraph import dijkstra


@dataclass(frozen=True)
class MarkovSpectrum:
    """Eigenpairs of A = N_R(C) for symmetric C, largest eigenvalue first.

    eigenvalues (n,) are real; right (n, n) holds the right eigenvectors psi_j = D^-1/2 v_j as
    columns (A psi_j = eta_j psi_j), v_j orthonormal eigenvectors of D^-1/2 C D^-1/2."""

    eigenvalues: np.ndarray
    right: np.ndarray
    degrees: np.ndarray


def markov_spectrum(
    scores: np.ndarray, *, vectors: bool = True, rtol: float = 1e-5
) -> MarkovSpectrum:
    """Eigenpairs of the row-normalised scores without forming N_R(C), which is not symmetric.

    A = D^-1 C shares its eigenvalues with D^-1/2 C D^-1/2, symmetric when C is, so they come
    out real and sorted by eigh. The conjugate is symmetrised, (M + M^T)/2, against rounding,
    as the paper's Methods advise; a C further from symmetric than rtol * max|C| (float32
    distances of Q = K stay within it; Q != K does not) is an error, since then A's spectrum is
    complex and the official code turns to a different construction."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square matrix, got shape {scores.shape}")
    if np.abs(scores - scores.T).max() > rtol * np.abs(scores).max():
        raise ValueError("scores are not symmetric (Q != K): the Markov spectrum is not real")
    degrees = scores.sum(axis=1)
    if np.any(degrees <= 0):
        raise ValueError("a row of the scores sums to zero: N_R(C) is undefined there")
    scale = 1.0 / np.sqrt(degrees)
    conj = scale[:, None] * scores * scale[None, :]
    conj = 0.5 * (conj + conj.T)
    if vectors:
        eta, v = np.linalg.eigh(conj)
        order = np.argsort(eta)[::-1]
        return MarkovSpectrum(eta[order], scale[:, None] * v[:, order], degrees)
    eta = np.linalg.eigvalsh(conj)[::-1]
    return MarkovSpectrum(eta, np.empty((len(eta), 0)), degrees)


def spectral_gap(
    attention: np.ndarray,
    *,
    order: Literal["real", "modulus"] = "real",
    drop_self: bool = False,
) -> float:
    """Fig 5a's spectral gap: the first minus the second eigenvalue of A (any square matrix).

    The paper writes 1 - lambda_2, which equals this for a row-stochastic A (lambda_1 = 1).
    order="real" sorts the eigenvalues by real part, as the official code does (numpy's
    argsort of complex values); a negative eigenvalue near -1, which slows mixing as much as
    one near +1, then counts as far down the spectrum. order="modulus" is the mixing-time gap
    |lambda_1| - |lambda_2|. The difference is returned as a real number: its real part, which
    is what the official code keeps when it stores a complex gap in a float array.

    drop_self=True zeroes the diagonal first without renormalising the rows, as the official
    run does by default (attn_graph_v2.py, --use_same_token False); the paper does not say so,
    hence the default False. For Q = K FNA models the diagonal is already zero (the official
    model masks it), for DP it is not, so the option changes DP's gaps only."""
    a = np.array(attention, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 2:
        raise ValueError(f"attention must be a square matrix of size >= 2, got {a.shape}")
    if order not in ("real", "modulus"):
        raise ValueError(f"order must be 'real' or 'modulus', got {order!r}")
    if drop_self:
        np.fill_diagonal(a, 0.0)
    eig = np.linalg.eigvals(a.T)  # the official code decomposes A^T; same eigenvalues
    key = eig.real if order == "real" else np.abs(eig)
    first, second = eig[np.argsort(key)[::-1][:2]]
    if order == "modulus":
        return float(abs(first) - abs(second))
    return float((first - second).real)


def diffusion_map(
    scores: np.ndarray, *, tau: float = 0.1, components: tuple[int, ...] = (1, 2)
) -> np.ndarray:
    """Fig 5b's diffusion map Psi_tau = (eta_j^tau psi_j)_j of symmetric scores C, (n, m).

    components index the eigenvalues from the largest (0: the constant eigenvector with
    eta = 1), so the default (1, 2) takes the 2nd and 3rd largest, the pair the official
    notebook plots (plot_mechanisms.ipynb cell 7, columns -2 and -3 of an ascending sort).
    tau = 0.1 is the official value; the paper leaves it unstated. The official analysis
    rebuilds C from the model's distances with kappa * sqrt(0.1) and keeps the diagonal; that
    is the caller's C. Selecting and centring the far tokens is :func:`far_from_centre`."""
    spectrum = markov_spectrum(scores)
    eta = spectrum.eigenvalues[list(components)]
    if np.any(eta <= 0):
        raise ValueError(f"eigenvalues {eta} of the chosen components are not positive")
    return spectrum.right[:, list(components)] * eta[None, :] ** tau


def far_from_centre(points: np.ndarray, radius: float = 5.95) -> np.ndarray:
    """Indices of the points at least `radius` from their mean: the tokens Fig 5b shows (the
    official code compares squared distances with radius^2, so the boundary is included)."""
    points = np.asarray(points, dtype=float)
    sq = ((points - points.mean(axis=0)) ** 2).sum(axis=1)
    return np.flatnonzero(sq >= radius**2)


def _edge_lengths(attention: np.ndarray) -> np.ndarray:
    """1/|A_ij| off the diagonal; 0 (scipy's "no edge") on it and wherever A_ij = 0."""
    a = np.abs(np.asarray(attention, dtype=float))
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"attention must be a square matrix, got shape {a.shape}")
    lengths = np.zeros_like(a)
    np.divide(1.0, a, out=lengths, where=a > 0)
    np.fill_diagonal(lengths, 0.0)
    return lengths


def hop_counts(attention: np.ndarray) -> np.ndarray:
    """(n, n) hop counts of the minimum-weight paths i -> j, edge weights 1/A_ij (Fig 5d).

    Dijkstra from every source (scipy.sparse.csgraph), then the hops are read off the
    predecessor trees. Self-loops are dropped; the diagonal is 0. A zero weight is no edge,
    and a pair with no path of positive weights counts inf. The official code builds a
    networkx graph from 1/A, where 1/0 = inf is an edge of infinite length, so there such a
    pair counts one hop (the direct inf edge); with any positive path both agree. Ties between
    paths of equal total weight and different hop counts may resolve differently in the two
    libraries; for real-valued attention they have probability zero."""
    lengths = _edge_lengths(attention)
    n = lengths.shape[0]
    _, pred = dijkstra(lengths, directed=True, return_predecessors=True)
    rows = np.arange(n)[:, None]
    node = np.broadcast_to(np.arange(n), (n, n)).copy()  # walk back from each target
    reachable = (pred >= 0) | (node == rows)
    hops = np.where(reachable, 0.0, np.inf)
    active = reachable & (node != rows)
    while active.any():
        node = np.where(active, pred[rows, np.where(active, node, 0)], node)
        hops += active
        active = node != rows
        active &= reachable
    return hops


def pair_path(attention: np.ndarray, source: int, target: int) -> list[int]:
    """The minimum-weight path source -> target as a list of tokens (Fig 5c draws it; its hop
    count is len - 1). An empty list when target cannot be reached."""
    lengths = _edge_lengths(attention)
    _, pred = dijkstra(lengths, directed=True, indices=source, return_predecessors=True)
    if source == target:
        return [source]
    if pred[target] < 0:
        return []
    path = [target]
    while path[-1] != source:
        path.append(int(pred[path[-1]]))
    return path[::-1]


def hop_summary(hops: np.ndarray) -> dict[str, float]:
    """The off-diagonal hop counts of one sequence: max (Fig 5d), mean and std (Fig 5e, whose
    error bars are std/5), and how many pairs are unreachable (inf, left out of mean and std;
    max is inf when there are any)."""
    off = hops[~np.eye(hops.shape[0], dtype=bool)]
    finite = off[np.isfinite(off)]
    return {
        "max": float(off.max()) if off.size else 0.0,
        "mean": float(finite.mean()) if finite.size else float("nan"),
        "std": float(finite.std()) if finite.size else float("nan"),
        "unreachable": float(off.size - finite.size),
    }
