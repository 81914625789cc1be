"""The Linear Diffusion Network layer (Sec. 3) as an encoder block, ``model.block: ldn``.

On the hidden state h (B, T, C) and the token embeddings e_t = Embed(x_t) (B, T, C):

    h'_t = h_t + c_b [dt sum_s K_ts (h_s - h_t) + dt_att sum_s D_ts (h_s - h_t)] + F(x_t, h_t)

then LayerNorm (post-norm; with ``model.norm: pre`` the update reads LN(h) instead). K, the
diffusion kernel (Sec. 3.3), and D, the diffusion-based attention (Sec. 3.5), are built alike,
each with its own parameters: for t != s

    k_ts = phi(t - s) g(|t - s|) softplus(psi(h_t, h_s))     softplus: content (default)
    k_ts = softplus(phi(t - s) g(|t - s|) psi(h_t, h_s))     softplus: product (Sec. 3.3 as set)

and K_tt = -sum_{s != t} k_ts, so every row sums to zero by construction. phi is a learnable
gate per direction (or zero for s > t: forward-only), g = exp(-(t - s)^2 / 2 sigma^2) with a
learnable width, set to zero where it falls below the float's resolution, and psi a content
score. F(x_t, h_t) = sigmoid(W1 [h_t; e_t] + b1) * (W2 h_t + b2) (Sec. 3.4).

Step bound: per sequence b, c_b = 1 / max(1, max_t (dt |K_tt| + dt_att |D_tt|)). Then
P = I + c_b (dt K + dt_att D) has non-negative entries and rows summing to one, so the explicit
Euler step is a convex combination of the tokens, and dt c_b max_t |K_tt| <= 1 for each kernel,
whatever dt and psi have learned. One scale per sequence keeps sequences independent of their
batch and of padding; it is 1 whenever the learned steps are inside the bound already. Under
``causal`` the maximum runs over t' <= t (a running maximum, one scale per row), since a
maximum over the whole sequence would let a later token set an earlier token's step.

Paths (equal in exact arithmetic; tests/test_ldn.py compares them in float64):

- ``reference``: psi on every one of the T^2 pairs (the MLP reads each concatenated
  [h_t; h_s]), K and D materialised, and the update as Sec. 3.6 writes it, K H - diag(K 1) H.
- ``banded`` (default): g is zero beyond a half-width of about 5.6 sigma (float32; 8.6 sigma in
  float64), so K is banded. The path covers the widest band any learnable width reaches,
  w ~ 5.6 sigma_max (``GaussianDecay.band_limit``): the blocks follow from the options, the
  dtype and T alone, so no tensor is read on the host to shape them (no device sync, no graph
  break under torch.compile), and the path is exact whatever sigma training reaches. Queries
  go in blocks of c >= w, each against the 3c keys of its own and the two neighbouring
  blocks: the weights take O(T c) memory and K H one batched matmul, O(T c C) time; where
  that scores at least T^2 pairs (T up to about 3.5 w) it runs as one block on every pair.
  psi comes from per-token halves (q_t . k_s, or for the MLP W1 [h_t; h_s] = W1_t h_t +
  W1_s h_s), so no pair is ever concatenated. With the product softplus a pair beyond the
  band weighs softplus(0) = log 2, not 0: those keys enter through per-block sums (O(T C)).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.models.attention import runs_as_cuda
from pdelab.models.transformer import ENCODER_BLOCKS
from pdelab.papers.linear_diffusion.options import (
    BLOCK,
    DEFAULTS,
    band_halfwidth,
    check_options,
)

LOG2 = math.log(2.0)
ALIGN = 8  # block sizes are multiples of this (matmul-friendly)


def allowed_pairs(offset: Tensor, query: Tensor | None, key: Tensor | None, causal: bool) -> Tensor:
    """True where k_ts may be non-zero: t != s, both tokens real, and s < t under ``causal``.
    ``offset`` holds t - s; ``query`` and ``key`` say which tokens are real."""
    ok = offset > 0 if causal else offset != 0
    if query is not None:
        ok = ok & query[..., :, None]
    if key is not None:
        ok = ok & key[..., None, :]
    return ok


def softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)) to the dtype's precision everywhere. ``F.softplus`` returns x itself
    above its threshold of 20, which is short by log1p(exp(-x)) (2e-9 at 20): exact in
    float32, not in float64, where the reference and banded paths are compared."""
    return torch.logaddexp(x, x.new_zeros(()))


class Step(nn.Module):
    """A positive step dt = exp(theta): learnable (the paper's default) or fixed."""

    def __init__(self, init: float, learnable: bool) -> None:
        super().__init__()
        value = torch.tensor(math.log(init))
        if learnable:
            self.log_value = nn.Parameter(value)
        else:
            self.register_buffer("log_value", value)

    def forward(self) -> Tensor:
        return self.log_value.exp()


class DirectionGate(nn.Module):
    """phi(t - s), the weight of the flow from s into t: 2 sigmoid(a) with one learnable logit
    per direction (1 both ways at the start: symmetric), or 0 for s > t (``forward``)."""

    def __init__(self, direction: str) -> None:
        super().__init__()
        self.forward_only = direction == "forward"
        self.logits = nn.Parameter(torch.zeros(1 if self.forward_only else 2))  # [past, future]

    def forward(self, offset: Tensor) -> Tensor:
        gate = 2 * torch.sigmoid(self.logits)
        zero = gate.new_zeros(())
        future = zero if self.forward_only else gate[1]
        return torch.where(offset > 0, gate[0], torch.where(offset < 0, future, zero))


class GaussianDecay(nn.Module):
    """g(|t - s|) = exp(-(t - s)^2 / (2 sigma^2)), sigma = sigma_max sigmoid(theta) learnable in
    (0, sigma_max); 0 where it is below the float's resolution, so the kernel is banded."""

    def __init__(self, sigma: float, sigma_max: float) -> None:
        super().__init__()
        self.sigma_max = sigma_max
        self.theta = nn.Parameter(torch.tensor(math.log(sigma / (sigma_max - sigma))))

    def sigma(self) -> Tensor:
        return self.sigma_max * torch.sigmoid(self.theta)

    def eps(self) -> float:
        return torch.finfo(self.theta.dtype).eps

    def band(self) -> int:
        """Half-width beyond which g is exactly 0 at the current sigma. It reads the parameter
        on the host (a device sync), so it serves analyses only, never the forward pass."""
        return band_halfwidth(float(self.sigma().detach()), self.eps())

    def band_limit(self) -> int:
        """Half-width beyond which g is exactly 0 at every width it can learn (sigma <=
        sigma_max): fixed by the options and the dtype, so the banded path's shapes never
        wait on a parameter's value (no host sync, no graph break), whatever training does."""
        return band_halfwidth(self.sigma_max, self.eps())

    def forward(self, offset: Tensor) -> Tensor:
        sigma = self.sigma()
        g = torch.exp(-offset.to(sigma.dtype).square() / (2 * sigma.square()))
        return torch.where(g >= self.eps(), g, 0.0)


class ContentGate(nn.Module):
    """psi(h_t, h_s): ``bilinear``, q_t . k_s / sqrt(r) with q, k rank-r projections of h; or
    ``mlp``, the paper's "small MLP" on the pair, w2 . gelu(W1 [h_t; h_s] + b1) + b2, width r."""

    def __init__(self, dim: int, rank: int, form: str) -> None:
        super().__init__()
        self.form, self.rank = form, rank
        if form == "bilinear":
            self.query, self.key = nn.Linear(dim, rank), nn.Linear(dim, rank)
        else:
            self.hidden, self.out = nn.Linear(2 * dim, rank), nn.Linear(rank, 1)

    def pairs(self, h: Tensor) -> Tensor:
        """psi on all pairs (B, T, T), as written: the MLP reads every [h_t; h_s]."""
        if self.form == "bilinear":
            return self.query(h) @ self.key(h).transpose(-2, -1) / math.sqrt(self.rank)
        b, t, c = h.shape
        pair = torch.cat([h[:, :, None].expand(b, t, t, c), h[:, None].expand(b, t, t, c)], -1)
        return self.out(F.gelu(self.hidden(pair))).squeeze(-1)  # (B, T, T, 2C) -> (B, T, T)

    def halves(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """Per-token parts (B, T, r) with psi(h_t, h_s) = combine(a_t, b_s)."""
        if self.form == "bilinear":
            return self.query(h), self.key(h)
        w_t, w_s = self.hidden.weight.split(h.shape[-1], dim=1)
        return F.linear(h, w_t, self.hidden.bias), F.linear(h, w_s)

    def combine(self, a: Tensor, b: Tensor) -> Tensor:
        """(..., n, r) queries' and (..., m, r) keys' halves -> psi (..., n, m)."""
        if self.form == "bilinear":
            return a @ b.transpose(-2, -1) / math.sqrt(self.rank)
        return self.out(F.gelu(a[..., :, None, :] + b[..., None, :, :])).squeeze(-1)


def blocking(w: int, t: int) -> tuple[int, int]:
    """(c, nb): blocks of c >= w queries (a multiple of ALIGN), nb of them over t tokens."""
    c = -(-w // ALIGN) * ALIGN
    return c, -(-t // c)


def one_block(w: int, t: int) -> bool:
    """Whether the banded path runs as one block, the whole sequence: when the band holds
    every pair, or when the blocks' windows would score at least as many pairs as all t^2
    (short sequences, where the dense form is the cheaper one; exact either way, since g is
    zero beyond the band in both)."""
    c, nb = blocking(w, t)
    return w >= t - 1 or nb * c * 3 * c >= t * t


def far_sums(x: Tensor, causal: bool) -> Tensor:
    """Per block i of x (B, nb, ...) already summed over the block: the sum over blocks
    j <= i - 2 and, unless ``causal``, j >= i + 2 (the keys outside block i's window)."""
    nb = x.shape[1]
    incl = x.cumsum(1)
    left = torch.cat([torch.zeros_like(x[:, :2]), incl[:, :-2]], 1)[:, :nb]
    if causal:
        return left
    return left + incl[:, -1:] - torch.cat([incl[:, 1:], incl[:, -1:]], 1)


class DiffusionKernel(nn.Module):
    """One row-sum-zero kernel (K, or D) and its step: phi, g, psi and dt."""

    def __init__(
        self,
        dim: int,
        rank: int,
        psi: str,
        direction: str,
        sigma: float,
        sigma_max: float,
        softplus: str,
        dt: float,
        learn_dt: bool,
    ) -> None:
        super().__init__()
        self.phi = DirectionGate(direction)
        self.g = GaussianDecay(sigma, sigma_max)
        self.psi = ContentGate(dim, rank, psi)
        self.step = Step(dt, learn_dt)
        self.product = softplus == "product"

    def weights(self, psi: Tensor, offset: Tensor, allowed: Tensor) -> Tensor:
        """k_ts from psi at offsets t - s; 0 on the diagonal and wherever not ``allowed``."""
        phi, g = self.phi(offset), self.g(offset)
        k = softplus(phi * g * psi) if self.product else phi * g * softplus(psi)
        return torch.where(allowed, k, 0.0)

    def matrix(self, h: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """K (B, T, T) materialised: k_ts off the diagonal, K_tt = -sum_{s != t} k_ts."""
        i = torch.arange(h.shape[1], device=h.device)
        offset = i[:, None] - i[None, :]
        k = self.weights(self.psi.pairs(h), offset, allowed_pairs(offset, mask, mask, causal))
        return k - torch.diag_embed(k.sum(-1))

    def forward(
        self, h: Tensor, mask: Tensor | None, causal: bool, path: str
    ) -> tuple[Tensor, Tensor]:
        """sum_s K_ts (h_s - h_t) (B, T, C) and |K_tt| (B, T), on the chosen path."""
        if path == "reference":
            k = self.matrix(h, mask, causal)
            return k @ h - k.sum(-1, keepdim=True) * h, -k.diagonal(dim1=-2, dim2=-1)
        kh, degree = self.banded(h, mask, causal)
        return kh - degree[..., None] * h, degree

    def reach(self, h: Tensor) -> int:
        """The half-width the banded path covers. On a GPU, under torch.compile, or while a
        CPU stands in for one (pdelab.models.attention.runs_as_cuda): g's static band limit
        (from sigma_max), so that deciding the blocks reads no tensor. On a CPU in eager mode,
        where reading sigma costs nothing, its current band: far narrower while the widths
        are below the cap, and as exact (g is zero beyond either)."""
        if torch.compiler.is_compiling() or runs_as_cuda(h):
            return self.g.band_limit()
        return self.g.band()

    def banded(self, h: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
        """(sum_{s != t} k_ts h_s, sum_{s != t} k_ts), K never formed: blocks of c queries,
        each against keys [(i - 1) c, (i + 2) c), which hold every s with |t - s| <= w."""
        b, t, d = h.shape
        real = h.new_ones(b, t) if mask is None else mask.to(h.dtype)
        a, keys = self.psi.halves(h)
        w = self.reach(h)
        c, nb = blocking(w, t)
        if one_block(w, t):
            i = torch.arange(t, device=h.device)
            offset = i[:, None] - i[None, :]
            allowed = allowed_pairs(offset, real > 0, real > 0, causal)
            k = self.weights(self.psi.combine(a, keys), offset, allowed)  # (B, T, T)
            return k @ h, k.sum(-1)
        n = nb * c

        def blocks(x: Tensor) -> Tensor:  # (B, T, X) -> (B, nb, c, X)
            return F.pad(x, (0, 0, 0, n - t)).view(b, nb, c, x.shape[-1])

        def windows(x: Tensor) -> Tensor:  # (B, T, X) -> (B, nb, 3c, X), zeros off the ends
            return F.pad(x, (0, 0, c, n - t + c)).unfold(1, 3 * c, c).transpose(-1, -2)

        query = blocks(real[..., None])[..., 0] > 0  # (B, nb, c)
        key = windows(real[..., None])[..., 0] > 0  # (B, nb, 3c)
        j = torch.arange(3 * c, device=h.device)
        offset = torch.arange(c, device=h.device)[:, None] + c - j[None, :]  # t - s, (c, 3c)
        psi = self.psi.combine(blocks(a), windows(keys))  # (B, nb, c, 3c)
        k = self.weights(psi, offset, allowed_pairs(offset, query, key, causal))
        kh, degree = k @ windows(h), k.sum(-1)  # (B, nb, c, C), (B, nb, c)
        if self.product:  # keys beyond the window weigh softplus(0) = log 2 each
            q = query.to(h.dtype)
            far_h = far_sums(blocks(h * real[..., None]).sum(2), causal)  # (B, nb, C)
            far_n = far_sums(q.sum(2), causal)  # (B, nb): how many real keys
            kh = kh + LOG2 * q[..., None] * far_h[:, :, None]
            degree = degree + LOG2 * q * far_n[:, :, None]
        return kh.reshape(b, n, d)[:, :t], degree.reshape(b, n)[:, :t]


class LocalUpdate(nn.Module):
    """F(x_t, h_t) = sigmoid(W1 [h_t; Embed(x_t)] + b1) * (W2 h_t + b2) (Sec. 3.4): a gated
    per-token map that reads the token itself, to restore what diffusion smooths away."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate, self.value = nn.Linear(2 * dim, dim), nn.Linear(dim, dim)

    def forward(self, h: Tensor, tokens: Tensor) -> Tensor:
        return torch.sigmoid(self.gate(torch.cat([h, tokens], dim=-1))) * self.value(h)


@ENCODER_BLOCKS.register(BLOCK)
class LDNBlock(nn.Module):
    """One LDN layer: (B, T, C) -> (B, T, C). ``kernels`` holds K ("diffusion") and D
    ("attention") as switched on; ``local`` is F or None. The options are options.py's."""

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        mlp_dim: int = 0,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm: str = "post",
        diffusion: bool = DEFAULTS["diffusion"],
        attention: bool = DEFAULTS["attention"],
        local: bool = DEFAULTS["local"],
        dt: float = DEFAULTS["dt"],
        direction: str = DEFAULTS["direction"],
        sigma: float = DEFAULTS["sigma"],
        dt_att: float = DEFAULTS["dt_att"],
        direction_att: str = DEFAULTS["direction_att"],
        sigma_att: float = DEFAULTS["sigma_att"],
        learn_dt: bool = DEFAULTS["learn_dt"],
        step_bound: bool = DEFAULTS["step_bound"],
        sigma_max: float = DEFAULTS["sigma_max"],
        psi: str = DEFAULTS["psi"],
        rank: int | None = DEFAULTS["rank"],
        softplus: str = DEFAULTS["softplus"],
        path: str = DEFAULTS["path"],
    ) -> None:
        super().__init__()
        del heads, mlp_dim, attention_dropout  # no heads; F is the layer's only per-token map
        given = dict(diffusion=diffusion, attention=attention, local=local, dt=dt)
        given |= dict(direction=direction, sigma=sigma, dt_att=dt_att, sigma_att=sigma_att)
        given |= dict(direction_att=direction_att, learn_dt=learn_dt, step_bound=step_bound)
        given |= dict(sigma_max=sigma_max, psi=psi, rank=rank, softplus=softplus, path=path)
        check_options(**{k: v for k, v in given.items() if v != DEFAULTS[k]})
        shared = dict(dim=dim, rank=rank or dim, psi=psi, sigma_max=sigma_max)
        shared |= dict(softplus=softplus, learn_dt=learn_dt)
        self.kernels = nn.ModuleDict()
        if diffusion:
            self.kernels["diffusion"] = DiffusionKernel(
                direction=direction, sigma=sigma, dt=dt, **shared
            )
        if attention:
            self.kernels["attention"] = DiffusionKernel(
                direction=direction_att, sigma=sigma_att, dt=dt_att, **shared
            )
        self.local = LocalUpdate(dim) if local else None
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"
        self.step_bound, self.path = step_bound, path

    def step_scale(self, rate: Tensor, causal: bool) -> Tensor:
        """c (B, T) from rate_bt = sum over kernels of dt |K_tt|: the largest scale <= 1 at
        which every diagonal entry of P = I + c (dt K + dt_att D) is >= 0. One per sequence,
        c_b = 1 / max(1, max_t rate_bt); under ``causal`` the maximum runs over t' <= t only,
        so that no step reads a later token."""
        if not self.step_bound:
            return torch.ones_like(rate)
        if causal:
            return 1 / rate.cummax(dim=1).values.clamp_min(1.0)
        return (1 / rate.amax(dim=1, keepdim=True).clamp_min(1.0)).expand_as(rate)

    def diffuse(self, u: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
        """The diffusion and attention terms, c sum_kernels dt sum_s K_ts (u_s - u_t), and c."""
        if not self.kernels:
            return torch.zeros_like(u), u.new_ones(u.shape[:2])
        flux, rate = [], []
        for kernel in self.kernels.values():
            f, degree = kernel(u, mask, causal, self.path)
            dt = kernel.step()
            flux.append(dt * f)
            rate.append(dt * degree)
        scale = self.step_scale(sum(rate), causal)
        return scale[..., None] * sum(flux), scale

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        causal: bool = False,
        taps: dict[str, Tensor] | None = None,
        tokens: Tensor | None = None,
    ) -> Tensor:
        u = self.norm(x) if self.pre_norm else x  # the state the update reads
        update, scale = self.diffuse(u, mask, causal)
        if self.local is not None:
            if tokens is None:
                raise ValueError("the LDN local update F reads the token embeddings: pass tokens")
            update = update + self.drop(self.local(u, tokens))
        out = x + update
        if not self.pre_norm:
            out = self.norm(out)
        if taps is not None:
            taps.update(input=x, update=update, step_scale=scale, output=out)
        return out

    def operators(
        self, x: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> dict[str, tuple[Tensor, Tensor]]:
        """Each kernel this layer applies to ``x``, materialised (B, T, T), with the step each
        row takes (B, T), dt c: {"diffusion": (K, step), "attention": (D, step)}. For checks
        and analysis (row sums, the step bound, products over layers)."""
        u = self.norm(x) if self.pre_norm else x
        mats = {name: kernel.matrix(u, mask, causal) for name, kernel in self.kernels.items()}
        steps = {name: kernel.step() for name, kernel in self.kernels.items()}
        rate = sum(steps[n] * -m.diagonal(dim1=-2, dim2=-1) for n, m in mats.items())
        scale = self.step_scale(rate, causal)
        return {name: (m, steps[name] * scale) for name, m in mats.items()}


def ldn_reference(module: nn.Module) -> None:
    """The LDN block on its reference path (what a stacked step runs)."""
    if isinstance(module, LDNBlock):
        module.path = "reference"


# Several seeds in one process (pdelab.training.stacked_seeds.discover_families): how this
# paper's modules stack
STACKED_FAMILY = {
    "name": "linear diffusion block",
    "classes": (
        LDNBlock,
        DiffusionKernel,
        DirectionGate,
        GaussianDecay,
        ContentGate,
        Step,
        LocalUpdate,
    ),
    "how": (
        "the banded path may size its blocks by a band width read on the host from each "
        "kernel's learned sigma (in eager mode on a CPU), which vmap cannot batch and which "
        "differs between seeds: the stacked forward runs the reference path (K and D "
        "materialised, T x T; equal to banded in exact arithmetic, "
        "papers/linear_diffusion/tests/test_ldn.py)"
    ),
    "prepare": ldn_reference,
}
