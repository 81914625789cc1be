"""Roughness and commutator diagnostics: the model's taps they read, the identities they rest on,
and the run -> parquet -> figure/table path on a tiny run."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT, write_run
from pdelab.data import listops
from pdelab.data.store import load_manifest, write_prepared
from pdelab.models.diffusion import dirichlet_energy, laplacian_matrix
from pdelab.models.factory import build_model
from pdelab.models.transformer import BLOCK_TAPS, Classifier
from pdelab.papers.diffusion_positions import diagnostics as D
from pdelab.papers.diffusion_positions import diagnostics_measures as M
from pdelab.papers.diffusion_positions import diagnostics_model as DM
from pdelab.papers.diffusion_positions import diagnostics_report as R
from pdelab.papers.diffusion_positions import diagnostics_stats as S
from pdelab.spec.config import SITES, DiffusionSpec, load_params, resolve

ALL_BLOCK_SITES = ("after_attention", "after_mlp", "layer_diffusion", "before_layernorm")
# Every variant the diagnostics read: no diffusion, each registered site alone, all at once.
SITE_SETS = [(), *((s,) for s in SITES), tuple(SITES)]
SITE_IDS = ["none", *SITES, "all"]


def tiny(
    sites=(), norm="post", pooling="mean", strides=(1,), alpha=0.1, smoothing=None
) -> Classifier:
    torch.manual_seed(0)
    model = Classifier(
        5,
        pooling=pooling,
        vocab_size=17,
        max_len=40,
        dim=8,
        layers=2,
        heads=2,
        mlp_dim=16,
        dropout=0.1,
        attention_dropout=0.1,
        norm=norm,
        diffusion=DiffusionSpec(sites=tuple(sites), strides=strides, alpha=alpha),
        smoothing=smoothing,
    )
    return model.eval()


def batch(b: int = 3, t: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(2, 17, (b, t))
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, 13:] = False
    ids[~mask] = 0
    return ids, mask


def attention_layer() -> torch.nn.Module:
    """A float64 attention sublayer with sharp (input-dependent) routing."""
    attn = tiny().encoder.blocks[0].attn.double()
    with torch.no_grad():
        attn.qkv.weight[:16] *= 3.0  # queries and keys: rows 0..15 of (24, 8)
    return attn


def random_input(b: int = 2, t: int = 12, seed: int = 2) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(b, t, 8, dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# Taps: the activations come from the model's own forward
# --------------------------------------------------------------------------------------------


def test_the_points_are_taps() -> None:
    assert set(DM.BLOCK_POINTS) <= set(BLOCK_TAPS) and "attention_read" in BLOCK_TAPS


@pytest.mark.parametrize("sites", SITE_SETS, ids=SITE_IDS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_taps_reproduce_the_block_output(norm, sites) -> None:
    """Each block's taps: its input, what its attention reads, h = X + Attn and the block's
    output before layer_diffusion; the block's own output is that site applied to the tap."""
    encoder, ids, mask = DM.encoder_inputs(tiny(sites, norm), *batch())
    with torch.no_grad():
        x = encoder.drop(encoder.tokens(ids) + encoder.positions(torch.arange(ids.shape[1])))
        for block in encoder.blocks:
            taps: dict[str, torch.Tensor] = {}
            out = block(x, mask, taps=taps)
            assert list(taps) == list(BLOCK_TAPS) and torch.equal(out, block(x, mask))
            assert torch.equal(out, block.site("layer_diffusion", taps["block_output"], mask))
            if "layer_diffusion" not in block.diffusion:
                assert torch.equal(taps["block_output"], out)
            assert taps["attention_input"] is x
            read = block.ln1(block.site("before_ln1", x, mask)) if norm == "pre" else x
            assert torch.equal(taps["attention_read"], read)
            attn = block.attn(taps["attention_read"], mask)
            assert torch.equal(taps["after_attention"], x + attn)
            g = block.site("after_mlp", taps["mlp_output"], mask)
            if norm == "post":
                g = block.ln2(block.site("before_ln2", g, mask))
            assert torch.equal(taps["block_output"], g)
            x = out


@pytest.mark.parametrize("smoothing", [None, {"pde": "diffusion", "steps": 1}])
@pytest.mark.parametrize("sites", SITE_SETS, ids=SITE_IDS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_trace_reads_the_encoder_forward(norm, sites, smoothing) -> None:
    """trace's points are the encoder's taps: the output is the encoder's, each layer's input
    the previous layer's output (after the released smoothing, which sits between layers)."""
    model = tiny(sites, norm, "cls", smoothing=smoothing)
    encoder, ids, mask = DM.encoder_inputs(model, *batch())
    with torch.no_grad():
        out, points, reads = DM.trace(encoder, ids, mask)
        assert torch.equal(out, encoder(ids, mask))
        found = {(j, p): z for j, p, z in points}
        x = found[(0, "embedding")]
        if encoder.embed_diffusion is not None:
            x = encoder.embed_diffusion(x, mask)
        for j, block in enumerate(encoder.blocks):
            assert torch.equal(found[(j, "attention_input")], x)
            taps: dict[str, torch.Tensor] = {}
            x = block(x, mask, taps=taps)
            assert torch.equal(reads[j], taps["attention_read"])
            assert torch.equal(found[(j, "block_output")], taps["block_output"])
            if smoothing:
                x = encoder.smoothing[j](x, mask)
    assert [(j, p) for j, p, _ in points] == [(0, "embedding")] + [
        (j, p) for j in range(2) for p in DM.BLOCK_POINTS
    ]


@pytest.mark.parametrize("sites", SITE_SETS, ids=SITE_IDS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_taps_change_nothing(norm, sites) -> None:
    """taps=None and a forward with taps give the same output and gradients, bit for bit,
    in training mode too (the same dropout draws)."""
    model = tiny(sites, norm).train()
    ids, mask = batch()
    results = []
    for taps in (None, {}):
        torch.manual_seed(3)
        model.zero_grad()
        out = model.encoder(ids, mask, taps=taps)
        out.square().sum().backward()
        results.append([out.detach(), *(p.grad.clone() for p in model.encoder.parameters())])
        if taps is not None:
            assert len(taps) == 1 + len(BLOCK_TAPS) * 2 and "blocks.1.block_output" in taps
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("sites", [(), ("in_attention",), ("head_diffusion",)])
def test_attention_at_its_own_routing_is_the_layer(sites) -> None:
    """project + attend is the layer: routing at x itself changes nothing."""
    attn = tiny(sites).encoder.blocks[1].attn
    x, mask = random_input().float(), batch(2, 12)[1]
    with torch.no_grad():
        assert torch.equal(M.attention(attn, x, mask, routing=x), attn(x, mask))


# --------------------------------------------------------------------------------------------
# Roughness
# --------------------------------------------------------------------------------------------


def test_roughness_is_the_dirichlet_energy() -> None:
    t, d = 10, 3
    ramp = torch.arange(t, dtype=torch.float64)[None, :, None].expand(2, t, d).clone()
    mask = torch.ones(2, t, dtype=torch.bool)
    mask[1, 6:] = False  # 6 real tokens: 5 pairs
    r = M.roughness(ramp, mask)
    assert torch.allclose(r["energy"], dirichlet_energy(ramp, mask))
    assert torch.allclose(r["energy"], torch.tensor([0.5 * 9 * d, 0.5 * 5 * d], dtype=ramp.dtype))
    assert torch.allclose(r["roughness"], torch.full((2,), 0.5, dtype=ramp.dtype))  # per pair/ch
    z = random_input()
    assert torch.allclose(M.roughness(z)["energy"], dirichlet_energy(z))
    # scale-free roughness: invariant to scale and offset, a Rayleigh quotient below 2
    s = M.roughness(z)["roughness_scalefree"]
    assert torch.allclose(M.roughness(5 * z + 3)["roughness_scalefree"], s)
    assert (s > 0).all() and (s < 2).all()
    const = torch.ones(1, t, d, dtype=torch.float64)
    assert M.roughness(const)["energy"].item() == 0


# --------------------------------------------------------------------------------------------
# Commutator
# --------------------------------------------------------------------------------------------


def test_commutator_vanishes_when_attention_commutes_with_diffusion() -> None:
    op = M.reference_operator()
    attn = attention_layer()
    x, mask = random_input(), batch(2, 12)[1]
    rough = M.commutators(attn, x, mask, op)
    assert (rough["exact"] > 1e-2).all() and (rough["linear"] > 1e-2).all()
    # a constant sequence is a fixed point of S, and attention maps it to a constant sequence
    const = x[:, :1].expand_as(x).contiguous()
    flat = M.commutators(attn, const, None, op)
    for form in ("exact", "linear", "tangent"):
        assert flat[form].max() < 1e-12
    # uniform attention (zero query and key weights): A = 11^T / n commutes with Delta_N
    with torch.no_grad():
        attn.qkv.weight[:16] = 0
    uniform = M.commutators(attn, x, mask, op)
    for form in ("exact", "linear", "tangent"):
        assert uniform[form].max() < 1e-10 * uniform["attention_norm"].max()


def test_linear_form_is_eq13_per_head() -> None:
    """S(A(X)) - A_X(S(X)) == sum_h alpha (Delta A_h - A_h Delta) X W_V^h W_O^h (Eq. 13)."""
    attn, x = attention_layer(), random_input()
    op = M.Operator((0.07,), (1,))
    b, t, c = x.shape
    heads, dh = attn.heads, attn.head_dim
    with torch.no_grad():
        q, k, _ = attn.project(x)
        a = (q @ k.transpose(-1, -2) / math.sqrt(dh)).softmax(-1)  # (B, H, T, T)
        lap = op.alpha * laplacian_matrix(t)
        w_v, w_o = attn.qkv.weight[2 * c :], attn.out.weight  # v = x W_v^T, y = z W_o^T
        expected = torch.zeros_like(x)
        for h in range(heads):
            ch = slice(h * dh, (h + 1) * dh)
            xw = x @ w_v[ch].T @ w_o[:, ch].T  # X W_V^h W_O^h
            expected += (lap @ a[:, h] - a[:, h] @ lap) @ xw
        ax = M.attention(attn, x, None)
        linear = op(ax) - M.attention(attn, op(x), None, routing=x)
    assert torch.allclose(linear, expected, atol=1e-12)
    assert torch.allclose(M.frobenius(linear), M.commutators(attn, x, None, op)["linear"])


def test_padding_changes_no_commutator() -> None:
    attn, x = attention_layer(), random_input(b=1, t=12)
    mask = torch.ones(1, 12, dtype=torch.bool)
    mask[0, 8:] = False
    padded = M.commutators(attn, x, mask, M.reference_operator())
    alone = M.commutators(attn, x[:, :8], None, M.reference_operator())
    for key in alone:
        assert torch.allclose(padded[key], alone[key], rtol=1e-6), key


def test_exact_and_first_order_forms_agree_as_alpha_vanishes() -> None:
    attn, x = attention_layer(), random_input()
    gaps = []
    for alpha in (1e-1, 1e-2, 1e-3):
        c = M.commutators(attn, x, None, M.Operator((alpha,), (1,)))
        gaps.append(float((c["exact"] / c["tangent"] - 1).abs().max()))
    assert gaps[2] < 1e-2 and gaps[2] < gaps[1] < gaps[0]  # O(alpha): ratio -> 1
    # Eq. (13) freezes the routing: it misses the first-order term dA[(S - I)X] X W, so with
    # input-dependent attention it is not the alpha -> 0 limit of the exact commutator ...
    assert float((c["linear"] / c["tangent"] - 1).abs().max()) > 0.05
    # ... but when the weights do not depend on X (causal, zero q/k: A_ij = 1/(i+1), j <= i)
    # all three forms coincide at every alpha, and the ratio is 1
    with torch.no_grad():
        attn.qkv.weight[:16] = 0
    for alpha in (0.3, 1e-3):
        c = M.commutators(attn, x, None, M.Operator((alpha,), (1,)), causal=True)
        assert (c["exact"] > 1e-4 * alpha).all()
        assert torch.allclose(c["linear"], c["exact"], rtol=1e-9)
        assert torch.allclose(c["tangent"], c["exact"], rtol=1e-6)


def test_multiscale_operator_matches_the_models_step() -> None:
    model = tiny(("after_attention",), strides=(1, 2, 4), alpha=0.3)
    module = model.encoder.blocks[1].diffusion["after_attention"]
    op = DM.layer_operator(model.encoder, 1)
    assert op.source == "blocks.1.after_attention" and op.strides == (1, 2, 4)
    assert op.alpha == pytest.approx(0.3)
    x, mask = random_input().float(), batch(2, 12)[1]
    with torch.no_grad():
        assert torch.allclose(op(x, mask), module.step(x, mask), atol=1e-6)
    assert DM.layer_operator(tiny().encoder, 0).source == "reference"
    assert DM.layer_operator(tiny(("after_embedding",)).encoder, 1).source == "embed_diffusion"


# --------------------------------------------------------------------------------------------
# Runs, CLI, figure, table
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("listops")
    spec = listops.ListOpsSpec(
        n_train=8, n_val=12, n_test=8, min_length=5, max_length=40, max_depth=4, seed=0
    )
    listops.fetch(spec, root / "raw")
    listops.prepare(spec, root / "raw", root / "prepared")
    return root / "prepared"


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    docs = {
        split: (
            [rng.integers(2, 16, rng.integers(4, 20)) for _ in range(6)],
            rng.integers(0, 2, 6),
            [rng.integers(2, 16, rng.integers(4, 20)) for _ in range(6)],
        )
        for split in ("train", "val", "test")
    }
    out = tmp_path_factory.mktemp("pairs")
    write_prepared(out, docs, listops.VOCAB, 2, {"task": "retrieval"})
    return out


def make_run(
    root: Path, data: Path, variant: str, test_acc: float = 0.5, norm: str = "post", **model
) -> Path:
    run = resolve(load_params(ROOT / "params.yaml"), "listops", variant, 0)
    sizes = {"dim": 8, "layers": 2, "heads": 2, "mlp_dim": 16, "norm": norm, **model}
    run = replace(run, data_dir=str(data), model=replace(run.model, **sizes))
    manifest = load_manifest(data)
    run = replace(run, task=manifest["task"])
    torch.manual_seed(0)
    out = root / f"{run.task}-{variant}-{norm}"
    weights = build_model(run, manifest).state_dict()
    result = {"test_acc": test_acc}
    write_run(
        out, result=result, data_hash=manifest["content_hash"], spec=run.to_dict(), weights=weights
    )
    return out


def check_rows(diag: pd.DataFrame, layers: int = 2) -> None:
    assert len(diag) == 1 + 4 * layers
    assert list(diag["point"]) == ["embedding"] + list(DM.BLOCK_POINTS) * layers
    assert list(diag["layer"]) == [0] * 5 + [1] * 4
    for column in (
        "roughness",
        "energy",
        "commutator_exact",
        "commutator_linear",
        "commutator_exact_rel",
        "commutator_linear_rel",
        "commutator_tangent",
        "commutator_exact_ref_rel",
        "alpha_used",
    ):
        assert np.isfinite(diag[column]).all() and (diag[column] > 0).all(), column


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_diagnose_run_rows(tmp_path, data_dir, norm) -> None:
    base = D.diagnose_run(make_run(tmp_path, data_dir, "baseline", norm=norm), n_examples=5)
    check_rows(base)
    assert set(base["alpha_source"]) == {"reference"} and (base["alpha_used"] == 0.1).all()
    assert not base["site_active"].any() and (base["n_examples"] == 5).all()
    assert base[["task", "variant", "seed", "norm"]].iloc[0].tolist() == [
        "listops",
        "baseline",
        0,
        norm,
    ]
    post = D.diagnose_run(make_run(tmp_path, data_dir, "after_attention", norm=norm))
    check_rows(post)
    assert list(post["alpha_source"].unique()) == [
        "blocks.0.after_attention",
        "blocks.1.after_attention",
    ]
    assert list(post.loc[post["site_active"], "point"]) == ["after_attention"] * 2
    assert (post["n_examples"] == 12).all()  # capped at the split's size


def test_diagnose_run_pair_task_and_cls_pooling(tmp_path, pair_dir) -> None:
    diag = D.diagnose_run(make_run(tmp_path, pair_dir, "after_embedding", pooling="cls"))
    check_rows(diag)
    assert diag["task"].iloc[0] == "retrieval" and diag["site_active"].sum() == 1
    assert set(diag["alpha_source"]) == {"embed_diffusion"}


@pytest.mark.slow
def test_cli_measures_and_summarizes(tmp_path, data_dir) -> None:
    runs = [
        str(make_run(tmp_path, data_dir, variant, acc))
        for variant, acc in (("baseline", 0.5), ("after_attention", 0.4))
    ]
    out, table = tmp_path / "diag.parquet", tmp_path / "corr.md"
    D.main(
        [
            "measure",
            *runs,
            "--out",
            str(out),
            "--n-examples",
            "4",
            "--png",
            str(tmp_path / "d.png"),
            "--table",
            str(table),
        ]
    )
    diag = pd.read_parquet(out)
    assert len(diag) == 18 and set(diag["variant"]) == {"baseline", "after_attention"}
    assert (tmp_path / "d.png").stat().st_size > 0
    assert "n/a" in table.read_text()  # one variant: n = 1 < 3
    # the workflow's two steps: one part per task (here per run), then the figure and table
    module = [sys.executable, "-m", "pdelab.papers.diffusion_positions.diagnostics"]
    parts = [tmp_path / "a.pq", tmp_path / "b.pq"]
    measure = ["measure", runs[0], "--out", str(parts[0]), "--n-examples", "4"]
    subprocess.run([*module, *measure], check=True, capture_output=True)
    D.main(["measure", runs[1], "--out", str(parts[1]), "--n-examples", "4"])
    assert len(pd.read_parquet(parts[0])) == 9
    D.summary_from_runs(runs).to_parquet(tmp_path / "summary.parquet")
    summarize = ["summarize", *map(str, parts), "--summary", str(tmp_path / "summary.parquet")]
    summarize += ["--png", str(tmp_path / "s.png"), "--table", str(tmp_path / "s.md")]
    subprocess.run([*module, *summarize], check=True, capture_output=True)
    assert (tmp_path / "s.md").read_text() == table.read_text()
    assert (tmp_path / "s.png").read_bytes() == (tmp_path / "d.png").read_bytes()
    with pytest.raises(SystemExit):  # summarize needs the accuracies
        D.main(["summarize", str(parts[0]), "--table", str(tmp_path / "x.md")])


def synthetic(values: dict[str, tuple[float, float]], tasks=("listops",)) -> tuple:
    """A diag and summary where each variant's roughness / commutator and accuracy are given."""
    diag, summary = [], []
    for task in tasks:
        for variant, (feature, acc) in values.items():
            for layer, point in [(0, "embedding")] + [
                (j, p) for j in range(2) for p in DM.BLOCK_POINTS
            ]:
                diag.append(
                    {
                        "task": task,
                        "variant": variant,
                        "seed": 0,
                        "layer": layer,
                        "point": point,
                        "depth": 0,
                        "site_active": point == "after_attention",
                        "roughness": feature,
                        "roughness_scalefree": feature,
                        "commutator_exact_rel": 2 * feature,
                        "commutator_exact_ref_rel": 2 * feature,
                        "commutator_linear_ref_rel": feature,
                    }
                )
            summary.append(
                {"task": task, "variant": variant, "seed": 0, "status": "ok", "test_acc": acc}
            )
    return pd.DataFrame(diag), pd.DataFrame(summary)


def test_correlations_and_plot(tmp_path) -> None:
    diag, summary = synthetic({"baseline": (1.0, 0.5), "a": (2.0, 0.4)})
    corr = S.correlations(diag, summary)
    assert (corr["models per seed"] == 1).all() and (corr["seeds"] == 0).all()
    assert corr[["pearson", "spearman"]].isna().all().all()
    diag, summary = synthetic(
        {"baseline": (1.0, 0.5), "a": (2.0, 0.45), "b": (3.0, 0.40), "c": (5.0, 0.20)},
        tasks=("listops", "imdb_bytes_lra"),
    )
    corr = S.correlations(diag, summary).set_index(["scope", "feature"])
    assert corr.loc[("all", "roughness_mean"), "models per seed"] == 6
    assert corr.loc[("all", "roughness_mean"), "spearman"] == pytest.approx(-1.0, abs=1e-5)
    assert -1 < corr.loc[("listops", "commutator_exact_rel"), "pearson"] < -0.9
    # every variant is scored by the baseline's roughness at its insertion point: constant here
    assert np.isnan(corr.loc[("all", "site_roughness_baseline"), "pearson"])
    R.plot(diag, summary, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    R.table_file(corr.reset_index(), "title").write(tmp_path / "t.md", None, "smoke")
    assert (tmp_path / "t.md").read_text().startswith("**title**")
    assert "<strong>title</strong>" in (tmp_path / "t.html").read_text()
