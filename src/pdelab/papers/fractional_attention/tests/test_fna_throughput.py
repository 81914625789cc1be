"""FNA's GPU throughput, checked where it can be on a CPU: FlexAttention's two constructions
of the squared norms agree in float64 (outputs and gradients) on every FNA kernel the paper
profile trains, the column form (no atomic adds) is the default, and the CUDA forward of each
of those kernels reads no tensor on the host and traces as one graph, padded or not.

"The CUDA forward" is ``FNAAttention.forward`` with ``device_role`` answering "cuda": the
paths, masks and precision a GPU takes, on CPU tensors (FlexAttention runs eagerly there, and
its gradients go through torch's reference backward in float64)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex
import torch.nn.functional as F
from torch import Tensor

from pdelab.papers.fractional_attention import attention as fna
from pdelab.papers.fractional_attention import flex
from pdelab.spec.config import load_params, resolve
from pdelab.spec.data import TASK_DATA
from pdelab.spec.studies import studies_of

pytestmark = pytest.mark.filterwarnings("ignore")  # FlexAttention warns when run uncompiled

B, T, T_SOURCE = 2, 150, 40  # T: two FlexAttention blocks; cross-attention reads T_SOURCE keys
# what a training forward must not call: each reads a device value on the host
HOST_READS = (
    *("item", "tolist", "cpu", "numpy", "nonzero"),
    *("__bool__", "__int__", "__float__", "__index__"),
)


@dataclass(frozen=True)
class KernelCase:
    """One FNA kernel as the paper profile trains it: the first variant that trains it, its
    task, head shape and options (``orthogonal`` left out: it constrains the projections, not
    the kernel's forward). Two heads stand for several: heads enter the kernel only through
    d_M of a single spherical head."""

    variant: str
    task: str
    heads: int
    head_dim: int
    options: tuple[tuple[str, Any], ...]

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.task}"

    @property
    def kind(self) -> tuple:
        """What sets its forward's code path apart: alpha's regime (alpha < 2 the power law or
        the Laplace form, 2 the Gaussian), the other options, a single spherical head (whose
        d_M is d - 1) and the calls."""
        options = dict(self.options)
        regime = "gaussian" if options.get("alpha") == 2 else "power"
        rest = tuple(sorted((k, v) for k, v in options.items() if k != "alpha"))
        single_sphere = self.heads == 1 and options.get("spherical", False)
        return regime, rest, single_sphere, self.calls

    @property
    def calls(self) -> tuple[str, ...]:
        """The attention calls its model makes: an encoder-decoder (translation) adds the
        decoder's causal self-attention and, keys untied, the cross-attention."""
        if TASK_DATA.get(self.task).module_name != "translation":
            return ("self",)
        return ("self", "causal") if dict(self.options).get("tied") else ("self", "causal", "cross")

    def kernel(self, dtype: torch.dtype = torch.float32) -> fna.FNAAttention:
        kernel = fna.FNAAttention(self.heads, self.head_dim, **dict(self.options))
        return kernel.to(dtype).train()


def paper_kernels() -> list[KernelCase]:
    """Every distinct FNA kernel forward of the paper profile's runs, read from their resolved
    run specs: one case per (alpha's regime, options, head dimension, calls), the values of
    alpha < 2 sharing one (one code path), as do tasks whose models call the kernel alike."""
    params = load_params()
    cases: dict[tuple, KernelCase] = {}
    for study in studies_of(params, "paper").values():
        for run in study.runs:
            model = resolve(params, run.task, run.variant, run.seed, "paper").model
            if model.attention != "fna":
                continue
            options = {k: v for k, v in model.attention_options.items() if k != "orthogonal"}
            heads = 1 if model.heads == 1 else 2
            case = KernelCase(
                run.variant, run.task, heads, model.dim // model.heads, tuple(options.items())
            )
            cases.setdefault((case.kind, case.head_dim), case)
    return list(cases.values())


def cuda_path(case: KernelCase) -> str:
    """The path the case's kernel trains on with a GPU (FNAAttention.path)."""
    kernel = case.kernel()
    return "sdpa" if kernel.geo.gaussian and not kernel.spherical else "flex"


def tiered(cases: list[KernelCase]) -> set[KernelCase]:
    """The fast tier: the first case of each kind of kernel; the same kind at other head
    dimensions is the slow tier's."""
    first: dict[tuple, KernelCase] = {}
    for case in cases:
        first.setdefault(case.kind, case)
    return set(first.values())


PAPER_KERNELS = paper_kernels()
FLEX_KERNELS = [c for c in PAPER_KERNELS if cuda_path(c) == "flex"]
FAST = tiered(PAPER_KERNELS)


def param(case: KernelCase, *rest: Any, fast: bool = True) -> Any:
    """A pytest case, in the slow tier unless it is of the fast tier and ``fast``."""
    ident = "-".join([case.id, *(str(r) for r in rest)])
    marks = () if case in FAST and fast else (pytest.mark.slow,)
    return pytest.param(case, *rest, id=ident, marks=marks)


def random(shape: tuple[int, ...], seed: int, dtype: torch.dtype) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=dtype)


def inputs(
    case: KernelCase, call: str, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor, Tensor, bool]:
    """q, k, v (requiring gradients) and ``causal`` for one call of the case's model."""
    t_keys = T_SOURCE if call == "cross" else T
    q = random((B, case.heads, T, case.head_dim), 0, dtype)
    k, v = (random((B, case.heads, t_keys, case.head_dim), s, dtype) for s in (1, 2))
    return (*(x.requires_grad_() for x in (q, k, v)), call == "causal")


def padding(kind: str, t: int) -> Tensor | None:
    """(B, t) True at real keys: the first row full, the second a third padding (its real
    tokens first, or last); None for none."""
    if kind == "none":
        return None
    real = torch.arange(t)[None, :] < torch.tensor([t, t - t // 3])[:, None]
    return real if kind == "right" else real.flip(-1)


@pytest.fixture
def as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels take their CUDA paths on CPU tensors, FlexAttention its gradients through
    torch's reference backward (the API refuses CPU gradients; lifted here only)."""
    monkeypatch.setattr(fna, "device_role", lambda x: "cuda")
    monkeypatch.setattr(torch_flex, "_validate_device", lambda *_: None)


@contextlib.contextmanager
def host_reads_refused() -> Iterator[None]:
    """Every Tensor method of HOST_READS raises inside."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def refuse(name: str):
        def read(self: Tensor, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"Tensor.{name} read a device value on the host")

        return read

    try:
        for name in HOST_READS:
            setattr(torch.Tensor, name, refuse(name))
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def grads(out: Tensor, xs: tuple[Tensor, ...], real: Tensor | None) -> list[Tensor]:
    """Gradients of a fixed random projection of ``out``'s real query rows."""
    weight = random(tuple(out.shape), 3, out.dtype)
    if real is not None:
        weight = weight * real[:, None, :, None]
    return list(torch.autograd.grad(out, xs, weight, materialize_grads=True))


def assert_close(a: Tensor, b: Tensor, tol: float) -> None:
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs().max().item() <= tol * (1 + b.abs().max().item())


def test_the_paper_profile_trains_every_kind_of_fna_kernel() -> None:
    """The cases below are the paper profile's own: both regimes of alpha, the sphere, Q = K
    with and without its diagonal, the Laplace ablation, the three kappa rules, and the
    translation model's causal and cross-attention calls."""
    options = [dict(c.options) for c in PAPER_KERNELS]
    assert {o["alpha"] == 2 for o in options} == {True, False}
    for flag in ("spherical", "tied", "zero_diagonal", "laplace"):
        assert any(o.get(flag) for o in options), flag
    assert {o.get("kappa", "text") for o in options} == {"text", "vision", "translation"}
    assert {"causal", "cross"} <= {call for c in PAPER_KERNELS for call in c.calls}


# --------------------------------------------------------------------------------------------
# FlexAttention's norms: columns (the default) equal the captured norms
# --------------------------------------------------------------------------------------------


def flex_call(
    case: KernelCase, call: str, kind: str, norms: str
) -> tuple[Tensor, list[Tensor], Tensor | None]:
    kernel = case.kernel(torch.float64)
    q, k, v, causal = inputs(case, call, torch.float64)
    mask = padding(kind, k.shape[-2])
    q_, k_ = kernel.prepare(q, k)
    args = (kernel.geo, mask, causal, kernel.zero_diagonal)
    out = flex.flex_path(q_, k_, v, *args, compiled=False, norms=norms)
    real = padding(kind, T) if call != "cross" else None
    return out, grads(out, (q, k, v), real), real


NORM_CASES = [  # left padding (partial blocks off the diagonal) in the fast tier
    param(case, call, kind, fast=kind == "left")
    for case in FLEX_KERNELS
    for call in case.calls
    for kind in ("none", "right", "left")
]


@pytest.mark.parametrize(("case", "call", "kind"), NORM_CASES)
def test_column_norms_equal_captured_norms_in_float64(
    case: KernelCase, call: str, kind: str, as_cuda: None
) -> None:
    """q' = [-2q, 1, |q|^2] . k' = [k, |k|^2, 1] and |q|^2 + |k|^2 - 2 q.k with captured norms
    give one output and one gradient of q, k, v to float64's rounding: the column form, which
    the backward needs no atomic adds for, changes nothing but rounding."""
    out, got, real = flex_call(case, call, kind, "columns")
    want, want_grads, _ = flex_call(case, call, kind, "captured")
    rows = 1.0 if real is None else real[:, None, :, None]
    assert_close(out * rows, want * rows, 1e-12)
    for g, w in zip(got, want_grads, strict=True):
        assert_close(g, w, 1e-12)


def test_the_kernel_hands_flexattention_the_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default FlexAttention gets q', k' (width d + 2: no captured norm in ``score_mod``,
    no atomic add in its backward), from the kernel's CUDA forward too."""
    assert flex.DEFAULT_NORMS == "columns"
    case = FLEX_KERNELS[0]
    widths: list[int] = []

    def spy(q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> Tensor:
        widths.append(q.shape[-1])
        return torch_flex.flex_attention(q, k, v, **kwargs)

    monkeypatch.setattr(flex, "flex_attention", spy)
    monkeypatch.setattr(fna, "device_role", lambda x: "cuda")
    kernel = case.kernel().eval()
    q, k, v, _ = inputs(case, "self")
    with torch.no_grad():
        kernel(q, k, v, None, False)
    assert widths == [max(flex.MIN_HEAD_DIM, case.head_dim + 2)]


# --------------------------------------------------------------------------------------------
# The CUDA forward: no host read, one graph
# --------------------------------------------------------------------------------------------

FORWARD_CASES = [
    param(case, call, "padded" if padded else "full")
    for case in PAPER_KERNELS
    for call in case.calls
    for padded in (False, True)
]


@pytest.mark.parametrize(("case", "call", "padded"), FORWARD_CASES)
def test_the_cuda_training_forward_reads_nothing_on_the_host(
    case: KernelCase, call: str, padded: str, as_cuda: None
) -> None:
    """Item, bool, tolist, cpu and the like raise inside the forward: no mask is looked at,
    no path is chosen by a tensor's value, so the step queues without waiting for the GPU."""
    kernel = case.kernel()
    q, k, v, causal = inputs(case, call)
    mask = padding("left" if padded == "padded" else "none", k.shape[-2])
    with host_reads_refused():
        out = kernel(q, k, v, mask, causal)
    assert out.shape == v.shape[:2] + (q.shape[-2], v.shape[-1]) and out.requires_grad


def test_the_refusal_catches_the_cpu_paths_host_read() -> None:
    """The check can fail: on a CPU the kernel reads whether a mask is all True."""
    case = PAPER_KERNELS[0]
    q, k, v, _ = inputs(case, "self")
    unpadded = torch.ones(B, T, dtype=torch.bool)
    with pytest.raises(AssertionError, match="__bool__"), host_reads_refused():
        case.kernel()(q, k, v, unpadded, False)


@pytest.mark.parametrize(("case", "call", "padded"), FORWARD_CASES)
def test_the_cuda_training_forward_has_no_graph_break(
    case: KernelCase, call: str, padded: str, as_cuda: None
) -> None:
    """torch._dynamo.explain traces the training forward (grad on) as one graph, so a compiled
    model fuses it whole rather than falling back to Python per layer."""
    kernel = case.kernel()
    q, k, v, causal = inputs(case, call)
    mask = padding("right" if padded == "padded" else "none", k.shape[-2])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(kernel)(q, k, v, mask, causal)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1


# --------------------------------------------------------------------------------------------
# LA on CUDA: padding keys pushed out through their columns, no mask
# --------------------------------------------------------------------------------------------


class SDPASpy:
    """Records the masks each scaled_dot_product_attention call is handed."""

    def __init__(self, sdpa) -> None:
        self.sdpa, self.calls = sdpa, []

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> Tensor:
        self.calls.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return self.sdpa(q, k, v, **kwargs)


@pytest.mark.parametrize("kappa", ["text", 1000.0])
@pytest.mark.parametrize(
    ("kind", "causal"), [("right", False), ("left", False), ("right", True), ("left", True)]
)
def test_la_on_cuda_weighs_padding_keys_zero_without_a_mask(
    kind: str, causal: bool, kappa: Any, as_cuda: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Padding keys get k = 0 and a squared norm past every real key's reach: in float64 the
    real queries' outputs and the gradients are the reference's to rounding, though padding
    values are huge, and SDPA is handed no mask (its fused kernels)."""
    spy = SDPASpy(F.scaled_dot_product_attention)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    kernel = fna.FNAAttention(2, 8, alpha=2.0, kappa=kappa).double().train()
    case = KernelCase("la", "imdb_wordpiece", 2, 8, (("alpha", 2.0),))
    q, k, v, _ = inputs(case, "self", torch.float64)
    mask = padding(kind, T)
    with torch.no_grad():
        v[~mask[:, None, :, None].expand_as(v)] = 1e6  # any weight on padding shows
    out = kernel(q, k, v, mask, causal)
    assert spy.calls == [(None, causal)]
    want = kernel.attend(q, k, v, mask, causal, "reference")
    rows = mask[:, None, :, None]  # a padding query may read padding keys only (unused)
    assert_close(out * rows, want * rows, 1e-12)
    for g, w in zip(grads(out, (q, k, v), mask), grads(want, (q, k, v), mask), strict=True):
        assert_close(g, w, 1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_la_on_cuda_in_bf16_still_weighs_padding_keys_zero(causal: bool, as_cuda: None) -> None:
    """Under bf16 autocast the padding norm travels as hi + lo bf16 columns like any |k|^2:
    padding values of 1e6 leave the real queries within bf16's tolerance of the reference
    (test_fna_la.py's 2^-6), so no padding key takes a weight."""
    kernel = fna.FNAAttention(2, 8, alpha=2.0).train()
    case = KernelCase("la", "imdb_wordpiece", 2, 8, (("alpha", 2.0),))
    q, k, v = (x.detach().bfloat16().float() for x in inputs(case, "self")[:3])
    mask = padding("left", T)
    v[~mask[:, None, :, None].expand_as(v)] = 1e6
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = kernel(q, k, v, mask, causal)
    want = kernel.attend(q, k, v, mask, causal, "reference")
    rows = mask[:, None, :, None]
    assert out.dtype == torch.float32
    assert (out.float() - want).mul(rows).abs().max().item() <= 2**-6
