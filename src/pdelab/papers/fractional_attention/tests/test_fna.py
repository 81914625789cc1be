"""Fractional neural attention: options fail at resolve time, every fast path equals the
materialised reference in float64 (forward and gradients, padded or not), the projections
obey their constraints, and Phi is the paper's kernel."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from torch import Tensor

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.seq2seq import CrossAttention
from pdelab.models.transformer import SelfAttention
from pdelab.papers.fractional_attention import attention as fna
from pdelab.papers.fractional_attention.options import KERNEL_OPTIONS, distance_scale
from pdelab.spec.config import ConfigError, resolve
from pdelab.spec.plugins import import_mechanisms
from pdelab.training.causality import Causality, probe_causality, verdict
from pdelab.training.precision import full_precision

import_mechanisms()

B, T, H, DH = 2, 11, 2, 4
CHUNK = 4  # three key blocks of 11 keys: the online logsumexp crosses blocks

# Every variant of the mechanism, as kernel options (alpha is crossed with each below).
VARIANTS: dict[str, dict] = {
    "general": {},
    "op": {"orthogonal": True},
    "tied": {"tied": True},
    "op_tied": {"orthogonal": True, "tied": True},
    "tied_zero_diagonal": {"tied": True, "zero_diagonal": True},
    "spherical": {"spherical": True},
    "op_spherical": {"orthogonal": True, "spherical": True},
    "spherical_tied_zero_diagonal": {"spherical": True, "tied": True, "zero_diagonal": True},
    "vision": {"kappa": "vision"},
    "numeric_kappa": {"kappa": 3.0},
    "laplace": {"laplace": True},
    "tied_laplace": {"tied": True, "laplace": True},
    "spherical_laplace": {"spherical": True, "laplace": True},
}
ALPHAS = (1.0, 1.2, 2.0)


def takes(variant: str, alpha: float) -> bool:
    """The Laplace ablation is the power law's small-z form: alpha < 2 only."""
    return not (VARIANTS[variant].get("laplace") and alpha == 2)


FNA_KERNELS = tuple(KERNEL_OPTIONS)


def padding_mask(padded: bool) -> Tensor | None:
    if not padded:
        return None
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 7:] = False
    return mask


def qkv(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(B, H, T, DH, generator=gen, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )


def grads(out: Tensor, inputs: tuple[Tensor, ...], seed: int = 1) -> list[Tensor]:
    """Gradients of a random projection of ``out`` (zeros for an input the output ignores)."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
    return list(torch.autograd.grad(out, inputs, weight, materialize_grads=True))


def assert_close(a: Tensor, b: Tensor, tol: float = 1e-12) -> None:
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs().max().item() <= tol * (1 + b.abs().max().item())


# --------------------------------------------------------------------------------------------
# Options, checked when params.yaml is resolved
# --------------------------------------------------------------------------------------------


def with_variant(params: dict, model: dict) -> dict:
    p = copy.deepcopy(params)
    p["variants"]["fna_test"] = {"model": model}
    return p


@pytest.mark.parametrize(
    ("kernel", "options", "message"),
    [
        ("fna", {"alpha": 2.5}, r"'alpha'=2\.5 must be a number in \[1, 2\]"),
        ("fna", {"alpha": 0.5}, r"'alpha'=0\.5"),
        ("fna_reference", {"alpha": True}, r"'alpha'=True"),
        ("fna", {"kappa": 0}, r"'kappa'=0 must be > 0 or one of text, vision, translation"),
        ("fna", {"kappa": -2.0}, r"'kappa'=-2\.0 must be > 0"),
        ("fna", {"kappa": "txt"}, r"'kappa'='txt'"),
        ("fna", {"spherical": True, "kappa": "vision"}, r"'kappa'='vision' with spherical"),
        ("fna", {"zero_diagonal": True}, r"'zero_diagonal'=true needs tied=true"),
        ("fna_dp", {"tied": "yes"}, r"'tied'='yes' must be true or false"),
        ("fna", {"chunk_size": 0}, r"'chunk_size'=0 must be a positive integer"),
        ("fna", {"laplace": True, "alpha": 2}, r"'laplace'=true needs alpha < 2"),
        ("fna_dp", {"laplace": True}, r"'laplace' is not taken by kernel 'fna_dp'"),
        ("fna", {"beta": 1.0}, r"'beta' is not taken by kernel 'fna'"),
        ("fna_reference", {"chunk_size": 8}, r"'chunk_size' is not taken by kernel"),
        ("fna_dp", {"alpha": 1.2}, r"'alpha' is not taken by kernel 'fna_dp'"),
    ],
)
def test_bad_options_fail_at_resolve_time_naming_the_key(
    params: dict, kernel: str, options: dict, message: str
) -> None:
    p = with_variant(params, {"attention": kernel, "attention_options": options})
    with pytest.raises(ConfigError, match=r"variants\.fna_test\.model\.attention_options.*"):
        resolve(p, "listops", "fna_test", 0)
    with pytest.raises(ConfigError, match=message):
        resolve(p, "listops", "fna_test", 0)


@pytest.mark.parametrize("kernel", FNA_KERNELS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_resolves_and_builds(params: dict, kernel: str, variant: str) -> None:
    options = {k: v for k, v in VARIANTS[variant].items() if k in KERNEL_OPTIONS[kernel]}
    p = with_variant(params, {"attention": kernel, "attention_options": options, "heads": 2})
    spec = resolve(p, "listops", "fna_test", 0)
    assert spec.model.attention == kernel and spec.model.attention_options == options
    module = ATTENTION_KERNELS.get(kernel)(heads=2, head_dim=4, **options)
    for key, value in options.items():
        assert getattr(module, key) == value


def test_a_kernel_rejects_bad_options_when_built_directly() -> None:
    with pytest.raises(ValueError, match=r"'alpha'=3"):
        ATTENTION_KERNELS.get("fna")(heads=2, head_dim=4, alpha=3)
    with pytest.raises(ValueError, match=r"d_M = dim - 1"):
        ATTENTION_KERNELS.get("fna")(heads=1, head_dim=1, spherical=True)


# --------------------------------------------------------------------------------------------
# kappa, d_M and Phi
# --------------------------------------------------------------------------------------------


def test_kappa_follows_the_official_code() -> None:
    assert distance_scale("text", 1.2, 32, 8, False) == pytest.approx(258.3, abs=0.05)  # spec 7
    assert distance_scale("text", 2.0, 32, 8, False) == pytest.approx(math.sqrt(32))
    assert distance_scale("vision", 1.2, 8, 6, False) == 8.0
    assert distance_scale("translation", 1.2, 64, 8, False) == 64.0
    assert distance_scale("translation", 2.0, 64, 8, False) == 8.0
    d_m = 16 - 1  # one spherical head: the sphere S^(d-1)
    assert distance_scale("text", 1.2, 16, 1, True) == pytest.approx(
        math.pi / (math.pi ** (1 / d_m) - 1)
    )
    assert distance_scale("text", 2.0, 16, 1, True) == 1.0
    assert distance_scale(2.5, 1.2, 16, 4, True) == 2.5
    assert fna.geometry(1, 16, 1.2, "text", True, False).exponent == pytest.approx(15 + 1.2)
    assert fna.geometry(4, 16, 1.2, "text", True, False).exponent == pytest.approx(16 + 1.2)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_weights_are_phi_of_the_distance_row_normalised(alpha: float) -> None:
    """One query at 0 and keys on a line at 0, 1, 3 (d_H = 1, kappa = 2 by hand)."""
    kernel = fna.FNAReference(heads=1, head_dim=1, alpha=alpha, kappa=2.0).double()
    q = torch.zeros(1, 1, 3, 1, dtype=torch.float64)
    k = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64).view(1, 1, 3, 1)
    a = kernel.weights(q, k, None, False)[0, 0, 0]
    z = torch.tensor([0.0, 0.5, 1.5], dtype=torch.float64)
    phi = torch.exp(-z.square()) if alpha == 2 else (1 + z) ** -(1 + alpha)
    assert_close(a, phi / phi.sum(), 1e-15)


def test_the_laplace_ablation_is_the_power_laws_small_z_form() -> None:
    """exp(-(d_M + alpha) z) by hand (d_H = 1, kappa = 2), and it meets (1 + z)^-(d_M + alpha)
    to first order as z -> 0 while its tail is far lighter."""
    q = torch.zeros(1, 1, 3, 1, dtype=torch.float64)
    k = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64).view(1, 1, 3, 1)
    a = fna.FNAReference(1, 1, alpha=1.2, kappa=2.0, laplace=True).weights(q, k, None, False)
    phi = torch.exp(-2.2 * torch.tensor([0.0, 0.5, 1.5], dtype=torch.float64))
    assert_close(a[0, 0, 0], phi / phi.sum(), 1e-15)
    geo = fna.geometry(1, 1, 1.2, 2.0, False, False, laplace=True)
    power = fna.geometry(1, 1, 1.2, 2.0, False, False)
    dist = torch.tensor([1e-4, 100.0], dtype=torch.float64)
    assert (geo.log_phi(dist) - power.log_phi(dist))[0].abs() < 1e-8
    assert geo.log_phi(dist)[1] < power.log_phi(dist)[1] - 100


def test_the_power_law_tail_is_heavier_than_the_gaussian() -> None:
    """Far keys keep weight for alpha < 2 (a power of z) and lose it at alpha = 2 (exp(-z^2))."""
    q = torch.zeros(1, 1, 2, 1, dtype=torch.float64)
    k = torch.tensor([0.0, 20.0], dtype=torch.float64).view(1, 1, 2, 1)
    far = {
        alpha: fna.FNAReference(1, 1, alpha=alpha, kappa=2.0).weights(q, k, None, False)[0, 0, 0, 1]
        for alpha in (1.2, 2.0)
    }
    assert far[1.2] == pytest.approx(11**-2.2 / (1 + 11**-2.2))
    assert far[2.0] < 1e-40 < far[1.2]


@pytest.mark.parametrize("padded", [False, True])
def test_reference_rows_sum_to_one_and_padding_weighs_nothing(padded: bool) -> None:
    q, k, _ = qkv()
    mask = padding_mask(padded)
    kernel = fna.FNAReference(H, DH, tied=True, zero_diagonal=True)
    a = kernel.weights(q, k, mask, False)
    assert_close(a.sum(-1), torch.ones(B, H, T, dtype=torch.float64))
    assert (a.diagonal(dim1=-2, dim2=-1) == 0).all()
    if padded:
        assert (a[1, :, :, 7:] == 0).all()
    untouched = fna.FNAReference(H, DH, tied=True).weights(q, k, mask, False)
    real = 7 if padded else T  # a padded query's own key is padding
    top = untouched[:, :, :real].argmax(-1)
    assert (top == torch.arange(real)).all()  # Phi(0) = 1 is the largest in a row


# --------------------------------------------------------------------------------------------
# Fast paths against the reference, float64
# --------------------------------------------------------------------------------------------

KERNEL_CASES = [
    case
    for case in itertools.product(VARIANTS, ALPHAS, [False, True], [False, True])
    if takes(*case[:2])
]


def case_id(case: tuple) -> str:
    variant, alpha, padded, causal = case
    return f"{variant}-a{alpha}-{'padded' if padded else 'full'}-{'causal' if causal else 'bi'}"


def fast_paths(kernel: fna.FNAAttention) -> list[str]:
    return ["chunked"] + (["sdpa"] if kernel.geo.gaussian and not kernel.spherical else [])


@pytest.mark.parametrize("case", KERNEL_CASES, ids=case_id)
def test_fast_paths_equal_the_reference(case: tuple) -> None:
    variant, alpha, padded, causal = case
    options = VARIANTS[variant]
    kernel = fna.FNAAttention(H, DH, alpha=alpha, chunk_size=CHUNK, **options).double()
    mask = padding_mask(padded)
    q, k, v = qkv()
    want = kernel.attend(q, k, v, mask, causal, "reference")
    want_grads = grads(want, (q, k, v))
    for path in fast_paths(kernel):
        out = kernel.attend(q, k, v, mask, causal, path)
        target, target_grads = want, want_grads
        if path == "sdpa" and causal and padded:  # right padding: see test_fna_la.py
            real = mask[:, None, :, None]
            target = kernel.attend(q, k, v, mask, causal, "reference") * real
            out = out * real
            target_grads = grads(target, (q, k, v))
        assert_close(out, target)
        for got, ref in zip(grads(out, (q, k, v)), target_grads, strict=True):
            assert_close(got, ref)
    assert kernel.path(q) == fast_paths(kernel)[-1]  # what forward runs on a CPU


# one case per variant in the fast tier (alpha 1.2, padded, causal), the rest in the slow one
FLEX_CASES = [
    case if case[1:] == (1.2, True, True) else pytest.param(case, marks=pytest.mark.slow)
    for case in KERNEL_CASES
]


@pytest.mark.filterwarnings("ignore")  # FlexAttention warns that it runs uncompiled
@pytest.mark.parametrize("case", FLEX_CASES, ids=case_id)
def test_the_flex_score_mod_equals_the_reference(case: tuple) -> None:
    """FlexAttention's forward runs eagerly on a CPU (its backward needs CUDA, below)."""
    variant, alpha, padded, causal = case
    kernel = fna.FNAAttention(H, DH, alpha=alpha, **VARIANTS[variant]).double()
    q, k, v = (x.detach() for x in qkv())
    mask = padding_mask(padded)
    want = kernel.attend(q, k, v, mask, causal, "reference")
    assert_close(kernel.attend(q, k, v, mask, causal, "flex"), want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's backward needs CUDA")
@pytest.mark.parametrize("variant", VARIANTS)
def test_flex_on_cuda_equals_the_reference_with_gradients(variant: str) -> None:
    """In full_precision, as FNAAttention.forward calls it (fp32 products, no TF32)."""
    kernel = fna.FNAAttention(H, DH, **VARIANTS[variant]).cuda()
    q, k, v = (x.detach().float().cuda().requires_grad_() for x in qkv())
    mask = padding_mask(True).cuda()
    with full_precision("cuda"):
        want = kernel.attend(q, k, v, mask, False, "reference")
        out = kernel.attend(q, k, v, mask, False, "flex")
        assert_close(out, want, 1e-4)
        for got, ref in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
            assert_close(got, ref, 1e-3)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_a_row_with_no_key_gives_zero_on_every_path(alpha: float) -> None:
    """Causal with the diagonal dropped leaves query 0 no key: 0 out, as F.normalize gives."""
    kernel = fna.FNAAttention(H, DH, alpha=alpha, tied=True, zero_diagonal=True, chunk_size=CHUNK)
    q, k, v = qkv()
    kernel = kernel.double()
    for path in ["reference", *fast_paths(kernel)]:
        out = kernel.attend(q, k, v, None, True, path)
        assert (out[:, :, 0] == 0).all(), path
        assert all(torch.isfinite(g).all() for g in grads(out, (q, k, v))), path


@pytest.mark.parametrize("case", KERNEL_CASES, ids=case_id)
def test_chunked_tiles_and_the_shifted_sum_equal_the_reference(case: tuple) -> None:
    """Several query blocks and ragged last tiles (rows < T), and the forward's second sum,
    exp(log C - max log C), forced: the same output and gradients as the reference."""
    variant, alpha, padded, causal = case
    kernel = fna.FNAAttention(H, DH, alpha=alpha, **VARIANTS[variant]).double()
    mask = padding_mask(padded)
    q, k, v = qkv()
    want = kernel.attend(q, k, v, mask, causal, "reference")
    want_grads = grads(want, (q, k, v))
    for rows, chunk, shifted in ((3, 4, False), (4, 5, True)):
        q_, k_ = kernel.prepare(q, k)
        args = (mask, kernel.geo, causal, kernel.zero_diagonal, chunk, rows, shifted)
        out = fna.ChunkedAttention.apply(q_, k_, v, *args)
        assert_close(out, want)
        for got, ref in zip(grads(out, (q, k, v)), want_grads, strict=True):
            assert_close(got, ref)


def test_tile_rows_fill_the_scratch_budget() -> None:
    """Query rows per tile: TILE_BYTES over (buffers x B*H x chunk) scores, in steps of
    ROW_STEP, at least ROW_STEP, at most T; the forward's one scratch tile takes twice the
    rows of the backward's two."""
    step, budget = fna.ROW_STEP, fna.TILE_BYTES
    rows = fna.tile_rows(4, 4096, 256, 4)
    assert rows == budget // (4 * 256 * 4) and rows % step == 0
    assert fna.tile_rows(4, 4096, 256, 4, buffers=2) == rows // 2
    assert fna.tile_rows(4, 11, 4, 8) == 11  # short sequences: one block of queries
    assert fna.tile_rows(3, 4096, 256, 4) % step == 0
    assert fna.tile_rows(1024, 4096, 256, 4) == step  # many heads: the floor


def test_the_chunked_path_runs_on_one_intra_op_thread() -> None:
    """one_thread sets torch's threads to 1 inside and restores them, on error too."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with fna.one_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), fna.one_thread():
            raise RuntimeError
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_log_space_normalises_rows_the_official_normalisation_cannot() -> None:
    """d_H = 64 (exponent -65.2) and keys far from every query: each weight in a row is below
    F.normalize's 1e-12 floor (in float32 it underflows to 0), so the official computation
    leaves the rows unnormalised; the chunked path, in log space, normalises them."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 6, 64, generator=gen, dtype=torch.float64)
    k = 40 * torch.randn(1, 1, 6, 64, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 1, 6, 64, generator=gen, dtype=torch.float64)
    kernel = fna.FNAAttention(1, 64, alpha=1.2, kappa="vision")
    z = torch.cdist(q, k) / kernel.geo.kappa
    exact = torch.softmax(-kernel.geo.exponent * torch.log1p(z), dim=-1) @ v
    fast = kernel.float().attend(q.float(), k.float(), v.float(), None, False, "chunked")
    assert_close(fast.double(), exact, 1e-4)
    for dtype in (torch.float32, torch.float64):
        official = kernel.to(dtype).weights(q.to(dtype), k.to(dtype), None, False)
        assert (official.sum(-1) < 1e-6).all(), dtype


@pytest.mark.parametrize("alpha", [1.2, 2.0])
@pytest.mark.parametrize("padded", [False, True])
def test_causal_fna_reads_no_future_token(alpha: float, padded: bool) -> None:
    torch.manual_seed(0)
    layer = SelfAttention(H * DH, H, 0.0, "fna", kernel_options={"alpha": alpha}).double()
    mask = padding_mask(padded)
    x = torch.randn(B, T, H * DH, dtype=torch.float64)
    report = probe_causality(lambda y: layer(y, mask, causal=True), x, tol=1e-12)
    assert verdict(report) is Causality.CAUSAL
    both_ways = probe_causality(lambda y: layer(y, mask, causal=False), x, tol=1e-12)
    assert verdict(both_ways) is Causality.LEAKS  # the probe can tell


# --------------------------------------------------------------------------------------------
# Whole attention layers: projections and kernels together
# --------------------------------------------------------------------------------------------


def layers(kernel: str, options: dict, heads: int) -> tuple[SelfAttention, SelfAttention]:
    """(fast layer, reference layer) with the same weights, in float64."""
    torch.manual_seed(0)
    fast = SelfAttention(8, heads, 0.0, kernel, kernel_options=options).double()
    ref_options = {k: v for k, v in options.items() if k != "chunk_size"}
    ref = SelfAttention(8, heads, 0.0, "fna_reference", kernel_options=ref_options).double()
    ref.load_state_dict(fast.state_dict())
    return fast, ref


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize(
    ("variant", "alpha"),
    [(v, a) for v in VARIANTS for a in (1.2, 2.0) if takes(v, a)],
)
def test_every_variant_layer_matches_its_reference(variant: str, alpha: float, heads: int) -> None:
    fast, ref = layers("fna", {**VARIANTS[variant], "alpha": alpha, "chunk_size": CHUNK}, heads)
    x = torch.randn(B, T, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    mask = padding_mask(True)
    outs = [layer(x, mask) for layer in (fast, ref)]
    assert_close(outs[0], outs[1])
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(outs[0].shape, generator=gen, dtype=torch.float64)
    for out in outs:
        (out * w).sum().backward()
    for (name, p), (_, p_ref) in zip(fast.named_parameters(), ref.named_parameters(), strict=True):
        assert p.grad is not None, name
        assert_close(p.grad, p_ref.grad)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("kernel", ["fna", "fna_reference", "fna_dp"])
def test_projections_obey_their_constraints(kernel: str, heads: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(B, T, 8)
    dim = 8

    def build(**options) -> SelfAttention:
        return SelfAttention(dim, heads, 0.0, kernel, kernel_options=options)

    general = build()
    assert isinstance(general.qkv, fna.Projection)  # the kernel's own projection is used
    assert all(m.bias is None for m in general.qkv.modules() if isinstance(m, torch.nn.Linear))
    op = build(orthogonal=True)
    w_k = op.qkv.key.weight
    assert_close(w_k @ w_k.T, torch.eye(dim), 1e-5)
    q, _, _ = op.project(x)
    if heads == 1:  # one orthogonal head reads q = x (Prop. 1)
        assert op.qkv.query is None and torch.equal(q[:, 0], x)
    else:
        w_q = op.qkv.query.weight
        assert_close(w_q @ w_q.T, torch.eye(dim), 1e-5)
    assert not any("parametrizations" in n for n, _ in op.qkv.value.named_parameters())
    tied = build(tied=True)
    q, k, _ = tied.project(x)
    assert tied.qkv.key is None and torch.equal(q, k)
    if kernel != "fna_dp":
        sphere = build(spherical=True, orthogonal=True)
        q, k, v = sphere.project(x)
        x_hat = x / x.norm(dim=-1, keepdim=True)  # every projection reads the input on S^(d-1)
        w_v = sphere.qkv.value.weight
        assert_close(v.transpose(1, 2).reshape(B, T, dim), x_hat @ w_v.T, 1e-6)
        if heads == 1:  # q = x / |x| and an orthogonal W_K keep the head on the sphere
            assert_close(q.norm(dim=-1), torch.ones(B, 1, T), 1e-6)
            assert_close(k.norm(dim=-1), torch.ones(B, 1, T), 1e-6)
        else:  # semi-orthogonal heads leave it; the kernel puts each head back
            q, k = sphere.kernel.prepare(q, k)
            assert_close(q.norm(dim=-1), torch.ones(B, heads, T), 1e-6)
            assert_close(k.norm(dim=-1), torch.ones(B, heads, T), 1e-6)


@pytest.mark.parametrize("kernel", ["fna", "fna_reference", "fna_dp"])
def test_cross_attention_reads_the_memory_unless_tied(kernel: str) -> None:
    """In an encoder-decoder q comes from the target and k, v from the source, through the
    kernel's own projection; tied keys (k := q) would never read the source: refused."""
    torch.manual_seed(0)
    cross = CrossAttention(8, 2, 0.0, kernel, kernel_options={"orthogonal": True})
    x, memory = torch.randn(B, 3, 8), torch.randn(B, 7, 8)
    q, k, v = cross.project_pair(x, memory)
    assert_close(q, cross.project(x)[0])
    assert_close(k, cross.project(memory)[1])
    assert cross(x, memory, None).shape == (B, 3, 8)
    with pytest.raises(ValueError, match="defined on one sequence only"):
        CrossAttention(8, 2, 0.0, kernel, kernel_options={"tied": True})


def test_the_dp_baseline_is_softmax_attention_on_fna_projections() -> None:
    q, k, v = (x.detach() for x in qkv())
    mask = padding_mask(True)
    dp = ATTENTION_KERNELS.get("fna_dp")(heads=H, head_dim=DH, tied=True)
    reference = ATTENTION_KERNELS.get("reference")(heads=H, head_dim=DH)
    assert_close(dp(q, k, v, mask, False), reference(q, q, v, mask, False))  # keeps q.q_i
    untied = ATTENTION_KERNELS.get("fna_dp")(heads=H, head_dim=DH)
    assert_close(untied(q, k, v, mask, True), reference(q, k, v, mask, True))


# --------------------------------------------------------------------------------------------
# Coinciding q and k: the clamps act in the backward only
# --------------------------------------------------------------------------------------------


def coinciding(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """q = k with entries +-1/2: unit vectors, so that every distance, squared norm and cosine
    is exact in float64 (0 where a query meets its own key): a path that returns anything but
    0 there has moved the distance itself, not rounding."""
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randint(0, 2, (B, H, T, DH), generator=gen).double() - 0.5).requires_grad_()
    k = q.detach().clone().requires_grad_()
    v = torch.randn(B, H, T, DH, generator=gen, dtype=torch.float64, requires_grad=True)
    return q, k, v


@pytest.mark.filterwarnings("ignore")  # FlexAttention warns that it runs uncompiled
@pytest.mark.parametrize("spherical", [False, True])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_fast_paths_equal_the_reference_where_q_and_k_coincide(
    alpha: float, spherical: bool
) -> None:
    """The distance at coinciding points is 0 on every path: before, the forward clamped d^2
    at 1e-12 and the cosine at 1 - 1e-7, which moved the weights by up to 3e-7 (Euclidean)
    and 1e-4 (sphere) from the reference's. Gradients stay finite and equal."""
    kernel = fna.FNAAttention(H, DH, alpha=alpha, chunk_size=CHUNK, spherical=spherical).double()
    q, k, v = coinciding()
    want = kernel.attend(q, k, v, None, False, "reference")
    want_grads = grads(want, (q, k, v))
    for path in fast_paths(kernel):
        out = kernel.attend(q, k, v, None, False, path)
        assert_close(out, want)
        for got, ref in zip(grads(out, (q, k, v)), want_grads, strict=True):
            assert_close(got, ref)
    detached = (x.detach() for x in (q, k, v))  # FlexAttention's forward, eagerly on a CPU
    assert_close(kernel.attend(*detached, None, False, "flex"), want)


@pytest.mark.parametrize("spherical", [False, True])
def test_the_distance_is_exact_forward_and_its_gradient_clamped(spherical: bool) -> None:
    """What FlexAttention differentiates: the exact distance forward, a finite gradient that is
    the clamped distance's (0 at coinciding points), under autograd and under torch.func's
    transforms (FlexAttention derives its backward from score_mod with them)."""
    geo = fna.geometry(1, DH, 1.2, "text", spherical, False)
    s = torch.tensor([1.0, 0.0, 1e-14, 0.3] if spherical else [0.0, 1e-14, -1e-16, 2.0])
    s = s.double().requires_grad_()
    exact = torch.acos(s.detach().clamp(-1, 1)) if spherical else s.detach().clamp_min(0).sqrt()
    dist = geo.distance_clamped_grad(s)
    assert torch.equal(geo.distance(s.detach()), exact)
    assert torch.allclose(dist.detach(), exact, rtol=1e-15, atol=1e-21)  # not 1e-6 or 4.5e-4
    (grad,) = torch.autograd.grad(dist.sum(), s)
    (want,) = torch.autograd.grad(geo.clamped_distance(s).sum(), s)
    assert torch.isfinite(grad).all() and torch.equal(grad, want)
    func_grad = torch.func.vmap(torch.func.grad(geo.distance_clamped_grad))(s.detach())
    assert torch.equal(func_grad, want)
    assert grad[0] == 0  # s = 1 on the sphere, d^2 = 0 in Euclidean space: clamped
