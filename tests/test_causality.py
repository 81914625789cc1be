"""The causality probe, and the audit it exists for: which PDE mechanisms read the future."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pdelab.models.attention import ATTENTION_KERNELS
from pdelab.models.smoothing import ReleasedSmoothing
from pdelab.papers.continuous_time_attention import attention as pa
from pdelab.records import causal_verdict
from pdelab.training import causality
from pdelab.training.causality import (
    Causality,
    CausalityReport,
    probe_causality,
    probe_causality_grad,
    verdict,
)

B, T, H, DH = 2, 10, 2, 4
DIM = H * DH
METHODS = ["perturb", "grad"]


def features(seed: int = 0) -> Tensor:
    return torch.randn(
        B, T, DIM, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


class Layer(nn.Module):
    """x (B, T, DIM) -> q, k, v heads -> kernel -> (B, T, DIM): a self-attention layer."""

    def __init__(self, kernel: nn.Module, causal: bool, mask: Tensor | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(DIM, 3 * DIM, dtype=torch.float64)
        self.kernel, self.causal, self.mask = kernel.double(), causal, mask

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).view(B, T, 3, H, DH).permute(2, 0, 3, 1, 4)
        return self.kernel(q, k, v, self.mask, self.causal).transpose(1, 2).reshape(B, T, DIM)


def sdpa_fn(causal: bool):
    def fn(x: Tensor) -> Tensor:
        q = x.view(B, T, H, DH).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, is_causal=causal).transpose(1, 2)

    return fn


# -- the probe itself -----------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_probe_flags_non_causal_attention_and_passes_causal(method: str) -> None:
    x = features()
    leaky = probe_causality(sdpa_fn(False), x, method=method)
    assert isinstance(leaky, CausalityReport) and leaky.method == method
    assert leaky.leaks and verdict(leaky) is Causality.LEAKS
    assert leaky.first_leak_position == 0 and leaky.max_leak > 1e-3
    assert leaky.positions == tuple(range(T - 1)) and len(leaky.per_position) == T - 1
    causal = probe_causality(sdpa_fn(True), x, method=method)
    assert not causal.leaks and verdict(causal) is Causality.CAUSAL
    assert causal.max_leak == 0.0 and causal.first_leak_position is None


@pytest.mark.parametrize("method", METHODS)
def test_probe_locates_the_first_leak(method: str) -> None:
    """A function that only reads ahead from position 5 onwards."""

    def fn(x: Tensor) -> Tensor:
        y = x.clone()
        y[:, 5] = y[:, 5] + 0.5 * x[:, 7]
        return y

    report = probe_causality(fn, features(), method=method)
    assert report.leaks and report.first_leak_position == 5
    assert report.per_position[:5] == (0.0,) * 5
    only_early = probe_causality(fn, features(), positions=[0, 1, 2], method=method)
    assert not only_early.leaks and only_early.positions == (0, 1, 2)


def test_probe_on_token_ids() -> None:
    emb = nn.Embedding(20, DIM, dtype=torch.float64)
    ids = torch.randint(0, 20, (B, T), generator=torch.Generator().manual_seed(1))
    causal = probe_causality(lambda i: sdpa_fn(True)(emb(i)), ids, vocab_size=20)
    leaky = probe_causality(lambda i: sdpa_fn(False)(emb(i)), ids, vocab_size=20)
    assert not causal.leaks and leaky.leaks
    with pytest.raises(TypeError, match="float"):
        probe_causality_grad(emb, ids)


def test_probe_tolerance() -> None:
    def tiny_leak(x: Tensor) -> Tensor:
        return x + 1e-9 * x.flip(1)

    assert not probe_causality(tiny_leak, features(), tol=1e-6).leaks
    assert probe_causality(tiny_leak, features(), tol=1e-12).leaks


# -- the verdict as an enum -------------------------------------------------------------------


def test_verdict_words_are_the_stored_strings() -> None:
    """result.parquet and the tables hold these exact words; renaming one breaks old runs."""
    assert [c.value for c in Causality] == ["causal", "leaks future tokens"]
    assert Causality.LEAKS == "leaks future tokens" and str(Causality.CAUSAL) == "causal"
    assert f"{Causality.LEAKS}" == "leaks future tokens"
    assert Causality.LEAKS.leaks and not Causality.CAUSAL.leaks
    assert causality.Causality is causal_verdict.Causality  # one enum, torch-free for the report


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("causal", Causality.CAUSAL),
        ("leaks future tokens", Causality.LEAKS),
        (Causality.LEAKS, Causality.LEAKS),
        ("", None),
        (None, None),
        (math.nan, None),
        (np.float64("nan"), None),
    ],
)
def test_parse_reads_a_summary_cell(cell: object, expected: Causality | None) -> None:
    assert Causality.parse(cell) is expected


def test_parse_reads_a_parquet_column(tmp_path) -> None:
    """Unprobed runs store "" (or NaN after a concat with older files): both parse to None."""
    frame = pd.DataFrame({"causality": ["causal", "", "leaks future tokens"]})
    frame.to_parquet(tmp_path / "r.parquet")
    column = pd.concat([pd.read_parquet(tmp_path / "r.parquet"), pd.DataFrame({"x": [1]})])
    parsed = [Causality.parse(v) for v in column["causality"]]
    assert parsed == [Causality.CAUSAL, None, Causality.LEAKS, None]


def test_parse_rejects_an_unknown_word() -> None:
    with pytest.raises(ValueError):
        Causality.parse("leaky")


# -- the audit: PDE kernels under causal=True ------------------------------------------------

CAUSAL_KERNELS = (
    [("pde", {"pde": p}) for p in pa.PDE_TYPES]
    + [("pde_reference", {"pde": p}) for p in pa.PDE_TYPES]
    + [
        ("pde_longformer", {"window": 4, "n_global": 1}),
        ("pde_longformer", {"window": 4, "n_global": 1, "fast": False}),
        ("longformer", {"window": 4, "n_global": 1}),
    ]
)


def _id(case: tuple[str, dict]) -> str:
    name, opts = case
    return "-".join([name, *(f"{k}={v}" for k, v in opts.items())])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("case", CAUSAL_KERNELS, ids=_id)
def test_causal_kernels_pass_the_probe(case: tuple[str, dict], padded: bool, method: str) -> None:
    name, opts = case
    mask = None
    if padded:
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[1, T - 3 :] = False
    kernel = ATTENTION_KERNELS.get(name)(heads=H, head_dim=DH, **opts)
    report = probe_causality(
        Layer(kernel, causal=True, mask=mask), features(2), method=method, tol=1e-12
    )
    assert verdict(report) is Causality.CAUSAL, report


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("pde", pa.PDE_TYPES)
def test_paper_evolution_on_a_causal_mask_leaks(pde: str, fast: bool, method: str) -> None:
    """The paper as written: causal A(0), then the ordinary two-sided Laplacian along keys."""
    kernel = pa.PDEAttention(H, DH, pde=pde, steps=1, fast=fast, causal_form="two_sided")
    report = probe_causality(Layer(kernel, causal=True), features(3), method=method)
    assert verdict(report).leaks
    assert report.first_leak_position == 0  # one step already reads one token ahead


def test_released_smoothing_after_a_causal_layer_leaks() -> None:
    layer = Layer(ATTENTION_KERNELS.get("sdpa")(heads=H, head_dim=DH), causal=True)
    smooth = ReleasedSmoothing().double()
    assert verdict(probe_causality(layer, features(4))) is Causality.CAUSAL
    for method in METHODS:
        report = probe_causality(lambda x: smooth(layer(x)), features(4), method=method)
        assert verdict(report) is Causality.LEAKS
        assert report.first_leak_position == 1  # token 0 is pinned, token 1 reads token 2
    # the repository's later causal stencil does not
    backward = ReleasedSmoothing(causal=True, steps=2).double()
    for method in METHODS:
        report = probe_causality(lambda x: backward(layer(x)), features(4), method=method)
        assert verdict(report) is Causality.CAUSAL
