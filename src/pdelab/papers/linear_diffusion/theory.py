"""The paper's theory, checked on the layer as implemented (Sec. 3.3, Appendix A.2 and A.4).

Each function measures one statement on the ``ldn`` block itself (its kernels materialised by
``LDNBlock.operators``), at random parameters and inputs; theory_report.py adds trained models
and writes the table and figure.

* Row sums: every row of K and D sums to zero (Sec. 3.3), to float precision.
* Theorem 1 (A.2, global dependency): for K_ts >= 0 with G(K) strongly connected, some power
  of A = I + dt (K - diag(K 1)) is entrywise positive. As stated it is false: at T = 2,
  K = [[0, 1], [1, 0]] and dt = 1 (A.4's largest step) A is the swap matrix, whose powers are
  never positive (the proof calls A non-negative plus identity, though its diagonal is
  1 - dt deg). The paper's own forward-only phi (Sec. 3.3) breaks the second hypothesis:
  no later token reaches an earlier one (:func:`forward_only_hypothesis`). On the layer,
  the support of A is taken exactly (off the diagonal g is 0 below the float's resolution and
  every other factor is positive; on it, the step bound zeroes the row of the largest degree
  exactly), and the smallest L is found by boolean powers. That a finite band, and
  L = ceil((T - 1) / w), exist at all is the layer's truncation of g: a Gaussian never
  vanishes, so the paper's K links every pair in one step.
* A.4 (stability): the paper assumes K_ts >= 0 and concludes ||H^(l)||_2 <= ||H^(l-1)||_2 from
  a convex combination. A row-stochastic A bounds the infinity norm, not the 2-norm:
  ||A||_2 <= sqrt(||A||_1 ||A||_inf) = sqrt(max column sum) <= sqrt(T), and ||A||_2 = 1 exactly
  when A is also column-stochastic (A^T A 1 = 1 forces A^T 1 = 1). The bound sqrt(T) is sharp
  for the layer: every row putting its weight on one column (:func:`hub_layer`) gives
  A close to 1 e_j^T. The search: random draws, gradient ascent on the input and the
  kernel's parameters, and that construction.
* Mass: the mean token is kept only when the columns of A sum to one (K symmetric, say);
  its drift is measured for a symmetric kernel and the layer's own (a measure, not a claim of
  the paper's: it claims row sums only).
* Cost: FLOPs of one block against T (FlopCounterMode), banded and reference, beside a
  Transformer block: is the "linear" network linear in T?
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from pdelab.models.transformer import Block
from pdelab.papers.linear_diffusion.layer import LDNBlock
from pdelab.spec.config import DiffusionSpec

KERNELS = ("diffusion", "attention")  # K and D, as LDNBlock names them
# Kernel options whose arithmetic differs (each checked for zero row sums, both paths' kernels
# being the same materialised matrix).
ROW_SUM_CONFIGS: dict[str, dict[str, Any]] = {
    "default (bilinear, content)": {},
    "pair MLP psi": {"psi": "mlp"},
    "softplus of the product": {"softplus": "product"},
    "forward-only phi": {"direction": "forward", "direction_att": "forward"},
}


def layernormed(b: int, t: int, c: int, dtype: torch.dtype, seed: int) -> Tensor:
    """A layer-normed random state, as the layer sees it after the embedding's LayerNorm."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, c, generator=g, dtype=dtype)
    return torch.nn.functional.layer_norm(x, (c,))


def euler_matrix(ops: dict[str, tuple[Tensor, Tensor]]) -> Tensor:
    """A = I + sum over kernels of step_t K (B, T, T), the step each row takes."""
    mats = [step[..., None] * k for k, step in ops.values()]
    eye = torch.eye(mats[0].shape[-1], dtype=mats[0].dtype, device=mats[0].device)
    return eye + sum(mats)


def kernel_measures(ops: dict[str, tuple[Tensor, Tensor]], real: Tensor | None = None) -> dict:
    """Row sums (largest |sum| relative to the largest |diagonal|), the sign of the
    off-diagonal, and the step bound max_t step_t |K_tt| of each kernel."""
    out: dict[str, float] = {}
    ops = {name: (k.detach(), step.detach()) for name, (k, step) in ops.items()}
    for name, (k, step) in ops.items():
        diag = -k.diagonal(dim1=-2, dim2=-1)
        off = k - torch.diag_embed(k.diagonal(dim1=-2, dim2=-1))
        scale = float(diag.abs().max().clamp_min(torch.finfo(k.dtype).tiny))
        out[f"{name}_row_sum"] = float(k.sum(-1).abs().max()) / scale
        out[f"{name}_min_offdiag"] = float(off.min())
        out[f"{name}_step_bound"] = float((step * diag).max())
    a = euler_matrix(ops)
    out["euler_min"] = float(a.min())
    out["euler_row_sum_error"] = float((a.sum(-1) - 1).abs().max())
    out["norm_inf"] = float(torch.linalg.matrix_norm(a, ord=math.inf).max())
    out["norm_2"] = float(torch.linalg.matrix_norm(a, ord=2).max())
    out["column_sum_error"] = float((a.sum(-2) - 1).abs().max())
    return out


def row_sum_check(t: int = 64, c: int = 16, seeds: int = 3) -> pd.DataFrame:
    """Zero row sums and the stochastic Euler matrix for every ROW_SUM_CONFIG, float32 and
    float64, at random parameters and inputs."""
    rows = []
    for dtype in (torch.float32, torch.float64):
        for name, options in ROW_SUM_CONFIGS.items():
            for seed in range(seeds):
                torch.manual_seed(seed)
                layer = LDNBlock(c, **options).to(dtype)
                with torch.no_grad():
                    ops = layer.operators(layernormed(4, t, c, dtype, seed))
                rows.append(
                    {"config": name, "dtype": str(dtype).removeprefix("torch."), "seed": seed}
                    | kernel_measures(ops)
                )
    return pd.DataFrame(rows)


def support_power(support: Tensor, max_power: int) -> int:
    """The smallest L <= max_power with support^L entrywise non-zero (boolean products of a
    (T, T) support that holds the diagonal), or 0 when there is none (not strongly
    connected)."""
    reach = support.clone()
    for power in range(1, max_power + 1):
        if bool(reach.all()):
            return power
        reach = (reach.to(torch.float64) @ support.to(torch.float64)) > 0
    return 0


def theorem_1_counterexample(max_power: int = 64) -> dict[str, Any]:
    """Theorem 1's hypotheses met, its conclusion false: T = 2, K = [[0, 1], [1, 0]] (every
    K_ts >= 0, as the theorem assumes, and strongly connected) and dt = 1, which A.4's bound
    dt <= 1 / sum_s K_ts allows. A = I + dt (K - diag(K 1)), A.1's operator, is the swap
    matrix: its powers alternate between the swap and I, and none up to ``max_power`` is
    positive. Integer arithmetic: the zeros are exact."""
    k = torch.tensor([[0, 1], [1, 0]], dtype=torch.int64)
    dt = 1
    a = torch.eye(2, dtype=torch.int64) + dt * (k - torch.diag(k.sum(1)))
    power, positive = a.clone(), []
    for n in range(1, max_power + 1):
        if bool((power > 0).all()):
            positive.append(n)
        power = power @ a
    return {"K": k.tolist(), "dt": dt, "A": a.tolist(), "powers": max_power, "positive": positive}


def strongly_connected(weights: np.ndarray) -> tuple[bool, int]:
    """(whether G(K) is strongly connected, the number of ordered pairs (i, j), i != j, with
    no path from j to i), G(K) having an edge s -> t where K_ts > 0 (Theorem 1's hypothesis
    2: K_{i_(m+1) i_m} > 0 along the path). Boolean closure of the off-diagonal support."""
    t = weights.shape[0]
    reach = (weights > 0) | np.eye(t, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(max(t, 2))))):
        reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
    missing = int((~reach).sum())
    return missing == 0, missing


def forward_only_hypothesis(t: int = 16, sigma: float = 4.0, seed: int = 0) -> dict[str, Any]:
    """Theorem 1's hypotheses for Sec. 3.3's kernel with the paper's own example of phi,
    forward-only (phi(t - s) = 0 for s > t: token t reads no later token), built from the
    paper's formula in float64, not from the layer: k_ts = phi(t - s) g(|t - s|) softplus(psi)
    with g the untruncated Gaussian (positive at every offset) and psi random scores.
    Hypothesis 1 (K_ts >= 0 off the diagonal) holds; hypothesis 2 fails: no path leads from
    a later token to an earlier one, T (T - 1) / 2 ordered pairs. A = I + dt (K - diag(K 1))
    is then lower triangular, so no power of it is positive (checked up to 2 T, dt at A.4's
    bound). As printed, softplus(phi g psi) gives log 2 where phi = 0: every future pair
    weighs at least that, G(K) is strongly connected, and the kernel is not forward-only."""
    rng = np.random.default_rng(seed)
    i = np.arange(t)
    offset = i[:, None] - i[None, :]  # t - s
    phi = (offset >= 0).astype(float)  # forward-only: 0 for s > t
    g = np.exp(-(offset**2) / (2 * sigma**2))
    psi = rng.standard_normal((t, t))
    softplus = np.logaddexp(psi, 0.0)
    k = phi * g * softplus
    np.fill_diagonal(k, 0.0)
    connected, missing = strongly_connected(k)
    dt = 1.0 / k.sum(1).max()  # A.4's largest step
    a = np.eye(t) + dt * (k - np.diag(k.sum(1)))
    power, positive = a.copy(), False
    for _ in range(2 * t):
        positive = positive or bool((power > 0).all())
        power = power @ a
    printed = np.logaddexp(phi * g * psi, 0.0)  # softplus of the product, Sec. 3.3 as printed
    np.fill_diagonal(printed, 0.0)
    printed_connected, _ = strongly_connected(printed)
    future = offset < 0
    return {
        "T": t,
        "nonnegative": bool((k >= 0).all()),
        "connected": connected,
        "unlinked_pairs": missing,
        "pairs": t * (t - 1),
        "future_weight": float(np.abs(k[future]).max()),
        "upper_zero": bool((np.triu(a, 1) == 0).all()),
        "some_power_positive": positive,
        "printed_connected": printed_connected,
        "printed_future_weight": float(printed[future].min()),
    }


def exact_support(layer: LDNBlock, x: Tensor) -> Tensor:
    """The support (B, T, T) of A = I + c sum dt K in exact arithmetic. Off the diagonal,
    k_ts > 0 (phi, softplus and g are positive, g exactly 0 beyond its band). On it,
    1 - c rate_t, rate_t = sum dt |K_tt| and c = 1 / max(1, max_t rate_t): exactly 0 for the
    row(s) of the largest rate when the step bound is active, else positive. Computed from
    A's entries instead, a row the bound zeroes keeps a float residue of either sign."""
    with torch.no_grad():
        ops = layer.operators(x)
        rate = sum(kernel.step() * -ops[n][0].diagonal(dim1=-2, dim2=-1)
                   for n, kernel in layer.kernels.items())  # fmt: skip
        off = sum(k > 0 for k, _ in ops.values())
        top = rate.amax(-1, keepdim=True)
        zero = (rate == top) & (top >= 1) if layer.step_bound else torch.zeros_like(rate) > 0
        eye = torch.eye(x.shape[1], dtype=torch.bool, device=x.device)
        return (off > 0) | (eye & ~zero[..., None])


def global_dependency(
    lengths: tuple[int, ...] = (16, 32, 64, 128, 256),
    sigmas: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0),
    direction: str = "two_sided",
) -> pd.DataFrame:
    """Theorem 1: the smallest L with (I + dt K)^L > 0 for a K-only layer (float32, as trained)
    at random parameters, against T and the width of g, from A's exact support
    (:func:`exact_support`); beside ceil((T - 1) / w), w the largest offset g keeps, and the
    L read from A's float32 entries (``L_float``). ``zeroed``: whether the step bound zeroes a
    diagonal entry. Forward-only phi is not strongly connected: no L exists."""
    rows = []
    for sigma in sigmas:
        torch.manual_seed(0)
        layer = LDNBlock(8, attention=False, sigma=sigma, direction=direction)
        kernel = layer.kernels["diffusion"]
        offsets = torch.arange(0, 10 * int(sigma) + 10)
        with torch.no_grad():
            w = int(offsets[kernel.g(offsets) > 0].max())
        for t in lengths:
            x = layernormed(1, t, 8, torch.float32, 0)
            support = exact_support(layer, x)[0]
            with torch.no_grad():
                a = euler_matrix(layer.operators(x))[0]
            measured, residue = support_power(support, t), support_power(a > 0, t)
            rows.append(
                {
                    "direction": direction,
                    "sigma": sigma,
                    "reach": w,
                    "T": t,
                    "L": measured if measured else math.nan,
                    "L_float": residue if residue else math.nan,
                    "zeroed": not bool(support.diagonal().all()),
                    "predicted": math.ceil((t - 1) / w) if direction == "two_sided" else math.nan,
                }
            )
    return pd.DataFrame(rows)


def hub_layer(t: int, c: int = 8, kernels: str = "K", hub: int = 0, margin: float = 40.0):
    """A layer and an input (float64) at which every row of A puts its weight on the column of
    one token, ``hub``: A close to 1 e_hub^T, whose 2-norm is sqrt(T), the sharp bound for a
    row-stochastic A. Every kernel's psi is made rank one, psi_ts = q_t k_s with k_hub = 1 and
    k_s = -1 elsewhere; q_t = margin / g(|t - hub|), so each row t != hub has the same degree
    (about phi margin) and the step bound zeroes every one of their diagonal entries, while
    the hub's own row (psi = -margin) keeps weight about exp(-margin) off its diagonal. The
    widths sit at their cap so that g reaches the whole sequence. The input is not
    layer-normed (as in :func:`norm_search`'s ascent); the weights could carry its scale."""
    options = {"attention": False} if kernels == "K" else {}
    layer = LDNBlock(c, local=False, **options).double()
    i = torch.arange(t)
    with torch.no_grad():
        for kernel in layer.kernels.values():
            kernel.g.theta.fill_(8.0)  # sigma = sigma_max sigmoid(8), just below the cap
            for lin in (kernel.psi.query, kernel.psi.key):
                lin.weight.zero_()
                lin.bias.zero_()
            kernel.psi.query.weight[0, 0] = math.sqrt(kernel.psi.rank)  # q_t = sqrt(r) x_t0
            kernel.psi.key.weight[0, 1] = 1.0  # k_s = x_s1
        g = layer.kernels[next(iter(layer.kernels))].g(i - hub)
    x = torch.zeros(1, t, c, dtype=torch.float64)
    x[0, :, 0] = margin / g.clamp_min(1e-300)
    x[0, hub, 0] = margin  # psi_hub,s = -margin: the hub's row stays near the identity's
    x[0, :, 1] = -1.0
    x[0, hub, 1] = 1.0
    return layer, x


def sharp_norm(t: int, c: int = 8) -> tuple[float, float]:
    """(||A||_2 at :func:`hub_layer`'s construction, sqrt(T)): the bound and how near the layer
    comes to it."""
    layer, x = hub_layer(t, c)
    with torch.no_grad():
        a = euler_matrix(layer.operators(x))
    return float(torch.linalg.matrix_norm(a, ord=2).max()), math.sqrt(t)


def norm_search(
    lengths: tuple[int, ...] = (8, 16, 32, 64),
    draws: int = 6,
    steps: int = 80,
    c: int = 8,
    kernels: str = "K",
) -> pd.DataFrame:
    """The largest ||A||_2 = ||I + c (dt K + dt_att D)||_2 found over kernels the layer can
    produce: ``draws`` random layers and inputs, then Adam on the input, psi, phi, the width and
    the step of the best draw, maximising the spectral norm (the step bound stays on: A is
    stochastic throughout); then :func:`hub_layer`'s construction (``construction``), beside
    the sharp bound sqrt(T). ``kernels``: "K" (A.4's pure diffusion) or "K+D" (the layer)."""
    options = {"attention": False} if kernels == "K" else {}
    rows = []
    for t in lengths:
        best_random, best_state = -math.inf, None
        for draw in range(draws):
            torch.manual_seed(draw)
            layer = LDNBlock(c, local=False, **options).double()
            for p in layer.parameters():  # spread the draws beyond the initialisation
                p.data.add_(torch.randn_like(p) * 2.0)
            x = layernormed(1, t, c, torch.float64, draw) * 3
            with torch.no_grad():
                value = float(torch.linalg.matrix_norm(euler_matrix(layer.operators(x)), ord=2))
            if value > best_random:
                best_random, best_state = value, (layer, x)
        layer, x = best_state
        x = x.clone().requires_grad_(True)
        optimiser = torch.optim.Adam([x, *layer.parameters()], lr=0.05)
        best = best_random
        for _ in range(steps):
            a = euler_matrix(layer.operators(x))
            norm = torch.linalg.matrix_norm(a, ord=2).max()
            best = max(best, float(norm.detach()))
            optimiser.zero_grad()
            (-norm).backward()
            optimiser.step()
        with torch.no_grad():
            a = euler_matrix(layer.operators(x))
            final = {
                "norm_inf": float(torch.linalg.matrix_norm(a, ord=math.inf).max()),
                "max_column_sum": float(a.sum(-2).max()),
                "euler_min": float(a.min()),
            }
            hub_block, hub_x = hub_layer(t, c, kernels)
            hub = euler_matrix(hub_block.operators(hub_x))
        construction = {
            "construction": float(torch.linalg.matrix_norm(hub, ord=2).max()),
            "construction_norm_inf": float(torch.linalg.matrix_norm(hub, ord=math.inf).max()),
            "construction_min": float(hub.min()),
        }
        rows.append(
            {"kernels": kernels, "T": t, "random": best_random, "ascent": best, **final}
            | construction
            | {"largest": max(best, construction["construction"]), "bound": math.sqrt(t)}
        )
    return pd.DataFrame(rows)


def symmetric_layer(c: int, **options: Any) -> LDNBlock:
    """A K-only layer whose kernel is symmetric: psi's query and key maps tied, phi equal both
    ways (its initial state), so A's columns sum to one."""
    layer = LDNBlock(c, attention=False, local=False, **options)
    psi = layer.kernels["diffusion"].psi
    psi.key.weight, psi.key.bias = psi.query.weight, psi.query.bias
    return layer


def mass_drift(a: Tensor, h: Tensor) -> Tensor:
    """|mean_t (A h)_t - mean_t h_t| / |mean_t h_t| per sequence: the drift of the mean token."""
    before, after = h.mean(-2), (a @ h).mean(-2)
    return (after - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(1e-30)


def mass_check(t: int = 64, c: int = 16, seeds: int = 4) -> pd.DataFrame:
    """Column sums of A, the mean token's drift in one step and ||A||_2: a symmetric kernel
    (tied psi, equal gates: A doubly stochastic, so ||A||_2 = 1, A.4's bound), the layer's
    default (asymmetric q . k), forward-only phi. float64."""
    rows = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        layers = {
            "symmetric K": symmetric_layer(c),
            "default K": LDNBlock(c, attention=False, local=False),
            "default K + D": LDNBlock(c, local=False),
            "forward-only K": LDNBlock(c, attention=False, local=False, direction="forward"),
        }
        h = layernormed(2, t, c, torch.float64, seed) + 0.5  # a mean token away from zero
        for name, layer in layers.items():
            with torch.no_grad():
                a = euler_matrix(layer.double().operators(h))
            rows.append(
                {
                    "kernel": name,
                    "seed": seed,
                    "column_sum_error": float((a.sum(-2) - 1).abs().max()),
                    "drift": float(mass_drift(a, h).max()),
                    "norm_2": float(torch.linalg.matrix_norm(a, ord=2).max()),
                }
            )
    return pd.DataFrame(rows)


def counted_flops(module: torch.nn.Module, *args: Any, **kwargs: Any) -> int:
    """FLOPs of one forward pass, counted by FlopCounterMode. Attention runs on SDPA's math
    backend, whose products the counter sees (a fused CPU kernel would count as zero)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        module(*args, **kwargs)
    return int(counter.get_total_flops())


def block_flops(block: torch.nn.Module, t: int, c: int, tokens: bool) -> int:
    """FLOPs of one forward pass of a block on (1, t, c)."""
    extra = {"tokens": torch.randn(1, t, c)} if tokens else {}
    return counted_flops(block, torch.randn(1, t, c), None, **extra)


def transformer_block(c: int) -> Block:
    """The backbone's post-norm block at width c: SDPA with heads of 32, MLP 4c, no sites."""
    return Block(c, max(1, c // 32), 4 * c, 0.0, 0.0, "post", "sdpa", DiffusionSpec())


def cost_in_length(lengths: tuple[int, ...] = (256, 512, 1024), c: int = 16) -> pd.DataFrame:
    """FLOPs of one block against T: LDN banded at its initial widths and at the widths' cap
    (sigma_max, what training may reach), the reference path, and a Transformer block (SDPA,
    MLP 4C). Elementwise maps are not counted (FlopCounterMode counts products)."""
    torch.manual_seed(0)
    cap = LDNBlock(c, sigma=63.0, sigma_att=63.0)
    blocks = {
        "LDN banded (initial widths 4, 16)": (LDNBlock(c), True),
        "LDN banded (widths at the cap, 63)": (cap, True),
        "LDN reference (all T^2 pairs)": (LDNBlock(c, path="reference"), True),
        "Transformer block (SDPA)": (transformer_block(c), False),
    }
    rows = []
    for name, (block, tokens) in blocks.items():
        for t in lengths:
            rows.append({"block": name, "T": t, "flops": block_flops(block.eval(), t, c, tokens)})
    return pd.DataFrame(rows)


def growth_exponent(frame: pd.DataFrame) -> dict[str, float]:
    """Per block, the slope of log FLOPs against log T over the last two lengths (1: linear,
    2: quadratic)."""
    out = {}
    for name, part in frame.groupby("block", sort=False):
        part = part.sort_values("T").tail(2)
        flops, t = np.log(part["flops"].to_numpy()), np.log(part["T"].to_numpy())
        out[name] = float((flops[1] - flops[0]) / (t[1] - t[0]))
    return out
