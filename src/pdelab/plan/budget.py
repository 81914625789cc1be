"""The runs to train first within a budget of GPU-hours: the most claims decided per GPU-hour.

Why apart from the claims: the choice is arithmetic on what each claim needs (seeds a side of
each job class it rests on) and what a seed of each class costs; the claims, their spreads and
their seeds needed are the report's (:mod:`pdelab.report.claims_cost`).

The rule, greedy: at each step take the claim whose runs not yet trained or chosen cost the
least (every claim counts one, so the fewest GPU-hours is the most claims per GPU-hour) among
those that still fit what is left of the budget; a seed a class already has (trained, or chosen
for an earlier claim) costs nothing again, so claims sharing runs grow cheaper as others are
chosen. Greedy is not optimal (a knapsack is hard), and a claim counts as decided at its
central seeds needed: the spread's own interval may ask for more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

JobClass = tuple[str, str]  # (task, variant): one model, whatever the seed


@dataclass(frozen=True)
class Want:
    """A claim and the seeds a side it needs of each job class it rests on."""

    name: str
    seeds: Mapping[JobClass, int]


@dataclass(frozen=True)
class Chosen:
    """A claim chosen within the budget, the GPU-hours it added and the total after it."""

    want: Want
    hours: float
    cumulative: float


def marginal(
    want: Want, have: Mapping[JobClass, int], seed_hours: Mapping[JobClass, float]
) -> float:
    """GPU-hours of the seeds ``want`` needs beyond those each class ``have``s."""
    return sum(max(0, n - have.get(c, 0)) * seed_hours.get(c, 0.0) for c, n in want.seeds.items())


def choose(
    wants: Sequence[Want],
    seed_hours: Mapping[JobClass, float],
    budget: float,
    trained: Mapping[JobClass, int] | None = None,
) -> tuple[list[Chosen], dict[JobClass, int]]:
    """(the claims chosen in order, the seeds a side each class then has) within ``budget``
    GPU-hours, ``trained``: the seeds each class has already (cost nothing)."""
    have = dict(trained or {})
    left = list(wants)
    chosen: list[Chosen] = []
    spent = 0.0
    while left:
        costs = [(marginal(w, have, seed_hours), i) for i, w in enumerate(left)]
        fitting = [(c, i) for c, i in costs if spent + c <= budget + 1e-9]
        if not fitting:
            break
        cost, index = min(fitting)
        want = left.pop(index)
        for c, n in want.seeds.items():
            have[c] = max(have.get(c, 0), n)
        spent += cost
        chosen.append(Chosen(want, cost, spent))
    return chosen, have
