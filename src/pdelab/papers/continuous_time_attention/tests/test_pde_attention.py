"""PDE-evolved attention: fast path == materialized reference, stability, conservation."""

from __future__ import annotations

import math

import pytest
import torch

from pdelab.models.attention import ATTENTION_KERNELS, ReferenceKernel
from pdelab.models.smoothing import ReleasedSmoothing
from pdelab.papers.continuous_time_attention import attention as pa
from pdelab.spec.options import RELEASED_DEFAULTS

B, H, T, D = 2, 2, 11, 4
MY_KERNELS = ["longformer", "pde", "pde_longformer", "pde_reference"]
# Coefficients well inside the bounds but large enough that every term, including the
# asymmetric advection, changes the result visibly.
STRONG = {
    "diffusion": {"alpha": 0.3},
    "wave": {"c": 0.8},
    "advection_diffusion": {"alpha": 0.3, "beta": 0.5},
    "reaction_diffusion": {"alpha": 0.2, "beta": 0.5},
}


def qkv(seed: int = 0, t: int = T) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, t, D, generator=g, dtype=torch.float64) for _ in range(3))


def padding(t: int = T) -> torch.Tensor:
    mask = torch.ones(B, t, dtype=torch.bool)
    mask[1, t - 3 :] = False  # right padding on the second sequence
    return mask


def pair(pde: str, steps: int, **options) -> tuple[pa.PDEAttention, pa.PDEAttention]:
    """A fast kernel and its reference with identical, per-head distinct coefficients."""
    opts = {"pde": pde, "steps": steps, **STRONG[pde], **options}
    fast = pa.PDEAttention(H, D, **opts).double()
    ref = pa.PDEReferenceAttention(H, D, **opts).double()
    with torch.no_grad():
        for name in fast.coef_names:
            value = getattr(fast, name) * torch.tensor([1.0, 0.6], dtype=torch.float64)
            getattr(fast, name).copy_(value)
            getattr(ref, name).copy_(value)
    return fast, ref


def stencil_matrix(fn, w: torch.Tensor | None, t: int) -> torch.Tensor:
    """The (T, T) matrix M with fn(a) == M @ a for column vectors a."""
    return fn(torch.eye(t, dtype=torch.float64), w).T


# -- stencils ---------------------------------------------------------------------------------


def test_neumann_laplacian_spectrum_and_symmetry() -> None:
    lap = stencil_matrix(pa.laplacian, None, T)
    assert torch.equal(lap, lap.T)
    assert torch.allclose(lap.sum(0), torch.zeros(T, dtype=torch.float64))
    expected = -4 * torch.sin(math.pi * torch.arange(T, dtype=torch.float64) / (2 * T)) ** 2
    assert torch.allclose(torch.linalg.eigvalsh(lap), expected.sort().values, atol=1e-12)


def test_gradient_is_central_difference_with_replicate_ends_and_adjoint_matches() -> None:
    a = torch.randn(T, dtype=torch.float64)
    g = pa.gradient(a)
    assert torch.allclose(g[1:-1], (a[2:] - a[:-2]) / 2)
    assert torch.allclose(g[0], (a[1] - a[0]) / 2) and torch.allclose(g[-1], (a[-1] - a[-2]) / 2)
    w = torch.ones(T - 1, dtype=torch.float64)
    w[6] = 0  # a padding gap
    grad, adj = stencil_matrix(pa.gradient, w, T), stencil_matrix(pa.gradient_adjoint, w, T)
    assert torch.allclose(adj, grad.T)
    assert not torch.allclose(grad.T, -grad)  # not antisymmetric: the transpose matters


def test_no_flux_into_padding() -> None:
    w = torch.ones(T - 1, dtype=torch.float64)
    w[7:] = 0  # keys 8.. are padding
    a = torch.zeros(T, dtype=torch.float64)
    a[7] = 1.0  # mass on the last real key
    assert torch.all(pa.laplacian(a, w)[8:] == 0)
    assert pa.laplacian(a, w).sum() == 0


# -- fast path == reference ----------------------------------------------------------------


@pytest.mark.parametrize("pde", pa.LINEAR_PDES)
@pytest.mark.parametrize("steps", [0, 1, 2, 4])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_fast_path_equals_reference(pde: str, steps: int, padded: bool, causal: bool) -> None:
    q, k, v = qkv(steps)
    mask = padding() if padded else None
    fast, ref = pair(pde, steps)
    out = fast(q, k, v, mask, causal)
    torch.testing.assert_close(out, ref(q, k, v, mask, causal), rtol=0, atol=1e-12)
    if steps:
        plain = ReferenceKernel(H, D)(q, k, v, mask, causal)
        assert (out - plain).abs().max() > 1e-3  # the PDE really did something


@pytest.mark.parametrize("pde", pa.LINEAR_PDES)
@pytest.mark.parametrize("padded", [False, True])
def test_fast_path_equals_reference_two_sided_causal(pde: str, padded: bool) -> None:
    q, k, v = qkv(1)
    mask = padding() if padded else None
    fast, ref = pair(pde, 3, causal_form="two_sided")
    torch.testing.assert_close(
        fast(q, k, v, mask, True), ref(q, k, v, mask, True), rtol=0, atol=1e-12
    )


def test_causal_fast_path_with_more_steps_than_tokens() -> None:
    q, k, v = qkv(2, t=3)
    fast, ref = pair("diffusion", 4)
    torch.testing.assert_close(
        fast(q, k, v, None, True), ref(q, k, v, None, True), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_pde_longformer_fast_equals_reference(causal: bool, padded: bool) -> None:
    q, k, v = qkv(3)
    mask = padding() if padded else None
    opts = {
        "window": 4,
        "n_global": 2,
        "pde": "advection_diffusion",
        "steps": 3,
        **STRONG["advection_diffusion"],
    }
    fast = pa.PDELongformerAttention(H, D, **opts).double()
    ref = pa.PDELongformerAttention(H, D, fast=False, **opts).double()
    torch.testing.assert_close(
        fast(q, k, v, mask, causal), ref(q, k, v, mask, causal), rtol=0, atol=1e-12
    )


def test_fast_path_matches_in_float32() -> None:
    q, k, v = (x.float() * 3 for x in qkv(4))
    fast, ref = pair("diffusion", 4)
    fast, ref = fast.float(), ref.float()
    for causal in (False, True):
        torch.testing.assert_close(
            fast(q, k, v, None, causal), ref(q, k, v, None, causal), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_reaction_diffusion_chunked_equals_unchunked(causal: bool, padded: bool) -> None:
    q, k, v = qkv(5)
    mask = padding() if padded else None
    opts = {"pde": "reaction_diffusion", "steps": 4, **STRONG["reaction_diffusion"]}
    chunked = pa.PDEAttention(H, D, chunk_size=3, **opts).double()
    whole = pa.PDEReferenceAttention(H, D, **opts).double()
    assert chunked.chunk_size == 3 and whole.chunk_size is None
    out = chunked(q, k, v, mask, causal)
    torch.testing.assert_close(out, whole(q, k, v, mask, causal), rtol=0, atol=1e-14)
    # and the reaction term acts: it differs from pure diffusion with the same alpha
    diff = pa.PDEReferenceAttention(H, D, pde="diffusion", steps=4, alpha=0.2).double()
    assert (out - diff(q, k, v, mask, causal)).abs().max() > 1e-4


@pytest.mark.parametrize("pde", pa.PDE_TYPES)
@pytest.mark.parametrize("name", ["pde", "pde_reference"])
@pytest.mark.parametrize("causal", [False, True])
def test_zero_steps_is_plain_softmax_attention(pde: str, name: str, causal: bool) -> None:
    q, k, v = qkv(6)
    mask = padding()
    kernel = ATTENTION_KERNELS.get(name)(heads=H, head_dim=D, pde=pde, steps=0).double()
    torch.testing.assert_close(
        kernel(q, k, v, mask, causal),
        ReferenceKernel(H, D)(q, k, v, mask, causal),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize("causal", [False, True])
def test_longformer_is_masked_softmax_and_pde_longformer_zero_steps_matches(causal: bool) -> None:
    q, k, v = qkv(7)
    mask = padding()
    lf = ATTENTION_KERNELS.get("longformer")(heads=H, head_dim=D, window=4, n_global=1)
    out = lf(q, k, v, mask, causal)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    allowed = pa.longformer_pattern(T, 4, 1, q.device)[None, None] & mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    pde0 = pa.PDELongformerAttention(H, D, window=4, n_global=1, steps=0).double()
    torch.testing.assert_close(pde0(q, k, v, mask, causal), out, rtol=0, atol=1e-12)
    # a window covering everything, no global tokens: full attention
    full = ATTENTION_KERNELS.get("longformer")(heads=H, head_dim=D, window=2 * T, n_global=0)
    torch.testing.assert_close(
        full(q, k, v, mask, causal),
        ReferenceKernel(H, D)(q, k, v, mask, causal),
        rtol=0,
        atol=1e-12,
    )


def test_longformer_pattern() -> None:
    p = pa.longformer_pattern(8, window=2, n_global=1, device="cpu")
    assert p[4, 3] and p[4, 5] and not p[4, 2] and not p[4, 6]  # one key each side
    assert p[0].all() and p[:, 0].all()  # the global token


# -- every registered kernel ----------------------------------------------------------------


def test_registered_names() -> None:
    mine = [
        n for n in ATTENTION_KERNELS.names() if ATTENTION_KERNELS.get(n).__module__ == pa.__name__
    ]
    assert mine == MY_KERNELS


@pytest.mark.parametrize("name", MY_KERNELS)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_backward(name: str, causal: bool) -> None:
    extra = {"window": 4} if "longformer" in name else {}
    kernel = ATTENTION_KERNELS.get(name)(heads=H, head_dim=D, dropout=0.0, **extra)
    q, k, v = (x.float().requires_grad_(True) for x in qkv(8))
    out = kernel(q, k, v, padding(), causal)
    assert out.shape == (B, H, T, D) and torch.isfinite(out).all()
    (out * torch.randn_like(out)).sum().backward()
    for tensor in (q, k, v, *kernel.parameters()):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()
        assert tensor.grad.abs().sum() > 0


@pytest.mark.parametrize("pde", pa.PDE_TYPES)
def test_every_pde_type_trains_through_the_fast_kernel(pde: str) -> None:
    kernel = pa.PDEAttention(H, D, pde=pde)
    q, k, v = (x.float().requires_grad_(True) for x in qkv(9))
    kernel(q, k, v, None, True).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in kernel.parameters())


def test_dropout_only_in_training_and_on_a0() -> None:
    q, k, v = (x.float() for x in qkv(10))
    kernel = pa.PDEAttention(H, D, dropout=0.5)
    kernel.eval()
    torch.testing.assert_close(
        kernel(q, k, v, None, True), pa.PDEAttention(H, D)(q, k, v, None, True)
    )
    kernel.train()
    assert (kernel(q, k, v, None, True) - kernel(q, k, v, None, True)).abs().max() > 0


# -- stability ------------------------------------------------------------------------------


@pytest.mark.parametrize("pde", pa.PDE_TYPES)
def test_table_11_defaults_are_stable_and_used(pde: str) -> None:
    pa.check_stability(pde=pde)
    pa.check_stability(pde=pde, steps=4, dt=1.0, **pa.TABLE_11[pde])
    kernel = pa.PDEAttention(H, D, pde=pde)
    for name, value in pa.TABLE_11[pde].items():
        assert torch.allclose(getattr(kernel, name), torch.full((H,), value))


@pytest.mark.parametrize(
    ("options", "key", "bound"),
    [
        ({"pde": "diffusion", "alpha": 0.6}, "alpha", "alpha <= 0.5"),
        ({"pde": "diffusion", "alpha": 0.3, "dt": 2.0}, "alpha", "alpha <= 0.25"),
        ({"pde": "diffusion", "alpha": -0.1}, "alpha", ">= 0"),
        ({"pde": "wave", "c": 1.5}, "'c'", "c <= 1"),
        ({"pde": "reaction_diffusion", "beta": 0.9}, "beta", "|beta| <= 0.8"),
        ({"pde": "advection_diffusion", "beta": 0.5}, "beta", "|beta| <= 0.447214"),
        ({"pde": "advection_diffusion", "alpha": 0.7}, "alpha", "alpha <= 0.5"),
        ({"pde": "diffusion", "c": 0.1}, "'c'", "no effect"),
        ({"pde": "heat"}, "pde", "diffusion"),
        ({"steps": -1}, "steps", ">= 0"),
        ({"dt": 0.0}, "dt", "> 0"),
    ],
)
def test_check_stability_rejects(options: dict, key: str, bound: str) -> None:
    with pytest.raises(ValueError) as err:
        pa.check_stability(**options)
    assert key in str(err.value) and bound in str(err.value)


def test_kernel_construction_checks_stability() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ATTENTION_KERNELS.get("pde")(heads=H, head_dim=D, alpha=0.9)
    pa.check_stability(pde="diffusion", alpha=0.5, window=256, fast=True)  # at the bound
    with pytest.raises(ValueError, match="fast"):
        ATTENTION_KERNELS.get("pde_reference")(heads=H, head_dim=D, fast=True)


def test_unstable_coefficient_really_blows_up() -> None:
    """The bound is the real one: just past it the top mode grows, at it nothing does."""
    a0 = torch.zeros(1, 1, 1, 32, dtype=torch.float64)
    a0[..., ::2] = 1.0  # the highest-frequency mode (plus a constant)
    for alpha, grows in ((0.5, False), (0.55, True)):
        coef = {"alpha": torch.tensor([alpha], dtype=torch.float64)}
        a = pa.evolve(a0, None, coef, "diffusion", 60, 1.0)
        assert (a.abs().max() > 2) == grows


# -- properties of the evolved attention ------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_diffusion_rows_keep_mass_and_stay_nonnegative_at_the_cfl_bound(causal: bool) -> None:
    q, k, _ = qkv(11)
    q = q * 4  # peaked rows: the hardest case for positivity
    mask = padding()
    kernel = pa.PDEReferenceAttention(H, D, pde="diffusion", alpha=0.5, steps=6).double()
    a = kernel.attention_weights(q, k, mask, causal)
    torch.testing.assert_close(a.sum(-1), torch.ones(B, H, T, dtype=torch.float64))
    assert a.min() >= 0
    assert torch.all(a[1, :, :, T - 3 :] == 0)  # nothing flowed into the padding
    if causal:
        assert torch.all(a.triu(diagonal=1) == 0)  # nor onto future keys
    a0 = pa.PDEReferenceAttention(H, D, steps=0).double().attention_weights(q, k, mask, causal)
    assert (a - a0).abs().max() > 1e-2


def test_reaction_diffusion_stays_in_unit_interval_at_its_bound() -> None:
    q, k, _ = qkv(12)
    kernel = pa.PDEReferenceAttention(
        H, D, pde="reaction_diffusion", alpha=0.3, beta=0.4, steps=6
    ).double()
    a = kernel.attention_weights(q * 4, k, None, False)
    assert a.min() >= 0 and a.max() <= 1


def test_two_sided_causal_form_moves_mass_onto_future_keys() -> None:
    q, k, _ = qkv(13)
    kernel = pa.PDEReferenceAttention(H, D, steps=2, causal_form="two_sided").double()
    a = kernel.attention_weights(q, k, None, True)
    assert a.triu(diagonal=1).abs().max() > 1e-3


# -- the released code's mechanism ------------------------------------------------------------


def test_released_smoothing_keeps_first_and_last_token() -> None:
    x = torch.randn(B, T, 6, dtype=torch.float64)
    smooth = ReleasedSmoothing(steps=2).double()
    y = smooth(x)
    assert y.shape == x.shape
    assert torch.equal(y[:, 0], x[:, 0]) and torch.equal(y[:, -1], x[:, -1])
    single = ReleasedSmoothing(steps=1).double()
    assert torch.allclose(single.alpha, torch.tensor([0.1], dtype=torch.float64))
    one = single(x)
    alpha = single.alpha[0].detach()
    expected = x[:, 1:-1] + alpha * (x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2])
    torch.testing.assert_close(one[:, 1:-1], expected, rtol=0, atol=1e-15)
    (y.square().sum()).backward()
    assert smooth.alpha.grad is not None and smooth.alpha.shape == (2,)


@pytest.mark.parametrize("pde", list(RELEASED_DEFAULTS))
def test_released_smoothing_variants_and_padding(pde: str) -> None:
    x = torch.randn(B, T, 6, dtype=torch.float64)
    mask = padding()
    y = ReleasedSmoothing(pde=pde).double()(x, mask)
    assert torch.equal(y[:, 0], x[:, 0]) and torch.equal(y[:, -1], x[:, -1])
    assert torch.equal(y[1, T - 4 :], x[1, T - 4 :])  # padding and its neighbour stay put
    assert (y[:, 1:-1] - x[:, 1:-1]).abs().max() > 1e-3
    causal = ReleasedSmoothing(pde=pde, causal=True).double()(x)
    assert torch.equal(causal[:, :2], x[:, :2])


def test_released_smoothing_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="pde"):
        ReleasedSmoothing(pde="heat")
    with pytest.raises(ValueError, match="beta"):
        ReleasedSmoothing(pde="diffusion", beta=0.1)
