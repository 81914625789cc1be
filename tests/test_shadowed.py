"""An edit that does nothing is named: a key a task or variant sets that the active run
profile overrides in every run of it gets one warning line at parse time."""

from __future__ import annotations

import copy
from typing import Any

from pdelab.spec.run_sheet import trained_runs
from pdelab.spec.shadowed import shadowed, warning


def pairs(params: dict[str, Any], profile: str) -> list[tuple[str, str]]:
    return [(s.task, s.variant) for s in trained_runs(params, profile)]


def test_a_tasks_lr_the_smoke_profile_overrides_is_named(params) -> None:
    found = shadowed(params, "smoke", pairs(params, "smoke"))
    assert lr_overridden(found)
    line = warning(params, "smoke", pairs(params, "smoke"))
    assert line is not None and "\n" not in line
    assert "loses to profiles.smoke.overrides.train.lr" in line and "pdelab explain" in line


def lr_overridden(found: dict[str, set[str]]) -> list[str]:
    """The tasks' train.lr keys that lose to the smoke profile's overrides."""
    wins = {"profiles.smoke.overrides.train.lr"}
    return [k for k, won in found.items() if k.endswith(".train.lr") and won == wins]


def test_a_key_some_run_takes_is_not_named(params) -> None:
    before = lr_overridden(shadowed(params, "smoke", pairs(params, "smoke")))
    edited = copy.deepcopy(params)
    edited["profiles"]["smoke"]["overrides"]["train"].pop("lr")
    after = shadowed(edited, "smoke", pairs(edited, "smoke"))
    assert before and not set(before) & set(after)
    assert warning(params, "paper", pairs(params, "paper")) is None
