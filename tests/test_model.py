"""The backbone: every insertion site is called, every variant trains, masks are honoured."""

from __future__ import annotations

import pytest
import torch

from conftest import ROOT
from pdelab.models import transformer
from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.diffusion import Diffusion
from pdelab.models.transformer import Classifier, PairClassifier, diffusion_modules
from pdelab.spec.config import SITES, load_params, resolve
from pdelab.spec.plugins import import_mechanisms

import_mechanisms()  # the papers' kernels (pde, longformer, ...) register on import
VARIANTS = list(load_params(ROOT / "params.yaml")["variants"])


def tiny(
    diffusion,
    norm="post",
    pooling="mean",
    attention="sdpa",
    dropout=0.0,
    attention_options=None,
    smoothing=None,
) -> Classifier:
    torch.manual_seed(0)
    return Classifier(
        5,
        pooling=pooling,
        vocab_size=17,
        max_len=33,
        dim=8,
        layers=2,
        heads=2,
        mlp_dim=16,
        dropout=dropout,
        attention_dropout=dropout,
        norm=norm,
        attention=attention,
        attention_options=attention_options,
        smoothing=smoothing,
        diffusion=diffusion,
    )


def batch(b: int = 3, t: int = 20):
    torch.manual_seed(1)
    ids = torch.randint(2, 17, (b, t))
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, 13:] = False
    ids[~mask] = 0
    return ids, mask


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_forward_and_backward(params, variant: str, norm: str) -> None:
    spec = resolve(params, "listops", variant, 0)
    m = spec.model
    model = tiny(
        spec.diffusion,
        norm=norm,
        dropout=0.1,
        attention=m.attention,
        attention_options=m.attention_options,
        smoothing=m.smoothing,
    )
    ids, mask = batch()
    logits = model(ids, mask)
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    logits.sum().backward()
    for name, p in model.named_parameters():
        if p.requires_grad and "positions" not in name:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert (len(diffusion_modules(model)) > 0) == bool(spec.diffusion.sites)
    kernel = model.encoder.blocks[0].attn.kernel
    assert kernel is not None and type(kernel) is ATTENTION_KERNELS.get(m.attention)
    for option, value in m.attention_options.items():
        assert getattr(kernel, option, value) == value  # the options reach the kernel
    assert (model.encoder.smoothing is not None) == bool(m.smoothing)


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("site", SITES)
def test_every_site_is_called(params, site: str, norm: str) -> None:
    spec = resolve(params, "listops", "baseline", 0).diffusion
    model = tiny(type(spec)(sites=(site,)), norm=norm)
    calls: list[str] = []
    modules = diffusion_modules(model)
    for name, module in modules:
        module.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
    model(*batch())
    per_layer = {"after_embedding": 0, "before_layernorm": 2}.get(site, 1)
    expected = 1 if site == "after_embedding" else 2 * per_layer  # 2 layers
    assert len(modules) == expected and sorted(calls) == sorted(n for n, _ in modules)


def test_sites_list_is_the_backbones() -> None:
    assert transformer.SITES is SITES and len(set(SITES)) == 7


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_does_not_change_predictions(params, variant: str, pooling: str) -> None:
    """A sequence padded to a longer batch gets the same logits as on its own."""
    spec = resolve(params, "listops", variant, 0)
    model = tiny(spec.diffusion, pooling=pooling).eval()
    ids, mask = batch()
    with torch.no_grad():
        alone = model(ids[:1, :13], mask[:1, :13])
        padded = model(ids, mask)[:1]
    assert torch.allclose(alone, padded, atol=1e-5)


@pytest.mark.parametrize("kernel", ATTENTION_KERNELS.names())
def test_attention_kernels_agree_with_reference(kernel: str) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 9, 4).unbind(0)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    ref = ATTENTION_KERNELS.get("reference")(heads=2, head_dim=4).eval()
    module = ATTENTION_KERNELS.get(kernel)(heads=2, head_dim=4).eval()
    for causal in (False, True):
        out = module(q, k, v, key_padding_mask=mask, causal=causal)
        want = ref(q, k, v, key_padding_mask=mask, causal=causal)
        assert out.shape == want.shape
        if kernel in ("sdpa", "reference"):
            assert torch.allclose(out, want, atol=1e-5)


def test_diffusion_layer_is_a_layer_per_site() -> None:
    assert all(isinstance(m, Diffusion) for _, m in diffusion_modules(tiny(None)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_pair_classifier_forward_backward_and_shared_tower(params, variant: str) -> None:
    spec = resolve(params, "listops", variant, 0)
    torch.manual_seed(0)
    model = PairClassifier(
        2,
        vocab_size=17,
        max_len=33,
        dim=8,
        layers=1,
        heads=2,
        mlp_dim=16,
        dropout=0.0,
        attention_dropout=0.0,
        diffusion=spec.diffusion,
    ).eval()
    ids, mask = batch()
    logits = model(ids, mask, ids.flip(0), mask.flip(0))
    assert logits.shape == (3, 2)
    logits.sum().backward()
    assert model.tower.encoder.tokens.weight.grad is not None  # one encoder serves both
    assert all(p.grad is not None for p in model.parameters())  # no dead tower head
    u = model.tower.embed(ids, mask)
    swapped = model.head(torch.cat([u, u, u * u, u - u], dim=-1))
    assert torch.allclose(model(ids, mask, ids, mask), swapped)


# --------------------------------------------------------------------------------------------
# ViT patches (model.patch)
# --------------------------------------------------------------------------------------------


def test_patch_embedding_takes_each_patch_in_row_major_order() -> None:
    """Pixel tokens (intensity + 2) of a 4x4 image, patch 2: the four 2x2 patches, in order,
    each flattened row by row; a leading CLS keeps its own embedding."""
    embed = transformer.PatchEmbedding(2, dim=4)
    with torch.no_grad():  # the linear map reads a patch back: intensity x 255 per pixel
        embed.pixels.weight.copy_(torch.eye(4) * 255)
        embed.pixels.bias.zero_()
    image = torch.arange(16).reshape(4, 4)
    ids = (image + 2).reshape(1, 16)
    out = embed(ids)
    expected = torch.tensor([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]])
    torch.testing.assert_close(out[0], expected.float())
    with_cls = embed(torch.cat([torch.ones(1, 1, dtype=torch.long), ids], dim=1))
    assert with_cls.shape == (1, 5, 4)
    torch.testing.assert_close(with_cls[0, 0], embed.specials.weight[1])
    torch.testing.assert_close(with_cls[0, 1:], out[0])
    mask = torch.ones(1, 17, dtype=torch.bool)
    mask[0, 1:5] = False  # the first image row: half of patches 1 and 2
    assert embed.token_mask(mask).tolist() == [[True, True, True, True, True]]
    mask[0, 1:] = False
    assert embed.token_mask(mask).tolist() == [[True, False, False, False, False]]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vit_classifier_trains_on_patches(pooling: str) -> None:
    """A pre-LN classifier with 2x2 patches on 8x8 images: 16 (+ CLS) tokens; it fits a
    batch whose label is the brightness of the top-left quarter."""
    torch.manual_seed(0)
    model = Classifier(
        2, pooling=pooling, vocab_size=258, max_len=17, dim=16, layers=1, heads=2, mlp_dim=32,
        dropout=0.0, attention_dropout=0.0, norm="pre", patch=2,
    )  # fmt: skip
    images = torch.randint(0, 256, (32, 8, 8))
    labels = (images[:, :4, :4].float().mean((1, 2)) > 127.5).long()
    ids = (images + 2).reshape(32, 64)
    mask = torch.ones_like(ids, dtype=torch.bool)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(ids, mask), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert (model(ids, mask).argmax(-1) == labels).float().mean() >= 0.9


def test_patch_refuses_what_is_not_an_image(params) -> None:
    from dataclasses import replace

    from pdelab.models.factory import build_model

    run = resolve(params, "listops", "baseline", 0, "smoke")
    run = replace(run, model=replace(run.model, patch=2))
    manifest = {"vocab": ["<pad>", "<cls>", "a"], "num_classes": 2, "pairs": False}
    manifest["splits"] = {"train": {"max_length": 64}}
    with pytest.raises(ValueError, match="model.patch = 2 needs square images"):
        build_model(run, manifest)
    pixels = {**manifest, "vocab": ["<pad>", "<cls>", *(str(v) for v in range(256))]}
    assert build_model(run, pixels).encoder.positions.num_embeddings == 16
    pixels["splits"] = {"train": {"max_length": 63}}
    with pytest.raises(ValueError, match="sequences of 63"):
        build_model(run, pixels)
