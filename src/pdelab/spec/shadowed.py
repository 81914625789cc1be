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

from pdelab.spec.config import PARAMS_FILE, Sources, _merge, layers_of, load_with_sources

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


def where_instead(key: str, winners: set[str], profile: str) -> str:
    """Where a shadowed key's value takes effect in this profile: the winning layer's own key
    where that is a profile's task or variant block, else the profile's block for the task or
    variant (``tasks.listops.train.lr`` -> ``profiles.smoke.tasks.listops.train.lr``)."""
    kind, name, section, leaf = key.split(".", 3)
    prefix = f"profiles.{profile}."
    blocks = sorted(w for w in winners if w.startswith((f"{prefix}tasks.", f"{prefix}variants.")))
    if blocks:
        return f"{blocks[-1]}.{section}.{leaf}"
    return f"{prefix}{kind}.{name}.{section}.{leaf}"


def warning(
    params: dict[str, Any],
    profile: str,
    runs: Iterable[tuple[str, str]],
    sources: Sources | None = None,
    mine_only: bool = False,
) -> str | None:
    """One line per key params.yaml sets for a task or variant that changes no run of this
    profile, naming the key that wins and where to write the value instead; then one line
    for the other files' such keys (the papers' settings a profile overrides by design);
    None when there are none. ``sources``: the file of each key (read from params.yaml here
    when not given); ``mine_only``: params.yaml's keys alone."""
    found = shadowed(params, profile, runs)
    if not found:
        return None
    if sources is None:
        sources = load_with_sources(PARAMS_FILE)[1] if PARAMS_FILE.exists() else Sources("")
    mine = sorted(k for k in found if sources.params and sources.of(k) == sources.params)
    lines = [
        f"params: {sources.params}: {key} changes no run of the {profile} run profile: "
        f"{' and '.join(sorted(found[key]))} wins; write it as "
        f"{where_instead(key, found[key], profile)} instead"
        for key in mine
    ]
    keys = sorted(set(found) - set(mine))
    if keys and not mine_only:
        example = next((k for k in keys if k.endswith(".train.lr")), keys[0])
        lines.append(
            f"params: {len(keys)} key(s) set for a task or variant change no run of the "
            f"{profile} run profile, whose own settings win (e.g. {example} loses to "
            f"{' and '.join(sorted(found[example]))}); `pdelab explain TASK VARIANT` names the "
            "file and layer behind each key"
        )
    return "\n".join(lines) or None
