"""The Linear Diffusion Network block: options fail at resolve time, the banded path equals the
materialised reference in float64 (outputs and gradients, padded or not, causal or not), every
kernel's rows sum to zero, the explicit step stays inside its bound by construction (also after
training), the update is the paper's equation, and a tiny LDN classifier learns."""

from __future__ import annotations

import copy
import inspect
import itertools
import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from pdelab.models.factory import build_model
from pdelab.models.transformer import ENCODER_BLOCKS, Classifier
from pdelab.papers.linear_diffusion.layer import LDNBlock, one_block
from pdelab.papers.linear_diffusion.layer import softplus as layer_softplus
from pdelab.papers.linear_diffusion.options import DEFAULTS, OPTION_NAMES, band_halfwidth
from pdelab.spec.config import ConfigError, RunSpec, resolve
from pdelab.spec.options import BLOCK_OPTIONS
from pdelab.spec.plugins import import_mechanisms
from pdelab.training.causality import Causality, probe_causality, verdict

import_mechanisms()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: extra threads only contend for the cores (several times slower
    on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


B, T, C = 2, 37, 6
# float64 half-widths of g: 5 (sigma 0.5) and 7 (sigma 0.8), so the banded path runs five
# blocks of 8 (fewer pairs than T^2); sigma 30 covers the sequence (its single-block branch)
NARROW = {"sigma": 0.5, "sigma_att": 0.8}
WIDE = {"sigma": 30.0, "sigma_att": 40.0}
TERMS = {  # which diffusion terms are on (F, the local update, with each)
    "K": {"attention": False},
    "D": {"diffusion": False},
    "K+D": {},
}


def kernel_variants() -> dict[str, dict]:
    """Every combination of the options that change a kernel's arithmetic."""
    out = {}
    for psi, softplus, direction, terms in itertools.product(
        ("bilinear", "mlp"), ("content", "product"), ("two_sided", "forward"), TERMS
    ):
        options = {"psi": psi, "softplus": softplus, **TERMS[terms]}
        if terms != "D":
            options["direction"] = direction
        if terms != "K":
            options["direction_att"] = direction
        out[f"{terms}-{psi}-{softplus}-{direction}"] = options
    return out


KERNEL_VARIANTS = kernel_variants()
# The ablations and the remaining options (each on top of the default kernels)
ABLATIONS: dict[str, dict] = {
    "default": {},
    "K_only": {"attention": False},
    "D_only": {"diffusion": False},
    "K_only_no_F": {"attention": False, "local": False},
    "D_only_no_F": {"diffusion": False, "local": False},
    "K+D_no_F": {"local": False},
    "fixed_dt": {"learn_dt": False},
    "no_step_bound": {"step_bound": False},
    "rank_3": {"rank": 3},
    "large_dt": {"dt": 5.0, "dt_att": 5.0},
}


def with_widths(options: dict, widths: dict = NARROW) -> dict:
    """options plus the widths of the kernels they switch on (an option of a kernel that is
    off is an error)."""
    keep = {"sigma": options.get("diffusion", True), "sigma_att": options.get("attention", True)}
    return {**{k: v for k, v in widths.items() if keep[k]}, **options}


def block(options: dict, norm: str = "post", dtype=torch.float64, wide: bool = False) -> LDNBlock:
    torch.manual_seed(0)
    layer = LDNBlock(C, norm=norm, **with_widths(options, WIDE if wide else NARROW))
    return layer.to(dtype)


def inputs(padded: bool, dtype=torch.float64, t: int = T) -> tuple[Tensor, Tensor, Tensor | None]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, t, C, generator=gen, dtype=dtype, requires_grad=True)
    tokens = torch.randn(B, t, C, generator=gen, dtype=dtype, requires_grad=True)
    mask = None
    if padded:
        mask = torch.ones(B, t, dtype=torch.bool)
        mask[1, t - 12 :] = False
    return x, tokens, mask


def run(layer: LDNBlock, path: str, x: Tensor, tokens: Tensor, mask, causal: bool) -> Tensor:
    layer.path = path
    return layer(x, mask, causal, tokens=tokens)


def grads(out: Tensor, wrt: list[Tensor]) -> list[Tensor]:
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
    return list(torch.autograd.grad(out, wrt, weight, materialize_grads=True))


def assert_close(a: Tensor, b: Tensor, tol: float = 1e-12) -> None:
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    assert (a - b).abs().max().item() <= tol * (1 + b.abs().max().item())


# --------------------------------------------------------------------------------------------
# Options, checked when params.yaml is resolved; existing specs keep their JSON
# --------------------------------------------------------------------------------------------


def with_variant(params: dict, model: dict, diffusion: dict | None = None) -> dict:
    p = copy.deepcopy(params)
    p["variants"]["ldn_test"] = {"model": model, **({"diffusion": diffusion} if diffusion else {})}
    return p


def test_an_ldn_variant_resolves_and_round_trips(params) -> None:
    options = {"psi": "mlp", "sigma": 2.0, "attention": False}
    p = with_variant(params, {"block": "ldn", "block_options": options})
    spec = resolve(p, "listops", "ldn_test", 0)
    assert spec.model.block == "ldn" and spec.model.block_options == options
    body = json.loads(spec.to_json())
    assert body["model"]["block"] == "ldn" and body["model"]["block_options"] == options
    assert RunSpec.from_dict(body) == spec
    after_embedding = with_variant(p, {"block": "ldn"}, {"sites": ["after_embedding"]})
    assert resolve(after_embedding, "listops", "ldn_test", 0).diffusion.sites == (
        "after_embedding",
    )


def test_existing_specs_keep_their_json(params) -> None:
    """block, block_options and patch are left out of a spec's JSON at their defaults, so
    every run recorded before they existed keeps its spec (and is not retrained)."""
    before = {"dim", "layers", "heads", "mlp_dim", "dropout", "attention_dropout", "norm"}
    before |= {"pooling", "attention", "attention_options", "smoothing"}
    for variant in params["variants"]:
        spec = resolve(params, "listops", variant, 0)
        model = json.loads(spec.to_json())["model"]
        ldn = {"block", "block_options"} & set(model) if spec.model.block == "ldn" else set()
        patched = {"patch"} if spec.model.patch else set()  # variants that set them
        assert set(model) - ldn - patched == before, variant
        assert RunSpec.from_dict(json.loads(spec.to_json())) == spec


def ldn(**options) -> dict:
    return {"block": "ldn", "block_options": options}


@pytest.mark.parametrize(
    ("model", "diffusion", "message"),
    [
        ({"block": "ldnn"}, None, r"variants\.ldn_test\.model\.block: unknown name 'ldnn'.*ldn"),
        (
            ldn(sigmaa=2),
            None,
            r"variants\.ldn_test\.model\.block_options \(block 'ldn'\): option 'sigmaa' is not "
            r"taken by block 'ldn'; it takes: diffusion, attention, local",
        ),
        (
            ldn(psi="dot"),
            None,
            r"block_options \(block 'ldn'\): option 'psi'='dot' must be one of bilinear, mlp",
        ),
        (
            ldn(sigma_att=80.0),
            None,
            r"option 'sigma_att'=80\.0 must be below sigma_max = 64",
        ),
        (ldn(dt=0), None, r"option 'dt'=0 must be a number > 0"),
        (
            ldn(diffusion=False, attention=False, local=False),
            None,
            r"all false: the layer would be the identity",
        ),
        (
            ldn(diffusion=False, sigma=3.0),
            None,
            r"option 'sigma' has no effect with diffusion: false",
        ),
        (
            ldn(diffusion=False, attention=False, path="reference"),
            None,
            r"option 'path' has no effect with diffusion: false and attention: false",
        ),
        (
            ldn(learn_dt="yes"),
            None,
            r"option 'learn_dt'='yes' must be true or false",
        ),
        (ldn(rank=0), None, r"option 'rank'=0 must be a positive"),
        (
            {"block": "ldn", "attention": "pde"},
            None,
            r"variants\.ldn_test\.model\.attention: block 'ldn' has no attention",
        ),
        (
            {"block": "ldn"},
            {"sites": ["after_mlp"]},
            r"variants\.ldn_test\.diffusion\.sites: sites \['after_mlp'\] are inside the "
            r"transformer block",
        ),
        (
            {"block_options": {"dt": 0.1}},
            None,
            r"block_options \(block 'transformer'\): option 'dt' is not taken by block "
            r"'transformer'; it takes: none",
        ),
    ],
)
def test_invalid_options_name_the_key(params, model: dict, diffusion, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(with_variant(params, model, diffusion), "listops", "ldn_test", 0)


def test_block_options_are_the_blocks_arguments() -> None:
    """The options registered torch-free are the block's keyword arguments, defaults alike."""
    assert BLOCK_OPTIONS.names() == sorted([*ENCODER_BLOCKS.names(), "transformer"])
    shape = {"self", "dim", "heads", "mlp_dim", "dropout", "attention_dropout", "norm"}
    parameters = inspect.signature(LDNBlock.__init__).parameters
    assert set(parameters) - shape == set(OPTION_NAMES)
    assert {name: parameters[name].default for name in OPTION_NAMES} == DEFAULTS


# --------------------------------------------------------------------------------------------
# The banded path equals the materialised reference in float64
# --------------------------------------------------------------------------------------------


def path_case_id(case) -> str:
    name, padded, causal, wide = case
    parts = [name, "padded" if padded else "full", "causal" if causal else "bi"]
    return "-".join(parts + (["wide"] if wide else []))


PATH_CASES = [
    *itertools.product(KERNEL_VARIANTS, (False, True), (False, True), (False,)),
    *itertools.product(KERNEL_VARIANTS, (True,), (False, True), (True,)),
]


@pytest.mark.parametrize("case", PATH_CASES, ids=path_case_id)
def test_banded_path_equals_reference(case) -> None:
    name, padded, causal, wide = case
    layer = block(KERNEL_VARIANTS[name], wide=wide)
    for kernel in layer.kernels.values():
        assert one_block(kernel.g.band(), T) == wide  # both branches of the banded path
    x, tokens, mask = inputs(padded)
    wrt = [x, tokens, *layer.parameters()]
    want = run(layer, "reference", x, tokens, mask, causal)
    out = run(layer, "banded", x, tokens, mask, causal)
    assert_close(out, want)
    for a, b in zip(grads(out, wrt), grads(want, wrt), strict=True):
        assert_close(a, b)


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("name", ABLATIONS)
def test_ablations_banded_equals_reference(name: str, norm: str) -> None:
    layer = block(ABLATIONS[name], norm=norm)
    x, tokens, mask = inputs(True)
    want = run(layer, "reference", x, tokens, mask, False)
    out = run(layer, "banded", x, tokens, mask, False)
    assert_close(out, want)
    wrt = [x, tokens, *layer.parameters()]
    for a, b in zip(grads(out, wrt), grads(want, wrt), strict=True):
        assert_close(a, b)


def test_g_is_zero_beyond_its_band_and_the_band_follows_sigma() -> None:
    layer = block({})
    g = layer.kernels["diffusion"].g
    w = g.band()
    offsets = torch.arange(-3 * w, 3 * w + 1)
    values = g(offsets)
    assert (values[offsets.abs() >= w] == 0).all() and (values[offsets.abs() < w - 1] > 0).all()
    eps = torch.finfo(torch.float64).eps
    assert w == band_halfwidth(0.5, eps) == math.floor(0.5 * math.sqrt(2 * math.log(1 / eps))) + 1
    assert band_halfwidth(4.0, torch.finfo(torch.float32).eps) == 23  # 5.6 sigma in float32


# --------------------------------------------------------------------------------------------
# Row sums, signs, masks; the paper's update equation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KERNEL_VARIANTS)
def test_rows_sum_to_zero_off_diagonal_non_negative(name: str, causal: bool, dtype) -> None:
    layer = block(KERNEL_VARIANTS[name], dtype=dtype)
    x, _, mask = inputs(True, dtype)
    tol = 1e-13 if dtype == torch.float64 else 1e-5
    with torch.no_grad():
        for kernel, (k, _) in layer.operators(x, mask, causal).items():
            scale = k.abs().amax(dim=(-2, -1), keepdim=True)
            assert (k.sum(-1).abs() <= tol * scale[..., 0]).all(), kernel
            off = ~torch.eye(T, dtype=torch.bool)
            assert (k[:, off] >= 0).all() and (k.diagonal(dim1=-2, dim2=-1) <= 0).all()
            assert (k[1, T - 12 :] == 0).all() and (k[1, :, T - 12 :] == 0).all()  # padding
            if causal:
                assert (k.triu(1) == 0).all()


def test_forward_only_gate_leaks_under_the_product_softplus() -> None:
    """Sec. 3.3 as written, softplus(phi g psi): phi = 0 for s > t still gives softplus(0) =
    log 2, so the forward-only gate reads the future; with the content softplus it does not."""
    x, _, _ = inputs(False)
    for softplus, leaks in (("content", False), ("product", True)):
        layer = block({"softplus": softplus, "direction": "forward", "attention": False})
        with torch.no_grad():
            k, _ = layer.operators(x)["diffusion"]
        future = k.triu(1)
        if leaks:
            assert torch.allclose(future[future != 0], torch.tensor(math.log(2), dtype=k.dtype))
            assert (future[:, 0, 1:] > 0).all()
        else:
            assert (future == 0).all()


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("name", ["default", "K_only", "D_only", "K+D_no_F", "large_dt"])
def test_the_update_is_the_papers_equation(name: str, norm: str) -> None:
    """h + dt (K h - diag(K 1) h) + F(x, h) + dt_att (D h - diag(D 1) h), then LayerNorm
    (post) or read from LN(h) (pre), with F = sigmoid(W1 [h; e] + b1) * (W2 h + b2), written
    out here from the materialised kernels and the weights."""
    layer = block(ABLATIONS[name], norm=norm)
    x, tokens, mask = inputs(True)
    with torch.no_grad():
        u = F.layer_norm(x, (C,), layer.norm.weight, layer.norm.bias) if norm == "pre" else x
        update = torch.zeros_like(x)
        for k, step in layer.operators(x, mask).values():
            update += step[..., None] * (k @ u - k.sum(-1, keepdim=True) * u)
        if layer.local is not None:
            w1, b1 = layer.local.gate.weight, layer.local.gate.bias
            w2, b2 = layer.local.value.weight, layer.local.value.bias
            update += torch.sigmoid(torch.cat([u, tokens], -1) @ w1.T + b1) * (u @ w2.T + b2)
        want = x + update
        if norm == "post":
            want = F.layer_norm(want, (C,), layer.norm.weight, layer.norm.bias)
        assert_close(run(layer, "banded", x, tokens, mask, False), want)


def stable_softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    return x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))


def test_softplus_is_exact_in_float64_above_torchs_threshold() -> None:
    """F.softplus returns x itself above 20, short by log1p(exp(-x)) (2e-9 at 20, far above
    float64's resolution); the layer's softplus, and so every kernel weight, is exact."""

    def relative(a: Tensor, b: Tensor) -> float:
        return float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())

    x = torch.linspace(-60.0, 60.0, 2401, dtype=torch.float64)
    assert relative(layer_softplus(x), stable_softplus(x)) <= 4e-16
    assert relative(F.softplus(x[x > 21]), stable_softplus(x[x > 21])) > 1e-13
    offset = torch.tensor([[0, -1], [1, 0]])
    for options, score in (({}, 25.0), ({"softplus": "product"}, 400.0)):
        kernel = block({"attention": False, **options}).kernels["diffusion"]
        psi = torch.full((1, 2, 2), score, dtype=torch.float64)
        with torch.no_grad():
            k = kernel.weights(psi, offset, offset != 0)[0, 1, 0]
            gates = kernel.phi(offset)[1, 0] * kernel.g(offset)[1, 0]
            inner = gates * score if options else torch.tensor(score, dtype=torch.float64)
            want = stable_softplus(inner) * (1.0 if options else gates)
        assert float(inner) > 20  # where F.softplus would return its input
        assert relative(k, want) <= 4e-16, options


# --------------------------------------------------------------------------------------------
# The explicit-Euler bound, by construction
# --------------------------------------------------------------------------------------------


def euler_matrix(layer: LDNBlock, x: Tensor, mask, causal: bool = False) -> Tensor:
    """P = I + sum over kernels of (dt c_b) K, the linear map the diffusion terms apply."""
    ops = layer.operators(x, mask, causal)
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    return eye + sum(step[..., None] * k for k, step in ops.values())


def assert_stochastic(p: Tensor, tol: float) -> None:
    assert (p >= -tol).all(), p.min()
    assert (p.sum(-1) - 1).abs().max() <= tol


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KERNEL_VARIANTS)
def test_step_bound_holds_by_construction(name: str, causal: bool) -> None:
    """Steps far outside the bound (dt = 50) are scaled per sequence so that P is non-negative
    and row-stochastic, hence dt c_b max_t |K_tt| <= 1 for each kernel."""
    options = dict(KERNEL_VARIANTS[name])
    if options.get("diffusion", True):
        options["dt"] = 50.0
    if options.get("attention", True):
        options["dt_att"] = 50.0
    layer = block(options)
    x, _, mask = inputs(True)
    with torch.no_grad():
        assert_stochastic(euler_matrix(layer, x, mask, causal), 1e-12)
        for k, step in layer.operators(x, mask, causal).values():
            worst = (step * k.diagonal(dim1=-2, dim2=-1).abs()).amax()
            assert worst <= 1 + 1e-12
            assert (step < 50.0).any()  # the scale did act (causal: not on row 0, which is 0)


def test_steps_inside_the_bound_are_left_alone_and_without_the_bound_it_fails() -> None:
    x, _, mask = inputs(True)
    small = block({"dt": 1e-3, "dt_att": 1e-3})
    with torch.no_grad():
        for _, step in small.operators(x, mask).values():
            torch.testing.assert_close(step, torch.full((B, T), 1e-3, dtype=x.dtype))
    unbounded = block({"dt": 50.0, "dt_att": 50.0, "step_bound": False})
    with torch.no_grad():
        p = euler_matrix(unbounded, x, mask)
    assert p.min() < -1  # what the bound prevents: negative weights, an unstable step


@pytest.mark.parametrize("name", ["default", "K_only", "D_only", "no_step_bound"])
def test_bound_and_row_sums_hold_after_training(name: str) -> None:
    """A few large Adam steps on a tiny classifier (dt pushed up by its gradient): every layer's
    kernels still have zero row sums, and with the bound the Euler matrix stays stochastic."""
    model = tiny_classifier(with_widths(ABLATIONS[name]))
    ids, labels = toy_task(64, torch.Generator().manual_seed(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    start = {n: p.detach().clone() for n, p in model.named_parameters() if "log_value" in n}
    for _ in range(15):
        loss = F.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    moved = [n for n, p in model.named_parameters() if n in start and not torch.equal(p, start[n])]
    assert moved  # the steps dt were learned
    taps: dict[str, Tensor] = {}
    model = model.double()
    with torch.no_grad():
        model.encoder(ids, None, taps=taps)
        for i, layer in enumerate(model.encoder.blocks):
            x = taps[f"blocks.{i}.input"]
            for k, _ in layer.operators(x).values():
                assert (k.sum(-1).abs() <= 1e-12 * k.abs().amax()).all()
            if layer.step_bound:
                assert_stochastic(euler_matrix(layer, x, None), 1e-12)


# --------------------------------------------------------------------------------------------
# Ablations, padding, causality, the factory
# --------------------------------------------------------------------------------------------


def test_ablations_build_what_they_name() -> None:
    assert list(block(ABLATIONS["K_only"]).kernels) == ["diffusion"]
    assert list(block(ABLATIONS["D_only"]).kernels) == ["attention"]
    assert list(block({}).kernels) == ["diffusion", "attention"]
    assert block(ABLATIONS["K+D_no_F"]).local is None and block({}).local is not None
    fixed = block(ABLATIONS["fixed_dt"])
    names = {n for n, _ in fixed.named_parameters()}
    assert not any("log_value" in n for n in names)
    assert {n for n, _ in fixed.named_buffers()} == {
        f"kernels.{k}.step.log_value" for k in fixed.kernels
    }
    assert float(fixed.kernels["diffusion"].step()) == pytest.approx(DEFAULTS["dt"])
    pure = block(ABLATIONS["K_only_no_F"])
    x, tokens, mask = inputs(True)
    with torch.no_grad():  # pure diffusion, then LayerNorm: P x normalised, F absent
        p = euler_matrix(pure, x, mask)
        want = F.layer_norm(p @ x, (C,), pure.norm.weight, pure.norm.bias)
        assert_close(pure(x, mask, tokens=None), want)


def tiny_classifier(options: dict, pooling: str = "mean", patch: int = 0) -> Classifier:
    torch.manual_seed(0)
    return Classifier(
        2, pooling=pooling, vocab_size=12, max_len=40, dim=16, layers=2, heads=1, mlp_dim=16,
        dropout=0.0, attention_dropout=0.0, block="ldn", block_options=options, patch=patch,
    )  # fmt: skip


@pytest.mark.parametrize("path", ["banded", "reference"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_does_not_change_predictions(pooling: str, path: str) -> None:
    model = tiny_classifier(with_widths({"path": path}), pooling).eval()
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(2, 12, (3, 30), generator=gen)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 17:] = False
    ids[~mask] = 0
    with torch.no_grad():
        alone = model(ids[:1, :17], mask[:1, :17])
        padded = model(ids, mask)[:1]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", ["banded", "reference"])
@pytest.mark.parametrize("name", KERNEL_VARIANTS)
def test_causal_ldn_reads_no_future_token(name: str, path: str) -> None:
    layer = block(KERNEL_VARIANTS[name] | {"path": path})
    x, tokens, mask = inputs(True)
    x, tokens = x.detach(), tokens.detach()
    report = probe_causality(lambda y: layer(y, mask, True, tokens=tokens), x, tol=1e-12)
    assert verdict(report) is Causality.CAUSAL
    both_ways = probe_causality(lambda y: layer(y, mask, False, tokens=tokens), x, tol=1e-12)
    one_way = "forward" in name and "content" in name  # phi = 0 for s > t, and 0 it stays
    assert verdict(both_ways) is (Causality.CAUSAL if one_way else Causality.LEAKS)


def test_the_factory_builds_ldn_classifiers_language_models_and_patch_models(params) -> None:
    p = with_variant(params, {"block": "ldn", "block_options": NARROW})
    pixels = ["<pad>", "<cls>", *(str(v) for v in range(256))]
    cases = [
        ("listops", {"vocab": ["<pad>", "<cls>", "a", "b"], "num_classes": 3}, 20, 0),
        ("listops", {"vocab": pixels, "num_classes": 2}, 64, 2),  # an 8 x 8 image, 2 x 2 patches
        ("wikitext", {"vocab": ["<pad>", "<cls>", "a", "b"], "kind": "lm"}, 16, 0),
    ]
    for task, manifest, length, patch in cases:
        run = resolve(p, task, "ldn_test", 0, "smoke")
        run = replace(run, model=replace(run.model, patch=patch, dim=8, heads=1, layers=2))
        manifest = {**manifest, "splits": {"train": {"max_length": length}}}
        model = build_model(run, manifest)
        assert all(isinstance(b, LDNBlock) for b in model.encoder.blocks)
        ids = torch.randint(2, len(manifest["vocab"]), (2, length))
        out = model(ids, torch.ones_like(ids, dtype=torch.bool))
        out.float().sum().backward()
        assert torch.isfinite(out).all()
        assert all(p.grad is not None for p in model.parameters())


# --------------------------------------------------------------------------------------------
# It learns
# --------------------------------------------------------------------------------------------


def toy_task(n: int, gen: torch.Generator, t: int = 12) -> tuple[Tensor, Tensor]:
    """Is the first token's id larger than the last one's? (a comparison across the sequence)"""
    ids = torch.randint(2, 12, (n, t), generator=gen)
    return ids, (ids[:, 0] > ids[:, -1]).long()


def test_a_tiny_ldn_classifier_learns_a_toy_task() -> None:
    gen = torch.Generator().manual_seed(0)
    model = tiny_classifier({})
    ids, labels = toy_task(512, gen)
    test_ids, test_labels = toy_task(512, gen)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        batch = torch.randint(0, 512, (64,), generator=gen)
        loss = F.cross_entropy(model(ids[batch]), labels[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model(test_ids).argmax(-1) == test_labels).float().mean().item()
    assert accuracy >= 0.9, accuracy
