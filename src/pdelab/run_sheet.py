"""The run sheet: every (task, variant, seed) the studies of a profile need, each once, and the
validation of a whole params.yaml (the Snakefile calls it before any job starts).

Studies are views over runs: two studies that need the same run share it, and two variants
whose resolved specs coincide in a profile (``baseline_T256`` where the task's own length is
256) share one trained run (:func:`same_runs`). This module joins
config (one run's spec), data (each task's data spec) and the papers (the study kinds and the
keys each paper's studies may have).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pdelab.config import (
    TOP_LEVEL_KEYS,
    ConfigError,
    RunSpec,
    active_profile,
    check_name,
    check_profile_variants,
    resolve,
)
from pdelab.data import check_data_spec
from pdelab.papers import STUDY_KINDS, Paper, load_all

# The keys any study may have, whatever its kind (the schema types them); the paper that owns
# the study's kind adds its own (Paper.study_keys).
STUDY_KEYS = ("title", "kind", "tasks", "variants", "seeds", "baseline", "paper_table")
# What a profile may set for a study (profiles.<profile>.studies.<study>): the part of its
# tasks and variants it runs, and its seeds.
PROFILE_STUDY_KEYS = ("tasks", "variants", "seeds")


@dataclass(frozen=True)
class RunKey:
    task: str
    variant: str
    seed: int


def study_block(params: dict[str, Any], study: str, profile: str | None = None) -> dict[str, Any]:
    """A study as a profile runs it: its params.yaml block with the tasks, variants and seeds
    that ``profiles.<profile>.studies.<study>`` sets. A paper's full grid can so be the study
    while the smoke profile trains a corner of it, or the paper's five seeds where the
    profile's default is three."""
    profile = active_profile(params, profile)
    check_name(study, tuple(params.get("studies", {})), "study")
    own = (params["profiles"][profile].get("studies") or {}).get(study) or {}
    return {**params["studies"][study], **own}


def study_runs(params: dict[str, Any], study: str, profile: str | None = None) -> list[RunKey]:
    """The runs a study views in a profile, in table order."""
    profile = active_profile(params, profile)
    s = study_block(params, study, profile)
    seeds = s.get("seeds", params["profiles"][profile].get("seeds", [0]))
    return [RunKey(t, v, int(seed)) for t in s["tasks"] for v in s["variants"] for seed in seeds]


def run_sheet(params: dict[str, Any], profile: str | None = None) -> list[RunKey]:
    """Every run any study needs, each once (studies share runs)."""
    runs: dict[RunKey, None] = {}
    for study in params.get("studies", {}):
        runs.update(dict.fromkeys(study_runs(params, study, profile)))
    return list(runs)


def same_runs(specs: list[RunSpec]) -> dict[RunKey, RunKey]:
    """Runs whose resolved spec equals an earlier run's apart from the variant's name, mapped to
    that earlier run: training them again would only repeat it, so they are trained once."""
    first: dict[str, RunKey] = {}
    same: dict[RunKey, RunKey] = {}
    for spec in specs:
        key = RunKey(spec.task, spec.variant, spec.seed)
        body = spec.to_dict() | {"variant": ""}
        canonical = first.setdefault(json.dumps(body, sort_keys=True), key)
        if canonical != key:
            same[key] = canonical
    return same


def trained_runs(params: dict[str, Any], profile: str | None = None) -> list[RunSpec]:
    """The runs that are actually trained: the run sheet without the runs another one repeats."""
    specs = validate(params, profile)
    same = same_runs(specs)
    return [s for s in specs if RunKey(s.task, s.variant, s.seed) not in same]


def check_study_keys(name: str, study: dict[str, Any], paper: Paper) -> None:
    """Every key of a study is a generic one or one its kind's paper declares, and a paper's
    key holds what the paper's schema for it says; errors name the study and the key."""
    kind = study.get("kind", "accuracy")
    for key, value in study.items():
        if key in STUDY_KEYS:
            continue
        if key not in paper.study_keys:
            allowed = ", ".join([*STUDY_KEYS, *paper.study_keys])
            raise ConfigError(
                f"studies.{name}.{key}: unknown key for a study of kind {kind!r} (paper "
                f"{paper.name}); allowed keys: {allowed}"
            )
        error = best_match(Draft202012Validator(paper.study_keys[key]).iter_errors(value))
        if error is not None:
            where = "".join(f".{part}" for part in error.absolute_path)
            raise ConfigError(f"studies.{name}.{key}{where}: {error.message}")


def check_profile_studies(params: dict[str, Any]) -> None:
    """Each profile's ``studies`` block names studies, sets only PROFILE_STUDY_KEYS, and takes
    tasks and variants from the study's own lists (the study's table is the whole grid)."""
    studies = params.get("studies", {})
    for profile, block in params.get("profiles", {}).items():
        for name, own in (block.get("studies") or {}).items():
            where = f"profiles.{profile}.studies.{name}"
            check_name(name, tuple(studies), where)
            for key, values in (own or {}).items():
                check_name(key, PROFILE_STUDY_KEYS, f"{where}.{key}: key")
                if key == "seeds":
                    continue
                for value in values:
                    check_name(
                        value,
                        tuple(studies[name][key]),
                        f"{where}.{key}: {value!r} is not in studies.{name}.{key}, which",
                    )


def validate(params: dict[str, Any], profile: str | None = None) -> list[RunSpec]:
    """Resolve every run of the active profile; the first invalid key raises ConfigError."""
    unknown = set(params) - set(TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(
            f"{sorted(unknown)[0]}: unknown top-level key; valid keys are "
            f"{', '.join(TOP_LEVEL_KEYS)}"
        )
    profile = active_profile(params, profile)
    check_profile_variants(params)
    check_profile_studies(params)
    load_all()  # each paper registers its study kinds
    for name, study in params.get("studies", {}).items():
        kind = study.get("kind", "accuracy")
        check_name(kind, STUDY_KINDS.names(), f"studies.{name}.kind")
        paper = STUDY_KINDS.get(kind)
        check_study_keys(name, study, paper)
        for t in study["tasks"]:
            check_name(t, tuple(params["tasks"]), f"studies.{name}.tasks")
            check_data_spec(params, profile, t)
        for v in study["variants"]:
            check_name(v, tuple(params["variants"]), f"studies.{name}.variants")
        named = paper.named_variants(study)
        for v in [*named, *([study["baseline"]] if "baseline" in study else [])]:
            check_name(
                v,
                tuple(study["variants"]),
                f"studies.{name}: variant {v!r} is not in its variants list, which",
            )
    return [resolve(params, r.task, r.variant, r.seed, profile) for r in run_sheet(params, profile)]
