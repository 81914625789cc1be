"""A spec in its canonical form (pdelab.spec.config.canonical_diffusion) builds the model the
spec as written builds: leaving out what the model does not read changes no weight."""

from __future__ import annotations

import pytest
import torch

from pdelab.models.transformer import Classifier
from pdelab.spec.config import canonical_diffusion
from pdelab.spec.model import DiffusionSpec


def model(diffusion: DiffusionSpec) -> Classifier:
    torch.manual_seed(0)
    return Classifier(
        3,
        pooling="mean",
        vocab_size=11,
        max_len=17,
        dim=8,
        layers=2,
        heads=2,
        mlp_dim=16,
        dropout=0.0,
        attention_dropout=0.0,
        norm="pre",
        attention="sdpa",
        diffusion=diffusion,
    )


@pytest.mark.parametrize(
    "written",
    [
        DiffusionSpec(sites=(), alpha=0.3, layernorm=False, learnable=False, strides=(1, 2)),
        DiffusionSpec(sites=("after_mlp",), alpha=(0.2,)),
        DiffusionSpec(sites=("after_embedding", "in_attention"), alpha=(0.15,), layernorm=False),
    ],
)
def test_the_canonical_spec_builds_the_same_model(written: DiffusionSpec) -> None:
    canonical = canonical_diffusion(written)
    assert canonical != written
    first, second = model(written), model(canonical)
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.randint(2, 11, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    assert torch.equal(first(ids, mask), second(ids, mask))
