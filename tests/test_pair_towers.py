"""PairClassifier runs both towers of a retrieval pair as one encoder call (the 2B documents
stacked, the shorter side padded); its logits and every gradient equal the two separate calls
of forward_reference in float64, for the backbone's mechanisms and for each mechanism family
the run profiles train on document pairs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from pdelab.models.factory import build_model
from pdelab.models.transformer import PairClassifier, stacked_pair
from pdelab.plan import compile_check
from pdelab.spec.config import load_params
from pdelab.spec.model import SITES, DiffusionSpec

TOLERANCE = 1e-10
BATCH, LONG, SHORT = 3, 21, 13


def documents(length: int, real: list[int], vocab: int, seed: int) -> tuple[Tensor, Tensor]:
    """(B, length) ids, row i real for its first real[i] tokens, then padding (id 0)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (len(real), length), generator=generator)
    mask = torch.arange(length)[None] < torch.tensor(real)[:, None]
    return ids.masked_fill(~mask, 0), mask


def pair_batch(vocab: int) -> dict[str, Tensor]:
    """Two sides of different padded lengths, each with padding inside."""
    ids, mask = documents(LONG, [LONG, 9, 17], vocab, seed=1)
    ids2, mask2 = documents(SHORT, [5, SHORT, 11], vocab, seed=2)
    return {"ids": ids, "mask": mask, "ids2": ids2, "mask2": mask2}


def gradients(model: nn.Module, forward: Any, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """(logits, every parameter's gradient of a fixed weighting of the logits)."""
    model.zero_grad(set_to_none=True)
    logits = forward(**batch)
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)
    return (logits.detach(), *(g.clone() for g in grads))


def assert_towers_equal(model: nn.Module, batch: dict[str, Tensor]) -> None:
    model = model.to(torch.float64).eval()  # eval: no dropout draws to differ between calls
    one_call = gradients(model, model.forward, batch)
    two_calls = gradients(model, model.forward_reference, batch)
    for a, b in zip(one_call, two_calls, strict=True):
        scale = max(1.0, b.abs().max().item())
        assert (a - b).abs().max().item() <= TOLERANCE * scale


CORE = [
    {},
    {"attention": "reference"},
    {"pooling": "cls"},
    {"smoothing": {"pde": "diffusion", "steps": 2}},
    *({"diffusion": DiffusionSpec(sites=(site,), strides=(1, 2))} for site in SITES),
]


@pytest.mark.parametrize("options", CORE, ids=lambda o: "-".join(map(str, o.values())) or "sdpa")
def test_one_encoder_call_equals_two_for_the_backbone(options: dict[str, Any]) -> None:
    torch.manual_seed(0)
    pooling = options.pop("pooling", "mean")
    model = PairClassifier(
        2, pooling=pooling, vocab_size=40, max_len=LONG + 1, dim=16, layers=2, heads=2,
        mlp_dim=32, **options,
    )  # fmt: skip
    assert_towers_equal(model, pair_batch(40))


def profile_pair_families() -> list[Any]:
    """One pair-classification model of each mechanism family of the smoke and paper
    profiles (pdelab.plan.compile_check's selection)."""
    params, found = load_params(), {}
    for profile in ("smoke", "paper"):
        for one in compile_check.select(params, profile):
            if one.kind == "pair classification":
                found.setdefault(one.family, one)
    return [pytest.param(one, id=family) for family, one in found.items()]


@pytest.mark.parametrize("selected", profile_pair_families())
def test_one_encoder_call_equals_two_for_each_profile_family(
    selected: compile_check.Selected,
) -> None:
    run, shape = compile_check.shrunk(selected.model)
    torch.manual_seed(0)
    model = build_model(run, shape.manifest())
    assert isinstance(model, PairClassifier)
    assert_towers_equal(model, pair_batch(len(shape.vocab)))


def test_stacked_pair_pads_the_shorter_side_and_keeps_missing_masks_missing() -> None:
    batch = pair_batch(40)
    both, mask = stacked_pair(batch["ids"], batch["mask"], batch["ids2"], batch["mask2"])
    assert both.shape == mask.shape == (2 * BATCH, LONG)
    assert torch.equal(mask[BATCH:, :SHORT], batch["mask2"]) and not mask[BATCH:, SHORT:].any()
    assert torch.equal(both[BATCH:, SHORT:], torch.zeros(BATCH, LONG - SHORT, dtype=both.dtype))
    same = torch.ones(BATCH, SHORT, dtype=torch.long)
    assert stacked_pair(same, None, same, None)[1] is None
    _, filled = stacked_pair(batch["ids"], None, batch["ids2"], batch["mask2"])
    assert filled is not None and filled[:BATCH].all()
