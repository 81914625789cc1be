"""Training precision: the profiles' settings, bf16 autocast in training, and the fp32
regions (FNA's distance kernels, the causality probe) that autocast never reaches."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from pdelab.papers.fractional_attention import attention as fna
from pdelab.spec import config
from pdelab.spec.config import ConfigError, load_params, resolve
from pdelab.spec.plugins import import_mechanisms
from pdelab.training import precision
from pdelab.training.causality import probe_causality
from pdelab.training.train import train

import_mechanisms()
CPU = torch.device("cpu")


def test_config_and_precision_name_the_same_precisions():
    assert config.PRECISIONS == precision.PRECISIONS


@pytest.mark.parametrize(("profile", "expected"), [("smoke", "fp32"), ("paper", "bf16")])
def test_profiles_precision(params, profile, expected):
    for task, variant in (("listops", "baseline"), ("imdb_wordpiece", "fna")):
        run = resolve(params, task, variant, 0, profile)
        assert run.train.precision == expected
        # fp32 is left out of a spec, so no run recorded before it reruns; compiling is no
        # part of a spec at all (pdelab.training.compiled)
        assert ("precision" in run.to_dict()["train"]) == (expected != "fp32")
        assert "compile" not in run.to_dict()["train"]


def test_unknown_precision_names_the_key(params):
    bad = json.loads(json.dumps(params))
    bad["profiles"]["smoke"]["overrides"]["train"]["precision"] = "fp8"
    with pytest.raises(ConfigError, match=r"profiles\.smoke\.overrides\.train\.precision.*fp32"):
        resolve(bad, "listops", "baseline", 0, "smoke")


def test_bf16_autocast_runs_products_in_bf16_and_fp32_is_untouched():
    x, layer = torch.randn(4, 8), torch.nn.Linear(8, 8)
    with precision.autocast(CPU, "bf16"):
        assert layer(x).dtype == torch.bfloat16
    with precision.autocast(CPU, "fp32"):
        assert layer(x).dtype == torch.float32
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        precision.autocast(CPU, "fp16")


def test_full_precision_turns_autocast_and_tf32_off_and_restores_them():
    torch.set_float32_matmul_precision("high")  # TF32 allowed outside
    try:
        with precision.autocast(CPU, "bf16"):
            with precision.full_precision():
                assert not torch.is_autocast_enabled("cpu")
                assert torch.get_float32_matmul_precision() == "highest"
                assert (torch.randn(3, 3) @ torch.randn(3, 3)).dtype == torch.float32
            assert torch.is_autocast_enabled("cpu")
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_distances_cancel_in_bf16_which_is_why_fna_keeps_fp32():
    """Nearby points: |q|^2 + |k|^2 - 2 q.k in bf16 is noise, in fp32 it is the distance."""
    gen = torch.Generator().manual_seed(0)
    q = 10 + torch.randn(64, 32, generator=gen)
    k = q + 0.05 * torch.randn(64, 32, generator=gen)
    exact = (q.double() - k.double()).square().sum(-1)

    def d2(a, b):
        return a.square().sum(-1) + b.square().sum(-1) - 2 * (a * b).sum(-1)

    err16 = ((d2(q.bfloat16(), k.bfloat16()).double() - exact).abs() / exact).median()
    err32 = ((d2(q, k).double() - exact).abs() / exact).median()
    assert err16 >= 0.5 and err32 < 0.05  # bf16: half the distance or more is lost


# LA (alpha = 2, Euclidean: the SDPA path) is not here: it runs in the precision of the sdpa
# baseline it is compared with (fractional_attention/tests/test_fna_la.py holds its tolerance)
KERNELS = [
    ("fna", {"alpha": 1.2}),  # chunked log-space path on a CPU (FlexAttention on CUDA)
    ("fna", {"alpha": 2.0, "spherical": True}),  # on the sphere, alpha = 2 is log-space too
    ("fna", {"alpha": 1.2, "spherical": True}),
    ("fna_reference", {"alpha": 1.2}),
]


@pytest.mark.parametrize(("kernel", "options"), KERNELS)
@pytest.mark.parametrize("causal", [False, True])
def test_fna_kernels_under_bf16_autocast_equal_their_fp32_output(kernel, options, causal):
    """Autocast reaches the projections around the kernel, never the kernel: given the same
    q, k, v, the output under bf16 autocast is the fp32 output, in the dtype v came in."""
    cls = fna.FNAReference if kernel == "fna_reference" else fna.FNAAttention
    module = cls(heads=2, head_dim=16, **options).eval()
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 24, 16, generator=gen) for _ in range(3))
    expected = module(q, k, v, None, causal)
    with precision.autocast(CPU, "bf16"):
        got = module(q, k, v, None, causal)
        got_bf16 = module(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, causal)
    assert got.dtype == torch.float32 and got_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    weights = module.weights(q, k, None, causal)
    with precision.autocast(CPU, "bf16"):
        torch.testing.assert_close(module.weights(q, k, None, causal), weights, rtol=0, atol=0)


def test_the_causality_probe_runs_in_fp32_under_autocast():
    seen = []

    def causal_fn(x):
        seen.append(torch.is_autocast_enabled("cpu"))
        return torch.cumsum(x @ torch.eye(x.shape[-1]), dim=1)  # a causal map

    x = torch.randn(2, 12, 4)
    with precision.autocast(CPU, "bf16"):
        report = probe_causality(causal_fn, x, tol=1e-6)
    assert seen and not any(seen)
    assert not report.leaks and report.max_leak == 0.0  # fp32 exact: no bf16 rounding noise


@pytest.fixture(scope="module")
def workdir(tiny_workdir, tmp_path_factory) -> Path:
    return tiny_workdir(tmp_path_factory.mktemp("precision"))


def test_a_bf16_run_trains_and_records_its_precision(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
    short = replace(run, train=replace(run.train, epochs=2, patience=2))
    runs = {p: replace(short, train=replace(short.train, precision=p)) for p in ("fp32", "bf16")}
    history = {p: train(r, p, track=False, progress=False) for p, r in runs.items()}
    for p in runs:
        result = pd.read_parquet(Path(p) / "result.parquet").iloc[0]
        record = json.loads((Path(p) / "run.json").read_text())
        assert result["precision"] == p and record["result"]["precision"] == p
        assert record["gpu_slot"] is None  # a CPU run takes no GPU slot
        assert result["status"] == "ok" and history[p]["train_loss"].notna().all()
    # the same seed and batches: bf16 rounds the products, so the losses differ a little
    diff = (history["bf16"]["train_loss"] - history["fp32"]["train_loss"]).abs()
    assert 0 < diff.max() < 0.1 * history["fp32"]["train_loss"].max()
