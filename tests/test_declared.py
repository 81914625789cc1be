"""A claim declared as data is judged on every pair its kind needs, and priced from its runs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from pdelab.report.claims import NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, SIGN_ONLY
from pdelab.report.claims_cost import claim_costs, claims_table, total_of
from pdelab.report.declared import Declared, Kind, Runs, judgement, runs_of
from pdelab.spec.studies import RunKey

SEEDS = (0, 1, 2, 3, 4)
JITTER = (0.0, 0.3, -0.2, 0.1, -0.15)  # points, per seed: a spread for the t intervals


def summary(means: dict[tuple[str, str], float], seeds: tuple[int, ...] = SEEDS) -> pd.DataFrame:
    """Finished runs with test accuracy (a fraction) of ``means`` (points) plus a per-seed
    jitter that differs by variant, so paired differences have a spread."""
    rows = [
        {
            "task": task,
            "variant": variant,
            "seed": seed,
            "status": "ok",
            "test_acc": (mean + JITTER[seed] * (1 + i % 3)) / 100,
        }
        for i, ((task, variant), mean) in enumerate(means.items())
        for seed in seeds
    ]
    return pd.DataFrame(rows)


def declared(kind: Kind, runs: Runs, **kw) -> Declared:
    return Declared("a claim", "Table 1", "the paper's words", "as printed", kind, runs, **kw)


# -- validation ------------------------------------------------------------------------------


def test_a_best_of_one_rival_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="fewer than two.*kind 'difference'"):
        declared(Kind.BEST, Runs(("t",), ("a", "b")))


def test_each_task_on_one_task_is_refused() -> None:
    with pytest.raises(ValueError, match="names one"):
        declared(Kind.EACH_TASK, Runs(("t",), ("a", "b")))


@pytest.mark.parametrize(
    ("kind", "runs", "kw", "message"),
    [
        (Kind.THRESHOLD, Runs(("t",), ("a", "b")), {}, "no threshold"),
        (Kind.PER_FAMILY, Runs(("t",), ("a",), "gap,acc"), {}, "no families"),
        (Kind.PER_FAMILY, Runs(("t",), ("a",), "acc", (("f", ("a",)),)), {}, "two metrics"),
        (Kind.NULL, Runs(("t",), ("a", "b")), {"sign": 1}, "sign 0"),
        (Kind.DIFFERENCE, Runs(("t",), ("a", "b")), {"sign": 0}, "kind 'null'"),
        (Kind.DIFFERENCE, Runs(("t",), ("a", "b", "c")), {}, "kind 'best'"),
        (Kind.EQUIVALENCE, Runs(("t",), ("a", "b")), {}, "declare effect="),
        (Kind.DIFFERENCE, Runs(("t",), ("a", "b")), {"ratio": 0.6}, "'equivalence' only"),
        (Kind.BEST, Runs(("t",), ("a", "b", "c")), {"effects": {"b": 1.0}}, "one effect per"),
        (Kind.DIFFERENCE, Runs(("t",), ("a", "b")), {"margin": 0.0}, "must be positive"),
    ],
)
def test_a_declaration_that_cannot_be_judged_as_declared_is_refused(
    kind: Kind, runs: Runs, kw: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        declared(kind, runs, **kw)


def test_runs_list_each_task_and_variant_once() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        Runs(("t",), ("a", "a"))
    with pytest.raises(ValueError, match="no task"):
        Runs((), ("a",))


# -- the kit builds every pair the kind needs -------------------------------------------------


def test_best_is_judged_against_every_rival_so_a_leading_rival_refutes_it() -> None:
    data = summary({("t", "a"): 80.0, ("t", "b"): 70.0, ("t", "c"): 90.0})
    best = declared(Kind.BEST, Runs(("t",), ("a", "b", "c")), effects={"b": 10.0, "c": 5.0})
    judged = judgement(best, data)
    assert [key for key, _ in judged.parts] == ["b", "c"]
    assert judged.part("b")[1] == REPRODUCED  # a over b alone would reproduce the claim
    assert judged.part("c")[1] == NOT_REPRODUCED
    interval, verdict, reason = judged.judged
    assert verdict == NOT_REPRODUCED
    assert len(interval.pairs) == 2  # the report re-reads it from both pairs
    assert "c" in reason


def test_best_with_a_rival_not_run_is_not_measurable() -> None:
    data = summary({("t", "a"): 80.0, ("t", "b"): 70.0, ("t", "c"): 60.0})
    best = declared(Kind.BEST, Runs(("t",), ("a", "b", "d")), effects={"b": 10.0, "d": 5.0})
    assert judgement(best, data).judged[1] == NOT_MEASURABLE
    every_run = declared(Kind.BEST, Runs(("t",), ("a", "b", "c")), effects={"b": 10, "c": 20})
    assert judgement(every_run, data).judged[1] == REPRODUCED


def test_each_task_needs_every_task_not_their_mean() -> None:
    data = summary(
        {("x", "a"): 90.0, ("x", "b"): 70.0, ("y", "a"): 60.0, ("y", "b"): 65.0}
    )  # +20 on x, -5 on y: +7.5 on their mean
    runs = Runs(("x", "y"), ("a", "b"))
    mean = judgement(declared(Kind.DIFFERENCE, runs, effect=7.5), data)
    assert mean.judged[1] == REPRODUCED
    assert mean.judged[0].estimate == pytest.approx(7.5, abs=0.5)
    each = judgement(declared(Kind.EACH_TASK, runs, effects={"x": 20.0, "y": 5.0}), data)
    assert [key for key, _ in each.parts] == ["x", "y"]
    assert each.part("x")[1] == REPRODUCED and each.part("y")[1] == NOT_REPRODUCED
    assert each.judged[1] == NOT_REPRODUCED


def test_per_family_gives_one_r_per_family_and_every_family_must_hold() -> None:
    settings = range(6)
    index = pd.MultiIndex.from_tuples(
        [(f"m{s}", seed) for s in settings for seed in SEEDS], names=["model", "seed"]
    )
    x = pd.Series([float(s) for s in settings for _ in SEEDS], index=index)
    noise = [((s * 3 + seed * 5) % 7 - 3) * 0.5 for s in settings for seed in SEEDS]
    strong = x * 2 + pd.Series(noise, index=index)  # r near 1, differing by seed
    none = pd.Series(
        [((s * 7 + seed * 3) % 5) - 2.0 for s in settings for seed in SEEDS], index=index
    )
    families = {"fna": (x, strong), "la": (x, none)}
    asked: list[str] = []

    def values(tasks: tuple[str, ...], family: str) -> tuple[pd.Series, pd.Series]:
        asked.append(family)
        return families[family]

    claim = declared(
        Kind.PER_FAMILY,
        Runs(("t",), ("m",), "gap,acc", (("fna", ()), ("la", ()))),
        effect=0.5,
        names={"fna": "FNA", "la": "LA"},
    )
    judged = judgement(claim, values)
    assert asked == ["fna", "la"]
    assert judged.part("fna")[0].estimate > 0.9
    assert judged.part("fna")[1] in (REPRODUCED, SIGN_ONLY)
    assert abs(judged.part("la")[0].estimate) < 0.6
    assert judged.judged[1] != judged.part("fna")[1]  # LA's r keeps the claim from holding
    assert "LA" in judged.judged[2] or judged.judged[1] == NOT_REPRODUCED


def test_an_equivalence_at_another_ratio_than_the_papers_is_not_measurable() -> None:
    data = summary({("t", "a"): 79.5, ("t", "b"): 80.0})
    trails = declared(
        Kind.EQUIVALENCE,
        Runs(("t",), ("a", "b")),
        sign=-1,
        effect=-0.5,
        margin=0.5,
        ratio=0.6,
        ratio_of="the ViT's parameters",
    )
    at_paper = judgement(trails, data, ratio=0.62).judged
    assert at_paper[1] != NOT_MEASURABLE or "times" not in at_paper[2]
    interval, verdict, reason = judgement(trails, data, ratio=1.0).judged
    assert verdict == NOT_MEASURABLE
    assert "1.00 times the ViT's parameters, not the paper's 0.60" in reason
    assert interval.measured is None  # no test left for Holm's adjustment to re-read


def test_all_of_judges_every_pair_of_every_part() -> None:
    data = summary(
        {("t", "m1"): 90.0, ("t", "s1"): 80.0, ("t", "r1"): 70.0}
        | {("t", "m2"): 60.0, ("t", "s2"): 80.0, ("t", "r2"): 50.0}
    )
    one = declared(Kind.BEST, Runs(("t",), ("m1", "s1", "r1")), effects={"s1": 10, "r1": 20})
    two = declared(Kind.BEST, Runs(("t",), ("m2", "s2", "r2")), effects={"s2": 10, "r2": 10})
    both = Declared("every position", "Table 7", "q", "p", Kind.ALL_OF, parts=(one, two))
    judged = judgement(both, data)
    assert judgement(one, data).judged[1] == REPRODUCED
    assert len(judged.parts) == 4
    assert judged.judged[1] == NOT_REPRODUCED  # m2 trails s2
    assert runs_of(both, (0,)) == [("t", v, 0) for v in ("m1", "s1", "r1", "m2", "s2", "r2")]


def test_runs_of_lists_every_task_variant_and_seed() -> None:
    claim = declared(Kind.EACH_TASK, Runs(("x", "y"), ("a", "b")), effects={"x": 1, "y": 1})
    runs = runs_of(claim, (0, 1))
    assert len(runs) == 8 and len(set(runs)) == 8
    assert runs[:2] == [("x", "a", 0), ("x", "a", 1)]
    family = declared(
        Kind.PER_FAMILY, Runs(("t",), ("a",), "gap,acc", (("f", ("a", "b")),)), effect=0.5
    )
    assert runs_of(family, (3,)) == [("t", "a", 3), ("t", "b", 3)]


# -- pricing ----------------------------------------------------------------------------------


def job(task: str, variant: str, seed: int, hours: float) -> SimpleNamespace:
    """A plan job as claims_cost reads it: its run and its hours on any GPU."""
    run = SimpleNamespace(task=task, variant=variant, seed=seed)
    return SimpleNamespace(run=run, gpu_hours=lambda gpu: hours, core_hours=0.0)


def test_each_claim_is_priced_by_its_own_runs_and_the_total_counts_a_run_once() -> None:
    jobs = [
        job("t", "a", 0, 1.0),
        job("t", "b", 0, 2.0),
        job("t", "c", 0, 4.0),
        job("u", "a", 0, 8.0),
    ]
    ab = declared(Kind.DIFFERENCE, Runs(("t",), ("a", "b")), study="s")
    best = declared(Kind.BEST, Runs(("t",), ("a", "b", "c")), study="s")
    # "d" repeats c's spec: the plan trains c for it; "e" is not trained at all
    other = declared(Kind.DIFFERENCE, Runs(("t",), ("d", "e")), study="s")
    same = {RunKey("t", "d", 0): RunKey("t", "c", 0)}
    costs = claim_costs({"paper": [ab, best, other]}, {"s": (0,)}, jobs, same)
    gpu = next(iter(costs[0].gpu_hours))
    assert [c.gpu_hours[gpu] for c in costs] == [3.0, 7.0, 4.0]
    assert [len(c.missing) for c in costs] == [0, 0, 1]
    total = total_of(costs, jobs, same)
    assert total.gpu_hours[gpu] == 7.0  # a, b, c once each; u/a belongs to no claim
    table = claims_table(costs, total)
    assert table.count("\n") == len(costs) + 2  # header, rule, one row per claim, the total
    assert "every claim's runs, each once" in table


def test_a_claim_whose_study_has_no_seeds_is_refused() -> None:
    claim = declared(Kind.DIFFERENCE, Runs(("t",), ("a", "b")), study="elsewhere")
    with pytest.raises(KeyError, match="no seeds for study 'elsewhere'"):
        claim_costs({"paper": [claim]}, {"s": (0,)}, [])


def test_margin_none_is_the_kits_default() -> None:
    data = summary({("t", "a"): 84.0, ("t", "b"): 80.0})
    judged = judgement(declared(Kind.DIFFERENCE, Runs(("t",), ("a", "b")), effect=4.0), data)
    assert judged.judged[0].claimed.margin == 2.0
    assert not math.isnan(judged.judged[0].low)


def test_a_difference_among_parts_is_named_by_what_it_is_set_against() -> None:
    data = summary({("t", "m1"): 90.0, ("t", "s1"): 80.0, ("t", "m2"): 90.0})
    data = pd.concat([data, summary({("t", "s2"): 80.0, ("t", "r2"): 70.0})])
    one = declared(Kind.DIFFERENCE, Runs(("t",), ("m1", "s1")), effect=10.0, names={"s1": "S1"})
    two = declared(Kind.BEST, Runs(("t",), ("m2", "s2", "r2")), effects={"s2": 10, "r2": 20})
    judged = judgement(Declared("both", "Table 7", "q", "p", Kind.ALL_OF, parts=(one, two)), data)
    assert [key for key, _ in judged.parts] == ["S1", "s2", "r2"]
    assert judged.judged[1] == REPRODUCED


def test_every_paper_declares_its_run_claims_without_any_result() -> None:
    from pdelab.report.claims_cost import declarations
    from pdelab.spec.config import PARAMS_FILE, load_params
    from pdelab.spec.studies import studies_of

    studies = studies_of(load_params(PARAMS_FILE), "paper")
    found = declarations(studies)
    assert len(found) == 4  # every registered paper with a study in the profile
    claims = [d for paper in found.values() for d in paper]
    kinds = {d.kind for d in claims}
    assert {Kind.BEST, Kind.EACH_TASK, Kind.PER_FAMILY, Kind.EQUIVALENCE} <= kinds
    assert {Kind.THRESHOLD, Kind.ORDERING, Kind.ALL_OF} <= kinds
    pred1 = next(d for d in claims if d.claim.startswith("Pred-1"))
    assert pred1.kind == Kind.BEST and len(pred1.runs.variants) == 7  # P1 and six rivals
    for d in claims:
        seeds = studies[d.study].seeds
        assert runs_of(d, seeds), d.claim
