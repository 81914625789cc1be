"""A card to fit (pdelab.plan.card_fit): per job the largest micro-batch whose estimated peak fits
the declared card, the accumulation that makes the paper's batch, checkpointed blocks where one
example does not fit; how many jobs share one card; the plan shows them, and how many jobs fit
each card size."""

from __future__ import annotations

import copy
import json
import math
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

import pytest

from pdelab.plan import card_fit
from pdelab.plan.card_fit import (
    GIB,
    MIB,
    SAFETY,
    choose,
    fits,
    need_bytes,
    share_mib,
)
from pdelab.plan.check import measured_peak
from pdelab.plan.cost import plan as make_plan
from pdelab.plan.counting import count_step
from pdelab.plan.hardware import CARDS_GIB
from pdelab.plan.render import plan_data, render
from pdelab.plan.shapes import task_shape
from pdelab.runtime.gpu_slots import MAX_JOBS_PER_GPU, jobs_per_gpu, shards_of, usable_mib
from pdelab.spec.config import ConfigError, gpu_memory_gb, resolve

# (task, variant): every task kind, document pairs, and a block of another paper
JOBS = [
    ("listops", "baseline"),  # the fast tier's; each of the others counts for seconds
    pytest.param("retrieval", "baseline", marks=pytest.mark.slow),
    pytest.param("wikitext", "baseline", marks=pytest.mark.slow),
    pytest.param("multi30k", "baseline", marks=pytest.mark.slow),
    pytest.param("image", "ldn", marks=pytest.mark.slow),
]


def card_for(peak_bytes: int) -> float:
    """The card (GiB) that a step of ``peak_bytes`` just fits, with the margins."""
    need = peak_bytes * card_fit.RESERVED_OVER_ALLOCATED + card_fit.CUDA_CONTEXT_GIB * GIB
    return need / (1 - SAFETY) / GIB


@pytest.mark.parametrize(("task", "variant"), JOBS)
def test_the_chosen_micro_batch_fits_and_the_next_larger_does_not(params, task, variant) -> None:
    run = resolve(params, task, variant, 0, "smoke")
    shape = task_shape(params, "smoke", task)
    batch = run.train.batch_size
    counted: dict[tuple[int, bool], int] = {}

    def peak_of(micro: int, checkpointed: bool) -> int:
        if (micro, checkpointed) not in counted:
            at = replace(run, train=replace(run.train, batch_size=micro))
            counted[micro, checkpointed] = count_step(at, shape, checkpointed).peak_bytes
        return counted[micro, checkpointed]

    card = card_for(peak_of(max(1, batch // 2), False))  # about half the batch fits
    fit = choose(peak_of, batch, card)
    assert fit.fits and not fit.checkpoint_blocks and 1 <= fit.micro_batch < batch
    assert fits(peak_of(fit.micro_batch, False), card, SAFETY)
    assert not fits(peak_of(fit.micro_batch + 1, False), card, SAFETY)
    assert fit.accumulation_steps == math.ceil(batch / fit.micro_batch)
    assert fit.micro_batch * fit.accumulation_steps >= batch  # the paper's batch, exactly
    # the trainer's own step at that micro-batch, measured in a fresh process, fits the card
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        what = (params, "smoke", task, variant, fit.micro_batch, "cpu")
        measured = pool.submit(measured_peak, *what).result()
    assert fits(measured, card, SAFETY / 2), (measured, fit.peak_bytes)


def linear(fixed: int, per_example: int, saved: int) -> card_fit.PeakOf:
    """A peak that grows by ``per_example`` bytes an example, less ``saved`` when checkpointed."""
    return lambda m, checkpointed: fixed + m * (per_example - (saved if checkpointed else 0))


def test_checkpointing_where_one_example_does_not_fit() -> None:
    peak_of = linear(2 * GIB, 4 * GIB, 3 * GIB)  # one example: 6 GiB; checkpointed: 3 GiB
    fit = choose(peak_of, 64, 6.0)  # 5.7 GiB usable: 2 checkpointed examples need 5.4
    assert fit.fits and fit.checkpoint_blocks and fit.micro_batch == 2
    assert fit.accumulation_steps == 32 and fit.label == "2 x 32 +ckpt"
    too_small = choose(peak_of, 64, 3.0)
    assert not too_small.fits and too_small.label == "-"
    roomy = choose(peak_of, 64, 1000.0)
    assert (roomy.micro_batch, roomy.accumulation_steps, roomy.checkpoint_blocks) == (64, 1, False)


def test_the_card_is_declared_per_profile(params) -> None:
    edited = copy.deepcopy(params)
    assert gpu_memory_gb(edited, "paper") is None  # none declared: the visible GPU's
    edited["profiles"]["paper"]["gpu_memory_gb"] = 40
    assert gpu_memory_gb(edited, "paper") == 40.0
    edited["profiles"]["paper"]["gpu_memory_gb"] = "40GB"
    with pytest.raises(ConfigError, match=r"profiles\.paper\.gpu_memory_gb"):
        gpu_memory_gb(edited, "paper")


def test_the_plan_shows_each_job_s_fit_and_the_jobs_each_card_fits(params, tmp_path: Path) -> None:
    only = ["listops/baseline"]
    plan = make_plan(params, "smoke", None, cache=tmp_path / "c.json", only=only, card_gib=1.2)
    job = plan.jobs[0]
    assert job.fit is not None and job.fit.card_gib == 1.2
    assert fits(job.fit.peak_bytes, 1.2, SAFETY)
    assert plan.total.fit == {c: plan.total.jobs for c in CARDS_GIB}  # small models
    assert job.gpu_hours("H200") >= job.steps * job.step_s["H200"] / 3600
    text = render(plan, "md")
    assert "micro-batch" in text and "fit 24 GB (micro-batches)" in text and "Card: 1.2 GB" in text
    data = json.loads(json.dumps(plan_data(plan)))
    row = data["jobs"][0]
    assert row["micro_batch"] == job.fit.micro_batch and row["accumulation"] >= 1
    assert data["cards"]["24"]["fit"] == plan.total.jobs
    # jobs per GPU: the job's share (its micro-batch's pass) against each GPU and the card
    share = share_mib(job.fit.peak_bytes)
    assert row["gpu_share_mib"] == share and row["jobs_per_gpu"] == jobs_per_gpu(share, 1.2 * 1024)
    assert "## Jobs per GPU" in text and re.search(r"\|\s+jobs/GPU\s+\|", text)
    table = text[text.index("## Jobs per GPU") : text.index("## Assumptions")]
    line = next(x for x in table.splitlines() if x.startswith("| listops "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    heads = [c.strip() for c in table.splitlines()[4].strip("|").split("|")]
    per_gpu = dict(zip(heads, cells, strict=True))
    assert per_gpu["jobs"] == str(plan.total.jobs)
    assert per_gpu["A100-80GB (80 GB)"] == str(jobs_per_gpu(share, 80 * 1024))
    assert per_gpu["RTX-4090 (24 GB)"] == str(jobs_per_gpu(share, 24 * 1024))
    assert per_gpu["card 1.2 GB"] == str(row["jobs_per_gpu"])
    assert "Jobs per GPU: a job's share of a GPU is its pass's peak" in text


@pytest.mark.parametrize(("profile", "task"), [("smoke", "image"), ("paper", "multi30k")])
def test_checkpointed_blocks_lower_the_estimated_peak_and_cost_a_recomputation(
    params, profile: str, task: str
) -> None:
    """On the CPU's kernels and on CUDA's emulated ones (bf16 autocast in the recomputation),
    with four blocks (with one, the recomputed block's activations are all there is)."""
    run = resolve(params, task, "baseline", 0, profile)
    model = replace(run.model, layers=4)
    run = replace(run, model=model, train=replace(run.train, batch_size=16))
    shape = task_shape(params, profile, task)
    kept, recomputed = count_step(run, shape), count_step(run, shape, True)
    assert recomputed.peak_bytes < kept.peak_bytes
    assert kept.flops < recomputed.flops < 1.5 * kept.flops  # a forward pass again, at most


def peak_for(share_gib: float) -> int:
    """The step peak whose share of a card is ``share_gib`` (the allocator's reserve and the
    CUDA context added: pdelab.plan.card_fit.need_bytes)."""
    context = card_fit.CUDA_CONTEXT_GIB * GIB
    return int((share_gib * GIB - context) / card_fit.RESERVED_OVER_ALLOCATED)


@pytest.mark.parametrize(
    ("share_gib", "card_gib", "k"),
    [(18, 80, 4), (18, 24, 1), (18, 141, 7), (30, 24, 0), (1.0, 80, MAX_JOBS_PER_GPU), (38, 80, 2)],
)
def test_a_card_runs_as_many_jobs_as_fit_with_the_safety_left_free(share_gib, card_gib, k):
    peak = peak_for(share_gib)
    share = share_mib(peak)
    assert abs(share - share_gib * 1024) <= 1  # the share is the need, in whole MiB
    assert jobs_per_gpu(share, card_gib * 1024) == k
    usable = usable_mib(card_gib * 1024)
    assert k * share <= usable  # k fit with SAFETY free
    assert usable < (k + 1) * share or k == MAX_JOBS_PER_GPU  # k + 1 do not, or k is the cap
    assert (k >= 1) == fits(peak, card_gib, SAFETY)  # one fits where the card fit says so
    assert need_bytes(peak) / MIB <= share


def test_shards_of_mixed_shares_that_fit_one_gpu_fit_its_memory() -> None:
    """SLURM counts shards, not memory: shards rounded up from the share keep every mix of
    jobs that SLURM lets share a GPU within its usable memory."""
    card = 80 * 1024
    usable = usable_mib(card)
    shares = [18 * 1024, 36 * 1024, 5 * 1024, 9 * 1024, 25 * 1024]
    for per_gpu in (4, 8, 16, 100):
        asked = {s: shards_of(s, card, per_gpu) for s in shares}
        assert per_gpu // asked[18 * 1024] == 4  # as many 18 GB jobs as the memory takes
        for a in shares:  # every pair and triple SLURM would co-schedule fits the memory
            for b in shares:
                for c in (0, *shares):
                    count = asked[a] + asked[b] + (asked[c] if c else 0)
                    if count <= per_gpu:
                        assert a + b + c <= usable, (per_gpu, a, b, c)
    with pytest.raises(ValueError, match="share must be > 0"):
        jobs_per_gpu(0, card)
