"""Edits that do nothing: a key a task or variant sets (in a paper's config.yaml or params.yaml)
that the active run profile overrides in every run of that task or variant.

Editing such a key (docs/reruns.md's example: a task's ``train.lr``) changes no resolved spec,
so Snakemake plans nothing and says nothing. The workflow names them at parse time, in one
line with the layer that wins (pdelab.spec.config's layers: the same ones ``pdelab explain``
shows).
The defaults are left out: a run profile overrides them by design.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pdelab.spec.config import _merge, layers_of

EDITED = ("tasks.", "variants.")  # the layers a person edits for one task or variant


def shadowed(
    params: dict[str, Any], profile: str, runs: Iterable[tuple[str, str]]
) -> dict[str, set[str]]:
    """ "layer.section.key" set by a task or variant -> the profile's keys that win over it,
    for every key no run of ``runs`` ((task, variant) pairs) takes from its own layer."""
    winners: dict[str, set[str]] = defaultdict(set)
    for task, variant in set(runs):
        layers = layers_of(params, task, variant, profile)
        origin = _merge(layers)[1]
        for where, layer in layers:
            if not where.startswith(EDITED):
                continue
            for section, values in layer.items():
                for key in values or {}:
                    winners[f"{where}.{section}.{key}"].add(origin[f"{section}.{key}"])
    prefix = f"profiles.{profile}."
    return {
        key: won
        for key, won in winners.items()
        if key not in won and all(w.startswith(prefix) for w in won)
    }


def warning(params: dict[str, Any], profile: str, runs: Iterable[tuple[str, str]]) -> str | None:
    """One line naming the keys an edit of which would change nothing in this run profile,
    and the layer that wins over them; None when there are none."""
    found = shadowed(params, profile, runs)
    if not found:
        return None
    keys = sorted(found)
    example = next((k for k in keys if k.endswith(".train.lr")), keys[0])
    return (
        f"params: {len(keys)} key(s) set for a task or variant change no run of the "
        f"{profile} run profile, whose own settings win (e.g. {example} loses to "
        f"{' and '.join(sorted(found[example]))}); `pdelab explain TASK VARIANT` names the "
        "file and layer behind each key"
    )
