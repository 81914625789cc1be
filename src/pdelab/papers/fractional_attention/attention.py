"""Fractional neural attention (FNA): row-normalised Lévy heat-kernel weights, with fast paths.

Per head (Eqs. 13-14), C_ij = Phi_alpha(dist(q_i, k_j) / kappa) and A = N_R(C), a plain L1 row
normalisation (no softmax); the output is A V. Phi_alpha(z) = (1 + z)^-(d_M + alpha) for
alpha < 2, the power-law tail of the fractional Laplacian's heat kernel (Eq. 10), and
exp(-z^2) at alpha = 2, the paper's "local attention" (Eq. 9). dist is Euclidean, or geodesic
on the unit sphere (Appendix A1). Padding keys, and later keys under ``causal``, weigh 0; a
row left with no key gives 0, as the official F.normalize does.

Variants, as options: ``orthogonal`` ("op") makes W_K orthogonal, and W_Q when H > 1, while a
single head reads q = x; ``tied`` sets W_K := W_Q; ``spherical`` puts the layer input and each
head's q, k on the unit sphere; ``zero_diagonal`` (with ``tied``) gives every token zero
weight on itself, which the official text model does and the paper does not say. The first
three constrain the projections, so the kernel supplies them (``make_projection``).
``laplace`` (alpha < 2, an ablation) replaces Phi by exp(-(d_M + alpha) z), the power law's
form for z << 1: with the text kappa (258 at d_H = 32) trained distances may never leave that
regime, and this variant measures whether the tail matters.

Paths, equal in exact arithmetic (tests/test_fna.py compares them in float64):
- ``fna_reference`` materialises C as the official code does (cdist, Phi, masked_fill 0,
  F.normalize): O(T^2) memory, the oracle and the memory anchor.
- ``fna`` at alpha = 2, Euclidean: exp(-|q - k|^2 / kappa^2) row-normalised is
  softmax_j((2 q.k_j - |k_j|^2) / kappa^2), as the |q_i|^2 factor cancels in the row sum, so
  scaled_dot_product_attention runs it exactly on q' = [q, -1/2], k' = [k, |k|^2] with scale
  2 / kappa^2, the head dimension zero-padded to a multiple of 8 for the fused kernels.
- ``fna`` otherwise: every C_ij > 0, so N_R(C) = softmax(log C) with log C_ij =
  -(d_M + alpha) log1p(dist / kappa) (or -(dist / kappa)^2 on the sphere at alpha = 2). On
  CUDA, FlexAttention computes it in ``score_mod`` (the Euclidean d^2 as the product of
  [-2q, 1, |q|^2] and [k, |k|^2, 1]); elsewhere (FlexAttention has no CPU backward) a
  key-chunked log-space softmax with an online logsumexp and a recomputing backward keeps
  memory at O(T * chunk). Log space never underflows; Phi itself does in float32 at d_H = 64
  once z >~ 3, where the reference, like the official code, returns unnormalised rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn.utils.parametrizations import orthogonal as orthogonal_map

from pdelab.models.attention import ATTENTION_KERNELS, SDPAKernel
from pdelab.papers.fractional_attention.options import (
    DEFAULT_ALPHA,
    DEFAULT_CHUNK,
    check_options,
    distance_scale,
    intrinsic_dim,
)
from pdelab.precision import fp32, full_precision

try:  # FlexAttention (torch >= 2.5) runs the general-alpha path on CUDA
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch: the chunked path everywhere
    create_block_mask = flex_attention = None

# Where the distance's derivative is singular (sqrt at d^2 = 0, arccos at cos = +-1) its
# gradient is taken as that of the distance clamped here: 0 below D2_FLOOR and beyond
# 1 - COS_MARGIN. The clamps act in the backward only; every forward takes the exact distance
# (Geometry.distance), as the reference does. The diagonal of tied q = k is set to distance 0
# exactly (its gradient is 0: the distance is constant there).
D2_FLOOR = 1e-12
COS_MARGIN = 1e-7


# --------------------------------------------------------------------------------------------
# Projections
# --------------------------------------------------------------------------------------------


def _linear(dim: int, orthogonal: bool) -> nn.Module:
    layer = nn.Linear(dim, dim, bias=False)  # the official runs set qkv_bias = False
    return orthogonal_map(layer) if orthogonal else layer


class Projection(nn.Module):
    """x (B, T, C) -> [q | k | v] (B, T, 3C) with FNA's constraints on W_Q and W_K.

    As in the official code: no biases; ``orthogonal`` parametrises W_K, and W_Q when H > 1, as
    orthogonal C x C matrices (each head reads d_H rows, so a head alone is only semi-orthogonal,
    Appendix A3), and one head reads q = x; ``tied`` has no W_K (k = q); ``spherical`` maps the
    input onto the unit sphere first. W_V is never constrained.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        orthogonal: bool = False,
        tied: bool = False,
        spherical: bool = False,
    ) -> None:
        super().__init__()
        self.spherical = spherical
        self.query = None if orthogonal and heads == 1 else _linear(dim, orthogonal)
        self.key = None if tied else _linear(dim, orthogonal)
        self.value = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        if self.spherical:
            x = F.normalize(x, dim=-1)
        q = x if self.query is None else self.query(x)
        k = q if self.key is None else self.key(x)
        return torch.cat([q, k, self.value(x)], dim=-1)


# --------------------------------------------------------------------------------------------
# The kernel Phi and its distance
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """What every path of one kernel shares: the distance, Phi and their constants.

    A path hands over ``s``, the squared distance (Euclidean) or the cosine (sphere), as both
    come from one matrix product; ``distance`` is exact, and its gradient (``ddistance``, or
    autograd through ``distance_clamped_grad``) is clamped as D2_FLOOR and COS_MARGIN say.
    """

    alpha: float
    exponent: float  # d_M + alpha
    kappa: float
    spherical: bool
    tied: bool  # k = q, so the diagonal distance is exactly 0
    laplace: bool = False  # exp(-(d_M + alpha) z) in place of the power law (an ablation)

    @property
    def gaussian(self) -> bool:
        return self.alpha == 2

    def phi(self, z: Tensor) -> Tensor:
        """Phi_alpha(z) itself, as the official code computes it (the reference)."""
        if self.gaussian:
            return torch.exp(-z.square())
        return torch.exp(-self.exponent * z) if self.laplace else (1 + z).pow(-self.exponent)

    def log_phi(self, dist: Tensor) -> Tensor:
        z = dist / self.kappa
        if self.gaussian:
            return -z.square()
        return -self.exponent * (z if self.laplace else torch.log1p(z))

    def dlog_phi(self, dist: Tensor) -> Tensor:
        """d log Phi(dist / kappa) / d dist."""
        if self.gaussian:
            return -2 * dist / self.kappa**2
        if self.laplace:
            return torch.full_like(dist, -self.exponent / self.kappa)
        return -self.exponent / (self.kappa + dist)

    def distance(self, s: Tensor) -> Tensor:
        """The exact distance: s only brought back into its domain, where rounding took it
        out (d^2 < 0, |cos| > 1), as the official code clamps the cosine."""
        if self.spherical:
            return torch.acos(s.clamp(-1, 1))
        return s.clamp_min(0).sqrt()

    def clamped_distance(self, s: Tensor) -> Tensor:
        """The distance with s clamped away from the singular points: its gradient is finite
        everywhere (0 where the clamp acts), its value off by up to 1e-6 (Euclidean) or 4.5e-4
        (sphere) there."""
        if self.spherical:
            return torch.acos(s.clamp(-1 + COS_MARGIN, 1 - COS_MARGIN))
        return s.clamp_min(D2_FLOOR).sqrt()

    def distance_clamped_grad(self, s: Tensor) -> Tensor:
        """For paths differentiated by autograd (FlexAttention's score_mod): the exact
        distance forward, the clamped distance's gradient backward (a straight-through sum, so
        no custom function has to be traced)."""
        clamped = self.clamped_distance(s)
        return clamped + (self.distance(s) - clamped).detach()

    def ddistance(self, s: Tensor, dist: Tensor) -> Tensor:
        """d dist / d s, 0 where ``distance`` clamps (as autograd through the clamp gives)."""
        if self.spherical:
            inside = s.abs() < 1 - COS_MARGIN
            return torch.where(inside, -torch.sin(dist).reciprocal(), 0.0)
        return torch.where(s > D2_FLOOR, 0.5 / dist, 0.0)


def geometry(
    heads: int,
    head_dim: int,
    alpha: float,
    kappa: float | str,
    spherical: bool,
    tied: bool,
    laplace: bool = False,
) -> Geometry:
    """The constants of one kernel from its options (options.py holds the rules)."""
    d_m = intrinsic_dim(head_dim, heads, spherical)
    scale = distance_scale(kappa, alpha, head_dim, heads, spherical)
    return Geometry(float(alpha), d_m + float(alpha), scale, spherical, tied, laplace)


def allowed_keys(
    key_padding_mask: Tensor | None, causal: bool, zero_diagonal: bool, t: int, device
) -> Tensor | None:
    """(B|1, 1, T, T) bool, True where query i weighs key j; None when every key may."""
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    i = torch.arange(t, device=device)
    if causal:
        tri = (i[None, :] <= i[:, None])[None, None]
        mask = tri if mask is None else mask & tri
    if zero_diagonal:
        off = (i[None, :] != i[:, None])[None, None]
        mask = off if mask is None else mask & off
    return mask


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def reference_weights(
    q: Tensor,
    k: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
) -> Tensor:
    """A (B, H, T, T) as the official code computes it: distances, Phi, masked entries set
    to 0, F.normalize(p=1). The distances are taken directly (cdist without its matrix-product
    shortcut, and exactly 0 on a tied diagonal), so that in float64 this is the oracle."""
    t = q.shape[-2]
    if geo.spherical:
        cos = q @ k.transpose(-2, -1)
        cos = cos.masked_fill(cos >= 1, 1.0).masked_fill(cos <= -1, -1.0)  # as att_spfns.py
        dist = torch.acos(cos)
    else:
        dist = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist")
    if geo.tied:
        dist = dist.masked_fill(torch.eye(t, dtype=torch.bool, device=q.device), 0.0)
    c = geo.phi(dist / geo.kappa)
    mask = allowed_keys(key_padding_mask, causal, zero_diagonal, t, q.device)
    if mask is not None:
        c = c.masked_fill(~mask, 0.0)
    return F.normalize(c, p=1, dim=-1)


def gaussian_sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
    dropout: float = 0.0,
) -> Tensor:
    """alpha = 2, Euclidean: SDPA on q' = [q, -1/2], k' = [k, |k|^2], scale 2 / kappa^2."""
    if geo.spherical or not geo.gaussian:
        raise ValueError("the SDPA path is exact only for alpha = 2 in Euclidean space")
    d = q.shape[-1]
    width = -(-(d + 1) // 8) * 8
    kk = k.square().sum(-1, keepdim=True)
    q_ = F.pad(torch.cat([q, q.new_full((*q.shape[:-1], 1), -0.5)], dim=-1), (0, width - d - 1))
    k_ = F.pad(torch.cat([k, kk], dim=-1), (0, width - d - 1))
    v_ = F.pad(v, (0, width - v.shape[-1]))
    mask = allowed_keys(key_padding_mask, False, zero_diagonal, q.shape[-2], q.device)
    if causal and mask is not None:
        mask = mask & allowed_keys(None, True, False, q.shape[-2], q.device)
    out = F.scaled_dot_product_attention(
        q_,
        k_,
        v_,
        attn_mask=mask,
        dropout_p=dropout,
        is_causal=causal and mask is None,
        scale=2 / geo.kappa**2,
    )
    return out[..., : v.shape[-1]]


_COMPILED_FLEX: Callable[..., Tensor] | None = None


@functools.lru_cache(maxsize=16)
def _causal_blocks(t: int, s: int, device: str):
    """The causal BlockMask of a (t, s) score matrix, built once per shape and device."""
    return create_block_mask(lambda b, h, i, j: j <= i, None, None, t, s, device=device)


def flex_path(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
    compiled: bool = True,
) -> Tensor:
    """FlexAttention with log Phi as ``score_mod``: fused, O(T) memory (CUDA).

    The score FlexAttention hands to ``score_mod`` is q'.k' with scale 1: the cosine on the
    sphere, and d^2 in Euclidean space through the augmented q' = [-2q, 1, |q|^2] and
    k' = [k, |k|^2, 1], so gradients reach |q|^2 and |k|^2 without captured buffers.
    ``compiled=False`` runs FlexAttention eagerly (a forward check on a CPU).
    """
    global _COMPILED_FLEX
    if flex_attention is None:
        raise RuntimeError("FlexAttention needs torch >= 2.5")
    if geo.spherical:  # distinct tensors even when tied: FlexAttention's graph guards aliasing
        q_, k_ = q, k.clone() if k is q else k
    else:
        qq, kk = q.square().sum(-1, keepdim=True), k.square().sum(-1, keepdim=True)
        q_ = torch.cat([-2 * q, torch.ones_like(qq), qq], dim=-1)
        k_ = torch.cat([k, kk, torch.ones_like(kk)], dim=-1)

    def score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        dist = geo.distance_clamped_grad(score)
        if geo.tied:
            dist = torch.where(i == j, torch.zeros_like(dist), dist)
        log_c = geo.log_phi(dist)
        keep = None if key_padding_mask is None else key_padding_mask[b, j]
        if zero_diagonal:
            keep = i != j if keep is None else keep & (i != j)
        return log_c if keep is None else torch.where(keep, log_c, -math.inf)

    # Padding and the diagonal are masked in score_mod (a row left with no key gives 0), so
    # the only block mask is the causal one, shared by every batch: O(T^2 / 128^2) blocks.
    block_mask = _causal_blocks(q.shape[-2], k.shape[-2], str(q.device)) if causal else None
    run = flex_attention
    if compiled:
        if _COMPILED_FLEX is None:
            _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
        run = _COMPILED_FLEX
    return run(q_, k_, v, score_mod=score_mod, block_mask=block_mask, scale=1.0)


def _block_scores(
    q: Tensor,
    k: Tensor,
    qq: Tensor | None,
    kk: Tensor | None,
    key_padding_mask: Tensor | None,
    keys: slice,
    geo: Geometry,
    causal: bool,
    zero_diagonal: bool,
    grad: bool,
) -> tuple[Tensor, Tensor | None]:
    """log C (B, H, T, C) of all queries against ``keys``, -inf where masked; with ``grad``
    also d log C / d s (s: d^2 or the cosine), 0 where clamped and on a tied diagonal.
    qq, kk: the squared norms (Euclidean) or None (sphere). Works in place where it can:
    on a CPU these elementwise passes, not the products, take the time."""
    k = k[..., keys, :]
    t, c = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1)
    if not geo.spherical:
        s = s.mul_(-2).add_(qq[..., :, None]).add_(kk[..., None, keys])
    dist = geo.distance(s)
    i = torch.arange(t, device=q.device)[:, None]
    j = torch.arange(keys.start, keys.start + c, device=q.device)[None, :]
    diag = i == j
    if geo.tied:
        dist = dist.masked_fill_(diag, 0.0)
    masked = None if key_padding_mask is None else ~key_padding_mask[:, None, None, keys]
    for off, use in ((j > i, causal), (diag, zero_diagonal)):
        if use:
            masked = off[None, None] if masked is None else masked | off
    scores = geo.log_phi(dist)
    if masked is not None:
        scores = scores.masked_fill_(masked, -math.inf)
    if not grad:
        return scores, None
    h = geo.dlog_phi(dist).mul_(geo.ddistance(s, dist))  # finite where masked: p = 0 there
    return scores, h.masked_fill_(diag, 0.0) if geo.tied else h


class ChunkedAttention(torch.autograd.Function):
    """softmax(log C) V over blocks of ``chunk`` keys: an online logsumexp forward and a
    backward that recomputes each block, so only q, k, v, the output and the row logsumexp
    are kept; memory is O(T * chunk) in either pass."""

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        geo: Geometry,
        causal: bool,
        zero_diagonal: bool,
        chunk: int,
    ) -> Tensor:
        b, h, t, _ = q.shape
        qq = None if geo.spherical else q.square().sum(-1)
        kk = None if geo.spherical else k.square().sum(-1)
        top = q.new_full((b, h, t), -math.inf)  # running row maximum of log C
        total = q.new_zeros(b, h, t)  # running sum of exp(log C - top)
        acc = q.new_zeros(b, h, t, v.shape[-1])  # running sum of exp(log C - top) v
        for j0 in range(0, k.shape[-2], chunk):
            keys = slice(j0, j0 + chunk)
            scores, _ = _block_scores(
                q, k, qq, kk, key_padding_mask, keys, geo, causal, zero_diagonal, grad=False
            )
            new_top = torch.maximum(top, scores.amax(-1))
            base = torch.where(torch.isfinite(new_top), new_top, 0.0)  # 0 while a row has no key
            decay = torch.where(torch.isfinite(top), torch.exp(top - base), 0.0)  # <= 1
            p = scores.sub_(base[..., None]).exp_()
            total = total * decay + p.sum(-1)
            acc = acc * decay[..., None] + p @ v[..., keys, :]
            top = new_top
        seen = total > 0
        base = torch.where(seen, top, 0.0)
        out = acc / torch.where(seen, total, 1.0)[..., None]
        lse = torch.where(seen, base + torch.log(torch.where(seen, total, 1.0)), -math.inf)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.key_padding_mask, ctx.geo = key_padding_mask, geo
        ctx.causal, ctx.zero_diagonal, ctx.chunk = causal, zero_diagonal, chunk
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        geo: Geometry = ctx.geo
        qq = None if geo.spherical else q.square().sum(-1)
        kk = None if geo.spherical else k.square().sum(-1)
        delta = (dout * out).sum(-1, keepdim=True)  # sum_j P_ij dP_ij, per row
        lse = torch.where(torch.isfinite(lse), lse, 0.0)[..., None]
        dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
        for j0 in range(0, k.shape[-2], ctx.chunk):
            keys = slice(j0, j0 + ctx.chunk)
            kc, vc = k[..., keys, :], v[..., keys, :]
            scores, h = _block_scores(
                q,
                k,
                qq,
                kk,
                ctx.key_padding_mask,
                keys,
                geo,
                ctx.causal,
                ctx.zero_diagonal,
                grad=True,
            )
            p = scores.sub_(lse).exp_()  # (B, H, T, C), 0 where masked
            dv[..., keys, :] = p.transpose(-2, -1) @ dout
            g = (dout @ vc.transpose(-2, -1)).sub_(delta).mul_(p).mul_(h)  # dL / ds
            if geo.spherical:  # s = q.k
                dq += g @ kc
                dk[..., keys, :] = g.transpose(-2, -1) @ q
            else:  # s = |q|^2 + |k|^2 - 2 q.k
                dq += 2 * (q * g.sum(-1, keepdim=True) - g @ kc)
                dk[..., keys, :] = 2 * (kc * g.sum(-2)[..., None] - g.transpose(-2, -1) @ q)
        return dq, dk, dv, None, None, None, None, None


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


class _FNAKernel(nn.Module):
    """The options, constants and projection the FNA kernels share."""

    def __init__(
        self,
        heads: int,
        head_dim: int,
        alpha: float = DEFAULT_ALPHA,
        kappa: float | str = "text",
        orthogonal: bool = False,
        tied: bool = False,
        spherical: bool = False,
        zero_diagonal: bool = False,
        laplace: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_options(
            alpha=alpha,
            kappa=kappa,
            orthogonal=orthogonal,
            tied=tied,
            spherical=spherical,
            zero_diagonal=zero_diagonal,
            laplace=laplace,
        )
        self.heads, self.head_dim = heads, head_dim
        self.alpha, self.kappa = alpha, kappa
        self.orthogonal, self.tied = orthogonal, tied
        self.spherical, self.zero_diagonal = spherical, zero_diagonal
        self.cross_attention = not tied  # k := q would never read another sequence's keys
        self.laplace = laplace
        self.dropout = dropout
        self.geo = geometry(heads, head_dim, alpha, kappa, spherical, tied, laplace)

    def extra_repr(self) -> str:
        g = self.geo
        return (
            f"alpha={self.alpha}, kappa={g.kappa:.4g} ({self.kappa}), d_M+alpha={g.exponent:g}, "
            f"orthogonal={self.orthogonal}, tied={self.tied}, spherical={self.spherical}, "
            f"zero_diagonal={self.zero_diagonal}, laplace={self.laplace}"
        )

    def make_projection(self, dim: int) -> Projection:
        return Projection(dim, self.heads, self.orthogonal, self.tied, self.spherical)

    def prepare(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The q, k the distance reads: k = q when tied, each unit-norm per head on the sphere."""
        if self.spherical:
            q = F.normalize(q, dim=-1)
            k = q if self.tied else F.normalize(k, dim=-1)
        return q, q if self.tied else k

    def weights(
        self, q: Tensor, k: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        """The attention matrix A (B, H, T, T), materialised (for tests and analyses), in
        fp32 (pdelab.precision: distances cancel in bf16)."""
        with full_precision(q.device.type):
            q, k = self.prepare(*fp32(q, k))
            return reference_weights(q, k, self.geo, key_padding_mask, causal, self.zero_diagonal)

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        a = self.weights(q, k, key_padding_mask, causal)
        return F.dropout(a, self.dropout, self.training) @ v


@ATTENTION_KERNELS.register("fna_reference")
class FNAReference(_FNAKernel):
    """FNA materialised as the official code computes it: the oracle of the fast paths."""

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        with full_precision(q.device.type):
            out = self.reference(*fp32(q, k, v), key_padding_mask, causal)
        return out.to(v.dtype)


@ATTENTION_KERNELS.register("fna")
class FNAAttention(_FNAKernel):
    """FNA on its fastest exact path: SDPA at alpha = 2 (Euclidean), FlexAttention on CUDA,
    else the chunked log-space softmax (``chunk_size`` keys per block). Attention dropout
    in training falls back to the reference, except on the SDPA path, which drops out itself."""

    PATHS = ("sdpa", "flex", "chunked", "reference")

    def __init__(
        self, heads: int, head_dim: int, chunk_size: int = DEFAULT_CHUNK, **options: Any
    ) -> None:
        check_options(chunk_size=chunk_size)
        super().__init__(heads, head_dim, **options)
        self.chunk_size = chunk_size

    def path(self, q: Tensor) -> str:
        if self.geo.gaussian and not self.spherical:
            return "sdpa"
        if self.training and self.dropout > 0:
            return "reference"
        return "flex" if q.is_cuda and flex_attention is not None else "chunked"

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        """In fp32 on every path, under bf16 autocast too (pdelab.precision: |q|^2 + |k|^2 -
        2 q.k cancels in bf16, and TF32 would lose the same bits); the output comes back in
        the dtype v came in."""
        with full_precision(q.device.type):
            out = self.attend(*fp32(q, k, v), key_padding_mask, causal, self.path(q))
        return out.to(v.dtype)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        path: str,
    ) -> Tensor:
        """The output on a named path (tests run every path on the same inputs)."""
        if path == "reference":
            return self.reference(q, k, v, key_padding_mask, causal)
        if key_padding_mask is not None and bool(key_padding_mask.all()):
            key_padding_mask = None  # no padding in this batch: no mask, fused kernels
        q, k = self.prepare(q, k)
        zd = self.zero_diagonal
        if path == "sdpa":
            p = self.dropout if self.training else 0.0
            return gaussian_sdpa(q, k, v, self.geo, key_padding_mask, causal, zd, p)
        if path == "flex":
            return flex_path(q, k, v, self.geo, key_padding_mask, causal, zd, q.is_cuda)
        if path == "chunked":
            return ChunkedAttention.apply(
                q, k, v, key_padding_mask, self.geo, causal, zd, self.chunk_size
            )
        raise ValueError(f"unknown path {path!r}; paths: {', '.join(self.PATHS)}")


@ATTENTION_KERNELS.register("fna_dp")
class DotProductAttention(SDPAKernel):
    """The paper's DP baseline: softmax(q.k / sqrt(d_H)) through SDPA, on FNA's projections
    (no biases; ``orthogonal``, ``tied``), so that DP and FNA differ in the weights alone. The
    official tied DP keeps each token's weight on itself."""

    def __init__(
        self,
        heads: int,
        head_dim: int,
        orthogonal: bool = False,
        tied: bool = False,
        dropout: float = 0.0,
    ) -> None:
        check_options(orthogonal=orthogonal, tied=tied)
        super().__init__(heads, head_dim, dropout)
        self.heads, self.orthogonal, self.tied = heads, orthogonal, tied
        self.cross_attention = not tied  # k := q would never read another sequence's keys

    def make_projection(self, dim: int) -> Projection:
        return Projection(dim, self.heads, self.orthogonal, self.tied)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        return super().forward(q, q if self.tied else k, v, key_padding_mask, causal)


__all__ = [
    "Projection",
    "Geometry",
    "geometry",
    "allowed_keys",
    "reference_weights",
    "gaussian_sdpa",
    "flex_path",
    "ChunkedAttention",
    "FNAReference",
    "FNAAttention",
    "DotProductAttention",
]
