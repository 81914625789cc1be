"""The cost plan (pdelab.plan): FLOPs against hand counts, estimated peak memory against
measured CPU steps, the GPU-hours and CPU core-hours formulas and the measurements that replace
their rates, and plan totals that are the sums of their jobs."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pdelab.cli import main
from pdelab.plan import step_counts
from pdelab.plan.check import checked_run, estimated_peak, measured_peak
from pdelab.plan.cost import JobCost, step_seconds
from pdelab.plan.cost import plan as make_plan
from pdelab.plan.counting import StepCost, count_step, count_training_step
from pdelab.plan.hardware import (
    CPU_CORE,
    GPUS,
    PRECISIONS,
    UTILISATION,
    Gpu,
    Throughput,
    assumed_throughput,
)
from pdelab.plan.measured import Measured, load_measured
from pdelab.plan.render import job_rows, plan_data, render
from pdelab.records.run import run_dir
from pdelab.spec.config import resolve
from pdelab.spec.run_sheet import trained_runs

# (profile, task, variant, batch): three models measured against their estimate, each along
# a path of its own: the paper's shapes (512 WordPiece tokens, a 30,522-piece embedding, bf16
# CPU autocast), translation (a boolean mask selects the real target tokens) through FNA's
# kernel, and LDN, whose block size is read from its weights
MEASURED = [
    ("paper", "imdb_wordpiece", "baseline", 2),
    ("smoke", "multi30k", "mt_fna", 8),
    ("smoke", "pathfinder", "ldn", 32),
]
SUBSET = ["listops/baseline", "listops/after_mlp", "image/ldn"]  # a small real plan


def rates() -> dict[tuple[str, str], Throughput]:
    devices = (*GPUS, CPU_CORE)
    return {(d.name, p): assumed_throughput(d, p) for d in devices for p in PRECISIONS}


def gpu(name: str) -> Gpu:
    return next(g for g in GPUS if g.name == name)


def test_a_linear_layer_costs_its_hand_count() -> None:
    b, i, o = 16, 8, 4
    cost = count_training_step(nn.Linear(i, o), torch.randn(b, i), lambda m, x: m(x).sum())
    # forward: b x i x o multiply-adds; backward: the weight's gradient (a batch needs none)
    assert cost.flops == 2 * (2 * b * i * o)
    assert cost.parameters == i * o + o
    # at least weights, gradients and AdamW's two moments, all fp32
    assert cost.peak_bytes >= 4 * 4 * cost.parameters
    assert cost.low_precision_flops == 0


class Tiny(nn.Module):
    """Embedding, one post-LN encoder layer (torch's), mean pooling, a linear head."""

    def __init__(self, vocab: int, dim: int, heads: int, mlp: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(ids)).mean(1))


def test_a_tiny_transformer_costs_its_hand_count() -> None:
    b, t, c, h, m, k = 4, 16, 32, 4, 64, 3
    ids, labels = torch.randint(0, 50, (b, t)), torch.randint(0, k, (b,))

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(model(batch[0]), batch[1])

    cost = count_training_step(Tiny(50, c, h, m, k), (ids, labels), loss)
    n = b * t
    # forward: the QKV, output and two MLP projections per token, the head per sequence, and
    # attention's Q K^T and A V (2 b t^2 c each, over all heads)
    forward = 2 * n * (3 * c * c + c * c + 2 * c * m) + 2 * b * c * k + 2 * (2 * b * t * t * c)
    # backward: every projection twice (its input's and its weight's gradient; the embedding's
    # output needs one, so every input does); attention five times, as a fused kernel's
    # backward computes Q K^T again (FlopCounterMode's count of SDPA's backward)
    projections = forward - 2 * (2 * b * t * t * c)
    assert cost.flops == 3 * projections + 3.5 * (forward - projections)


def test_the_cuda_model_runs_bf16_products_and_fused_attention(params: dict) -> None:
    """On CUDA the paper's bf16 runs its products in bf16 and attention in O(T) memory; the
    CPU keeps attention's T x T probabilities and dropout noise (math path, dropout > 0)."""
    cuda = count_step(*checked_run(params, "paper", "imdb_wordpiece", "baseline", 8))
    cpu = count_step(*checked_run(params, "paper", "imdb_wordpiece", "baseline", 8, device="cpu"))
    assert cuda.low_precision_flops == cuda.flops
    probabilities = 8 * 4 * 512 * 512 * 2  # one layer's (B, H, T, T) in bf16
    assert cpu.peak_bytes - cuda.peak_bytes > 4 * probabilities


@pytest.mark.slow
def test_estimated_peak_memory_is_within_20_percent_of_a_measured_cpu_step(
    params: dict,
) -> None:
    """Each measurement runs the trainer's own step (pdelab.training.train.train_step) on real
    tensors in a fresh process and reads torch's CPU allocation events; the estimate counts a fake
    step (like with like: the CPU's kernels, one thread each)."""
    context = get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context, max_tasks_per_child=1) as pool:
        futures = [pool.submit(measured_peak, params, *case, "cpu") for case in MEASURED]
        estimated = [estimated_peak(params, *case, device="cpu") for case in MEASURED]
        measured = [f.result() for f in futures]
    for case, estimate, real in zip(MEASURED, estimated, measured, strict=True):
        assert abs(estimate / real - 1) < 0.20, (case, estimate, real)


def test_gpu_hours_are_flops_at_sustained_rates(params: dict) -> None:
    run = resolve(params, "listops", "baseline", 0, "smoke")
    step = StepCost(parameters=1, flops=10**15, low_precision_flops=6 * 10**14, peak_bytes=0)
    seconds, source = step_seconds(run, step, gpu("A100-80GB"), rates(), Measured())
    expected = 6e14 / (312e12 * UTILISATION) + 4e14 / (19.5e12 * UTILISATION)
    assert (seconds, source) == (pytest.approx(expected), "assumed")
    job = JobCost(run, step, 1, 100, {"A100-80GB": seconds}, {"A100-80GB": source})
    assert job.steps == 100 * run.train.epochs
    assert job.gpu_hours("A100-80GB") == pytest.approx(job.steps * expected / 3600)


def test_measurements_replace_the_assumed_rates(params: dict, tmp_path: Path) -> None:
    run = resolve(params, "listops", "baseline", 0, "smoke")
    record = run_dir("smoke", run.task, run.variant, run.seed, tmp_path) / "run.json"
    record.parent.mkdir(parents=True)
    result = {"device": "cuda", "median_step_s": 0.5}
    record.write_text(json.dumps({"spec": run.to_dict(), "result": result}))
    measured = tmp_path / "measured.json"
    doc = {
        "throughput": [
            {"gpu": "A100-80GB", "precision": "bf16", "tflops": 200.0, "source": "a test"},
            {"gpu": "A100-80GB", "precision": "fp32", "tflops": 10.0},
        ],
        "step_s": [{"gpu": "H100-SXM", "task": "listops", "variant": "baseline", "step_s": 0.1}],
        "records_gpu": "RTX-4090",
    }
    measured.write_text(json.dumps(doc))
    found = load_measured(measured, "smoke", [run], tmp_path)
    table = rates() | found.throughput
    step = StepCost(parameters=1, flops=10**15, low_precision_flops=6 * 10**14, peak_bytes=0)
    seconds, source = step_seconds(run, step, gpu("A100-80GB"), table, found)
    assert (seconds, source) == (pytest.approx(6e14 / 200e12 + 4e14 / 10e12), "measured rate")
    assert step_seconds(run, step, gpu("H100-SXM"), table, found) == (0.1, "measured step")
    assert step_seconds(run, step, gpu("RTX-4090"), table, found) == (0.5, "measured step")
    record.write_text(json.dumps({"spec": {}, "result": result}))  # another spec's record
    assert ("RTX-4090", "listops", "baseline") not in load_measured(
        measured, "smoke", [run], tmp_path
    ).step_s


def test_plan_totals_are_the_sums_of_their_jobs(
    params: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache.json"
    plan = make_plan(params, "smoke", None, workers=1, cache=cache, only=SUBSET)
    jobs, total = plan.jobs, plan.total
    trained = [r for r in trained_runs(params, "smoke") if f"{r.task}/{r.variant}" in SUBSET]
    assert [j.run for j in jobs] == trained and total.jobs == len(jobs)
    assert total.flops == sum(j.flops for j in jobs)
    assert total.tokens == sum(j.tokens for j in jobs)
    assert total.parameters == sum(j.step.parameters for j in jobs)
    assert total.peak_bytes == max(j.step.peak_bytes for j in jobs)
    for g in GPUS:
        assert total.gpu_hours[g.name] == pytest.approx(sum(j.gpu_hours(g.name) for j in jobs))
    assert total.core_hours == pytest.approx(sum(j.core_hours for j in jobs))
    for name, study in plan.studies.items():
        own = [j for j in jobs if (j.run.task, j.run.variant, j.run.seed) in _runs(params, name)]
        assert study.jobs == len(own) and study.flops == sum(j.flops for j in own)
    # a second plan reads every step from the cache
    monkeypatch.setattr(step_counts, "count_step", lambda *a: pytest.fail("counted again"))
    again = make_plan(params, "smoke", None, workers=1, cache=cache, only=SUBSET)
    assert [j.step for j in again.jobs] == [j.step for j in jobs]


def test_a_cpu_profile_costs_cpu_core_hours(params: dict, tmp_path: Path) -> None:
    """The smoke profile's jobs train on the CPU: each costs its steps at one core's assumed
    rate (hand-computed here), the totals sum them, and the plan says what they rest on."""
    plan = make_plan(params, "smoke", None, cache=tmp_path / "c.json", only=["listops/baseline"])
    assert plan.jobs and all(j.on_cpu for j in plan.jobs)
    for j in plan.jobs:
        low, fp32 = j.step.low_precision_flops, j.step.flops - j.step.low_precision_flops
        peak = {p: CPU_CORE.peak_tflops[p] * 1e12 * UTILISATION for p in PRECISIONS}
        seconds = low / peak["bf16"] + fp32 / peak["fp32"]
        assert (j.step_s[CPU_CORE.name], j.time_source[CPU_CORE.name]) == (
            pytest.approx(seconds),
            "assumed",
        )
        assert j.core_hours == pytest.approx(j.steps * seconds / 3600) and j.core_hours > 0
    assert plan.total.cpu_jobs == len(plan.jobs)
    assert plan.total.core_hours == pytest.approx(sum(j.core_hours for j in plan.jobs))
    text = render(plan, "md")
    assert text.count("CPU core-h") >= 3  # the Total, Per study and Jobs tables
    assert f"{CPU_CORE.name} fp32: 38.4 GFLOPS, assumed" in text
    n = len(plan.jobs)
    assert f"CPU core-hours ({n} of {n} jobs train on the CPU): one core per torch thread" in text
    assert plan_data(plan)["core_hours"] == pytest.approx(plan.total.core_hours)


def test_a_gpu_job_has_no_core_hours_column(params: dict) -> None:
    run = resolve(params, "listops", "baseline", 0, "paper")  # device: cuda
    step = StepCost(parameters=1, flops=10**12, low_precision_flops=0, peak_bytes=2**20)
    job = JobCost(run, step, 1, 10, {g.name: 1.0 for g in GPUS}, {})
    assert not job.on_cpu and job.core_hours == 0.0
    assert "CPU core-h" not in job_rows([job])[0]


def test_a_cpu_run_s_record_is_its_measured_core_time(params: dict, tmp_path: Path) -> None:
    """A trained CPU run's median step time, x the threads it trained with, replaces the
    assumed core rate; no measurements (None) reads no records either."""
    run = resolve(params, "listops", "baseline", 0, "smoke")
    record = run_dir("smoke", run.task, run.variant, run.seed, tmp_path) / "run.json"
    record.parent.mkdir(parents=True)
    doc = {"spec": run.to_dict(), "result": {"device": "cpu", "median_step_s": 0.01}}
    record.write_text(json.dumps(doc | {"environment": {"threads": 2}}))
    absent = tmp_path / "measured.json"  # no file: the records still count
    found = load_measured(absent, "smoke", [run], tmp_path)
    step = StepCost(parameters=1, flops=10**9, low_precision_flops=0, peak_bytes=0)
    seconds, source = step_seconds(run, step, CPU_CORE, rates(), found)
    assert (seconds, source) == (pytest.approx(0.02), "measured step")
    assert step_seconds(run, step, gpu("H200"), rates(), found)[1] == "assumed"
    assert load_measured(None, "smoke", [run], tmp_path).step_s == {}
    record.write_text(json.dumps(doc | {"result": {"device": "cuda", "median_step_s": 0.01}}))
    assert not load_measured(absent, "smoke", [run], tmp_path).step_s  # no records_gpu named


def _runs(params: dict, study: str) -> set[tuple[str, str, int]]:
    from pdelab.spec.studies import studies_of

    return studies_of(params, "smoke")[study].run_keys


def test_pdelab_plan_writes_the_markdown_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan.md"
    argv = ["--profile", "smoke", "plan", "--format", "md", "--out", str(out), "--no-cache"]
    assert main([*argv, "--workers", "1", "--only", "listops/baseline"]) == 0
    text = out.read_text()
    assert text.startswith("# Cost plan: run profile smoke")
    for part in ("## Total", "## Per study", "## Assumptions", "## Jobs", "A100-80GB"):
        assert part in text
    assert "listops: " in text and "TFLOPS" in text
    assert "CPU core-h" in text and "CPU core-hours (" in text  # the smoke profile: CPU jobs


def test_pdelab_plan_fits_the_jobs_to_the_card_named_on_the_command_line(tmp_path: Path) -> None:
    """``--card GB`` asks what another card would take, without editing params.yaml."""
    out = tmp_path / "plan.md"
    argv = ["plan", "--profile", "smoke", "--card", "1.5", "--out", str(out), "--format", "md"]
    assert main([*argv, "--workers", "1", "--only", "listops/baseline", "--no-cache"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["card_gib"] == 1.5 and "Card: 1.5 GB" in out.read_text()
    assert all(job["micro_batch"] for job in data["jobs"]), data["jobs"]
