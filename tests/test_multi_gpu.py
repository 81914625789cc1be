"""One job on several GPUs, as the cost plan proposes it: a job of a CUDA run profile whose hours
on one GPU exceed the profile's ``multi_gpu`` threshold gets the fewest GPUs of one node (a
power of two) that bring it under, the plan's data says so, and the cluster asks for them; the
GPUs are no part of a run's spec."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pdelab.plan.cost import plan as make_plan
from pdelab.plan.cost import proposed_gpus
from pdelab.plan.render import plan_data, render
from pdelab.records.run import identity
from pdelab.runtime import cluster
from pdelab.spec.config import ConfigError, MultiGpu, multi_gpu, resolve

ONLY = ["wikitext/baseline"]  # one model of a CUDA run profile: a plan of three jobs (seeds)


@pytest.mark.parametrize(
    ("hours", "batch", "rule", "gpus"),
    [
        (10.0, 128, None, 1),  # no threshold: one GPU
        (10.0, 128, MultiGpu(12.0, 8), 1),  # under it
        (12.0, 128, MultiGpu(12.0, 8), 1),  # at it
        (13.0, 128, MultiGpu(12.0, 8), 2),
        (40.0, 128, MultiGpu(12.0, 8), 4),  # 40/2 = 20 > 12, 40/4 = 10
        (1000.0, 128, MultiGpu(12.0, 8), 8),  # at most max_gpus
        (1000.0, 128, MultiGpu(12.0, 6), 4),  # powers of two: even shares of the batch
        (1000.0, 2, MultiGpu(12.0, 8), 2),  # every process takes an example
    ],
)
def test_the_fewest_gpus_that_bring_a_job_under_the_threshold(hours, batch, rule, gpus) -> None:
    assert proposed_gpus(hours, batch, rule) == gpus


def test_the_threshold_is_declared_per_run_profile(params) -> None:
    edited = copy.deepcopy(params)
    assert multi_gpu(edited, "smoke") is None  # the smoke run profile: every job on one
    assert multi_gpu(edited, "paper") == MultiGpu(7.5, 8)  # params.yaml's
    edited["profiles"]["paper"]["multi_gpu"] = {"over_hours": 12, "max_gpus": 8}
    assert multi_gpu(edited, "paper") == MultiGpu(12.0, 8)
    for bad in (
        {"over_hours": 0, "max_gpus": 8},
        {"over_hours": 12},
        {"over_hours": 1, "max_gpus": 1.5},
    ):
        edited["profiles"]["paper"]["multi_gpu"] = bad
        with pytest.raises(ConfigError, match=r"profiles\.paper\.multi_gpu"):
            multi_gpu(edited, "paper")


@pytest.fixture(scope="module")
def hours(params, tmp_path_factory) -> float:
    """The job's hours on its slowest named GPU on a 24 GB card (in micro-batches), in a
    plan without a threshold."""
    cache = tmp_path_factory.mktemp("plan") / "cache.json"
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"].pop("multi_gpu", None)
    plain = make_plan(edited, "paper", None, cache=cache, only=ONLY, card_gib=24.0)
    assert {j.gpus for j in plain.jobs} == {1}
    assert "GPUs per job" not in render(plain, "md")  # no threshold: nothing to say of it
    return plain.jobs[0].slowest_hours


def test_the_plan_proposes_n_gpus_for_a_job_over_the_profiles_threshold(
    params, hours: float, tmp_path: Path
) -> None:
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"]["multi_gpu"] = {"over_hours": hours / 3, "max_gpus": 8}
    cache = tmp_path / "cache.json"
    made = make_plan(edited, "paper", None, cache=cache, only=ONLY, card_gib=24.0)
    assert [j.gpus for j in made.jobs] == [4, 4, 4]  # hours / 2 is over the threshold, / 4 not
    job = made.jobs[0]
    assert job.fit is not None and job.fit.micro_batch < job.run.train.batch_size  # 24 GB
    # each of the 4 processes takes 32 of the batch of 128, in the card's micro-batches
    micro, accumulation = job.fit.per_process(4)
    assert micro == min(job.fit.micro_batch, 32) and accumulation == -(-32 // micro)
    text = render(made, "md")
    assert "GPUs per job (profiles.paper.multi_gpu)" in text and "3 of 3 jobs do" in text
    data = json.loads(json.dumps(plan_data(made)))
    assert [row["gpus"] for row in data["jobs"]] == [4, 4, 4]
    assert data["jobs"][0]["accumulation"] == accumulation
    # the cluster reads them back: gpu=4 and torchrun's 4 processes for the job
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    wildcards = SimpleNamespace(task="wikitext", variant="baseline", seed=0)
    assert cluster.train_gpus(edited, "paper", wildcards, path) == 4
    assert "--nproc-per-node 4" in cluster.train_launch(4, 4)
    # a threshold over the job's hours, or none: one GPU
    edited["profiles"]["paper"]["multi_gpu"] = {"over_hours": hours * 1.01, "max_gpus": 8}
    roomy = make_plan(edited, "paper", None, cache=cache, only=ONLY, card_gib=24.0)
    assert [j.gpus for j in roomy.jobs] == [1, 1, 1]


def test_the_gpus_are_no_part_of_a_runs_spec(params) -> None:
    """The threshold sits beside the run profile's card and tracking, outside every layer a
    spec merges: setting it changes no run's identity, so it retrains nothing."""
    edited = copy.deepcopy(params)
    edited["profiles"]["paper"]["multi_gpu"] = {"over_hours": 0.001, "max_gpus": 8}
    for task, variant in (("wikitext", "baseline"), ("listops", "after_embedding")):
        before = resolve(params, task, variant, 0, "paper").to_dict()
        after = resolve(edited, task, variant, 0, "paper").to_dict()
        assert identity(before, "h") == identity(after, "h")
        assert "multi_gpu" not in json.dumps(after) and "gpus" not in json.dumps(after)


def test_the_paper_profile_puts_its_longest_jobs_on_several_gpus(params, tmp_path: Path) -> None:
    """params.yaml's threshold on the paper run profile, with the measured H200 rates: an LRA
    retrieval job (two towers at 4,000 bytes, about 14 H200-hours) trains on 2 GPUs, a
    WikiText job (3% of WikiText-103's articles, minutes) on one."""
    from conftest import ROOT

    only = ["retrieval/baseline", "wikitext/baseline"]
    measured = ROOT / "results/plan/measured.json"
    made = make_plan(params, "paper", measured, cache=tmp_path / "cache.json", only=only)
    by_task = {j.run.task: j for j in made.jobs if j.run.seed == 0}
    assert by_task["retrieval"].slowest_hours > 7.5 > by_task["retrieval"].slowest_hours / 2
    assert by_task["retrieval"].gpus == 2 and by_task["wikitext"].gpus == 1
