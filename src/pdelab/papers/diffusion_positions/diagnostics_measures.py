"""The two quantities the paper names but never measures, on tensors and one attention sublayer.

Roughness, per example over pairs of real tokens: ``energy`` E(Z) = 1/2 sum_i ||Z_{i+1} - Z_i||^2
(the paper's, length- and width-dependent); ``roughness`` = E / (pairs * channels), half the
mean squared neighbour difference, comparable across lengths and widths;
``roughness_scalefree`` = E / ||Z - mean_i Z||_F^2 in [0, 2), the share of high-frequency
modes, comparable across the growing pre-LN residual stream.

Commutator of S_alpha = I + sum_k alpha_k Delta_{N, h_k} (no LayerNorm, masked like the
model's: no edge touches padding) with A, a layer's attention sublayer (qkv projection, kernel,
output projection; eval mode). Three forms, Frobenius norms over real tokens:

* ``exact``    S(A(X)) - A(S(X)) (Prop. 4.8).
* ``linear``   Eq. (13)/(35): attention frozen as a mixing operator at X, A(X) ~ A(X) X. With
  heads and projections the frozen map is Y -> sum_h A_h(X) Y W_V^h W_O^h + const, so the form
  is sum_h alpha (Delta_N A_h - A_h Delta_N) X W_V^h W_O^h: per head, combined through each
  head's own value-output map. (Averaging A_h over heads would test a matrix the layer never
  applies: sum_h A_h X W_h != mean_h(A_h) X W unless every W_h agrees.) It is computed without
  T x T matrices as S(A(X)) - A_X(S(X)), the kernel re-run with the queries and keys of X and
  the values of S(X): exact for every registered kernel, as all are linear in V.
* ``tangent``  the first-order term of ``exact`` in alpha, (S - I) A(X) - J_A(X)[(S - I) X]
  (central difference, float64). It is ``linear`` plus the routing-sensitivity term
  -sum_h dA_h[(S - I) X] X W_h that Eq. (13) drops, so exact/tangent -> 1 as alpha -> 0 for any
  attention, while exact/linear -> 1 only where the attention weights do not move with X.

A is always the model's own SelfAttention (its ``project`` and ``attend`` halves for the frozen
routing), so a new attention site or kernel is measured without a change here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pdelab.models.diffusion import dirichlet_energy, neumann_laplacian
from pdelab.models.transformer import SelfAttention

REFERENCE_ALPHA, REFERENCE_STRIDES = 0.1, (1,)
ROUGHNESS = ("energy", "roughness", "roughness_scalefree")
TINY = 1e-300


@dataclass(frozen=True)
class Operator:
    """S_alpha = I + sum_k alpha_k Delta_{N, h_k} along dim 1: the theory's operator, no LN."""

    alphas: tuple[float, ...]
    strides: tuple[int, ...]
    source: str = "reference"

    @property
    def alpha(self) -> float:
        return float(sum(self.alphas))

    def scaled(self, factor: float) -> Operator:
        return Operator(tuple(a * factor for a in self.alphas), self.strides, self.source)

    def delta(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """(S - I) x; the mask cuts every edge that touches padding, as the model's S does."""
        out = torch.zeros_like(x)
        for a, h in zip(self.alphas, self.strides, strict=True):
            out = out + a * neumann_laplacian(x, h, mask)
        return out

    def __call__(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return x + self.delta(x, mask)


def reference_operator() -> Operator:
    """alpha = 0.1, stride 1: one operator at which every variant's layers compare."""
    return Operator((REFERENCE_ALPHA,), REFERENCE_STRIDES, "reference")


def _real(x: Tensor, mask: Tensor | None) -> Tensor:
    return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask


def roughness(z: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """Per-example (B,) Dirichlet energy of z (B, T, D) over real-token pairs: raw ``energy``,
    ``roughness`` per pair and channel, and ``roughness_scalefree`` (energy over variance)."""
    real = _real(z, mask)
    energy = dirichlet_energy(z, real)
    pairs = (real[:, 1:] & real[:, :-1]).sum(dim=1).to(z.dtype)
    w = real.unsqueeze(-1).to(z.dtype)
    mean = (z * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
    spread = ((z - mean) * w).pow(2).sum(dim=(1, 2))
    nan = torch.full_like(energy, float("nan"))
    return {
        "energy": energy,
        "roughness": torch.where(pairs > 0, energy / (pairs * z.shape[-1]).clamp_min(1.0), nan),
        "roughness_scalefree": torch.where(spread > 0, energy / spread.clamp_min(TINY), nan),
    }


def frobenius(y: Tensor, mask: Tensor | None = None) -> Tensor:
    """Per-example ||y||_F over real tokens only: padded rows are not part of the sequence."""
    return (y * _real(y, mask).unsqueeze(-1).to(y.dtype)).pow(2).sum(dim=(1, 2)).sqrt()


def attention(
    attn: SelfAttention,
    x: Tensor,
    mask: Tensor | None,
    causal: bool = False,
    routing: Tensor | None = None,
) -> Tensor:
    """The layer's own attention on x. With ``routing`` the queries and keys come from that
    input, so the attention weights are frozen at it while values still come from x: the
    linearization A(routing) x of Eq. (13), with the layer's own projections around it."""
    if routing is None:
        return attn(x, mask, causal)
    q, k, _ = attn.project(routing)
    _, _, v = attn.project(x)
    return attn.attend(q, k, v, mask, causal)


@torch.no_grad()
def commutators(
    attn: SelfAttention,
    x: Tensor,
    mask: Tensor | None,
    op: Operator,
    causal: bool = False,
    tangent: bool = True,
    fd_step: float = 1e-5,
) -> dict[str, Tensor]:
    """Per-example norms of the exact, linearized (frozen routing, Eq. 13) and first-order
    (``tangent``) commutators of S_alpha with this attention at x, and ||A(x)||_F."""
    ax = attention(attn, x, mask, causal)
    sx = op(x, mask)
    s_ax = op(ax, mask)
    out = {
        "attention_norm": frobenius(ax, mask),
        "exact": frobenius(s_ax - attention(attn, sx, mask, causal), mask),
        "linear": frobenius(s_ax - attention(attn, sx, mask, causal, routing=x), mask),
    }
    if tangent:  # J_A(x)[d] by a central difference, O(step^2): needs float64
        d = op.delta(x, mask)
        step = fd_step * float(x.norm()) / max(float(d.norm()), TINY)
        jd = attention(attn, x + step * d, mask, causal) - attention(
            attn, x - step * d, mask, causal
        )
        out["tangent"] = frobenius(op.delta(ax, mask) - jd / (2 * step), mask)
    return out
