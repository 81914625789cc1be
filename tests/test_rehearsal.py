"""The rehearsal (pdelab.plan.rehearsal): every distinct model of a run profile takes two training
steps on CPU, and a shape error, a non-finite loss or a parameter without a gradient fails it,
named. The paper's models run here at shorter sequences (the command keeps the paper's)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch
from torch import nn

from pdelab.plan import rehearsal
from pdelab.plan.rehearsal import Model, main, next_to_start, plan, rehearse, rehearse_all, summary
from pdelab.plan.shapes import TaskShape
from pdelab.spec.run_sheet import validate
from pdelab.training import session

# task/variant of the paper run profile -> tokens per sequence here (pixels for images)
SAMPLE = {
    "listops/multiscale_after_embedding": 48,  # classification, multi-scale diffusion
    "retrieval/baseline": 48,  # document pairs through the two-tower model
    "wikitext/pde_s4_causal": 48,  # language model, Continuous-Time Attention's PDE kernel
    "listops/ldn_no_f": 48,  # Linear Diffusion Networks' block
    "fashion_mnist32/ldn_patch": 256,  # the patch LDN on 16 x 16 images (65 tokens)
    "image/vit_fna": 256,  # Fractional Neural Attention's ViT, likewise
}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread, as the command gives each of two jobs on two cores (on a loaded
    machine a second thread mostly waits for the first)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def paper(params: dict[str, Any]) -> dict[str, Model]:
    models, _ = plan(params, "paper")
    return {m.name: m for m in models}


def at_length(model: Model, length: int) -> Model:
    """The model at a shorter sequence (its width, depth and heads kept; images stay square)."""
    if model.shape.kind == "lm":
        train = replace(model.run.train, seq_len=length)
        return replace(model, run=replace(model.run, train=train))
    return replace(model, shape=replace(model.shape, max_length=length))


def renamed(model: Model, variant: str) -> Model:
    return replace(model, run=replace(model.run, variant=variant))


def test_the_paper_profile_rehearses_each_distinct_model_once(params: dict[str, Any]) -> None:
    """Every (task, variant) pair once, but the three *_T512 variants, which repeat the run
    without the suffix (wikitext's own length is 512); shards split the list without overlap."""
    models, shared = plan(params, "paper")
    names = [m.name for m in models]
    pairs = {f"{r.task}/{r.variant}" for r in validate(params, "paper")}
    assert len(names) == len(set(names)) == len(pairs) - 3 and shared == 3
    same = {m.name: m.same for m in models if m.same}
    assert same["wikitext/baseline"] == ("baseline_T512",)
    halves = [plan(params, "paper", shard=(k, 2))[0] for k in (0, 1)]
    assert sorted(m.name for h in halves for m in h) == sorted(names)
    only, _ = plan(params, "paper", ["image/vit_*"])
    assert {m.name for m in only} == {f"image/vit_{v}" for v in ("fna", "la", "dp")} | {
        f"image/vit_{v}_op" for v in ("fna", "la", "dp")
    }


@pytest.mark.parametrize("name", SAMPLE)
def test_a_sample_of_the_paper_models_takes_two_steps(paper: dict[str, Model], name: str) -> None:
    outcome = rehearse(at_length(paper[name], SAMPLE[name]))
    assert outcome.ok, outcome.failure
    assert len(outcome.losses) == 2 and outcome.parameters > 0


def test_translation_takes_two_steps(params: dict[str, Any]) -> None:
    """The smoke run profile's encoder-decoder: the paper's (d 512, 6 + 6 layers, 68M
    parameters) costs seconds of initialisation alone."""
    (model,), _ = plan(params, "smoke", ["multi30k/baseline"])
    outcome = rehearse(model)
    assert outcome.ok, outcome.failure
    assert len(outcome.losses) == 2


rehearsal_build = session.build_model  # the real one, which the tests below replace


def poisoned(run: Any, manifest: dict[str, Any], how: str = "") -> nn.Module:
    """The real model, broken as ``how`` (default: its variant's name) says."""
    network = rehearsal_build(run, manifest)
    how = how or run.variant
    if how == "nan_loss":
        network.register_forward_hook(lambda module, inputs, output: output * float("nan"))
    elif how == "dead_weight":
        network.register_parameter("dead", nn.Parameter(torch.zeros(3)))
    elif how == "shape_error":  # a head that expects one feature more than it gets
        dim = run.model.dim
        network.head[0] = nn.Linear(dim + 1, dim)
    return network


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, paper: dict[str, Model]) -> list[Model]:
    """listops/baseline, healthy and broken three ways (between them, to show the run goes on
    past a failure)."""
    monkeypatch.setattr(session, "build_model", poisoned)  # what assemble() builds with
    base = at_length(paper["listops/baseline"], 24)
    names = ["nan_loss", "baseline", "dead_weight", "shape_error"]
    return [renamed(base, n) for n in names]


def test_each_failure_is_caught_and_named(broken: list[Model]) -> None:
    outcomes = {o.model.run.variant: o for o in rehearse_all(broken, threads=1)}
    assert outcomes["baseline"].ok
    assert outcomes["nan_loss"].failure == "non-finite loss at step 1"
    assert outcomes["dead_weight"].failure.startswith("step 1: 1 trainable parameters got no")
    assert outcomes["dead_weight"].failure.endswith("gradient: dead")
    assert "shapes cannot be multiplied" in outcomes["shape_error"].failure
    report = "\n".join(summary(list(outcomes.values()), 0, 1.0))
    assert "passed 1, failed 3" in report
    for variant in ("nan_loss", "dead_weight", "shape_error"):
        assert f"FAILED listops/{variant}: " in report
    assert report.count("T=24 dim=128 layers=6 heads=8 mlp_dim=512") == 3


def test_a_named_exception_lets_an_unused_parameter_pass(
    broken: list[Model], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = broken[2]
    monkeypatch.setitem(rehearsal.UNUSED_IN_TRAINING, ("listops/*", "tower.*"), "another one")
    monkeypatch.setitem(rehearsal.UNUSED_IN_TRAINING, ("retrieval/*", "dead"), "another job's")
    assert "gradient: dead" in rehearse(dead).failure
    monkeypatch.setitem(rehearsal.UNUSED_IN_TRAINING, ("listops/dead_*", "dead"), "this one")
    assert rehearse(dead).ok


def test_the_command_lists_every_failure_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose loss is NaN among healthy ones: a line per model, the summary names it
    with its keys, and the exit status is 1."""

    def shorter(params: dict[str, Any], profile: str, only: Any, shard: Any) -> Any:
        models, shared = plan(params, profile, only, shard)
        return [at_length(m, 24) for m in models], shared

    def nan_after_mlp(run: Any, manifest: dict[str, Any]) -> nn.Module:
        return poisoned(run, manifest, "nan_loss" if run.variant == "after_mlp" else "-")

    monkeypatch.setattr(rehearsal, "plan", shorter)
    monkeypatch.setattr(session, "build_model", nan_after_mlp)
    only = ["--only", "listops/baseline", "--only", "listops/after_mlp", "--only", "listops/ldn"]
    assert main(["--profile", "paper", "--jobs", "1", "--threads", "1", *only]) == 1
    out = capsys.readouterr().out
    assert "bf16 autocast and torch.compile are not rehearsed" in out
    assert "models 3 (and 0 variants that share one of their models), passed 2, failed 1" in out
    assert "FAILED listops/after_mlp: non-finite loss at step 1\n    kind=" in out
    assert out.count("ok   ") == 2
    assert main(["--profile", "paper", "--jobs", "1", "--threads", "1", *only[:2]]) == 0


@dataclass(frozen=True)
class CrashingShape(TaskShape):
    """Shapes whose manifest kills the process that asks for it (a worker killed for memory)."""

    def manifest(self) -> dict[str, Any]:
        os._exit(1)


@pytest.mark.slow
def test_parallel_jobs_report_every_model_and_outlive_a_dead_worker(
    paper: dict[str, Model],
) -> None:
    """Two workers; one dies under a model, which runs once more alone and fails, named, while
    the others pass in a new pool."""
    models = [at_length(paper[n], 24) for n in ("listops/baseline", "listops/after_mlp")]
    dead = renamed(models[0], "killed")
    dead = replace(dead, shape=CrashingShape(**vars(dead.shape)))
    outcomes = {o.model.name: o for o in rehearse_all([dead, *models], jobs=2, threads=1)}
    assert sorted(outcomes) == ["listops/after_mlp", "listops/baseline", "listops/killed"]
    assert outcomes["listops/baseline"].ok and outcomes["listops/after_mlp"].ok
    assert outcomes["listops/killed"].failure.startswith("its worker process failed (Broken")


def test_parallel_jobs_start_a_model_only_where_memory_allows(paper: dict[str, Model]) -> None:
    """Two towers of 4 layers of (8, 4000, 4000) maps fill 13 GB; a ListOps model (6 layers at
    2000) fits beside them in 20 GB, not in 15, where only a small one does."""
    retrieval, listops, vit = (
        paper[n] for n in ("retrieval/baseline", "listops/baseline", "image/vit_fna")
    )
    assert 12e9 < retrieval.memory() < 14e9
    pending = [listops, vit]
    assert next_to_start(pending, [], 1.0) is listops  # alone, whatever its size
    assert next_to_start(pending, [retrieval], 20e9) is listops
    assert next_to_start(pending, [retrieval], 15e9) is vit
    assert next_to_start(pending, [retrieval], 13e9) is None
    assert retrieval.memory(2) > 2 * retrieval.memory() - 2e9  # the maps grow with the batch
