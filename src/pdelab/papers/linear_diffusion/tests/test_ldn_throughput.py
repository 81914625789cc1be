"""The LDN training step stays on the device: the banded path takes its band from the options
(sigma_max, the dtype) and the sequence length, never from a parameter's value, so that for
every LDN variant of config.yaml, under every run profile, padded or not, on both branches of
the banded path (one block and several):

- torch._dynamo.explain of the layer's and of a factory-built model's training forward (and
  loss) reports no graph break;
- the forward, the loss and the backward read no tensor on the host where they run as on a
  GPU (pdelab.plan.host_syncs counts ``.item()``, ``bool``, ``tolist``, ``.cpu()``,
  ``nonzero``, boolean-mask indexing; on a CPU in eager mode the band is read from sigma, as
  exact and narrower);
- the static band covers every width the layer can learn, and the banded path equals the
  reference in float64, outputs and gradients, also with the widths at their cap.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from pdelab.data.store import PIXEL_VOCAB
from pdelab.models.attention import COUNTING_FOR_CUDA
from pdelab.models.factory import build_model
from pdelab.papers.linear_diffusion.layer import LDNBlock, one_block
from pdelab.papers.linear_diffusion.options import BLOCK, DEFAULTS, band_halfwidth
from pdelab.plan.host_syncs import SyncCounter
from pdelab.spec.config import RunSpec, resolve
from pdelab.spec.plugins import import_mechanisms

import_mechanisms()

CONFIG = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
LDN_VARIANTS = [
    name for name, body in CONFIG["variants"].items() if body.get("model", {}).get("block") == BLOCK
]
PROFILES = list(CONFIG["profiles"])
B, C = 2, 8
SHORT = 40  # tokens: one block at any cap of the widths
# A lower cap of the widths (above both initial widths, 4 and 16: options.check_options
# compares the default sigma_att with the cap even where D is off), at which LONG tokens run
# as several blocks: bands 141 (float64, 5 blocks of 144) and 94 (float32, 7 of 96)
LOW_CAP, LONG = 16.5, 600


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: extra threads only contend for the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each explain traces from scratch (no cache or recompile limit carried between tests)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_every_ldn_variant_and_profile_is_covered() -> None:
    """The parametrisation below reads config.yaml: the paper profile and every ``ldn*``
    variant are in it (a variant renamed or added there is tested without editing this file)."""
    assert "paper" in PROFILES
    assert {"ldn", "ldn_k", "ldn_d", "ldn_fixed_dt", "ldn_patch"} <= set(LDN_VARIANTS)


@contextlib.contextmanager
def no_host_reads() -> Iterator[None]:
    """Inside: every host read of pdelab's code is counted (pdelab.plan.host_syncs, which also
    makes the paths chosen by the device take their GPU form); there must be none."""
    with SyncCounter() as syncs:
        yield
    assert syncs.sites == [], syncs.sites


def static_reach(kernel: nn.Module) -> int:
    """The band the kernel covers on a GPU (pdelab.models.attention.COUNTING_FOR_CUDA)."""
    token = COUNTING_FOR_CUDA.set(True)
    try:
        return kernel.reach(torch.zeros(1))
    finally:
        COUNTING_FOR_CUDA.reset(token)


# --------------------------------------------------------------------------------------------
# The static band
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("cap", [0.9, 1.5, 16.5, 64.0])
def test_the_static_band_covers_every_learnable_width_and_is_tight_at_the_cap(
    cap: float, dtype: torch.dtype
) -> None:
    """band_limit() is g's band at sigma = sigma_max: g is 0 beyond it for every theta (the
    sigmoid saturated to the cap included) and positive just inside it at the cap."""
    torch.manual_seed(0)
    kernel = LDNBlock(C, sigma_max=cap, sigma=cap / 2, sigma_att=cap / 2).to(dtype)
    kernel = kernel.kernels["diffusion"]
    w = static_reach(kernel)
    assert w == kernel.g.band_limit() == band_halfwidth(cap, torch.finfo(dtype).eps)
    offsets = torch.arange(-3 * w, 3 * w + 1)
    with torch.no_grad():
        for theta in (-4.0, 0.0, 4.0, 40.0):  # 40: sigmoid rounds to 1, sigma = sigma_max
            kernel.g.theta.fill_(theta)
            values = kernel.g(offsets)
            assert static_reach(kernel) == w  # the band never reads the parameter
            assert kernel.g.band() <= w
            assert (values[offsets.abs() >= w] == 0).all(), theta
        assert float(kernel.g.sigma()) == float(torch.tensor(cap, dtype=dtype))  # at the cap
        assert (values[offsets.abs() < w - 1] > 0).all()


# --------------------------------------------------------------------------------------------
# The layer, each variant's block options
# --------------------------------------------------------------------------------------------


def variant_spec(params: dict, variant: str, profile: str) -> RunSpec:
    """The run spec of ``variant`` on the first task a study of config.yaml runs it on."""
    task = next(
        study["tasks"][0]
        for study in CONFIG["studies"].values()
        if variant in study.get("variants", ()) or variant in study.get("rows", {}).values()
    )
    return resolve(params, task, variant, 0, profile)


def variant_layer(
    params: dict, variant: str, capped: bool, dtype: torch.dtype = torch.float32, **extra: Any
) -> LDNBlock:
    """The block a variant's model stacks (its options and norm), at width C; ``capped``:
    under LOW_CAP, so that LONG tokens run as several blocks."""
    model = variant_spec(params, variant, "smoke").model
    options = dict(model.block_options or {})
    if capped and (options.get("diffusion", True) or options.get("attention", True)):
        options["sigma_max"] = LOW_CAP
    torch.manual_seed(0)
    return LDNBlock(C, norm=model.norm, **options, **extra).to(dtype)


def layer_inputs(
    padded: bool, dtype: torch.dtype = torch.float32, t: int = SHORT, width: int = C
) -> tuple[Tensor, Tensor, Tensor | None]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, t, width, generator=gen, dtype=dtype, requires_grad=True)
    tokens = torch.randn(B, t, width, generator=gen, dtype=dtype, requires_grad=True)
    mask = None
    if padded:
        mask = torch.ones(B, t, dtype=torch.bool)
        mask[1, t // 2 :] = False
    return x, tokens, mask


def runs_one_block(layer: LDNBlock, t: int) -> bool:
    branches = {one_block(static_reach(kernel), t) for kernel in layer.kernels.values()}
    assert len(branches) <= 1  # both kernels share the cap
    return branches == {True}


@pytest.mark.parametrize("causal", [False, True], ids=["bi", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("variant", LDN_VARIANTS)
def test_the_layers_training_forward_has_no_graph_break_and_no_host_read(
    params, variant: str, padded: bool, causal: bool
) -> None:
    for capped, t in ((False, SHORT), (True, LONG)):  # one block, then several
        layer = variant_layer(params, variant, capped, dropout=0.1).train()
        if layer.kernels:
            assert runs_one_block(layer, t) is not capped
        x, tokens, mask = layer_inputs(padded, t=t)

        def loss(x: Tensor, tokens: Tensor, mask: Tensor | None) -> Tensor:
            return layer(x, mask, causal, tokens=tokens).square().mean()  # noqa: B023

        explained = torch._dynamo.explain(loss)(x, tokens, mask)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
        assert explained.graph_count == 1
        with no_host_reads():
            loss(x, tokens, mask).backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()


# --------------------------------------------------------------------------------------------
# A small model of each variant, built by the factory, under each profile
# --------------------------------------------------------------------------------------------

TOKEN_VOCAB = ["<pad>", "<cls>", "a", "b", "c", "d"]


def small_runs(params: dict, variant: str) -> dict[str, RunSpec]:
    """The variant's run spec under each profile, its model shrunk to width C and one layer
    (block options, norm, dropout, pooling and patches kept), one per distinct model:
    {the profiles that share it: spec}."""
    found: dict[str, tuple[list[str], RunSpec]] = {}
    for profile in PROFILES:
        run = variant_spec(params, variant, profile)
        run = replace(run, model=replace(run.model, dim=C, heads=1, layers=1))
        key = json.dumps(asdict(run.model), sort_keys=True, default=str)
        found.setdefault(key, ([], run))[0].append(profile)
    return {"+".join(profiles): run for profiles, run in found.values()}


def banded_tokens(run: RunSpec) -> int:
    """The fewest tokens at which this model's blocks (float32) run as several blocks."""
    cap = (run.model.block_options or {}).get("sigma_max", DEFAULTS["sigma_max"])
    w = band_halfwidth(cap, torch.finfo(torch.float32).eps)
    return next(t for t in itertools.count(2) if not one_block(w, t))


def small_model(run: RunSpec, tokens: int) -> tuple[nn.Module, int, int]:
    """(the model pdelab's factory builds for ``run``, in training mode; the ids per example
    that give at least ``tokens`` tokens, pixels of a square image under ``model.patch``;
    the vocabulary's size)."""
    if run.model.patch:
        p = run.model.patch
        length = (p * math.isqrt(tokens - 1) + p) ** 2  # (side / p)^2 >= tokens patches
        manifest = {"vocab": list(PIXEL_VOCAB), "num_classes": 3}
    else:
        length, manifest = tokens, {"vocab": TOKEN_VOCAB, "num_classes": 3}
    manifest["splits"] = {"train": {"max_length": length}}
    torch.manual_seed(0)
    return build_model(run, manifest).train(), length, len(manifest["vocab"])


def model_batch(
    model: nn.Module, length: int, vocab: int, padded: bool
) -> tuple[Tensor, Tensor | None]:
    """B examples of ``length`` ids; ``padded``: with a mask, the second example's second half
    padded, or all real where the data is never padded (images: the encoder is built
    ``unpadded``)."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(2, vocab, (B, length), generator=gen)
    if not padded:
        return ids, None
    mask = torch.ones_like(ids, dtype=torch.bool)
    if not getattr(model.encoder, "unpadded", False):
        mask[1, length // 2 :] = False
    return ids.masked_fill(~mask, 0), mask


def training_loss(model: nn.Module, ids: Tensor, mask: Tensor | None, labels: Tensor) -> Tensor:
    return F.cross_entropy(model(ids, mask), labels)


@pytest.mark.parametrize("variant", LDN_VARIANTS)
def test_a_factory_models_training_step_has_no_graph_break_and_no_host_read(
    params, variant: str
) -> None:
    """Under every profile (the paper's included), padded and not, on one block (SHORT
    tokens) and on several (the fewest tokens that need them at the variant's cap)."""
    labels = torch.tensor([0, 2])
    runs = small_runs(params, variant)
    assert any("paper" in profiles.split("+") for profiles in runs)
    for profiles, run in runs.items():
        steps = ((SHORT, False), (SHORT, True), (banded_tokens(run), True))
        for tokens, padded in steps:
            case = f"{profiles}, {tokens} tokens, {'padded' if padded else 'no mask'}"
            model, length, vocab = small_model(run, tokens)
            blocks = list(model.encoder.blocks)
            assert blocks and all(isinstance(b, LDNBlock) for b in blocks)
            ids, mask = model_batch(model, length, vocab, padded)
            seen = model.encoder.tokens(model.encoder_inputs(ids, mask)[0]).shape[1]
            if blocks[0].kernels:
                assert runs_one_block(blocks[0], seen) is (tokens == SHORT), case
            explained = torch._dynamo.explain(training_loss)(model, ids, mask, labels)
            reasons = [b.reason for b in explained.break_reasons]
            assert explained.graph_break_count == 0, (case, reasons)
            with no_host_reads():
                training_loss(model, ids, mask, labels).backward()
            assert all(p.grad is not None for p in model.parameters() if p.requires_grad), case


# --------------------------------------------------------------------------------------------
# The banded path equals the reference (float64), for each variant's options
# --------------------------------------------------------------------------------------------


def assert_close(a: Tensor, b: Tensor, tol: float = 1e-10) -> None:
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs().max() <= tol * (1 + b.abs().max())


def weighted_grads(out: Tensor, wrt: list[Tensor]) -> list[Tensor]:
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    return list(torch.autograd.grad(out, wrt, weight, materialize_grads=True))


def assert_banded_equals_reference(layer: LDNBlock, t: int, padded: bool, causal: bool) -> None:
    """The layer's output and the gradients of its input, embeddings and every parameter on
    the banded path equal the reference's (float64)."""
    x, tokens, mask = layer_inputs(padded, torch.float64, t, layer.norm.normalized_shape[0])
    wrt = [x, tokens, *layer.parameters()]
    outputs = {}
    for path in ("reference", "banded"):
        layer.path = path
        outputs[path] = layer(x, mask, causal, tokens=tokens)
    assert_close(outputs["banded"], outputs["reference"])
    banded, reference = (weighted_grads(outputs[p], wrt) for p in ("banded", "reference"))
    for a, b in zip(banded, reference, strict=True):
        assert_close(a, b)


BRANCHES = {  # name -> (under LOW_CAP at LONG tokens, the learned widths pushed to the cap)
    "one_block": (False, False),
    "blocks": (True, False),
    "blocks_widths_at_cap": (True, True),
}


@pytest.mark.parametrize("causal", [False, True], ids=["bi", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("variant", LDN_VARIANTS)
def test_the_banded_path_equals_the_reference_in_float64(
    params, variant: str, branch: str, padded: bool, causal: bool
) -> None:
    capped, at_cap = BRANCHES[branch]
    layer = variant_layer(params, variant, capped, torch.float64)
    if not layer.kernels:
        pytest.skip(f"{variant} has no diffusion kernel: no banded path")
    t = LONG if capped else SHORT
    assert runs_one_block(layer, t) is not capped
    if at_cap:  # the widest band training can reach: the static band's worst case
        with torch.no_grad():
            for kernel in layer.kernels.values():
                kernel.g.theta.fill_(40.0)
    assert_banded_equals_reference(layer, t, padded, causal)


def kernel_forms() -> dict[str, dict[str, Any]]:
    """Every combination of the options that change a kernel's arithmetic, beyond those the
    variants set: psi, the softplus order, phi's direction, and which kernels are on."""
    terms = {"K": {"attention": False}, "D": {"diffusion": False}, "K+D": {}}
    forms = {}
    for psi, softplus, direction, on in itertools.product(
        ("bilinear", "mlp"), ("content", "product"), ("two_sided", "forward"), terms
    ):
        options = {"psi": psi, "softplus": softplus, **terms[on]}
        if on != "D":
            options["direction"] = direction
        if on != "K":
            options["direction_att"] = direction
        forms[f"{on}-{psi}-{softplus}-{direction}"] = options
    return forms


KERNEL_FORMS = kernel_forms()


@pytest.mark.parametrize("form", KERNEL_FORMS)
def test_every_kernel_form_equals_the_reference_on_several_blocks(form: str) -> None:
    """The static band's several-block branch (far sums, windows, padding, causal cuts) for
    every kernel form, padded or not, causal or not. Width 4 and rank 2: the reference MLP
    reads all (B, T, T, 2C) pairs."""
    torch.manual_seed(0)
    layer = LDNBlock(4, sigma_max=LOW_CAP, rank=2, **KERNEL_FORMS[form]).double()
    assert not runs_one_block(layer, LONG)
    for padded, causal in itertools.product((False, True), (False, True)):
        assert_banded_equals_reference(layer, LONG, padded, causal)
