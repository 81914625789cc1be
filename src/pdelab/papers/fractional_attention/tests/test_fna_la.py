"""FNA's LA path (alpha = 2, Euclidean, through SDPA): it runs in the precision the ``sdpa``
baseline runs in, within a stated bf16 tolerance of the fp32 reference, and a right-padded
causal batch needs no (T, T) mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from pdelab.papers.fractional_attention import attention as fna

B, H, T = 2, 2, 64
# bf16 keeps 8 bits of mantissa: the weights and the output round at 2^-9 each, so LA under
# bf16 autocast is held to 2^-6 of the fp32 reference (|v| ~ 1); without the hi + lo |k|^2
# the |k|^2 = 64 kappa^2 cases miss it by 3x to 20x.
BF16_TOL = 2**-6


def bf16_valued(x: Tensor) -> Tensor:
    """x rounded to bf16 and back: what autocast's projections hand the kernel."""
    return x.bfloat16().float()


def clustered(d: int, far: float, seed: int = 0) -> tuple[fna.FNAAttention, Tensor, Tensor, Tensor]:
    """Queries and keys about kappa apart around a centre ``far`` kappa from 0: the weights
    spread over many keys while |k|^2 is about far^2 kappa^2, so 2 q.k - |k|^2 cancels."""
    kernel = fna.FNAAttention(H, d, alpha=2.0, kappa="vision")
    kappa = kernel.geo.kappa
    gen = torch.Generator().manual_seed(seed)
    centre = far * kappa * F.normalize(torch.randn(B, H, 1, d, generator=gen), dim=-1)
    k = bf16_valued(centre + kappa * torch.randn(B, H, T, d, generator=gen) / d**0.5)
    q = bf16_valued(centre + kappa * torch.randn(B, H, T, d, generator=gen) / d**0.5)
    v = bf16_valued(torch.randn(B, H, T, d, generator=gen))
    return kernel, q, k, v


def right_padding() -> Tensor:
    return torch.arange(T)[None, :] < torch.tensor([T, 40])[:, None]


SDPA = F.scaled_dot_product_attention


class SDPASpy:
    """Records what each scaled_dot_product_attention call is handed."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
        self.calls.append({"dtype": q.dtype, "width": q.shape[-1], **kwargs})
        return SDPA(q, k, v, **kwargs)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> SDPASpy:
    recorder = SDPASpy()
    monkeypatch.setattr(F, "scaled_dot_product_attention", recorder)
    return recorder


@pytest.mark.parametrize(("causal", "padded"), [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("far", [0.0, 8.0])
@pytest.mark.parametrize("d", [4, 8, 32])
def test_la_runs_in_bf16_under_autocast_within_the_bf16_tolerance(
    d: int, far: float, causal: bool, padded: bool, spy: SDPASpy
) -> None:
    """Under bf16 autocast the baseline's SDPA runs in bf16, and so does LA's (it ran in fp32
    before, so the cost ratio compared two precisions); |k|^2 travels as hi + lo bf16 columns,
    which keeps LA within BF16_TOL of the fp32 reference even where |k|^2 = 64 kappa^2."""
    kernel, q, k, v = clustered(d, far)
    mask = right_padding() if padded else None
    want = kernel.attend(q, k, v, mask, causal, "reference")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = kernel(q, k, v, mask, causal)
    assert [c["dtype"] for c in spy.calls] == [torch.bfloat16]
    assert spy.calls[0]["width"] == -(-(d + 2) // 8) * 8  # q' = [q, -1/2, -1/2], padded
    real = torch.ones(B, 1, T, 1, dtype=torch.bool) if mask is None else mask[:, None, :, None]
    assert (out.float() - want).mul(real).abs().max().item() <= BF16_TOL


def test_la_without_autocast_runs_in_the_inputs_precision(spy: SDPASpy) -> None:
    kernel, q, k, v = clustered(8, 0.0)
    out = kernel(q, k, v, None, False)
    assert out.dtype == torch.float32 and [c["dtype"] for c in spy.calls] == [torch.float32]
    assert spy.calls[0]["width"] == 16  # q' = [q, -1/2]: one norm column, as before


@pytest.mark.parametrize("zero_diagonal", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_right_padded_causal_la_needs_no_dense_mask(
    side: str, zero_diagonal: bool, spy: SDPASpy
) -> None:
    """Right padding: is_causal and no (T, T) mask, exact at every real query in float64,
    outputs and gradients (padding queries read padding keys: their outputs are not the
    reference's and reach nothing). Left padding, or the zero diagonal, keeps the mask."""
    options = {"tied": True, "zero_diagonal": True} if zero_diagonal else {}
    kernel = fna.FNAAttention(H, 8, alpha=2.0, **options).double()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(B, H, T, 8, generator=gen, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    mask = right_padding() if side == "right" else right_padding().flip(-1)
    assert fna.right_padded(mask) == (side == "right")
    real = mask[:, None, :, None]
    out = kernel.attend(q, k, v, mask, True, "sdpa") * real
    want = kernel.attend(q, k, v, mask, True, "reference") * real
    dense = side == "left" or zero_diagonal
    (call,) = spy.calls
    assert (call["attn_mask"] is not None) == dense and call["is_causal"] == (not dense)
    assert (out - want).abs().max().item() <= 1e-12
    weight = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), weight, materialize_grads=True)
    ref = torch.autograd.grad(want, (q, k, v), weight, materialize_grads=True)
    for g, r in zip(got, ref, strict=True):
        assert (g - r).abs().max().item() <= 1e-12 * (1 + r.abs().max().item())
