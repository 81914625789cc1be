"""The nondeterminism floor: how far one run trained twice with its own seed on the same
machine parts (pdelab.records.replicate), per task and metric, and the effects smaller than it.

On CPU the two trainings are bitwise equal and the floor is 0: every difference between runs is
the experiment's. On a GPU the non-deterministic kernels move the numbers; an effect whose whole
interval lies within that movement cannot be told from the machine's own noise, whatever its
seeds say, and is flagged (:func:`below_floor`). The floor comes from one replicate per task:
one draw of the machine's noise, a floor to report and flag by, not a distribution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

# the metrics the paragraph names, in this order, where a task's records have them
SHOWN = ("test_acc", "test_loss", "test_ppl", "best_val_acc", "bleu")


class Bounded(Protocol):
    low: float
    high: float


def read_replicates(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """The replicate JSONs (results/replicates/<profile>/<task>.json); one that is missing or
    does not parse raises ValueError naming it and the rule that writes it."""
    found = []
    for path in paths:
        try:
            found.append(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(
                f"{path}: cannot read the replicate ({err}); run `snakemake {path}` (the "
                "replicate rule) to train it"
            ) from None
    return found


def metric_floor(entry: Mapping[str, Any]) -> float:
    """One metric's floor: 0 where the two trainings are bitwise equal, else their absolute
    difference; infinite where one is a number and the other not (one run diverged), as no
    effect on that metric can then be told from the machine."""
    if entry.get("bitwise_equal"):
        return 0.0
    diff = entry.get("abs_diff")
    return math.inf if diff is None else float(diff)


def floors(replicates: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """{(task, metric): floor} from the replicates, in the metric's own unit (an accuracy's
    as a fraction: multiply by 100 to set it against an effect in points)."""
    return {
        (str(rep["identity"]["task"]), name): metric_floor(entry)
        for rep in replicates
        for name, entry in rep["metrics"].items()
    }


def below_floor(effect_interval: Bounded | Sequence[float], floor: float) -> bool:
    """Whether an effect is smaller than the floor: its whole interval (low, high; a
    claims.Interval or a pair) lies strictly within (-floor, +floor), both in one unit. A
    floor of 0 (bitwise equal trainings) flags nothing; an interval that is not a number
    (no effect measured) is not flagged."""
    if isinstance(effect_interval, Sequence):
        low, high = (float(v) for v in effect_interval)
    else:
        low, high = float(effect_interval.low), float(effect_interval.high)
    if math.isnan(low) or math.isnan(high):
        return False
    return max(abs(low), abs(high)) < floor


def _number(value: float) -> str:
    return "∞ (one training diverged)" if math.isinf(value) else f"{value:.3g}"


def task_sentence(replicate: Mapping[str, Any]) -> str:
    """One task's floor: whose run was replicated, on which device, and its floor."""
    ident = replicate["identity"]
    run = f"{ident['task']} ({ident['variant']}, seed {ident['seed']})"
    where = f"on {replicate.get('device', '?')}"
    if replicate.get("bitwise_equal"):
        return f"- {run}, {where}: bitwise equal, floor 0."
    metrics = replicate["metrics"]
    named = [m for m in SHOWN if m in metrics] or sorted(metrics)
    parts = [f"{m} {_number(metric_floor(metrics[m]))}" for m in named]
    return f"- {run}, {where}: not bitwise equal; floor {', '.join(parts)}."


def paragraph(replicates: Sequence[Mapping[str, Any]]) -> str:
    """REPORT.md's "Nondeterminism floor" paragraph, one line per task (none replicated:
    says so, rather than imply a floor of 0)."""
    head = (
        "### Nondeterminism floor\n\n"
        "One run per task (its run profile's first variant and seed) trained again with the "
        "same seed on the same machine: the absolute difference of each metric is the floor "
        "below which a difference between runs cannot be told from the machine's own "
        "non-determinism (0 where the two are bitwise equal, as on CPU). An effect whose whole "
        "interval lies within its floor is flagged. Accuracies are fractions here."
    )
    if not replicates:
        return head + "\n\nNo run was replicated in this build: the floor is not known."
    ordered = sorted(replicates, key=lambda r: str(r["identity"]["task"]))
    return head + "\n\n" + "\n".join(task_sentence(r) for r in ordered)


FLOOR_KEY = "floor"  # a run claim's extra: the tasks, metric and scale its floor is read by


def flagged(claims: Sequence[Any], found: Mapping[tuple[str, str], float]) -> list[Any]:
    """Run claims whose whole interval lies within their nondeterminism floor, marked so in
    their reason (the floor of their tasks' metric, in the claim's unit); others as they are.
    A claim declares where its floor is read (``extra["floor"]``: pdelab.report.declared)."""
    return [flag(claim, found) for claim in claims]


def flag(claim: Any, found: Mapping[tuple[str, str], float]) -> Any:
    """One claim, its reason marked where its interval lies within its floor."""
    if claim.interval is None or FLOOR_KEY not in claim.extra:
        return claim
    where = json.loads(claim.extra[FLOOR_KEY])
    known = [found.get((task, where["metric"])) for task in where["tasks"]]
    if not known or None in known:
        return claim
    level = max(known) * where["scale"]
    if not below_floor(claim.interval, level):
        return claim
    note = f"smaller than the nondeterminism floor ({_number(level)} {claim.interval.unit})"
    return replace(claim, reason="; ".join(filter(None, [claim.reason, note])))
