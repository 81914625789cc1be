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
  2 / kappa^2, the head dimension zero-padded to a multiple of 8 for the fused kernels. Under
  bf16 autocast it runs in bf16, as the ``sdpa`` baseline does, |k|^2 carried as hi + lo bf16
  columns. On CUDA padding keys are pushed out through their columns (k = 0, a norm large
  enough that their weights are exactly 0), so no mask is built or read; on a CPU a
  right-padded causal batch runs ``is_causal`` without a (T, T) mask.
- ``fna`` otherwise: every C_ij > 0, so N_R(C) = softmax(log C) with log C_ij =
  -(d_M + alpha) log1p(dist / kappa) (or -(dist / kappa)^2 on the sphere at alpha = 2). On
  CUDA, FlexAttention computes it in ``score_mod`` (flex.py: d^2 the score of
  [-2q, 1, |q|^2] . [k, |k|^2, 1], the masks block-sparse, lengths padded to power-of-two
  buckets so compilations stay bounded); elsewhere (FlexAttention has no CPU backward)
  ``ChunkedAttention`` works on cache-sized (B*H, rows, chunk) tiles with in-place passes
  and a recomputing backward, memory O(T * chunk). It sums Phi itself (every log C <= 0),
  and a block of rows whose sum underflows (float32 at d_H = 64 once z >~ 3, where the
  reference, like the official code, returns unnormalised rows) is summed again as
  exp(log C - max log C), which never does.

Host syncs: the CUDA paths (``device_role`` "cuda", and "counted" while the cost plan counts
them) never read a tensor's value on the host in a forward, so a training step queues without
waiting for the GPU, and a compiled model traces the kernel whole (tests/
test_fna_throughput.py). The CPU paths may (no device to wait for): they drop an all-True
padding mask, find right padding, and the chunked path re-sums an underflowing block.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn.utils.parametrizations import orthogonal as orthogonal_map

from pdelab.models.attention import ATTENTION_KERNELS, SDPAKernel, runs_as_cuda
from pdelab.papers.fractional_attention.flex import FLEX_AVAILABLE, bucketed, flex_path
from pdelab.papers.fractional_attention.options import (
    DEFAULT_ALPHA,
    DEFAULT_CHUNK,
    check_options,
    distance_scale,
    intrinsic_dim,
)
from pdelab.training.precision import fp32, full_precision

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


def right_padded(key_padding_mask: Tensor) -> bool:
    """Whether every row's real keys come first (no real key after a padding one). Reads the
    mask on the host: CPU paths only."""
    return bool((key_padding_mask[:, 1:] <= key_padding_mask[:, :-1]).all())


def device_role(x: Tensor) -> str:
    """The device whose paths a kernel takes for ``x``: "cuda"; "counted", a CPU tensor that
    stands for a CUDA one while pdelab.plan.counting counts a CUDA step; else "cpu". Only on
    "cpu" may a path read a tensor's value on the host: elsewhere that waits for the device
    (a sync per call) and breaks a compiled graph."""
    if x.is_cuda:
        return "cuda"
    return "counted" if runs_as_cuda(x) else "cpu"


# exp(-PADDING_LOGIT) is 0 in float32 and float64 (both underflow past -745), with room to
# spare for the rounding of bf16 operands: how far below a row's top logit a padding key of
# the SDPA path is put (padding_norm)
PADDING_LOGIT = 2048.0


def padding_norm(q: Tensor, kk: Tensor, kappa: float) -> Tensor:
    """The squared norm that gives a key k = 0 weight exactly 0 on the SDPA path, a 0-dim
    tensor (no host read): its logit -P / kappa^2 lies PADDING_LOGIT below that of any real
    key j, (2 q.k_j - |k_j|^2) / kappa^2 >= -(|q|^2 + 2 |k_j|^2) / kappa^2 (as
    2 |q.k_j| <= |q|^2 + |k_j|^2), for P = PADDING_LOGIT kappa^2 + max |q|^2 + 2 max |k|^2."""
    qq = q.detach().square().sum(-1).amax()
    return PADDING_LOGIT * kappa**2 + qq + 2 * kk.detach().amax()


def gaussian_sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
    dropout: float = 0.0,
    dtype: torch.dtype | None = None,
    host_reads: bool = True,
) -> Tensor:
    """alpha = 2, Euclidean: SDPA on q' = [q, -1/2], k' = [k, |k|^2], scale 2 / kappa^2, in
    ``dtype`` (default the inputs'; FNAAttention passes bf16 under bf16 autocast, the
    precision the ``sdpa`` baseline runs in, so that their costs compare).

    In a lower ``dtype`` the logit 2 q.k_j - |k_j|^2 is a difference of two large terms
    once |k| >> kappa. The fused kernels multiply the rounded q', k' exactly and add in fp32,
    and q, k arrive in bf16 already under autocast, so only |k_j|^2 would lose bits: it is
    summed in the inputs' precision and carried as two columns, hi + lo, each rounded to
    ``dtype`` (k' = [k, hi, lo], q' = [q, -1/2, -1/2]): 2^-16 of |k_j|^2 rather than 2^-8. What
    is left is bf16's own rounding of the weights and the output (tests: within 2^-6 of the
    fp32 reference, at |k|^2 = 64 kappa^2 too). Widths are zero-padded to a multiple of 8.

    Padding without a mask, and without reading it (``host_reads`` False, the CUDA paths):
    each padding key becomes k = 0 with squared norm ``padding_norm``, so its weight is exactly
    0 in every row that has a real key, and SDPA runs its fused kernel, ``is_causal`` when
    causal. A query with no real key (a padding query of a left-padded causal batch, a batch
    row wholly padding) reads only padding keys: its (unused) output is not the reference's 0.
    With ``host_reads`` (a CPU), causal with right padding (every row's real keys first) runs
    ``is_causal`` with no mask: a real query reads only earlier, hence real, keys, exactly as
    with the mask, while a padding query also reads padding keys; other padded causal batches
    build the (T, T) mask. The zero diagonal builds it everywhere.
    """
    if geo.spherical or not geo.gaussian:
        raise ValueError("the SDPA path is exact only for alpha = 2 in Euclidean space")
    dtype = q.dtype if dtype is None else dtype
    d, t = q.shape[-1], q.shape[-2]
    kk = k.square().sum(-1, keepdim=True)
    if key_padding_mask is not None and not host_reads and not zero_diagonal:
        keep = key_padding_mask[:, None, :, None]  # padding keys pushed out (docstring)
        kk = torch.where(keep, kk, padding_norm(q, kk, geo.kappa))
        k, key_padding_mask = torch.where(keep, k, 0.0), None
    norms = [kk]
    if dtype != kk.dtype:  # hi + lo: |k|^2 to twice the mantissa of dtype
        hi = kk.to(dtype).to(kk.dtype)
        norms = [hi, kk - hi]
    extra = len(norms)
    width = -(-(d + extra) // 8) * 8
    q_ = torch.cat([q, q.new_full((*q.shape[:-1], extra), -0.5)], dim=-1)
    q_ = F.pad(q_, (0, width - d - extra)).to(dtype)
    k_ = F.pad(torch.cat([k, *norms], dim=-1), (0, width - d - extra)).to(dtype)
    v_ = F.pad(v, (0, width - v.shape[-1])).to(dtype)
    padded = key_padding_mask is not None
    if causal and padded and host_reads and not zero_diagonal and right_padded(key_padding_mask):
        key_padding_mask = None  # exact for every real query (docstring)
    mask = allowed_keys(key_padding_mask, False, zero_diagonal, t, q.device)
    if causal and mask is not None:
        mask = mask & allowed_keys(None, True, False, t, q.device)
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


# The chunked path works on (B*H, rows, keys) tiles of the score matrix, ``chunk`` keys by
# tile_rows(...) queries. Its scratch, TILE_BYTES a pass, stays in a core's L2 cache (2 MiB on
# the machines measured) beside the operands a tile streams in, through the dozen elementwise
# passes and products made over it, and each pass is large enough to cost more than its call.
TILE_BYTES = 2**20
ROW_STEP = 16  # query rows per tile: a multiple of this, at least this (or all of them)


def tile_rows(heads: int, t: int, chunk: int, itemsize: int, buffers: int = 1) -> int:
    """Query rows per tile of the chunked path, for ``heads`` = B * H and ``buffers`` scratch
    tiles (the forward needs 1, the backward 2): TILE_BYTES over ``buffers`` x ``heads`` x
    ``chunk`` scores, a multiple of ROW_STEP, at least ROW_STEP, at most t."""
    rows = TILE_BYTES // (buffers * heads * chunk * itemsize)
    return min(t, max(ROW_STEP, rows - rows % ROW_STEP))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op threads set to 1 inside: the chunked path makes thousands of small
    calls per step, and each would fork and join a thread team, so that on a shared machine
    one descheduled team member stalls every call (2 threads on a loaded 2-core machine ran
    it 6-100x slower than one). Compiled, the thread count is the process's: not traced."""
    if torch.compiler.is_compiling():
        yield
        return
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _distance_(s: Tensor, geo: Geometry) -> Tensor:
    """s (d^2 or the cosine) -> the exact distance, in place (as Geometry.distance)."""
    return s.clamp_(-1, 1).acos_() if geo.spherical else s.clamp_min_(0).sqrt_()


def _log_phi_(dist: Tensor, geo: Geometry, one: Tensor, shift: Tensor | None = None) -> Tensor:
    """dist -> log Phi(dist / kappa) (+ shift, a column), in place (as Geometry.log_phi). The
    power law takes log(1 + z) with 1 + z rounded as the official (1 + z)^-(d_M + alpha)
    rounds it; log1p would cost three times as much on a CPU."""
    if geo.gaussian:
        x, scale = dist.square_(), -1 / geo.kappa**2
    elif geo.laplace:
        x, scale = dist, -geo.exponent / geo.kappa
    else:
        x = torch.add(one, dist, alpha=1 / geo.kappa, out=dist).log_()
        scale = -geo.exponent
    return x.mul_(scale) if shift is None else torch.add(shift, x, alpha=scale, out=x)


class _Tiling:
    """The operands of ChunkedAttention cut into (B*H, rows, keys) tiles, and what every tile
    shares: q' and k' with s = q'.k' (d^2 through [-2q, 1, |q|^2] . [k, |k|^2, 1], or the
    cosine), the padding mask per key block, scratch. Each tile is computed with in-place
    passes, and every view it reads is made once per call: on a CPU the elementwise work and
    the calls, not the products, take most of the time."""

    def __init__(
        self,
        q: Tensor,
        k: Tensor,
        key_padding_mask: Tensor | None,
        geo: Geometry,
        causal: bool,
        zero_diagonal: bool,
        rows: int,
        chunk: int,
    ) -> None:
        b, h, t, d = q.shape
        n, s = b * h, k.shape[-2]
        self.geo, self.causal, self.zero_diagonal = geo, causal, zero_diagonal
        self.heads, self.n, self.t, self.s, self.rows, self.chunk = h, n, t, s, rows, chunk
        self.q, self.k = q.reshape(n, t, d), k.reshape(n, s, d)
        if geo.spherical:
            qa, ka = self.q, self.k
        else:
            qq = self.q.square().sum(-1, keepdim=True)
            kk = self.k.square().sum(-1, keepdim=True)
            qa = torch.cat([-2 * self.q, torch.ones_like(qq), qq], -1)
            ka = torch.cat([self.k, kk, torch.ones_like(kk)], -1)
        self.q_aug, self.k_aug = qa, ka
        self.starts = range(0, t, rows)
        self.key_starts = range(0, s, chunk)
        self.padding = (
            [None] * len(self.key_starts)
            if key_padding_mask is None
            else [~m[:, None, None, :] for m in key_padding_mask.split(chunk, 1)]
        )
        self.masked = key_padding_mask is not None or causal or zero_diagonal
        self.one = q.new_ones(())

    def keys_for(self, i: int, r: int) -> range:
        """Key blocks that query block i, of r rows, may read: under ``causal``, up to key
        i * rows + r - 1."""
        end = min(self.s, i * self.rows + r) if self.causal else self.s
        return range(-(-end // self.chunk))

    def tied_(self, s: Tensor, i: int, j: int) -> Tensor:
        """s with a tied diagonal's distance exactly 0 (d^2 = 0, or cosine 1), in place."""
        (r, c), i0, j0 = s.shape[-2:], i * self.rows, j * self.chunk
        if self.geo.tied and i0 < j0 + c and j0 < i0 + r:
            s.diagonal(i0 - j0, -2, -1).fill_(1.0 if self.geo.spherical else 0.0)
        return s

    def mask_(self, x: Tensor, i: int, j: int, value: float) -> Tensor:
        """Set the tile's padding keys, later keys (causal) and diagonal (zero_diagonal) to
        ``value``, in place."""
        if not self.masked:
            return x
        (r, c), i0, j0 = x.shape[-2:], i * self.rows, j * self.chunk
        if self.padding[j] is not None:
            x.view(-1, self.heads, r, c).masked_fill_(self.padding[j], value)
        if self.causal and j0 + c > i0 + 1:  # the tile reaches past its diagonal
            if value == 0:
                x.tril_(i0 - j0)
            else:
                later = torch.ones(r, c, dtype=torch.bool, device=x.device).triu_(i0 - j0 + 1)
                x.masked_fill_(later, value)
        if self.zero_diagonal and i0 < j0 + c and j0 < i0 + r:
            x.diagonal(i0 - j0, -2, -1).fill_(value)
        return x

    def forward(self, v: Tensor, shifted: bool) -> tuple[Tensor, Tensor]:
        """(out, lse), (B*H, T, dv) and (B*H, T, 1): per block of queries, sum_j C_ij and
        sum_j C_ij v_j over its tiles; see ChunkedAttention for ``shifted``."""
        n, t, rows, chunk, geo, one = self.n, self.t, self.rows, self.chunk, self.geo, self.one
        q_blocks = self.q_aug.split(rows, 1)
        k_blocks = self.k_aug.transpose(-2, -1).split(chunk, -1)
        values = v.reshape(n, self.s, -1).split(chunk, 1)
        out = v.new_empty(n, t, v.shape[-1])
        lse = v.new_empty(n, t, 1)
        tiny = math.sqrt(torch.finfo(v.dtype).tiny)
        buffer = v.new_empty(n * min(rows, t) * min(chunk, self.s))
        views: dict[tuple[int, int], Tensor] = {}

        def distances(i: int, j: int) -> Tensor:
            """The distances of tile (i, j), in the scratch tile."""
            r, c = q_blocks[i].shape[1], k_blocks[j].shape[-1]
            x = views.get((r, c))
            if x is None:
                x = views[(r, c)] = buffer[: n * r * c].view(n, r, c)
            return _distance_(self.tied_(torch.bmm(q_blocks[i], k_blocks[j], out=x), i, j), geo)

        def weights(i: int, j: int, base: Tensor | None = None) -> Tensor:
            """exp(log C - base) of tile (i, j), 0 where masked; Phi itself without base."""
            shift = None if base is None else base.neg()
            return self.mask_(_log_phi_(distances(i, j), geo, one, shift).exp_(), i, j, 0.0)

        def log_weights(i: int, j: int) -> Tensor:
            """log C of tile (i, j), -inf where masked."""
            return self.mask_(_log_phi_(distances(i, j), geo, one), i, j, -math.inf)

        for i, (o, m) in enumerate(zip(out.split(rows, 1), lse.split(rows, 1), strict=True)):
            keys = self.keys_for(i, o.shape[1])
            totals = v.new_zeros(n, o.shape[1], len(keys))  # sum_j C_ij, per key block
            acc, base = torch.zeros_like(o), None
            for j in keys:
                x = weights(i, j)
                torch.sum(x, -1, keepdim=True, out=totals[..., j : j + 1])
                acc.baddbmm_(x, values[j])
            total = totals.sum(-1, keepdim=True)
            if shifted or bool((total < tiny).any()):  # Phi underflowed: exp(log C - max)
                top = torch.stack([log_weights(i, j).amax(-1) for j in keys]).amax(0)
                base = torch.where(torch.isfinite(top), top, 0.0)[..., None]  # 0: no key
                totals.zero_(), acc.zero_()
                for j in keys:
                    x = weights(i, j, base)
                    torch.sum(x, -1, keepdim=True, out=totals[..., j : j + 1])
                    acc.baddbmm_(x, values[j])
                total = totals.sum(-1, keepdim=True)
            seen = total > 0
            torch.div(acc, torch.where(seen, total, 1.0), out=o)
            torch.log(total, out=m)  # -inf where a row has no key
            if base is not None:
                m.add_(base)
        return out, lse

    def weights_and_slope_(
        self, s: Tensor, p: Tensor, i: int, j: int, neg_lse: Tensor
    ) -> tuple[Tensor, Tensor, float]:
        """Tile (i, j) from its s: P = exp(log C - lse) into ``p``, 0 where masked, and D in
        place of s, with d log C / d s = c / D, D = inf where the gradient is clamped (as
        Geometry.ddistance: d^2 <= D2_FLOOR, |cos| >= 1 - COS_MARGIN) or on a tied diagonal.
        Returns (P, D, c)."""
        geo, e, kappa = self.geo, self.geo.exponent, self.geo.kappa
        self.tied_(s, i, j)
        if geo.spherical:  # d dist / d s = -1 / sin(dist)
            clamped = s.abs() >= 1 - COS_MARGIN
            torch.acos(s.clamp_(-1, 1), out=p)
            torch.sin(p, out=s)
            if geo.gaussian:  # d log Phi / d dist = -2 dist / kappa^2
                c = 2 / kappa**2
                s.div_(p)
            elif geo.laplace:  # -e / kappa
                c = e / kappa
            else:  # -e / (kappa + dist)
                c = e / kappa
                s.addcmul_(s, p, value=1 / kappa)
            s.masked_fill_(clamped, math.inf)
            _log_phi_(p, geo, self.one, neg_lse)
        elif geo.gaussian:  # d log Phi / d s = -1 / kappa^2
            c = -1 / kappa**2
            torch.add(neg_lse, s.clamp_min_(0), alpha=c, out=p)
            F.threshold_(s, D2_FLOOR, math.inf)
            s.masked_fill_(torch.isfinite(s), 1.0)
        else:  # d dist / d s = 1 / (2 dist), 0 below D2_FLOOR, where dist <= floor
            c, floor = -0.5 * e / kappa, math.sqrt(D2_FLOOR)
            s.clamp_min_(0).sqrt_()
            if geo.laplace:  # d log Phi / d s = c / dist
                torch.add(neg_lse, s, alpha=-e / kappa, out=p)
                F.threshold_(s, floor, math.inf)
            else:  # -e / (2 dist (kappa + dist)) = c / (dist (1 + dist / kappa))
                torch.add(self.one, s, alpha=1 / kappa, out=p)
                F.threshold_(s.mul_(p), floor * (1 + floor / kappa), math.inf)
                torch.add(neg_lse, p.log_(), alpha=-e, out=p)
        return self.mask_(p.exp_(), i, j, 0.0), s, c

    def backward(
        self, v: Tensor, out: Tensor, lse: Tensor, dout: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(dq, dk, dv) as (B*H, T|S, d) from (B*H, ...) out, lse and dout, tile by tile in
        FlashAttention's order: key blocks outside, so dk and dv accumulate in place.

        Two scratch tiles: s becomes D (weights_and_slope_) beside P; dv takes P, which then
        becomes P / D; dP - delta ([dout, -delta] . [v, 1], one product) replaces D and, times
        P / D, becomes dL/ds (over c), which dk and dq take through the first columns of q'
        (a multiple of q) and of k' (k itself)."""
        n, t, s, rows, chunk, d = self.n, self.t, self.s, self.rows, self.chunk, self.q.shape[-1]
        v = v.reshape(n, s, -1)
        delta = (dout * out).sum(-1, keepdim=True)  # sum_j P_ij dP_ij
        dout_a = torch.cat([dout, delta.neg_()], -1).split(rows, 1)
        dout_blocks = [x[..., : v.shape[-1]] for x in dout_a]
        v_t = torch.cat([v, torch.ones_like(v[..., :1])], -1).transpose(-2, -1).split(chunk, -1)
        q_blocks = self.q_aug.split(rows, 1)
        q_heads = [x[..., :d] for x in q_blocks]  # q, or -2 q
        k_t, k_blocks = self.k_aug.transpose(-2, -1).split(chunk, -1), self.k.split(chunk, 1)
        neg_lse = torch.where(torch.isfinite(lse), lse, 0.0).neg_().split(rows, 1)
        blocks = len(q_blocks)
        dq_blocks = v.new_zeros(blocks, n, rows, d)  # contiguous accumulators
        dq = [dq_blocks[i, :, : x.shape[1]] for i, x in enumerate(q_blocks)]
        dk, dv = v.new_empty(n, s, d), torch.empty_like(v)
        # The Euclidean s = |q|^2 + |k|^2 - 2 q.k also needs sum_j dL/ds_ij and sum_i dL/ds_ij
        # (sums, one column per tile, cost less than products d + 1 columns wide)
        euclidean = not self.geo.spherical
        q_sums = v.new_zeros(n, t, len(self.key_starts)).split(rows, 1)
        k_sums = v.new_zeros(n, s, blocks)
        buffer = v.new_empty(2 * n * min(rows, t) * min(chunk, s))
        views: dict[tuple[int, int], tuple[Tensor, ...]] = {}
        c = 0.0
        for j, (j0, k_j) in enumerate(zip(self.key_starts, k_blocks, strict=True)):
            cols = k_j.shape[1]
            dk_j, dv_j = torch.zeros_like(k_j), v.new_zeros(n, cols, v.shape[-1])
            k_sum_j = k_sums[:, j0 : j0 + cols]
            for i in range(j0 // rows if self.causal else 0, blocks):  # queries >= j0
                r = q_blocks[i].shape[1]
                tile = views.get((r, cols))
                if tile is None:
                    x, y = buffer[: 2 * n * r * cols].view(2, n, r, cols)
                    tile = views[(r, cols)] = (x, y, x.transpose(-2, -1), y.transpose(-2, -1))
                x, y, x_t, y_t = tile
                torch.bmm(q_blocks[i], k_t[j], out=x)
                _, _, c = self.weights_and_slope_(x, y, i, j, neg_lse[i])
                dv_j.baddbmm_(y_t, dout_blocks[i])
                y.div_(x)
                g = torch.bmm(dout_a[i], v_t[j], out=x).mul_(y)  # dL/ds, over c
                dk_j.baddbmm_(x_t, q_heads[i])
                dq[i].baddbmm_(g, k_j)
                if euclidean:
                    torch.sum(g, -1, keepdim=True, out=q_sums[i][..., j : j + 1])
                    torch.sum(g, -2, out=k_sum_j[..., i])
            dk[:, j0 : j0 + cols], dv[:, j0 : j0 + cols] = dk_j, dv_j
        dq = dq_blocks.transpose(0, 1).reshape(n, -1, d)[:, :t]
        if euclidean:  # q' = [-2q, 1, |q|^2]; d s / d q = 2 (q - k), d s / d k = 2 (k - q)
            q_sum = torch.cat(q_sums, 1).sum(-1, keepdim=True)
            k_sum = k_sums.sum(-1, keepdim=True)
            return (2 * c) * (self.q * q_sum - dq), c * (2 * self.k * k_sum + dk), dv
        return c * dq, c * dk, dv  # s = q.k, q' = q


class ChunkedAttention(torch.autograd.Function):
    """softmax(log C) V over (B*H, rows, ``chunk``) tiles (_Tiling), memory O(T * chunk) in
    either pass: a forward that sums the weights and the weighted values per block of
    queries, and a backward that recomputes each tile, so only q, k, v, the output and the
    row logsumexp are kept. Both run on one intra-op thread (``one_thread``).

    Every log C <= 0, so the forward sums Phi itself, as the official code does, with no
    running maximum. A block holding a row whose sum falls below sqrt(tiny), where Phi
    underflows (far keys: d_H = 64 and z >~ 3 in float32), is summed again as
    exp(log C - max_j log C), which cannot underflow; the output is exact either way (tests
    force that second sum with ``shifted``). ``rows`` is the number of queries per tile in
    either pass (default ``tile_rows``: more in the forward, which has one scratch tile, than
    in the backward, which has two)."""

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
        rows: int | None = None,
        shifted: bool = False,
    ) -> Tensor:
        b, h, t, _ = q.shape
        tile = rows or tile_rows(b * h, t, chunk, q.element_size())
        with one_thread():
            tiles = _Tiling(q, k, key_padding_mask, geo, causal, zero_diagonal, tile, chunk)
            out, lse = tiles.forward(v, shifted)
        out = out.view(b, h, t, -1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.key_padding_mask, ctx.geo, ctx.rows = key_padding_mask, geo, rows
        ctx.causal, ctx.zero_diagonal, ctx.chunk = causal, zero_diagonal, chunk
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        b, h, t, d = q.shape
        n, chunk = b * h, ctx.chunk
        rows = ctx.rows or tile_rows(n, t, chunk, q.element_size(), buffers=2)
        with one_thread():
            tiles = _Tiling(
                q, k, ctx.key_padding_mask, ctx.geo, ctx.causal, ctx.zero_diagonal, rows, chunk
            )
            dq, dk, dv = tiles.backward(v, out.view(n, t, -1), lse, dout.reshape(n, t, -1))
        shape = (b, h, -1, d)
        return dq.view(shape), dk.view(shape), dv.view(b, h, k.shape[-2], -1), *[None] * 7


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast gives matrix products on ``device_type``, or None when it is off."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


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
        fp32 (pdelab.training.precision: distances cancel in bf16)."""
        with full_precision(q.device.type):
            q, k = self.prepare(*fp32(q, k))
            return reference_weights(q, k, self.geo, key_padding_mask, causal, self.zero_diagonal)

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        a = self.weights(q, k, key_padding_mask, causal)
        return F.dropout(a, self.dropout, self.training) @ v


def counted_flex_path(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    geo: Geometry,
    key_padding_mask: Tensor | None,
    causal: bool,
    zero_diagonal: bool,
) -> Tensor:
    """FlexAttention as the cost plan counts it on fake CPU tensors (pdelab.plan.counting, which
    cannot run the CUDA kernel): its inputs padded as ``flex_path`` pads them (a bucket of at
    least 128 positions, widths of at least 16), through the chunked kernel, which keeps the
    same O(T) tensors for the backward. Memory as FlexAttention holds it; FLOPs of the whole
    bucket, an upper bound where FlexAttention skips blocks of padding."""
    q_, k_, v_, keep = bucketed(q, k, v, key_padding_mask)
    out = ChunkedAttention.apply(q_, k_, v_, keep, geo, causal, zero_diagonal, DEFAULT_CHUNK)
    return out[:, :, : q.shape[-2], : v.shape[-1]]


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
        if device_role(q) != "cpu" and FLEX_AVAILABLE:
            return "flex"
        # a CPU under torch.compile (pdelab.plan.compile_check): the reference traces whole,
        # where the chunked path branches on its values; flex is checked on a GPU
        return "reference" if torch.compiler.is_compiling() else "chunked"

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        """In fp32 on every path, under bf16 autocast too (pdelab.training.precision: |q|^2 + |k|^2
        - 2 q.k cancels in bf16, and TF32 would lose the same bits), except LA, the SDPA path,
        which runs in the autocast dtype, as the ``sdpa`` baseline does (gaussian_sdpa keeps
        |k|^2 to twice its mantissa); the output comes back in the dtype v came in."""
        path = self.path(q)
        low = autocast_dtype(q.device.type) if path == "sdpa" else None
        with full_precision(q.device.type):
            out = self.attend(*fp32(q, k, v), key_padding_mask, causal, path, low)
        return out.to(v.dtype)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        path: str,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """The output on a named path (tests run every path on the same inputs); ``dtype``:
        the precision LA's SDPA runs in (default the inputs')."""
        if path == "reference":
            return self.reference(q, k, v, key_padding_mask, causal)
        role = device_role(q)
        # elsewhere (or compiled) no value is read on the host (module docstring)
        host_reads = role == "cpu" and not torch.compiler.is_compiling()
        if host_reads and key_padding_mask is not None and bool(key_padding_mask.all()):
            key_padding_mask = None  # no padding in this batch: no mask, fused kernels
        q, k = self.prepare(q, k)
        zd = self.zero_diagonal
        if path == "sdpa":
            p = self.dropout if self.training else 0.0
            return gaussian_sdpa(
                q, k, v, self.geo, key_padding_mask, causal, zd, p, dtype, host_reads=host_reads
            )
        if path == "flex" and role == "counted":
            return counted_flex_path(q, k, v, self.geo, key_padding_mask, causal, zd)
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


def fna_reference(module: nn.Module) -> None:
    """FNA on its materialised reference (what a stacked step runs)."""
    if type(module) is FNAAttention:
        module.__class__ = FNAReference


# Several seeds in one process (pdelab.training.stacked_seeds.discover_families): how this
# paper's modules stack
STACKED_FAMILY = {
    "name": "fractional attention",
    "classes": (FNAAttention, FNAReference, DotProductAttention, Projection),
    "how": (
        "FNA's chunked path is an autograd.Function without a vmap rule and flex is compiled "
        "for CUDA: the stacked forward runs FNA's reference on every device (the fast paths' "
        "oracle, T x T, papers/fractional_attention/tests/test_fna.py); fna_dp is SDPA"
    ),
    "prepare": fna_reference,
}

__all__ = [
    "Projection",
    "Geometry",
    "geometry",
    "allowed_keys",
    "reference_weights",
    "right_padded",
    "device_role",
    "padding_norm",
    "gaussian_sdpa",
    "autocast_dtype",
    "flex_path",
    "ChunkedAttention",
    "tile_rows",
    "one_thread",
    "FNAReference",
    "FNAAttention",
    "DotProductAttention",
]
