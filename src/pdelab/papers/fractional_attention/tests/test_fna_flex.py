"""FNA's FlexAttention path: the widths, buckets, block masks and precision it hands torch's
FlexAttention, checked on a CPU where torch allows (compiled forwards; gradients through
torch's own reference backward) and on CUDA otherwise."""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex
from torch import Tensor
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from pdelab.papers.fractional_attention import attention as fna
from pdelab.papers.fractional_attention import flex
from pdelab.training.precision import full_precision

pytestmark = pytest.mark.filterwarnings("ignore")  # FlexAttention warns when run uncompiled
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

B, H = 2, 2
VARIANTS: dict[str, dict] = {
    "general": {},
    "tied": {"tied": True},
    "tied_zero_diagonal": {"tied": True, "zero_diagonal": True},
    "spherical": {"spherical": True},
    "laplace": {"laplace": True},
    "vision": {"kappa": "vision"},
}
PADDINGS = ("none", "right", "left")


def inputs(
    b: int, t: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64, device: str = "cpu"
) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, H, t, d, generator=gen, dtype=dtype).to(device) for _ in range(3))


def padding(kind: str, b: int, t: int, device: str = "cpu") -> Tensor | None:
    """None, or (b, t) True at real tokens: the first row full, the others padded."""
    if kind == "none":
        return None
    lengths = torch.tensor([t] + [max(1, t * (i + 1) // (b + 2)) for i in range(b - 1)])
    pos = torch.arange(t)[None, :]
    real = pos < lengths[:, None] if kind == "right" else pos >= t - lengths[:, None]
    return real.to(device)


def grads(out: Tensor, xs: tuple[Tensor, ...], seed: int = 1) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(out.device)
    return list(torch.autograd.grad(out, xs, weight, materialize_grads=True))


def assert_close(a: Tensor, b: Tensor, tol: float) -> None:
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs().max().item() <= tol * (1 + b.abs().max().item())


def run_flex(
    kernel: fna.FNAAttention,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    compiled: bool,
    norms: str = "captured",
) -> Tensor:
    """The flex path on the kernel's own q, k (k = q when tied, unit vectors on the sphere)."""
    q, k = kernel.prepare(q, k)
    return flex.flex_path(q, k, v, kernel.geo, mask, causal, kernel.zero_diagonal, compiled, norms)


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.fixture
def fresh_dynamo() -> None:
    """Compilations counted from zero (the compiled kernel's cache lives on its code)."""
    torch._dynamo.reset()
    counters.clear()


# --------------------------------------------------------------------------------------------
# What torch's FlexAttention does, read from the installed torch
# --------------------------------------------------------------------------------------------


def test_the_limits_this_path_works_around_are_torchs() -> None:
    """The narrowest width, the power-of-two rounding, the precision option and the compile
    limit are read from the installed torch; a torch that changes them fails here first."""
    from torch._inductor.kernel.flex import common, flex_attention

    lowering = inspect.getsource(flex_attention)
    assert f"Lt(query.get_size()[-1], {flex.MIN_HEAD_DIM})" in lowering
    assert lowering.count('kernel_options.setdefault("FLOAT32_PRECISION"') == 2  # fwd, bwd
    assert "\"'ieee'\"" in inspect.getsource(flex_attention.get_float32_precision)
    assert '"QK_HEAD_DIM_ROUNDED", next_power_of_two' in inspect.getsource(common)
    assert torch_flex._DEFAULT_SPARSE_BLOCK_SIZE == flex.FLEX_BLOCK
    assert torch._dynamo.config.recompile_limit < flex.COMPILE_LIMIT


# --------------------------------------------------------------------------------------------
# Widths (>= 16, a power of two) and buckets (powers of two >= 128)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("norms", "spherical"), [("captured", False), ("columns", False), ("captured", True)]
)
@pytest.mark.parametrize("d", [4, 8, 16, 32, 64])
def test_flexattention_gets_widths_it_accepts_without_a_wasted_power_of_two(
    d: int, norms: str, spherical: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inductor refuses widths below 16 on CUDA and rounds each up to a power of two: the
    captured norms leave q, k at width d (16 below it), where q' = [-2q, 1, |q|^2] made
    d + 2 (rounded to 2d); ``columns`` keeps that construction, padded to 16."""
    seen: list[tuple[int, ...]] = []

    def spy(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
        seen.append((q.shape[-1], k.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2]))
        return torch_flex.flex_attention(q, k, v, **kwargs)

    monkeypatch.setattr(flex, "flex_attention", spy)
    kernel = fna.FNAAttention(H, d, spherical=spherical)
    q, k, v = inputs(B, 5, d, dtype=torch.float32)
    out = run_flex(kernel, q, k, v, None, False, compiled=False, norms=norms)
    assert_close(out, kernel.attend(q, k, v, None, False, "reference"), 1e-5)
    qk = max(flex.MIN_HEAD_DIM, d + 2 if norms == "columns" and not spherical else d)
    assert seen == [(qk, qk, max(flex.MIN_HEAD_DIM, d), 128, 128)]
    if norms == "captured":
        assert qk & (qk - 1) == 0  # a power of two: nothing for the kernel to round up


def test_lengths_are_padded_to_power_of_two_buckets() -> None:
    lengths = [1, 2, 127, 128, 129, 255, 256, 257, 600, 1024, 1025, 4096]
    assert [flex.flex_length(n) for n in lengths] == [
        128, 128, 128, 128, 256, 256, 256, 512, 1024, 1024, 2048, 4096
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("causal", "zero_diagonal", "kind"),
    [(c, z, p) for c, z, p in itertools.product([False, True], [False, True], PADDINGS)],
)
def test_the_block_mask_is_the_mask_its_blocks_summarise(
    causal: bool, zero_diagonal: bool, kind: str
) -> None:
    """Full blocks are wholly allowed, empty blocks wholly refused (and the bucket's padding
    rows read nothing), partial blocks hold both: the kernel may skip mask_mod on the first
    and the blocks of the second without changing a weight."""
    t, b = 300, 3  # bucket 512: four blocks, the last wholly padding
    length = flex.flex_length(t)
    keep = torch.zeros(b, length, dtype=torch.bool)
    keep[:, :t] = True if kind == "none" else padding(kind, b, t)
    reach = torch.full((b,), 0 if causal else length, dtype=torch.int32)
    rows = torch.tensor(t, dtype=torch.int32)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    allowed = keep[:, None, :] & (j <= i + reach[:, None, None])
    if zero_diagonal:
        allowed = allowed & (i != j)

    def mask_mod(bb: Tensor, h: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
        return allowed[bb, qi, kj]

    mask = flex.block_mask(keep, reach, rows, length, zero_diagonal, mask_mod)
    n = flex.FLEX_BLOCK
    per_block = allowed.view(b, length // n, n, length // n, n)
    anyone, everyone = per_block.any(-1).any(2), per_block.all(-1).all(2)  # (b, Nq, Nk)
    live = (torch.arange(0, length, n) < t)[None, :, None]
    dense = mask.to_dense()  # (b, 1, Nq, Nk): partial or full
    full = torch.zeros_like(dense)
    for bb, qb in itertools.product(range(b), range(length // n)):
        m = int(mask.full_kv_num_blocks[bb, 0, qb])
        full[bb, 0, qb, mask.full_kv_indices[bb, 0, qb, :m]] = 1
    assert torch.equal(dense[:, 0].bool(), anyone & live)
    assert torch.equal(full[:, 0].bool(), everyone & live)


# --------------------------------------------------------------------------------------------
# Outputs and gradients against the reference
# --------------------------------------------------------------------------------------------

# every variant with the captured norms, and the augmented columns where they apply
# (Euclidean); causal with left padding (partial blocks off the diagonal), else right padding
CASES = [
    (variant, alpha, "left" if causal else "right", causal, norms)
    for variant, alpha, causal, norms in itertools.product(
        VARIANTS, [1.2, 2.0], [False, True], flex.NORMS
    )
    if not (variant == "laplace" and alpha == 2.0)
    and (norms == "captured" or (alpha == 1.2 and variant != "spherical"))
]


def case_id(case: tuple) -> str:
    variant, alpha, kind, causal, norms = case
    return f"{variant}-a{alpha}-{kind}-{'causal' if causal else 'bi'}-{norms}"


# in the fast tier: each variant at alpha 1.2, bidirectional, norms captured, and the general
# kernel causal and with norms from columns; the rest of the grid in the slow tier
FAST_CASES = {
    ("general", 1.2, "left", True, "captured"),
    ("general", 1.2, "right", False, "columns"),
}
GRADIENT_CASES = [
    case
    if case in FAST_CASES or case[1:] == (1.2, "right", False, "captured")
    else pytest.param(case, marks=pytest.mark.slow)
    for case in CASES
]


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=case_id)
def test_flex_gradients_equal_the_references(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the kernel's backward differentiates, through torch's reference backward in
    float64 on a CPU (the API refuses CPU gradients; the check is lifted here only): gradients
    reach |q|^2 and |k|^2 as captured tensors, padded keys and queries give nothing back, and
    causality and padding are the block mask's. The Triton backward is the CUDA test below."""
    variant, alpha, kind, causal, norms = case
    monkeypatch.setattr(torch_flex, "_validate_device", lambda *_: None)
    kernel = fna.FNAAttention(H, 4, alpha=alpha, **VARIANTS[variant]).double()
    q, k, v = (x.requires_grad_() for x in inputs(B, 150, 4))
    mask = padding(kind, B, 150)
    want = kernel.attend(q, k, v, mask, causal, "reference")
    out = run_flex(kernel, q, k, v, mask, causal, compiled=False, norms=norms)
    assert_close(out, want, 1e-12)
    for got, ref in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
        assert_close(got, ref, 1e-12)


@pytest.mark.parametrize("kind", ["right", "left"])
@pytest.mark.parametrize("spherical", [False, True])
def test_cross_attention_buckets_queries_and_keys_apart(
    spherical: bool, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encoder-decoder's 40 queries against 300 padded keys: buckets 128 and 512, the
    padding masked in the keys only, outputs and gradients as the reference's."""
    monkeypatch.setattr(torch_flex, "_validate_device", lambda *_: None)
    kernel = fna.FNAAttention(H, 4, spherical=spherical).double()
    q = inputs(3, 40, 4, seed=1)[0].requires_grad_()
    _, k, v = (x.requires_grad_() for x in inputs(3, 300, 4, seed=2))
    mask = padding(kind, 3, 300)
    want = kernel.attend(q, k, v, mask, False, "reference")
    out = run_flex(kernel, q, k, v, mask, False, compiled=False)
    assert_close(out, want, 1e-12)
    for got, ref in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
        assert_close(got, ref, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_compiled_causal_flex_equals_the_reference_on_a_cpu(
    variant: str, fresh_dynamo: None
) -> None:
    """torch compiles FlexAttention's forward for a CPU too: causal through the block mask,
    with right and left padding, against the reference, one compilation for all three."""
    kernel = fna.FNAAttention(H, 8, alpha=1.2 if variant == "laplace" else 2.0, **VARIANTS[variant])
    q, k, v = inputs(3, 150, 8, dtype=torch.float32)
    with torch.no_grad():
        for kind in PADDINGS:
            mask = padding(kind, 3, 150)
            want = kernel.attend(q, k, v, mask, True, "reference")
            assert_close(run_flex(kernel, q, k, v, mask, True, compiled=True), want, 1e-5)
    assert graphs() == 1


@pytest.mark.slow
def test_greedy_decoding_compiles_once_per_bucket(fresh_dynamo: None) -> None:
    """Greedy decoding grows the causal target by one token a step: every length up to 128
    shares the first bucket's compilation, 129 starts the second."""
    kernel = fna.FNAAttention(H, 8)
    q, k, v = inputs(3, 200, 8, dtype=torch.float32)
    with torch.no_grad():
        for t in [1, 2, 3, 64, 127, 128, 129, 200]:
            got = run_flex(kernel, q[..., :t, :], k[..., :t, :], v[..., :t, :], None, True, True)
            want = kernel.attend(
                q[..., :t, :], k[..., :t, :], v[..., :t, :], None, True, "reference"
            )
            assert_close(got, want, 1e-5)
            assert graphs() == (1 if t <= 128 else 2), t


@pytest.mark.slow
def test_an_epoch_of_varied_lengths_compiles_once_per_bucket_and_grad_mode(
    fresh_dynamo: None,
) -> None:
    """30 batches of random lengths 1..600, padded or not, causal or not, in training (grad
    on) or evaluation (no_grad): one compilation per (bucket, grad mode) met, at most 4 x 2 =
    8, where static shapes compiled each new length, mask and mode until torch's limit of 8
    and then ran FlexAttention unfused."""
    kernel = fna.FNAAttention(H, 8)
    gen = torch.Generator().manual_seed(0)
    met = set()
    for _ in range(30):
        t = int(torch.randint(1, 601, (1,), generator=gen))
        kind = PADDINGS[int(torch.randint(0, 3, (1,), generator=gen))]
        causal, train = (bool(torch.randint(0, 2, (1,), generator=gen)) for _ in range(2))
        q, k, v = inputs(B, t, 8, seed=t, dtype=torch.float32)
        mask = padding(kind, B, t)
        with torch.set_grad_enabled(train):
            got = run_flex(kernel, q, k, v, mask, causal, compiled=True)
        assert_close(got, kernel.attend(q, k, v, mask, causal, "reference"), 1e-5)
        met.add((flex.flex_length(t), train))
    assert graphs() == len(met) <= 8


@pytest.mark.slow
def test_a_compiled_model_traces_the_flex_path_whole(fresh_dynamo: None) -> None:
    """With a compiled step (a profile's ``compile``) its compilation traces this path inline:
    one graph (no break back to Python, which would run FlexAttention unfused), its length bucket a
    guard, so lengths in one bucket share it once torch has made the length dynamic."""
    kernel = fna.FNAAttention(H, 8)
    counter = CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def layer(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        return run_flex(kernel, q, k, v, mask, True, compiled=True)

    for t, compiled in [(20, 1), (40, 2), (100, 2), (200, 3), (250, 3)]:
        q, k, v = inputs(B, t, 8, seed=t, dtype=torch.float32)
        mask = padding("right", B, t)
        with torch.no_grad():
            assert_close(
                layer(q, k, v, mask), kernel.attend(q, k, v, mask, True, "reference"), 1e-5
            )
        assert counter.frame_count == compiled, t


# --------------------------------------------------------------------------------------------
# Precision
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_callers_precision_neither_changes_nor_recompiles_the_kernel(
    fresh_dynamo: None,
) -> None:
    """FlexAttention compiles under full_precision with TF32 pinned off in its kernel
    options, whatever the caller's matmul precision (which the call leaves as it was): the
    callers at 'high' and 'highest' share one compilation, where torch guards the global
    precision and compiled each apart."""
    assert flex.KERNEL_OPTIONS == {"FLOAT32_PRECISION": "'ieee'"}
    kernel = fna.FNAAttention(H, 8)
    q, k, v = inputs(B, 40, 8, dtype=torch.float32)
    want = kernel.attend(q, k, v, None, False, "reference")
    previous = torch.get_float32_matmul_precision()
    try:
        for precision in ("high", "highest", "medium"):
            torch.set_float32_matmul_precision(precision)
            with torch.no_grad():
                assert_close(run_flex(kernel, q, k, v, None, False, compiled=True), want, 1e-5)
            assert torch.get_float32_matmul_precision() == precision
    finally:
        torch.set_float32_matmul_precision(previous)
    assert graphs() == 1


# --------------------------------------------------------------------------------------------
# CUDA: the compiled Triton kernels, forward and backward
# --------------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("norms", flex.NORMS)
@pytest.mark.parametrize("kind", PADDINGS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_causal_flex_on_cuda_equals_the_reference_with_gradients(
    variant: str, kind: str, norms: str
) -> None:
    """Causal FlexAttention with gradients (d = 8: padded to 16), T = 300 over three blocks,
    in full_precision as FNAAttention calls it."""
    kernel = fna.FNAAttention(H, 8, **VARIANTS[variant]).cuda()
    q, k, v = (x.requires_grad_() for x in inputs(3, 300, 8, dtype=torch.float32, device="cuda"))
    mask = padding(kind, 3, 300, "cuda")
    with full_precision("cuda"):
        want = kernel.attend(q, k, v, mask, True, "reference")
        out = run_flex(kernel, q, k, v, mask, True, compiled=True, norms=norms)
        assert_close(out, want, 1e-4)
        for got, ref in zip(grads(out, (q, k, v)), grads(want, (q, k, v)), strict=True):
            assert_close(got, ref, 1e-3)


@needs_cuda
@pytest.mark.slow
def test_an_epoch_on_cuda_compiles_once_per_bucket_and_grad_mode(fresh_dynamo: None) -> None:
    """Training (grad) and evaluation (no_grad) forwards of varied batches, lengths, padding
    and causality on CUDA: each equals the reference, and batch sizes share a compilation
    (on CUDA the batch dimension is dynamic): one per (bucket, grad mode) met."""
    kernel = fna.FNAAttention(H, 8).cuda()
    gen = torch.Generator().manual_seed(0)
    met = set()
    for _ in range(16):
        b = int(torch.randint(2, 5, (1,), generator=gen))
        t = int(torch.randint(1, 601, (1,), generator=gen))
        kind = PADDINGS[int(torch.randint(0, 3, (1,), generator=gen))]
        causal, train = (bool(torch.randint(0, 2, (1,), generator=gen)) for _ in range(2))
        q, k, v = inputs(b, t, 8, seed=t, dtype=torch.float32, device="cuda")
        if train:
            q, k, v = (x.requires_grad_() for x in (q, k, v))
        mask = padding(kind, b, t, "cuda")
        with torch.set_grad_enabled(train):
            out = kernel(q, k, v, mask, causal)  # forward: full_precision, the flex path
        if train:
            out.sum().backward()
        with full_precision("cuda"), torch.no_grad():
            want = kernel.attend(q, k, v, mask, causal, "reference")
        real = torch.ones(b, t, dtype=torch.bool, device="cuda") if mask is None else mask
        real = real[:, None, :, None]
        assert_close(out.detach() * real, want * real, 1e-4)
        met.add((flex.flex_length(t), train))
    assert graphs() == len(met) <= 8
