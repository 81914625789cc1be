"""PDE-evolved attention (Continuous-Time Attention, arXiv 2505.20666, Sections 3.2-3.3, App. E).

The paper starts from A(0) = softmax(QK^T / sqrt(d)) and evolves it for N_t explicit Euler
steps along the token (key) axis, A(n+1) = A(n) + dt * D(A(n)), then returns A(N_t) V:

    diffusion            D(A) = alpha * lap(A)
    wave                 vel += dt * c^2 * lap(A);  A += dt * vel      (App. E eqs. 25-26)
    reaction_diffusion   D(A) = alpha * lap(A) + beta * A * (1 - A)
    advection_diffusion  D(A) = alpha * lap(A) + beta * grad(A)        (central difference)

Discretisation choices (the paper leaves them open). Token spacing ds = 1 and dt = 1 by default,
which is what the authors' released code does implicitly. ``lap`` is the graph Laplacian of the
path joining consecutive *real* keys: replicate (Neumann, zero-flux) at the sequence ends, and no
flux into padding, so padded keys keep zero weight and rows keep their mass. ``grad`` is the
central difference with the same replicate ghosts, (a[j+1] - a[j-1]) / 2 in the interior.

Fast path. For the linear PDEs one step is A <- A S^T, with S the (T x T) step operator acting
on a column indexed by keys, so A(N) V = A(0) ((S^T)^N V): ordinary attention over transformed
values. ``transform_values`` applies S^T with O(T d) stencils (S^T = S for diffusion and wave;
advection needs the adjoint of ``grad``), and the attention itself is
``scaled_dot_product_attention``, so memory stays O(T d) instead of O(T^2).

Causal form. A two-sided Laplacian moves row t's mass from key t onto key t+1, so output t reads
v[t+1]: the paper's evolution on top of a causal A(0) leaks the future (``causal_form=
"two_sided"`` reproduces that, for the audit). The leak-free form (``"restricted"``, default)
evolves row t on the keys <= t only, with a Neumann boundary at t. Its per-row boundary means
the values are no longer one shared transform, but only the N_t keys next to the boundary see
it; ``_causal_fast`` handles those with an explicit band and the rest with SDPA (see there).

Reaction-diffusion is nonlinear, so it is always materialized, in chunks of query rows (rows are
independent, so chunking is exact). In training each chunk is recomputed in the backward pass
(``torch.utils.checkpoint``) instead of keeping its N_t steps of (B, H, R, T) fp32 stencil
products alive: at most one chunk's evolution is resident at a time, for every layer together.

Dropout, when asked for, acts on A(0) in every path: each (query, key) entry of A(0) is kept with
probability 1 - p and scaled by 1 / (1 - p) (``F.dropout``'s rule), then the PDE evolves the
dropped matrix. The linear paths never form A: SDPA drops its own weights (fused on a GPU), and
the leak-free causal path draws the band's N_t entries per row itself (see ``_causal_fast``).
"Exact" for dropout means: given the same keep mask (``forward``'s ``dropout_keep``, a test
hook), every path equals the materialized reference to rounding, forward and backward. Masks
drawn by different paths come from different random streams (SDPA's kernel vs ``F.dropout``):
the same distribution, not the same sample. The recomputed chunks restore the RNG state, so
their backward sees the very mask their forward drew.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.transformer import RECOMPUTE_CONTEXT
from pdelab.papers.continuous_time_attention.options import (
    DEFAULT_STEPS,
    LINEAR_PDES,
    PDE_TYPES,
    TABLE_11,
    check_stability,
)

# --------------------------------------------------------------------------------------------
# Stencils along the last axis. w (..., T-1) weights the edge (j, j+1): 1 between two real
# keys, 0 into padding or across a causal boundary; None means every edge is present.
# --------------------------------------------------------------------------------------------


def _div(f: Tensor) -> Tensor:
    """(..., T-1) edge fluxes -> (..., T) node balance f[k] - f[k-1], zero flux at both ends."""
    return F.pad(f, (0, 1)) - F.pad(f, (1, 0))


def _flux(a: Tensor, w: Tensor | None) -> Tensor:
    f = a[..., 1:] - a[..., :-1]
    return f if w is None else f * w


def laplacian(a: Tensor, w: Tensor | None = None) -> Tensor:
    """Neumann graph Laplacian of the path along the last axis (symmetric, NSD, rows sum to 0)."""
    return _div(_flux(a, w))


def gradient(a: Tensor, w: Tensor | None = None) -> Tensor:
    """Central difference (a[j+1] - a[j-1]) / 2 with replicate ghosts at ends and padding."""
    f = _flux(a, w)
    return 0.5 * (F.pad(f, (0, 1)) + F.pad(f, (1, 0)))


def gradient_adjoint(b: Tensor, w: Tensor | None = None) -> Tensor:
    """The transpose of ``gradient`` (not its negative: the replicate ends break antisymmetry)."""
    g = b[..., :-1] + b[..., 1:]
    return -0.5 * _div(g if w is None else g * w)


def _per_head(x: Tensor, coef: Tensor) -> Tensor:
    """(H,) coefficient broadcast against x of shape (B, H, ...)."""
    return coef.view(1, -1, *([1] * (x.dim() - 2)))


def evolve(
    x: Tensor,
    w: Tensor | None,
    coef: dict[str, Tensor],
    pde: str,
    steps: int,
    dt: float,
    adjoint: bool = False,
) -> Tensor:
    """N_t explicit Euler steps of the PDE along the last axis of x (B, H, ..., T).

    With ``adjoint=False`` x holds attention rows (the paper's evolution); with ``adjoint=True``
    x holds value columns and the step is S^T, so that evolve(A) @ V == A @ evolve(V^T)^T.
    """
    if pde == "wave":
        c2 = _per_head(x, coef["c"]) ** 2
        vel = torch.zeros_like(x)  # the paper does not give V(0); at rest is the natural start
        for _ in range(steps):
            vel = vel + dt * c2 * laplacian(x, w)
            x = x + dt * vel
        return x
    alpha = _per_head(x, coef["alpha"])
    for _ in range(steps):
        update = alpha * laplacian(x, w)
        if pde == "advection_diffusion":
            beta = _per_head(x, coef["beta"])
            update = update + beta * (gradient_adjoint(x, w) if adjoint else gradient(x, w))
        elif pde == "reaction_diffusion":
            if adjoint:
                raise ValueError("reaction-diffusion is nonlinear and has no adjoint form")
            update = update + _per_head(x, coef["beta"]) * x * (1 - x)
        x = x + dt * update
    return x


def edge_weights(
    key_padding_mask: Tensor | None, t: int, rows: range | None, dtype: torch.dtype, device
) -> Tensor | None:
    """(B|1, 1, R|1, T-1) weights of the key edges: real-real only; with ``rows`` (causal,
    restricted form) query row r keeps only the edges (j, j+1) with j + 1 <= r."""
    w = None
    if key_padding_mask is not None:
        m = key_padding_mask
        w = (m[:, :-1] & m[:, 1:])[:, None, None, :]
    if rows is not None:
        r = torch.arange(rows.start, rows.stop, device=device)[:, None]
        j = torch.arange(t - 1, device=device)[None, :]
        cut = (j + 1 <= r)[None, None]
        w = cut if w is None else w & cut
    return None if w is None else w.to(dtype)


def transform_values(
    v: Tensor,
    key_padding_mask: Tensor | None,
    coef: dict[str, Tensor],
    pde: str,
    steps: int,
    dt: float,
) -> Tensor:
    """(S^T)^N V for v (B, H, T, D), computed with stencils: O(T D), never a T x T matrix."""
    w = edge_weights(key_padding_mask, v.shape[-2], None, v.dtype, v.device)
    return evolve(v.transpose(-1, -2), w, coef, pde, steps, dt, adjoint=True).transpose(-1, -2)


# --------------------------------------------------------------------------------------------
# Masks for A(0)
# --------------------------------------------------------------------------------------------


def longformer_pattern(t: int, window: int, n_global: int, device) -> Tensor:
    """(T, T) bool: sliding window |i - j| <= window // 2, plus n_global tokens that attend to
    and are attended by every position (Longformer, Beltagy et al. 2020)."""
    i = torch.arange(t, device=device)
    band = (i[:, None] - i[None, :]).abs() <= window // 2
    glob = i < n_global
    return band | glob[:, None] | glob[None, :]


def _score_mask(
    key_padding_mask: Tensor | None,
    causal: bool,
    pattern: Tensor | None,
    rows: range,
    t: int,
    device,
) -> Tensor | None:
    """(B|1, 1, R, T) bool, True where query row r may attend to key j in A(0)."""
    mask = None
    if key_padding_mask is not None:
        mask = key_padding_mask[:, None, None, :]
    if pattern is not None:
        p = pattern[rows.start : rows.stop][None, None]
        mask = p if mask is None else mask & p
    if causal:
        r = torch.arange(rows.start, rows.stop, device=device)[:, None]
        tri = (torch.arange(t, device=device)[None, :] <= r)[None, None]
        mask = tri if mask is None else mask & tri
    return mask


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    keep: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """``F.scaled_dot_product_attention``; given ``keep`` (bool, broadcast to (B, H, Tq, Tk)),
    its documented math with that dropout mask in place of a drawn one: the softmax weights
    zeroed where ``keep`` is False, the rest scaled by 1 / (1 - dropout_p). Materializes the
    weights: ``keep`` is the hook that lets a test give two paths the same mask."""
    if keep is None or dropout_p == 0.0:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = scores.softmax(dim=-1).masked_fill(~keep, 0.0)
    return weights @ v / (1 - dropout_p)


def _shift(x: Tensor, r: int) -> Tensor:
    """x[..., t - r, :] along dim 2 of (B, H, T, D), zeros where t < r."""
    return F.pad(x, (0, 0, r, 0))[:, :, : x.shape[2]]


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


class PDEAttention(nn.Module):
    """softmax(QK^T/sqrt d) evolved by a PDE along the key axis, then applied to V.

    Options: ``pde`` (diffusion | wave | reaction_diffusion | advection_diffusion), ``steps``
    (N_t), ``dt``, coefficients ``alpha`` / ``c`` / ``beta`` (default: Table 11; learnable, one
    per head), ``fast`` (SDPA over transformed values; False materializes A), ``chunk_size``
    (query rows per materialized chunk; None = all), ``causal_form`` (restricted | two_sided).
    """

    recompute = True  # materialized chunks are recomputed in the backward (see _materialized)

    def __init__(
        self,
        heads: int,
        head_dim: int,
        pde: str = "diffusion",
        steps: int = DEFAULT_STEPS,
        dt: float = 1.0,
        alpha: float | None = None,
        c: float | None = None,
        beta: float | None = None,
        fast: bool = True,
        chunk_size: int | None = 256,
        causal_form: str = "restricted",
        learnable: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_stability(
            pde=pde,
            steps=steps,
            dt=dt,
            alpha=alpha,
            c=c,
            beta=beta,
            chunk_size=chunk_size,
            causal_form=causal_form,
        )
        self.heads, self.pde, self.steps, self.dt = heads, pde, steps, float(dt)
        self.fast, self.chunk_size, self.causal_form = fast, chunk_size, causal_form
        self.dropout = dropout
        given = {"alpha": alpha, "c": c, "beta": beta}
        self.coef_names = tuple(TABLE_11[pde])
        for name in self.coef_names:
            init = TABLE_11[pde][name] if given[name] is None else float(given[name])
            value = torch.full((heads,), init)
            if learnable:
                setattr(self, name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)

    def extra_repr(self) -> str:
        return (
            f"pde={self.pde}, steps={self.steps}, dt={self.dt}, fast={self.fast}, "
            f"causal_form={self.causal_form}"
        )

    def coefficients(self, dtype: torch.dtype) -> dict[str, Tensor]:
        return {name: getattr(self, name).to(dtype) for name in self.coef_names}

    def pattern(self, t: int, device) -> Tensor | None:
        """Sparsity pattern of A(0) as a (T, T) bool; None = dense (overridden by Longformer)."""
        return None

    # -- materialized reference ----------------------------------------------------------

    def attention_weights(
        self,
        q: Tensor,
        k: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        rows: range | None = None,
        keep: Tensor | None = None,
    ) -> Tensor:
        """A(N_t) for the query rows ``rows`` (default all): (B, H, R, T), materialized.

        In training with dropout, A(0) is dropped by ``F.dropout``, or, given ``keep`` (bool,
        broadcast to (B, H, T, T), all query rows), zeroed where ``keep`` is False and scaled
        by 1 / (1 - p): the same rule with a mask the caller chose.
        """
        t = k.shape[-2]
        rows = range(q.shape[-2]) if rows is None else rows
        scores = q[:, :, rows.start : rows.stop] @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = _score_mask(key_padding_mask, causal, self.pattern(t, q.device), rows, t, q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        a = scores.softmax(dim=-1)
        if keep is not None and self.training and self.dropout > 0:
            a = a.masked_fill(~keep[..., rows.start : rows.stop, :], 0.0) / (1 - self.dropout)
        else:
            a = F.dropout(a, self.dropout, self.training)
        restricted = causal and self.causal_form == "restricted"
        w = edge_weights(key_padding_mask, t, rows if restricted else None, q.dtype, q.device)
        return evolve(a, w, self.coefficients(q.dtype), self.pde, self.steps, self.dt)

    def _rows_output(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        rows: range,
        keep: Tensor | None,
    ) -> Tensor:
        """A(N_t) V for the query rows ``rows``: (B, H, R, D)."""
        return self.attention_weights(q, k, key_padding_mask, causal, rows, keep) @ v

    def _materialized(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        keep: Tensor | None = None,
    ) -> Tensor:
        """A(N_t) V, ``chunk_size`` query rows at a time (rows evolve independently).

        With ``recompute`` (every kernel but the reference) and gradients on, each chunk runs
        under a non-reentrant ``checkpoint``: autograd keeps its inputs only and the backward
        evolves the chunk again, so what stays resident between forward and backward is
        O(T D), not the chunks' (B, H, R, T) steps. The recomputation restores the RNG state
        (``preserve_rng_state``), so its dropout mask is the forward's: the values and
        gradients are those of the plain chunked evolution with the same seed. Under a
        torch.func transform (stacked seeds: ``vmap(grad_and_value)``), which refuses the saved
        tensor hooks checkpoint works by, the chunks are kept as plain autograd keeps them.
        """
        t = q.shape[-2]
        chunk = self.chunk_size or t
        recompute = (
            self.recompute
            and torch.is_grad_enabled()
            and not torch._C._are_functorch_transforms_active()
        )
        # the cost plan's emulated CUDA autocast, re-entered by the recomputation as a
        # checkpointed block's is (pdelab.models.transformer.run_block); Dynamo cannot trace
        # ContextVar.get, and the plan's count runs eager
        context = None
        if recompute and not torch.compiler.is_compiling():
            context = RECOMPUTE_CONTEXT.get()
        options: dict[str, Any] = {"context_fn": context} if context else {}
        rows_output: Callable[..., Tensor] = self._rows_output
        if recompute:
            rows_output = partial(
                checkpoint,
                self._rows_output,
                use_reentrant=False,
                preserve_rng_state=True,
                **options,
            )
        out = [
            rows_output(q, k, v, key_padding_mask, causal, range(s, min(s + chunk, t)), keep)
            for s in range(0, t, chunk)
        ]
        return torch.cat(out, dim=-2)

    # -- fast paths ----------------------------------------------------------------------

    def _sdpa(
        self,
        q: Tensor,
        k: Tensor,
        w: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        dropout_p: float,
        keep: Tensor | None,
    ) -> Tensor:
        t = q.shape[-2]
        mask = _score_mask(
            key_padding_mask, False, self.pattern(t, q.device), range(t), t, q.device
        )
        if causal and mask is None:
            return attend(q, k, w, None, True, dropout_p, keep)
        if causal:
            mask = mask & torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return attend(q, k, w, mask, False, dropout_p, keep)

    def _causal_fast(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        dropout_p: float = 0.0,
        keep: Tensor | None = None,
    ) -> Tensor:
        """Leak-free causal evolution without materializing A, exact in exact arithmetic.

        Row t evolves on keys <= t with a Neumann boundary at t, so its transformed values
        W^(t) = (S_t^T)^N V differ from the shared W = (S^T)^N V only within N keys of the
        boundary: W^(t)_j = W_j for j <= t - N, and those W_j read v only up to j + N <= t.
        Hence out_t = [sum_{j <= t-N} e^{s_tj} W_j + sum_{r < N} e^{s_t,t-r} W^(t)_{t-r}] / Z_t:
        a shifted-causal SDPA over W plus an explicit band of N keys whose W^(t) come from
        evolving a window of 2N values. Merging needs SDPA's normaliser, which SDPA does not
        return, so a "sink" key with score m_t (the band's max score) and a one-hot value is
        appended: its output channel is p_t = e^{m_t} / (Z_main + e^{m_t}). Memory is O(T N D)
        (plus a (T, T) bool mask when there is padding or a sparsity pattern). Neither part
        ever reads a future value, so the result is causal by construction, not by cancellation.

        Dropout (``dropout_p`` > 0) keeps Z_t undropped and drops the numerator's terms, since
        the evolution is linear in the dropped A(0): out_t = [sum_j M_tj e^{s_tj} W^(t)_j] /
        ((1 - p) Z_t). The main sum is a second SDPA call with ``dropout_p``: SDPA drops its
        normalised weights, so its normaliser stays Z_main + e^{m_t} (the sink's channel, which
        it may drop, is not read from that call). p_t comes from the undropped call, and the
        band's N keys per row draw their own keep mask. ``keep`` (B|1, H|1, T, T) replaces
        every drawn mask by its entries, for the tests.
        """
        b, h, t, d = q.shape
        n = self.steps
        scale = 1.0 / math.sqrt(d)
        coef = self.coefficients(q.dtype)
        pattern = self.pattern(t, q.device)
        key_ok = (
            key_padding_mask
            if key_padding_mask is not None
            else torch.ones(1, t, dtype=torch.bool, device=q.device)
        )

        # Band: keys t - r for r < N, their scores and row-restricted transformed values.
        ti = torch.arange(t, device=q.device)[:, None]
        src = ti - torch.arange(n, device=q.device)[None, :]  # (T, N) key index t - r
        band_ok = (src >= 0)[None] & key_ok[:, src.clamp(min=0)]  # (B|1, T, N)
        if pattern is not None:
            band_ok = band_ok & pattern[ti, src.clamp(min=0)][None]
        scores = torch.stack([(q * _shift(k, r)).sum(-1) for r in range(n)], dim=-1) * scale
        scores = scores.masked_fill(~band_ok[:, None], float("-inf"))  # (B, H, T, N)
        m = scores.detach().amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(scores - m)  # <= 1; exactly 0 where the key is not attended
        band_den = e.sum(dim=-1, keepdim=True)  # undropped: the normaliser is A(0)'s
        if dropout_p > 0:
            if keep is None:
                band_keep = torch.rand(b, h, t, n, device=q.device) >= dropout_p
            else:
                band_keep = keep.expand(b, h, t, t).gather(-1, src.clamp(min=0).expand(b, h, t, n))
            e = e.masked_fill(~band_keep, 0.0) / (1 - dropout_p)

        window = F.pad(v, (0, 0, 2 * n - 1, 0)).unfold(2, 2 * n, 1)  # (B, H, T, D, 2N)
        ok = F.pad(key_ok.to(q.dtype), (2 * n - 1, 0)).unfold(1, 2 * n, 1)  # (B|1, T, 2N)
        w_edges = (ok[..., 1:] * ok[..., :-1])[:, None, :, None, :]  # (B|1, 1, T, 1, 2N-1)
        w_t = evolve(window, w_edges, coef, self.pde, n, self.dt, adjoint=True)
        w_t = w_t[..., n:].flip(-1)  # (B, H, T, D, N): column r is key t - r, exact
        band_num = torch.einsum("bhtr,bhtdr->bhtd", e, w_t)

        # Main part: keys j <= t - N with the shared W, via SDPA plus a sink key.
        rows = t - n + 1  # queries t = N-1 .. T-1; the first N-1 rows have no main keys
        o = q.new_zeros(b, h, t, d)
        p = q.new_ones(b, h, t, 1)
        if rows > 0:
            w_all = transform_values(v, key_padding_mask, coef, self.pde, n, self.dt)
            dp = -(-(d + 1) // 8) * 8  # pad head dim to a multiple of 8 for fused kernels
            sink = q.new_zeros(b, h, 1, dp)
            sink[..., d] = 1.0
            pad = (0, dp - d)
            q_ = torch.cat(
                [q[:, :, n - 1 :], m[:, :, n - 1 :] / scale, q.new_zeros(b, h, rows, dp - d - 1)],
                dim=-1,
            )
            k_ = torch.cat([sink, F.pad(k[:, :, : t - n], pad)], dim=2)
            v_ = torch.cat([sink, F.pad(w_all[:, :, : t - n], pad)], dim=2)
            mask = None
            if key_padding_mask is not None or pattern is not None:
                allowed = key_ok[:, None, None, : t - n]
                if pattern is not None:
                    allowed = allowed & pattern[n - 1 :, : t - n][None, None]
                allowed = F.pad(allowed.expand(-1, -1, rows, -1), (1, 0), value=True)
                mask = allowed & torch.ones(rows, rows, dtype=torch.bool, device=q.device).tril()
            undropped = attend(q_, k_, v_, mask, mask is None, scale=scale)
            main = undropped
            if dropout_p > 0:
                keep_main = None
                if keep is not None:  # the sink's column first, as in k_
                    keep_main = F.pad(keep[..., n - 1 :, : t - n], (1, 0), value=True)
                main = attend(q_, k_, v_, mask, mask is None, dropout_p, keep_main, scale)
            o = torch.cat([o[:, :, : n - 1], main[..., :d]], dim=2)
            p = torch.cat([p[:, :, : n - 1], undropped[..., d : d + 1]], dim=2)
        return (o + p * band_num) / ((1 - p) + p * band_den)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        dropout_keep: Tensor | None = None,
    ) -> Tensor:
        """(B, H, Tq, D) output. ``dropout_keep`` (bool, broadcast to (B, H, Tq, Tk)): in
        training with dropout, the keep mask of A(0) to use instead of drawing one, so that
        two kernels can be compared on the same mask (a test hook; it is never drawn whole)."""
        dropout_p = self.dropout if self.training else 0.0
        keep = dropout_keep if dropout_p > 0 else None
        linear = self.pde in LINEAR_PDES
        if not (self.fast and linear):
            return self._materialized(q, k, v, key_padding_mask, causal, keep)
        if causal and self.causal_form == "restricted" and self.steps > 0:
            return self._causal_fast(q, k, v, key_padding_mask, dropout_p, keep)
        w = transform_values(
            v, key_padding_mask, self.coefficients(q.dtype), self.pde, self.steps, self.dt
        )
        return self._sdpa(q, k, w, key_padding_mask, causal, dropout_p, keep)


ATTENTION_KERNELS.register("pde")(PDEAttention)


@ATTENTION_KERNELS.register("pde_reference")
class PDEReferenceAttention(PDEAttention):
    """The materialized O(T^2) evolution the paper describes (Algorithm 1), kept as the oracle
    the fast path is tested against; same options as ``pde`` but ``fast=False``, unchunked,
    and plain autograd (no recomputation): every step of A stays resident for the backward."""

    recompute = False

    def __init__(self, heads: int, head_dim: int, **options: Any) -> None:
        if options.pop("fast", False):
            raise ValueError("option 'fast' must be False for pde_reference; use 'pde' instead")
        options.setdefault("chunk_size", None)
        super().__init__(heads, head_dim, fast=False, **options)


@ATTENTION_KERNELS.register("longformer")
class LongformerAttention(nn.Module):
    """Sliding-window (window // 2 each side) + global-token attention, the paper's baseline.

    A mask-based implementation: the same weights as Longformer, but SDPA with a (T, T) bool
    mask rather than Longformer's banded O(T w) kernel; fine at the paper's T = 1024.
    """

    cross_attention = False  # the window ties query i to key i: one sequence only

    def __init__(
        self,
        heads: int,
        head_dim: int,
        window: int = 256,
        n_global: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_stability(window=window, n_global=n_global)
        self.window, self.n_global, self.dropout = window, n_global, dropout

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool
    ) -> Tensor:
        t = q.shape[-2]
        pattern = longformer_pattern(t, self.window, self.n_global, q.device)
        mask = _score_mask(key_padding_mask, causal, pattern, range(t), t, q.device)
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)


@ATTENTION_KERNELS.register("pde_longformer")
class PDELongformerAttention(PDEAttention):
    """Algorithm 2: Longformer window + global tokens give A(0), then the PDE refines it.

    The PDE acts along all real keys, so after N_t steps the band is N_t keys wider on each
    side: that spreading beyond the window is the paper's point. ``fast`` as in ``pde``.
    """

    cross_attention = False  # the window ties query i to key i: one sequence only

    def __init__(
        self, heads: int, head_dim: int, window: int = 256, n_global: int = 1, **options: Any
    ) -> None:
        check_stability(window=window, n_global=n_global)
        super().__init__(heads, head_dim, **options)
        self.window, self.n_global = window, n_global

    def pattern(self, t: int, device) -> Tensor:
        return longformer_pattern(t, self.window, self.n_global, device)


# Several seeds in one process (pdelab.training.stacked_seeds.discover_families): how this
# paper's modules stack
STACKED_FAMILY = {
    "name": "continuous-time attention",
    "classes": (PDEAttention, PDEReferenceAttention, LongformerAttention, PDELongformerAttention),
    "how": (
        "functions of their inputs and parameters alone: masks are tensor ops, never read on "
        "the host; under vmap(grad_and_value) the chunked evolution is kept by plain autograd "
        "(torch.func refuses checkpoint's saved-tensor hooks), the same values and gradients"
    ),
}


__all__ = [
    "TABLE_11",
    "PDE_TYPES",
    "LINEAR_PDES",
    "check_stability",
    "laplacian",
    "gradient",
    "gradient_adjoint",
    "evolve",
    "edge_weights",
    "transform_values",
    "attend",
    "longformer_pattern",
    "PDEAttention",
    "PDEReferenceAttention",
    "LongformerAttention",
    "PDELongformerAttention",
]
