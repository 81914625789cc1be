"""The cost plan's calibration from a GPU's measurements: what measured.json then says, how
the plan reads it back, and FNA's FlexAttention counted at its CUDA shapes."""

from __future__ import annotations

import json

import pytest
import torch

from pdelab.models.attention import COUNTING_FOR_CUDA
from pdelab.papers.fractional_attention import attention as fna
from pdelab.plan import calibration as pc
from pdelab.plan.check import checked_run
from pdelab.plan.counting import count_step
from pdelab.plan.hardware import GPUS, PRECISIONS
from pdelab.plan.measured import load_measured


@pytest.mark.parametrize(
    ("device", "name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ],
)
def test_a_gpu_torch_names_is_one_the_plan_knows(device: str, name: str) -> None:
    assert pc.plan_gpu(device) == name
    assert name in {g.name for g in GPUS}


def test_an_unknown_gpu_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no cost-plan GPU for 'Tesla T4'"):
        pc.plan_gpu("Tesla T4")


def test_calibration_gives_the_median_utilisation_and_each_jobs_step(params: dict) -> None:
    """Two measured jobs (the numbers stand for a GPU's): measured.json holds each job's step
    time and the GPU's rates at the median utilisation the jobs reached; the plan reads both."""
    raw = {
        "profile": "paper",
        "gpu": "NVIDIA H100 80GB HBM3",
        "torch": "2.x",
        "cuda": "12.x",
        "date": "2026-01-01",
        "warmup": 3,
        "timed": 10,
        "jobs": [
            {"job": "listops/baseline", "batch": 8, "step_s": 0.02, "peak_bytes": 700 * 2**20},
            {"job": "listops/after_embedding", "batch": 8, "step_s": 0.03, "peak_bytes": 2**29},
            {"job": "image/baseline", "error": "OutOfMemoryError: CUDA out of memory"},
        ],
    }
    doc, text = pc.calibrate(params, raw)
    gpu = next(g for g in GPUS if g.name == "H100-SXM")
    used = []
    for m in raw["jobs"][:2]:
        task, variant = m["job"].split("/")
        step = count_step(*checked_run(params, "paper", task, variant, m["batch"]))
        fp32 = step.flops - step.low_precision_flops
        at_peak = step.low_precision_flops / (gpu.peak_tflops["bf16"] * 1e12)
        used.append((at_peak + fp32 / (gpu.peak_tflops["fp32"] * 1e12)) / m["step_s"])
    rates = {e["precision"]: e["tflops"] for e in doc["throughput"]}
    median = (used[0] + used[1]) / 2
    assert rates == pytest.approx({p: gpu.peak_tflops[p] * median for p in PRECISIONS})
    assert [(e["task"], e["variant"], e["step_s"]) for e in doc["step_s"]] == [
        ("listops", "baseline", 0.02),
        ("listops", "after_embedding", 0.03),
    ]
    assert "image/baseline" in text and "not measured: OutOfMemoryError" in text
    assert f"median {100 * median:.1f}%" in text


def test_the_plan_reads_what_calibration_wrote(params: dict, tmp_path) -> None:
    doc = {
        "throughput": [
            {"gpu": "H200", "precision": p, "tflops": 10.0, "source": "s"} for p in PRECISIONS
        ],
        "step_s": [{"gpu": "H200", "task": "listops", "variant": "baseline", "step_s": 0.5}],
    }
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(doc))
    found = load_measured(path, "paper", [])
    assert (
        found.throughput["H200", "bf16"].tflops == 10.0
        and found.throughput["H200", "bf16"].measured
    )
    assert found.step_s["H200", "listops", "baseline"][0] == 0.5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("options", [{"alpha": 1.2}, {"alpha": 1.2, "spherical": True}])
def test_flex_counted_at_its_cuda_shapes_is_still_fna(options: dict, causal: bool) -> None:
    """While the plan counts for CUDA, FNA takes its FlexAttention path at FlexAttention's
    padded shapes (bucket 128, width 16) on the CPU: the output is still FNA's, exactly."""
    kernel = fna.FNAAttention(2, 4, **options).double()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 45, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.arange(45)[None, :] < torch.tensor([45, 30, 12])[:, None]
    token = COUNTING_FOR_CUDA.set(True)
    try:
        assert kernel.path(q) == "flex"
        out = kernel.attend(q, k, v, mask, causal, "flex")
    finally:
        COUNTING_FOR_CUDA.reset(token)
    assert kernel.path(q) == "chunked"
    want = kernel.attend(q, k, v, mask, causal, "reference")
    real = mask[:, None, :, None]
    assert torch.allclose(out * real, want * real, atol=1e-12)


@pytest.mark.slow
def test_the_cuda_count_of_fna_holds_flexattentions_padding(
    params: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Multi30k's sentences (under 128 tokens) are padded to FlexAttention's first bucket on
    CUDA: the CUDA count of an FNA translation model holds more than the same count on the
    chunked path's unpadded shapes."""
    job = checked_run(params, "paper", "multi30k", "mt_fna", 2, "cuda")
    flex = count_step(*job)
    monkeypatch.setattr(fna.FNAAttention, "path", lambda self, q: "chunked")
    chunked = count_step(*job)
    assert flex.peak_bytes > chunked.peak_bytes


def test_a_step_time_measured_in_one_profile_prices_only_that_profile_s_job(tmp_path) -> None:
    """A job of the same task and variant in another profile has another shape: a step time
    measured for the paper profile's ListOps baseline must not price the smoke profile's."""
    import json

    from pdelab.plan.measured import load_measured

    path = tmp_path / "measured.json"
    entry = {"gpu": "H200", "task": "listops", "variant": "baseline", "step_s": 0.25}
    path.write_text(json.dumps({"step_s": [entry | {"profile": "paper"}]}))
    assert ("H200", "listops", "baseline") in load_measured(path, "paper", []).step_s
    assert load_measured(path, "smoke", [], tmp_path / "runs").step_s == {}
    path.write_text(json.dumps({"step_s": [entry]}))  # no profile named: any profile's
    assert ("H200", "listops", "baseline") in load_measured(path, "smoke", [], tmp_path).step_s
