"""PDE attention with attention dropout: exact against the materialized reference on the same
keep mask, no (B, H, T, T) buffer kept for the backward, no graph break, no host read.

Every test is parametrized over the distinct kernel/option combinations that config.yaml's
variants name (a variant added there is tested without editing this file).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import Tensor
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from torch.utils._python_dispatch import TorchDispatchMode

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.papers.continuous_time_attention import attention as pa
from pdelab.plan.check import checked_run
from pdelab.plan.counting import count_step
from pdelab.spec.config import load_params

B, H, T, D = 2, 2, 11, 4
P = 0.3  # the dropout rate of the equality tests: high enough that many entries are dropped
WINDOW = 4  # config.yaml's window of 256 would cover these short sequences whole
# Well inside the stability bounds, large enough that every term changes the result
STRONG = {
    "diffusion": {"alpha": 0.3},
    "wave": {"c": 0.8},
    "advection_diffusion": {"alpha": 0.3, "beta": 0.5},
    "reaction_diffusion": {"alpha": 0.2, "beta": 0.5},
}


def config_kernels() -> dict[str, tuple[str, dict[str, Any]]]:
    """id -> (kernel, options) for each distinct attention kernel config.yaml's variants use."""
    config = yaml.safe_load((Path(pa.__file__).parent / "config.yaml").read_text())
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for variant in config["variants"].values():
        model = variant.get("model", {})
        if model.get("attention") not in ("pde", "pde_longformer", "longformer"):
            continue
        options = dict(model.get("attention_options", {}))
        if "window" in options:
            options["window"] = WINDOW
        ident = model["attention"] + "".join(f"-{k}={v}" for k, v in sorted(options.items()))
        found[ident] = (model["attention"], options)
    return found


KERNELS = config_kernels()
PDE_KERNELS = {ident: spec for ident, spec in KERNELS.items() if spec[0] != "longformer"}


def test_config_kernels_are_all_found() -> None:
    """The parametrisation covers every PDE type, both causal forms and the hybrid."""
    pdes = {opts.get("pde") for _, opts in PDE_KERNELS.values()}
    forms = {opts.get("causal_form", "restricted") for _, opts in PDE_KERNELS.values()}
    assert pdes == set(pa.PDE_TYPES) and forms == {"restricted", "two_sided"}
    assert {name for name, _ in KERNELS.values()} == {"pde", "pde_longformer", "longformer"}


def build(name: str, options: dict[str, Any], dropout: float, **extra: Any) -> torch.nn.Module:
    """A float64 kernel in training mode with per-head distinct, strong coefficients."""
    kernel = ATTENTION_KERNELS.get(name)(heads=H, head_dim=D, dropout=dropout, **options, **extra)
    kernel = kernel.double().train()
    with torch.no_grad():
        for coef in getattr(kernel, "coef_names", ()):
            strong = STRONG[kernel.pde][coef] * torch.tensor([1.0, 0.6], dtype=torch.float64)
            getattr(kernel, coef).copy_(strong)
    return kernel


def reference_of(name: str, options: dict[str, Any], dropout: float) -> pa.PDEAttention:
    """The materialized oracle: A evolved whole with plain autograd."""
    if name == "pde":
        return build("pde_reference", options, dropout)
    kernel = build(name, options, dropout, fast=False, chunk_size=None)
    kernel.recompute = False
    return kernel


def qkv(seed: int, t: int = T, batch: int = B) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, H, t, D, generator=g, dtype=torch.float64) for _ in range(3))


def padding(t: int = T, batch: int = B) -> Tensor:
    mask = torch.ones(batch, t, dtype=torch.bool)
    mask[1, t - 3 :] = False  # right padding on the second sequence
    return mask


def output_and_grads(
    kernel: torch.nn.Module,
    inputs: tuple[Tensor, ...],
    mask: Tensor | None,
    causal: bool,
    run: Callable[..., Tensor] | None = None,
    **kw: Any,
) -> list[Tensor]:
    """The output of ``run`` (default: the kernel) and the gradients of q, k, v and of every
    coefficient of the kernel, for a fixed cotangent."""
    kernel.zero_grad()
    q, k, v = (x.clone().requires_grad_(True) for x in inputs)
    out = (run or kernel)(q, k, v, mask, causal, **kw)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(99)).double()
    (out * cotangent).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad, *(p.grad for p in kernel.parameters())]


# -- exact against the reference ---------------------------------------------------------------


@pytest.mark.parametrize("dropout", [0.0, P])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("ident", list(PDE_KERNELS))
def test_training_path_equals_reference_on_the_same_keep_mask(
    ident: str, causal: bool, padded: bool, dropout: float
) -> None:
    """Forward and backward (q, k, v, coefficients) to 1e-10 in float64, with the kernel's
    materialized paths chunked (and so recomputed) and the reference evolving A whole."""
    name, options = PDE_KERNELS[ident]
    inputs = qkv(len(ident))
    mask = padding() if padded else None
    keep = torch.rand(B, H, T, T, generator=torch.Generator().manual_seed(7)) >= dropout
    kernel = build(name, options, dropout, chunk_size=4)
    reference = reference_of(name, options, dropout)
    got = output_and_grads(kernel, inputs, mask, causal, dropout_keep=keep)
    want = output_and_grads(reference, inputs, mask, causal, dropout_keep=keep)
    assert len(got) == len(want) > 4  # the coefficients' gradients are compared too
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10)
    if dropout:  # the mask acted: without it the output differs
        undropped = output_and_grads(kernel, inputs, mask, causal, dropout_keep=keep | True)
        assert (undropped[0] - got[0]).abs().max() > 1e-3


@pytest.mark.parametrize("pde", pa.PDE_TYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_recomputed_chunks_draw_the_forward_mask(pde: str, causal: bool) -> None:
    """A drawn mask: the recomputing chunked path gives, value for value, what the plain
    chunked evolution gives from the same seed, gradients included (the backward evolves
    each chunk again under the forward's RNG state, not a fresh mask)."""
    kernel = build("pde", {"pde": pde, "steps": 3}, P, fast=False, chunk_size=4)
    inputs, mask = qkv(3), padding()

    def plain(q: Tensor, k: Tensor, v: Tensor, m: Tensor | None, c: bool) -> Tensor:
        chunks = [range(s, min(s + 4, T)) for s in range(0, T, 4)]
        return torch.cat([kernel.attention_weights(q, k, m, c, rows) @ v for rows in chunks], -2)

    torch.manual_seed(11)
    got = output_and_grads(kernel, inputs, mask, causal)
    torch.manual_seed(11)
    want = output_and_grads(kernel, inputs, mask, causal, run=plain)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


def test_chunked_path_trains_under_stacked_seeds_transforms() -> None:
    """Under ``vmap(grad_and_value)`` (pdelab.training.stacked_seeds), which refuses the saved
    tensor hooks of checkpoint, the chunks are kept by plain autograd: each stacked kernel's
    gradients are its own run's."""
    kernels = [build("pde", {"pde": "reaction_diffusion", "steps": 3}, 0.0, chunk_size=4)]
    kernels.append(build("pde", {"pde": "reaction_diffusion", "steps": 3}, 0.0, chunk_size=4))
    with torch.no_grad():
        kernels[1].beta.mul_(-1)
    params, buffers = stack_module_state(kernels)
    q, k, v = (torch.stack([x, x.flip(-2)]) for x in qkv(4))

    def loss(p: dict, b: dict, *qkv_: Tensor) -> Tensor:
        return functional_call(kernels[0], (p, b), (*qkv_, padding(), True)).square().sum()

    grads, _ = vmap(grad_and_value(loss))(params, buffers, q, k, v)
    for i, kernel in enumerate(kernels):
        kernel.zero_grad()
        kernel(q[i], k[i], v[i], padding(), True).square().sum().backward()
        for name, param in kernel.named_parameters():
            torch.testing.assert_close(grads[name][i], param.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", ["restricted", "two_sided"])
@pytest.mark.parametrize("pde", pa.LINEAR_PDES)
def test_drawn_dropout_of_the_fast_paths_is_unbiased(pde: str, form: str) -> None:
    """The fast paths draw their masks inside SDPA (and the band's themselves), so no mask can
    be shared with the reference; their law can. The output is linear in the dropped A(0), so
    its mean over draws is the undropped output: checked over 4000 draws at p = 0.5, entry by
    entry within 5 standard errors. A wrong scale or a band mask shared with the main part
    would move the mean by far more."""
    draws = 4000
    q, k, v = (x.expand(draws, -1, -1, -1) for x in qkv(5, t=9, batch=1))
    kernel = build("pde", {"pde": pde, "steps": 3, "causal_form": form}, 0.5)
    torch.manual_seed(0)
    with torch.no_grad():
        dropped = kernel(q, k, v, None, True)
        exact = kernel.eval()(q[:1], k[:1], v[:1], None, True)[0]
    mean, stderr = dropped.mean(0), dropped.std(0) / math.sqrt(draws)
    assert stderr.min() > 0  # every entry was really dropped at random
    assert ((mean - exact).abs() <= 5 * stderr + 1e-12).all(), (mean - exact).abs().max()


# -- memory: what autograd keeps for the backward ----------------------------------------------


def saved_outside_sdpa(monkeypatch: pytest.MonkeyPatch, run: Callable[[], Tensor]) -> list:
    """The shapes of the tensors autograd saves for the backward while ``run`` runs outside
    ``attend`` (SDPA: on a GPU a fused kernel that keeps O(T) per query row)."""
    inside = [False]
    sdpa = pa.attend

    def marked(*args: Any, **kwargs: Any) -> Tensor:
        inside[0] = True
        try:
            return sdpa(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(pa, "attend", marked)
    shapes = []

    def pack(t: Tensor) -> Tensor:
        if not inside[0]:
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return shapes


def query_by_key(shape: tuple[int, ...], t: int) -> bool:
    """Whether a tensor of this shape spans (at least half) the query and the key axes."""
    return sum(size >= t // 2 for size in shape) >= 2


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("ident", list(PDE_KERNELS))
def test_no_query_by_key_buffer_is_kept_for_the_backward(
    monkeypatch: pytest.MonkeyPatch, ident: str, padded: bool
) -> None:
    """In training with dropout, causal: autograd saves nothing (T', T')-shaped outside SDPA,
    not even a chunk of rows (the chunks are recomputed); the reference saves such tensors."""
    name, options = PDE_KERNELS[ident]
    t = 64
    q, k, v = (x.requires_grad_(True) for x in qkv(1, t=t))
    mask = padding(t) if padded else None
    kernel = build(name, options, P, chunk_size=t // 2)
    reference = reference_of(name, options, P)
    got = saved_outside_sdpa(monkeypatch, lambda: kernel(q, k, v, mask, True))
    assert got and not [s for s in got if query_by_key(s, t)]
    want = saved_outside_sdpa(monkeypatch, lambda: reference(q, k, v, mask, True))
    assert [s for s in want if query_by_key(s, t)]


def test_the_cost_plan_counts_the_recomputed_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's CUDA count (fake tensors, emulated CUDA autocast) runs the recomputation in
    the forward's context, and counts a lower peak than with the chunks kept for the
    backward: the paper profile's reaction-diffusion job, at batch 8."""
    params = load_params()
    run, shape = checked_run(params, "paper", "wikitext", "reaction_diffusion_s4_causal", 8)
    assert run.device == "cuda" and run.model.attention_dropout > 0
    recomputed = count_step(run, shape).peak_bytes
    monkeypatch.setattr(pa.PDEAttention, "recompute", False)
    kept = count_step(run, shape).peak_bytes
    assert recomputed < 0.5 * kept


# -- compiled and sync-free ------------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Each explain traces from scratch (no cache or recompile limit carried between tests)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def float32_kernel(ident: str) -> torch.nn.Module:
    name, options = KERNELS[ident]
    return ATTENTION_KERNELS.get(name)(heads=H, head_dim=D, dropout=0.1, **options).train()


def float32_inputs(padded: bool) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    q, k, v = (x.float().requires_grad_(True) for x in qkv(2, t=16))
    return q, k, v, padding(16) if padded else None


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("ident", list(KERNELS))
def test_training_forward_has_no_graph_break(ident: str, padded: bool, causal: bool) -> None:
    kernel = float32_kernel(ident)
    q, k, v, mask = float32_inputs(padded)
    explained = torch._dynamo.explain(lambda *x: kernel(*x, causal))(q, k, v, mask)
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert explained.graph_count == 1


class HostRead(AssertionError):
    """A tensor's value was read on the host inside a training step."""


# Operators whose result the host must know: a device sync on a GPU
HOST_READ_OPS = {
    torch.ops.aten._local_scalar_dense,  # .item(), bool(t), int(t), float(t), if t.any():
    torch.ops.aten.nonzero,
    torch.ops.aten.masked_select,
    torch.ops.aten.is_nonzero,
    torch.ops.aten.equal,
}


class RaiseOnHostRead(TorchDispatchMode):
    """Raises on each operator that reads a value on the host, however it is reached, and on
    boolean-mask indexing (a hidden nonzero)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in HOST_READ_OPS:
            raise HostRead(f"host read: {func}")
        if func.overloadpacket in (torch.ops.aten.index, torch.ops.aten.index_put):
            indices = args[1] if len(args) > 1 else ()
            if any(isinstance(i, Tensor) and i.dtype == torch.bool for i in indices):
                raise HostRead(f"boolean-mask indexing: {func}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_reads() -> Iterator[None]:
    """Tensor.item, __bool__, __int__, __float__, tolist, cpu, numpy and nonzero raise inside,
    and so do the operators :class:`RaiseOnHostRead` refuses."""
    names = ("item", "__bool__", "__int__", "__float__", "tolist", "cpu", "numpy", "nonzero")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise HostRead("host read through a Tensor method")

    with pytest.MonkeyPatch.context() as patch, RaiseOnHostRead():
        for name in names:
            patch.setattr(torch.Tensor, name, refuse)
        yield


def test_the_guard_catches_host_reads() -> None:
    x = torch.ones(3)
    for read in (
        lambda: x.sum().item(),
        lambda: bool(x.any()),
        lambda: x.tolist(),
        lambda: x.cpu(),
        lambda: x[x > 0],
        lambda: torch.ops.aten._local_scalar_dense(x.sum()),
    ):
        with no_host_reads(), pytest.raises(HostRead):
            read()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("ident", list(KERNELS))
def test_training_step_reads_nothing_on_the_host(ident: str, padded: bool, causal: bool) -> None:
    """Forward and backward (the recomputed chunks run in the backward) in training with
    dropout: masks are tensor ops whether or not there is padding."""
    kernel = float32_kernel(ident)
    if hasattr(kernel, "chunk_size"):
        kernel.chunk_size = 8  # two chunks of the materialized paths
    q, k, v, mask = float32_inputs(padded)
    with no_host_reads():
        out = kernel(q, k, v, mask, causal)
        out.square().sum().backward()
    assert all(x.grad is not None for x in (q, k, v))
