"""What to book and what a decision costs: wall-clock on N GPUs, assumed rates shown as a range
of measured utilisations, the greedy choice of claims within a budget, the seeds a claim needs
from the best spread there is, and an --only pattern that names nothing refused by name.

Jobs here are made by hand (a toy plan) or counted for one small class of the smoke profile:
a full paper plan takes minutes of counting."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pdelab.cli import main
from pdelab.plan.booking import (
    at_peak_seconds,
    book,
    hours_range,
    measured_utilisation,
    section,
    wall_clock,
)
from pdelab.plan.budget import Want, choose, marginal
from pdelab.plan.cost import JobCost, NoMatch, Plan, Summary, check_patterns
from pdelab.plan.counting import StepCost
from pdelab.plan.hardware import GPUS, UTILISATION
from pdelab.report.claims_cost import budget_section, decision_prices
from pdelab.report.decide import SEEDS_CAP
from pdelab.report.decision_price import (
    OWN,
    PAPER,
    DecisionPrice,
    best_needed,
    needed_from_paper,
)
from pdelab.report.declared import Declared, Kind, Runs
from pdelab.spec.config import resolve
from pdelab.spec.studies import studies_of

MEASURED_GPU = "H200"  # the toy plan's measured kind; every other kind is assumed
STEPS = 1000  # steps_per_epoch of every toy job


def toy_job(params: dict, variant: str, seed: int, utilisation: float | None) -> JobCost:
    """A paper-profile job of listops; on :data:`MEASURED_GPU` a measured step at
    ``utilisation`` of its peak (None: the measured rate), elsewhere the assumed rate."""
    run = resolve(params, "listops", "baseline", seed, "paper")
    run = replace(run, variant=variant)
    step = StepCost(parameters=1, flops=10**14, low_precision_flops=10**14, peak_bytes=2**20)
    job = JobCost(run, step, 1, STEPS, {}, {})
    seconds, sources = {}, {}
    for g in GPUS:
        at_peak = at_peak_seconds(job, g)
        if g.name == MEASURED_GPU:
            u = utilisation if utilisation is not None else 0.04
            seconds[g.name] = at_peak / u
            sources[g.name] = "measured step" if utilisation is not None else "measured rate"
        else:
            seconds[g.name], sources[g.name] = at_peak / UTILISATION, "assumed"
    return replace(job, step_s=seconds, time_source=sources)


@pytest.fixture
def toy_jobs(params: dict) -> list[JobCost]:
    """16 single-GPU jobs: two classes measured at 2% and 5% of peak, the rest at the
    measured rate."""
    jobs = [toy_job(params, "baseline", s, 0.02) for s in range(2)]
    jobs += [toy_job(params, "after_mlp", s, 0.05) for s in range(2)]
    return jobs + [toy_job(params, "after_embedding", s, None) for s in range(12)]


def toy_plan(jobs: list[JobCost]) -> Plan:
    total = Summary.of("total", jobs)
    return Plan(
        "paper",
        jobs,
        {"toy": total},
        total,
        {},
        {},
        None,  # type: ignore[arg-type]
        1,
        study_jobs={"toy": jobs},
    )


def test_wall_clock_is_gpu_hours_over_n_when_jobs_divide_evenly() -> None:
    assert wall_clock([(1.0, 1)] * 16, 8) == pytest.approx(2.0)
    assert wall_clock([(3.0, 1)] * 7, 1) == pytest.approx(21.0)


def test_wall_clock_is_never_under_the_longest_job() -> None:
    jobs = [(10.0, 1)] + [(0.5, 1)] * 8
    assert wall_clock(jobs, 8) == pytest.approx(10.0)
    # a job on 4 GPUs takes its hours over 4; one asking for more than N takes all N
    assert wall_clock([(8.0, 4)], 8) == pytest.approx(2.0)
    assert wall_clock([(8.0, 16)], 8) == pytest.approx(1.0)
    assert wall_clock([(8.0, 4), (8.0, 4), (2.0, 1)], 4) >= 4.0
    with pytest.raises(ValueError, match="at least one GPU"):
        wall_clock([(1.0, 1)], 0)


def test_booking_on_8_gpus_is_consistent(toy_jobs: list[JobCost]) -> None:
    utilisation = measured_utilisation(toy_jobs)
    for g in GPUS:
        b = book(toy_jobs, g.name, 8, utilisation)
        for end in (0, 1):
            hours = b.gpu_hours[end]
            longest = b.longest[end]
            assert b.wall[end] >= longest - 1e-9
            assert b.wall[end] >= hours / 8 - 1e-9
        assert b.jobs == 16 and b.measured_step + b.measured_rate + b.assumed == 16
    h200 = book(toy_jobs, MEASURED_GPU, 8, utilisation)
    assert h200.gpu_hours[0] == h200.gpu_hours[1]  # measured: one number
    assert h200.gpu_hours[0] == pytest.approx(sum(j.gpu_hours(MEASURED_GPU) for j in toy_jobs))
    assert (h200.measured_step, h200.measured_rate, h200.assumed) == (4, 12, 0)
    # 16 jobs of equal length on 8 GPUs where each class's jobs are equal: the 12 at the rate
    # and the two classes: wall-clock is the GPU-hours over 8 exactly when every job is equal
    equal = [j for j in toy_jobs if j.run.variant == "after_embedding"][:8]
    even = book(equal * 2, MEASURED_GPU, 8, utilisation)
    assert even.wall[0] == pytest.approx(even.gpu_hours[0] / 8)


def test_an_assumed_rate_is_a_range_of_the_measured_utilisations(
    toy_jobs: list[JobCost],
) -> None:
    utilisation = measured_utilisation(toy_jobs)
    assert utilisation is not None
    assert (utilisation.low, utilisation.high) == (pytest.approx(0.02), pytest.approx(0.05))
    job = toy_jobs[0]
    low, high = hours_range(job, "H100-SXM", utilisation)
    at_peak = job.steps * at_peak_seconds(job, next(g for g in GPUS if g.name == "H100-SXM"))
    assert (low, high) == (
        pytest.approx(at_peak / 0.05 / 3600),
        pytest.approx(at_peak / 0.02 / 3600),
    )
    assert hours_range(job, MEASURED_GPU, utilisation) == (job.gpu_hours(MEASURED_GPU),) * 2
    text = section(toy_plan(toy_jobs), gpus=8, fmt="md")
    assert "## What to book" in text and "wall-clock on 8 GPUs" in text
    assert "H100-SXM (assumed, a range)" in text and f"{MEASURED_GPU} (measured)" in text
    assert "2-5% of the datasheet peak over 2 classes" in text
    row = next(line for line in text.splitlines() if line.startswith("| H100-SXM"))
    assert re.search(r"\|\s*[\d.,]+-[\d.,]+\s*\|", row), row  # GPU-hours as low-high
    # with no GPU step measured, an assumed rate is the one assumed number, labelled so
    unmeasured = [replace(j, time_source={g: "assumed" for g in j.time_source}) for j in toy_jobs]
    assert measured_utilisation(unmeasured) is None
    assert f"{UTILISATION:.0%} of the datasheet peak, one number" in section(
        toy_plan(unmeasured), 1, "md"
    )


def test_the_budget_takes_the_most_claims_it_can_pay_for() -> None:
    a, b, c = ("t", "a"), ("t", "b"), ("t", "c")
    hours = {a: 1.0, b: 2.0, c: 50.0}
    wants = [
        Want("cheap", {a: 3, b: 3}),
        Want("shares", {a: 5, b: 3}),  # 10 h alone, 2 h once "cheap" is chosen
        Want("dear", {c: 4, a: 3}),  # 200 h
    ]
    chosen, have = choose(wants, hours, budget=20.0, trained={a: 1})
    assert [x.want.name for x in chosen] == ["cheap", "shares"]
    # cheap: 2 seeds of a (one trained) + 3 of b = 8 h; then shares: 2 more of a = 2 h
    assert [x.hours for x in chosen] == [pytest.approx(8.0), pytest.approx(2.0)]
    assert chosen[-1].cumulative == pytest.approx(10.0) and chosen[-1].cumulative <= 20.0
    assert have == {a: 5, b: 3}
    assert marginal(wants[2], have, hours) == pytest.approx(200.0)
    assert choose(wants, hours, budget=1.0)[0] == []  # nothing fits: nothing chosen
    everything, _ = choose(wants, hours, budget=1e6)
    assert len(everything) == 3


def price(name: str, seeds: int | None, classes: dict[tuple[str, str], float]) -> DecisionPrice:
    needed = None if seeds is None else (seeds, seeds, seeds + 2)
    return DecisionPrice("P", name, needed, OWN, tuple(classes), classes)


def test_the_budget_section_says_what_it_decides_and_on_what_it_rests() -> None:
    prices = [
        price("one", 4, {("listops", "a"): 1.0}),
        price("two", 10, {("listops", "b"): 30.0}),  # 300 h: over the budget
        price("unsized", None, {("listops", "c"): 1.0}),
        price("capped", SEEDS_CAP + 1, {("listops", "c"): 1.0}),
    ]
    text = "\n".join(budget_section(prices, 200.0, "H200", {("listops", "a"): 1}, "md"))
    assert "## Within 200 GPU-hours on H200" in text
    assert "1 of 4 claims decided for 3 GPU-hours" in text  # 3 seeds more at 1 h each
    assert "| listops | a         |              4 |         1 |          3 |" in text
    assert "Left out: 2 claims not sized" in text and "Greedy" in text
    assert "before Holm's adjustment" in text


def seeds_claim(study: str = "seeds") -> Declared:
    return Declared(
        "P1 improves on the baseline",
        "Table 10",
        "",
        "+2.2",
        Kind.DIFFERENCE,
        Runs(("listops",), ("after_embedding", "baseline")),
        effect=2.2,
        study=study,
    )


def runs_summary(profile: str, sd: float, claimed: str = "after_embedding") -> pd.DataFrame:
    """Five seeds a side of listops, baseline and ``claimed``, with a spread of ``sd``."""
    rows = []
    for seed in range(5):
        noise = sd * (seed - 2) / math.sqrt(2.5)
        for variant, mean in (("baseline", 0.37), (claimed, 0.39)):
            acc = mean + noise * (1 if variant == "baseline" else -1)
            rows.append((profile, "listops", variant, seed, "ok", acc))
    return pd.DataFrame(rows, columns=["profile", "task", "variant", "seed", "status", "test_acc"])


def test_seeds_needed_come_from_the_best_spread_there_is(params: dict) -> None:
    studies = studies_of(params, "paper")
    claim = seeds_claim()
    smoke = runs_summary("smoke", 0.02)
    own = runs_summary("paper", 0.005)
    needed, source = best_needed(claim, studies, pd.concat([own, smoke]), "paper")
    assert source == OWN and needed is not None
    # no runs of the profile: the paper's printed deviations (its seeds table's std column)
    printed = needed_from_paper(claim, studies)
    assert printed is not None and printed[1] <= printed[0] <= printed[2]
    assert best_needed(claim, studies, smoke, "paper") == (printed, PAPER)
    # no deviation printed for the claim's study: the smoke profile's, named as such
    elsewhere = seeds_claim("positions")
    assert needed_from_paper(elsewhere, studies) is None
    found, source = best_needed(elsewhere, studies, smoke, "paper")
    assert source.startswith("the smoke profile") and found is not None
    assert found[0] > needed[0]  # a wider spread


def test_a_claims_price_is_its_seeds_times_a_seeds_hours(
    params: dict, toy_jobs: list[JobCost]
) -> None:
    studies = studies_of(params, "paper")
    plan = toy_plan(toy_jobs)
    summary = runs_summary("paper", 0.005, "after_mlp")
    claim = replace(seeds_claim(), runs=Runs(("listops",), ("after_mlp", "baseline")))
    [made] = decision_prices({"P": [claim]}, studies, summary, plan, MEASURED_GPU)
    assert made.classes == (("listops", "after_mlp"), ("listops", "baseline"))
    per_seed = {c: made.seed_hours[c] for c in made.classes}
    assert per_seed[("listops", "baseline")] == pytest.approx(toy_jobs[0].gpu_hours(MEASURED_GPU))
    assert made.needed is not None and made.source == OWN
    assert made.hours(made.needed[0]) == pytest.approx(made.needed[0] * sum(per_seed.values()))


def test_an_only_pattern_that_names_nothing_is_refused_with_the_closest_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(NoMatch, match=r"closest: listops/\*"):
        check_patterns(["lisops/*"], ["listops/baseline", "image/ldn"])
    check_patterns(["listops/*", "*/ldn"], ["listops/baseline", "image/ldn"])  # both match
    assert main(["--profile", "smoke", "plan", "--only", "lisops/*"]) != 0
    err = capsys.readouterr().err
    assert "'lisops/*' matches no task/variant" in err and "listops/*" in err


def test_pdelab_plan_opens_with_what_to_book_and_prices_a_budget(tmp_path: Path) -> None:
    """One small class of the smoke profile, counted: the booking opens the plan, the price of
    a decision and the budget follow the claims' costs."""
    out = tmp_path / "plan.md"
    measured = tmp_path / "measured.json"  # none: every rate assumed
    argv = ["--profile", "smoke", "plan", "--format", "md", "--out", str(out), "--no-cache"]
    argv += ["--workers", "1", "--only", "listops/baseline", "--measured", str(measured)]
    assert main([*argv, "--gpus", "8", "--budget", "200"]) == 0
    text = out.read_text()
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads[0] == "## What to book" and heads[-1] == "## Jobs"
    assert "wall-clock on 8 GPUs" in text and "(assumed 40%)" in text
    assert heads.index("## The price of a decision") < heads.index("## Jobs")
    assert "## Within 200 GPU-hours on" in text
