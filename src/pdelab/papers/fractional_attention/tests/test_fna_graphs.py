"""Figs 4-5 on trained models (graph_probe.py): removed edges are the kernel on the kept keys,
the two null conventions at p = 1, and the probe end to end on tiny trained runs."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pdelab.models.transformer import Classifier
from pdelab.papers.fractional_attention import GRAPH_OUTPUTS, outputs
from pdelab.papers.fractional_attention import graph_probe as gp
from pdelab.spec.config import load_params, resolve
from pdelab.training.train import train

KERNELS = {  # every mechanism the figures group, general and Q = K
    "fna": ("fna", {"alpha": 1.2, "orthogonal": True}),
    "la": ("fna", {"alpha": 2.0, "orthogonal": True}),
    "fna_qk": ("fna", {"alpha": 1.2, "orthogonal": True, "tied": True}),
    "dp": ("fna_dp", {"orthogonal": True}),
    "dp_qk": ("fna_dp", {"orthogonal": True, "tied": True}),
}


def one_layer(name: str) -> Classifier:
    attention, options = KERNELS[name]
    torch.manual_seed(0)
    return Classifier(
        2, vocab_size=20, max_len=10, dim=8, layers=1, heads=1, mlp_dim=8,
        attention=attention, attention_options=options,
    ).double().eval()  # fmt: skip


def qkv(model: Classifier, ids: torch.Tensor):
    attn = model.encoder.blocks[0].attn
    x = model.encoder.tokens(ids) + model.encoder.positions(torch.arange(ids.shape[1]))
    return attn.project(x)


@pytest.mark.parametrize("name", KERNELS)
def test_removing_edges_is_the_kernel_on_the_kept_keys(name: str) -> None:
    """No edge removed: the kernel's own output. Keys 6.. removed from every row: the kernel
    with those keys masked as padding (each row renormalised over the keys it keeps)."""
    model = one_layer(name)
    ids = torch.randint(2, 20, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, 8:] = False
    kernel = model.encoder.blocks[0].attn.kernel
    with torch.no_grad():
        q, k, v = qkv(model, ids)
        plain = kernel(q, k, v, key_padding_mask=mask, causal=False)
        none = torch.zeros(10, 10, dtype=torch.bool)
        for null in gp.NULLS:
            same = gp.RemovedEdges(kernel, none, null)(q, k, v, mask, False)
            torch.testing.assert_close(same, plain, rtol=1e-10, atol=1e-12)
        cut = torch.zeros(10, 10, dtype=torch.bool)
        cut[:, 6:] = True
        kept = mask.clone()
        kept[:, 6:] = False
        if "qk" not in name:  # tied kernels read k = q: masking keys must not touch queries
            expected = kernel(q, k, v, key_padding_mask=kept, causal=False)
            got = gp.RemovedEdges(kernel, cut, "same_null")(q, k, v, mask, False)
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        weights = gp.attention_weights(kernel, q, k, mask)
        torch.testing.assert_close(weights @ v, plain, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", KERNELS)
def test_every_edge_removed_under_each_null(name: str) -> None:
    """p = 1: the same null gives every mechanism zero rows; the published one gives DP a
    uniform mean over every key, padding included (the official -1e9 logits), FNA zero rows."""
    model = one_layer(name)
    ids = torch.randint(2, 20, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 7:] = False
    kernel = model.encoder.blocks[0].attn.kernel
    everything = torch.ones(10, 10, dtype=torch.bool)
    with torch.no_grad():
        q, k, v = qkv(model, ids)
        same = gp.RemovedEdges(kernel, everything, "same_null")(q, k, v, mask, False)
        published = gp.RemovedEdges(kernel, everything, "published")(q, k, v, mask, False)
    assert torch.count_nonzero(same) == 0
    if name.startswith("dp"):
        expected = v.mean(dim=-2, keepdim=True).expand_as(v)
        torch.testing.assert_close(published, expected)
    else:
        assert torch.count_nonzero(published) == 0


def test_an_unknown_null_is_refused() -> None:
    kernel = one_layer("fna").encoder.blocks[0].attn.kernel
    with pytest.raises(ValueError, match="null must be one of"):
        gp.RemovedEdges(kernel, torch.zeros(2, 2, dtype=torch.bool), "uniform")


@pytest.fixture(scope="module")
def trained(tiny_workdir, tmp_path_factory) -> dict[str, Path]:
    """Three tiny one-layer ListOps models (FNA, LA and DP; Q = K for FNA) and a two-layer
    one the probe must skip."""
    work = tiny_workdir(tmp_path_factory.mktemp("graphs"))
    cwd = Path.cwd()
    folders = {}
    try:
        os.chdir(work)
        params = load_params("params.yaml")
        for variant in ("shallow_l1_d8_a12_qk", "shallow_l1_d8_a20", "shallow_l1_d8_dp",
                        "shallow_l2_d8_a12"):  # fmt: skip
            run = resolve(params, "listops", variant, 0)
            run = replace(run, train=replace(run.train, epochs=2))  # a model, not a good one
            folders[f"listops/{variant}/0"] = work / variant
            train(run, work / variant, track=False, progress=False)
    finally:
        os.chdir(cwd)
    return folders


def test_probe_writes_figs_4_and_5_from_trained_models(trained, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(next(iter(trained.values())).parent)
    pairs = [f"{key}={folder}" for key, folder in trained.items()]
    gp.main([*pairs, "--out-dir", str(tmp_path), "--sequences", "8"])
    for path in GRAPH_OUTPUTS.values():
        assert (tmp_path / path).stat().st_size > 0, path
    ablation = pd.read_parquet(tmp_path / GRAPH_OUTPUTS["ablation"])
    assert set(ablation["variant"]) == {"shallow_l1_d8_a12_qk", "shallow_l1_d8_a20",
                                        "shallow_l1_d8_dp"}  # fmt: skip
    assert sorted(ablation["p"].unique()) == list(gp.REMOVAL)
    assert len(ablation) == 3 * len(gp.REMOVAL) * len(gp.NULLS)
    # at p = 0 both nulls are the model itself; at p = 1 under the same null every
    # mechanism loses its attention, and FNA's published null is the same null
    for (variant, p), block in ablation.groupby(["variant", "p"]):
        if p == 0 or not variant.endswith("dp"):
            assert block["acc"].nunique() == 1, (variant, p)
    gaps = pd.read_parquet(tmp_path / GRAPH_OUTPUTS["gaps"])
    assert ((gaps["gap"] > 0) & (gaps["gap"] <= 2)).all() and (gaps["sequences"] == 8).all()
    hops = pd.read_parquet(tmp_path / GRAPH_OUTPUTS["hops"])
    assert (hops["max_hops"] >= 1).all() and (hops["mean_hops"] >= 1).all()
    diffusion = pd.read_parquet(tmp_path / GRAPH_OUTPUTS["diffusion"])
    assert set(diffusion["variant"]) == {"shallow_l1_d8_a12_qk"}  # symmetric scores only
    table = (tmp_path / GRAPH_OUTPUTS["table"]).read_text()
    assert "FNA a=1.2 d8 Q=K" in table and "DP d8" in table
    frames = {name: pd.read_parquet(tmp_path / GRAPH_OUTPUTS[name]) for name in
              ("ablation", "gaps", "hops", "diffusion")}  # fmt: skip
    summary = gp.summary_table(frames, {"listops": 0.2}).set_index("model")
    assert summary.loc["DP d8", "spectral gap"] != "" != summary.loc["DP d8", "max hops"]


def test_a_p0_ablation_is_the_plain_test_accuracy(trained, monkeypatch) -> None:
    folder = trained["listops/shallow_l1_d8_a20/0"]
    monkeypatch.chdir(folder.parent)
    run, model = gp.load_run(folder, torch.device("cpu"))
    split = gp.load_split(run.data_dir, "test")
    acc = gp.ablation_accuracy(model, split, 0.0, "same_null", 16, torch.device("cpu"))
    result = pd.read_parquet(folder / "result.parquet")
    assert math.isclose(acc, float(result["test_acc"].iloc[0]), abs_tol=1e-9)
    again = gp.ablation_accuracy(model, split, 0.5, "same_null", 16, torch.device("cpu"))
    assert again == gp.ablation_accuracy(model, split, 0.5, "same_null", 16, torch.device("cpu"))


def test_outputs_declare_the_graph_probe_with_a_shallow_study(params) -> None:
    assert set(GRAPH_OUTPUTS.values()) <= set(outputs(params))
    only = {"studies": {"x": {"kind": "fna_accuracy", "tasks": [], "variants": []}}}
    assert not set(GRAPH_OUTPUTS.values()) & set(outputs(only))
    assert np.allclose(gp.REMOVAL, np.arange(11) / 10)
