"""torch.compile is how a run is computed, not what it is: the profile's ``compile`` reaches the
job on its command line, never its spec, and a compiled step computes the eager step's numbers
(float64, Inductor on a CPU)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT
from pdelab.spec.config import COMPILE_MODES, ConfigError, compile_mode, load_params, resolve
from pdelab.training import compiled
from pdelab.training.compiled import resolved_mode


@pytest.fixture(scope="module")
def params() -> dict:
    return load_params(ROOT / "params.yaml")


def test_the_paper_profiles_compile_and_the_smoke_profile_does_not(params) -> None:
    assert compile_mode(params, "smoke") == "off"
    assert compile_mode(params, "paper") == "auto"
    assert compile_mode(params, "paper_mini") == "auto"


def test_compiling_is_no_part_of_a_run_s_spec(params) -> None:
    for profile in ("smoke", "paper"):
        run = resolve(params, "listops", "baseline", 0, profile)
        assert "compile" not in json.dumps(run.to_dict())
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"]["compile"] = "off"
    before = resolve(params, "listops", "baseline", 0, "paper")
    assert resolve(edited, "listops", "baseline", 0, "paper") == before


@pytest.mark.parametrize("bad", ["fast", "on", 1])
def test_an_unknown_mode_is_refused_naming_the_key(params, bad) -> None:
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"]["compile"] = bad
    with pytest.raises(ConfigError, match=r"profiles\.paper\.compile"):
        compile_mode(edited, "paper")


def test_yaml_s_bare_off_reads_as_off(params) -> None:
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"]["compile"] = False  # `compile: off` in YAML 1.1
    assert compile_mode(edited, "paper") == "off"


@pytest.mark.parametrize(
    ("mode", "device", "step_s", "expected"),
    [
        ("auto", "cpu", 0.001, "off"),
        ("auto", "cuda", 0.005, "reduce-overhead"),
        ("auto", "cuda", 0.5, "default"),
        ("auto", "cuda", None, "default"),
        ("default", "cpu", None, "default"),
        ("reduce-overhead", "cuda", 1.0, "reduce-overhead"),
        ("off", "cuda", 0.001, "off"),
    ],
)
def test_auto_picks_cuda_graphs_for_small_steps(mode, device, step_s, expected) -> None:
    assert resolved_mode(mode, torch.device(device), step_s) == expected
    assert set(COMPILE_MODES) == {"off", "auto", "default", "reduce-overhead"}


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("Tesla T4", None),
    ],
)
def test_a_cuda_device_is_matched_to_the_plan_s_gpu_kind(name, kind) -> None:
    from pdelab.plan.hardware import GPUS

    assert compiled.gpu_kind(name, [g.name for g in GPUS]) == kind


def test_the_plan_prices_a_step_from_its_gpu_hours(tmp_path: Path, params, monkeypatch) -> None:
    run = resolve(params, "listops", "baseline", 0, "paper")
    plan = tmp_path / "plan.json"
    job = {"task": "listops", "variant": "baseline", "seed": 0, "gpu_hours": {"H200": 1.0}}
    plan.write_text(json.dumps({"profile": "paper", "jobs": [job]}))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    cuda = torch.device("cuda")
    assert compiled.planned_step_s(run, 3600, cuda, plan) == pytest.approx(1.0)
    assert compiled.planned_step_s(run, 3600, torch.device("cpu"), plan) is None
    other = resolve(params, "listops", "baseline", 1, "paper")
    assert compiled.planned_step_s(other, 3600, cuda, plan) is None


@pytest.mark.slow
def test_a_compiled_step_computes_the_eager_step_s_numbers() -> None:
    """Inductor on a CPU, float64, dropout off: three optimizer steps of a small classifier,
    compiled and eager, end at the same weights (to rounding: Inductor may reorder sums)."""
    from dataclasses import replace

    from pdelab.training.session import executed
    from pdelab.training.step import train_step
    from tests.test_micro_batch import session

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        eager = session("listops", "baseline", False, 0)
        fast = session("listops", "baseline", False, 0)
        fast = executed(fast, replace(fast.execution, compile="default"))
        assert fast.execution.compile == "default"
        order = np.random.default_rng(1).permutation(20)
        for start in range(0, 20, 8):
            a = train_step(eager, order[start : start + 8])
            b = train_step(fast, order[start : start + 8])
            assert float(a.loss) == pytest.approx(float(b.loss), rel=1e-10, abs=1e-12)
        pa, pb = dict(eager.model.named_parameters()), dict(fast.model.named_parameters())
        worst = max(float((pa[k] - pb[k]).detach().abs().max()) for k in pa)
        assert worst < 1e-10
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize(
    ("task", "variant"),
    [("listops", "after_embedding"), ("retrieval", "baseline"), ("wikitext", "pde_s2_causal")],
)
def test_a_batch_padded_to_its_bucket_trains_the_same_step(task, variant) -> None:
    """A compiled step pads each batch to its length bucket; every mechanism masks padding,
    so the eager step on bucketed arrays equals the eager step on the batch as it is."""
    from dataclasses import replace

    from pdelab.training.session import executed
    from pdelab.training.step import bucketed, train_step
    from tests.test_micro_batch import session

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        plain = session(task, variant, False, 0)
        padded = session(task, variant, False, 0)
        caps = padded.task_kind.token_caps(
            padded.run, padded.manifest | {"splits": {"train": {"max_length": 40}}}
        )
        arrays = padded.data["train"].batch(np.arange(8))
        grown = bucketed(arrays, caps)
        assert any(grown[k].shape != arrays[k].shape for k in arrays)  # padding was added
        original = padded.data["train"].batch
        padded.data["train"].batch = lambda index: bucketed(original(index), caps)
        for start in (0, 8):
            a = train_step(plain, np.arange(start, start + 8))
            b = train_step(padded, np.arange(start, start + 8))
            assert float(a.loss) == pytest.approx(float(b.loss), rel=1e-12)
        pa, pb = dict(plain.model.named_parameters()), dict(padded.model.named_parameters())
        assert max(float((pa[k] - pb[k]).detach().abs().max()) for k in pa) < 1e-12
        assert executed(padded, replace(padded.execution, compile="off")).execution.compile == "off"
    finally:
        torch.set_default_dtype(previous)
