"""The diffusion fast path (DiffusionStepFunction) computes exactly what the reference computes."""

from __future__ import annotations

import os

import pytest
import torch

from pdelab.models.diffusion import (
    Diffusion,
    DiffusionStepFunction,
    diffusion_step,
    diffusion_step_reference,
    set_fast_path,
)
from pdelab.models.transformer import Classifier, diffusion_modules
from pdelab.spec.config import SITES, DiffusionSpec

F64 = torch.float64
CONFIGS = [((1,), (0.1,)), ((1,), (0.499,)), ((1, 2, 4), (0.16, 0.16, 0.16)), ((2, 3), (0.3, 0.1))]


def padding_mask(batch: int, length: int, lengths: list[int]) -> torch.Tensor:
    mask = torch.zeros(batch, length, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    return mask


def grads_of(layer: Diffusion, x: torch.Tensor, mask, g: torch.Tensor, reference: bool):
    """(output, d/dx, d/deta, d/dtheta) of <g, S(x)>."""
    x = x.detach().clone().requires_grad_(True)
    layer.zero_grad()
    out = layer.step_reference(x, mask) if reference else layer.step(x, mask)
    out.backward(g)
    return out.detach(), x.grad, layer.eta.grad.clone(), layer.theta.grad.clone()


@pytest.mark.parametrize(("strides", "alphas"), CONFIGS)
@pytest.mark.parametrize("masked", [False, True])
def test_fast_equals_reference_forward_and_gradients(strides, alphas, masked: bool) -> None:
    torch.manual_seed(0)
    layer = Diffusion(5, strides, alphas, layernorm=False).to(F64)
    assert layer.fast  # the default
    x, g = torch.randn(3, 17, 5, dtype=F64), torch.randn(3, 17, 5, dtype=F64)
    mask = padding_mask(3, 17, [17, 9, 3]) if masked else None
    fast = grads_of(layer, x, mask, g, reference=False)
    ref = grads_of(layer, x, mask, g, reference=True)
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert fast[3].abs().sum() > 0 or len(strides) == 1  # theta's gradient is exercised
    if masked:  # padding stays untouched and receives no gradient from real tokens
        assert torch.equal(fast[0][1, 9:], x[1, 9:])


@pytest.mark.parametrize("strides", [(1,), (1, 2, 4)])
@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_function(strides, masked: bool) -> None:
    torch.manual_seed(1)
    x = torch.randn(2, 9, 3, dtype=F64, requires_grad=True)
    alphas = torch.full((len(strides),), 0.4 / len(strides), dtype=F64, requires_grad=True)
    mask = padding_mask(2, 9, [9, 6]) if masked else None
    assert torch.autograd.gradcheck(
        lambda x, a: DiffusionStepFunction.apply(x, a, mask, strides), (x, alphas)
    )


@pytest.mark.parametrize("length", [1, 2, 4])
def test_stride_at_least_length_is_identity_edge_case(length: int) -> None:
    torch.manual_seed(2)
    x = torch.randn(2, length, 3, dtype=F64, requires_grad=True)
    alphas = torch.tensor([0.2, 0.2], dtype=F64, requires_grad=True)
    strides = (4, 8)  # both >= length: no edges at all
    out = diffusion_step(x, alphas, strides)
    torch.testing.assert_close(out, x.detach(), rtol=0, atol=0)
    torch.testing.assert_close(out, diffusion_step_reference(x, alphas, strides))
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad, torch.ones_like(x))
    assert torch.equal(alphas.grad, torch.zeros(2, dtype=F64))


def test_mixed_strides_one_beyond_length_and_fixed_coefficients() -> None:
    """Stride 4 on L = 3 drops out; a non-learnable layer still gives the right grad_x."""
    torch.manual_seed(3)
    layer = Diffusion(2, (1, 4), (0.2, 0.2), learnable=False, layernorm=False).to(F64)
    x = torch.randn(2, 3, 2, dtype=F64, requires_grad=True)
    g = torch.randn(2, 3, 2, dtype=F64)
    (gx_fast,) = torch.autograd.grad(layer.step(x), x, g)
    (gx_ref,) = torch.autograd.grad(layer.step_reference(x), x, g)
    torch.testing.assert_close(gx_fast, gx_ref, rtol=1e-12, atol=1e-12)


def test_fast_keeps_no_per_stride_intermediates() -> None:
    """Backward saves x, alphas and the mask only, however many strides there are."""
    x = torch.randn(2, 16, 4, requires_grad=True)
    alphas = torch.tensor([0.1, 0.1, 0.1], requires_grad=True)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        diffusion_step(x, alphas, (1, 2, 4))
    assert sum(t.numel() for t in saved) == x.numel() + alphas.numel()
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        diffusion_step_reference(x, alphas, (1, 2, 4))
    assert sum(t.numel() for t in saved) >= 3 * x.numel()  # one Delta_h x per stride


def test_non_contiguous_input_and_float32() -> None:
    torch.manual_seed(4)
    base = torch.randn(3, 4, 20)
    x = base.transpose(1, 2)  # (3, 20, 4), non-contiguous
    alphas = torch.tensor([0.2, 0.1])
    mask = padding_mask(3, 20, [20, 11, 5])
    fast = diffusion_step(x, alphas, (1, 3), mask)
    assert fast.is_contiguous()
    torch.testing.assert_close(fast, diffusion_step_reference(x, alphas, (1, 3), mask))


@pytest.mark.parametrize("site", SITES)
def test_classifier_logits_equal_with_fast_on_and_off(site: str) -> None:
    torch.manual_seed(5)
    spec = DiffusionSpec(sites=(site,), strides=(1, 2, 4), alpha=(0.16, 0.16, 0.16))
    model = Classifier(
        3,
        vocab_size=11,
        max_len=24,
        dim=16,
        layers=2,
        heads=4,
        mlp_dim=32,
        dropout=0.0,
        diffusion=spec,
    ).to(F64)
    model.eval()  # no dropout of any kind (attention dropout included); gradients still flow
    ids = torch.randint(2, 11, (3, 24))
    mask = padding_mask(3, 24, [24, 15, 6])
    ids[~mask] = 0
    assert all(m.fast for _, m in diffusion_modules(model))
    fast = model(ids, mask)
    fast.sum().backward()
    fast_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    assert set_fast_path(model, False) == len(diffusion_modules(model)) > 0
    ref = model(ids, mask)
    ref.sum().backward()
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, model.get_parameter(name).grad, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("PDELAB_TEST_COMPILE") != "1",
    reason="torch.compile takes ~30 s on CPU; set PDELAB_TEST_COMPILE=1 to run",
)
def test_compiled_step_equals_reference() -> None:
    torch.manual_seed(6)
    layer = Diffusion(4, (1, 2, 4), (0.16, 0.16, 0.16), layernorm=False, compile_step=True).to(F64)
    x, g = torch.randn(2, 20, 4, dtype=F64), torch.randn(2, 20, 4, dtype=F64)
    mask = padding_mask(2, 20, [20, 13])
    compiled = grads_of(layer, x, mask, g, reference=False)
    ref = grads_of(layer, x, mask, g, reference=True)
    for a, b in zip(compiled, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
