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
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pdelab.spec import task_kinds
from pdelab.spec.config import (
    TOP_LEVEL_KEYS,
    ConfigError,
    RunSpec,
    active_profile,
    check_name,
    check_profile_variants,
    resolve,
)
from pdelab.spec.data import TASK_DATA, data_spec
from pdelab.spec.fields import finite
from pdelab.spec.plugins import STUDY_KINDS, Paper
from pdelab.spec.studies import (
    PROFILE_STUDY_KEYS,
    STUDY_KEYS,
    RunKey,
    Study,
    studies_of,
    study_kind,
)


def run_sheet(params: dict[str, Any], profile: str | None = None) -> list[RunKey]:
    """Every run any study needs, each once (studies share runs)."""
    runs: dict[RunKey, None] = {}
    for study in studies_of(params, profile).values():
        runs.update(dict.fromkeys(study.runs))
    return list(runs)


RUNS = Path("results/runs")  # the run folders, relative to the workflow's directory


def run_json(runs: Path, spec: RunSpec) -> Path:
    """Where a run's record is: ``<runs>/<profile>/<task>/<variant>/seed<N>/run.json``."""
    return runs / spec.profile / spec.task / spec.variant / f"seed{spec.seed}" / "run.json"


def holds(runs: Path, spec: RunSpec) -> bool:
    """Whether a run's folder already holds a run of this spec (read as this code reads a spec,
    so a record written in an older form of the same spec counts)."""
    try:
        recorded = json.loads(run_json(runs, spec).read_text())["spec"]
        return RunSpec.from_dict(recorded).to_json() == spec.to_json()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def same_runs(specs: list[RunSpec], runs: Path | str = RUNS) -> dict[RunKey, RunKey]:
    """Runs whose resolved spec equals another's apart from the variant's name, mapped to the
    one of them that is trained: training them again would only repeat it. The trained one
    does not depend on the order of the params files (moving a block retrains nothing): the
    run whose folder under ``runs`` already holds the spec, else the first by variant name."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in specs:
        body = json.dumps(spec.to_dict() | {"variant": ""}, sort_keys=True)
        groups.setdefault(body, []).append(spec)
    same: dict[RunKey, RunKey] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        by_name = sorted(group, key=lambda spec: spec.variant)
        trained = [spec for spec in by_name if holds(Path(runs), spec)]
        chosen = (trained or by_name)[0]
        canonical = RunKey(chosen.task, chosen.variant, chosen.seed)
        for spec in group:
            if spec is not chosen:
                same[RunKey(spec.task, spec.variant, spec.seed)] = canonical
    return same


def trained_folders(
    studies: Iterable[Study],
    same_run: Mapping[tuple[str, str, int], str],
    run_dir: str,
    profile: str,
    probe: str | None = None,
) -> dict[str, str]:
    """ "task/variant/seed" -> the folder of the run trained for it (a variant whose spec repeats
    another's reads that one's), over these studies as the run profile runs them; with
    ``probe``, only the variants each study lists under that key."""
    found = {}
    for study in studies:
        probed = set(study.get(probe, [])) if probe else None
        for r in study.runs:
            if probed is not None and r.variant not in probed:
                continue
            trained = same_run.get((r.task, r.variant, r.seed), r.variant)
            folder = run_dir.format(profile=profile, task=r.task, variant=trained, seed=r.seed)
            found[f"{r.task}/{r.variant}/{r.seed}"] = folder
    return found


def pairs(folders: Mapping[str, str]) -> str:
    """ "task/variant/seed=folder ..." for a command line."""
    return " ".join(f"{key}={folder}" for key, folder in folders.items())


def trained_runs(params: dict[str, Any], profile: str | None = None) -> list[RunSpec]:
    """The runs that are actually trained: the run sheet without the runs another one repeats."""
    specs = validate(params, profile)
    same = same_runs(specs)
    return [s for s in specs if RunKey(s.task, s.variant, s.seed) not in same]


def check_study_keys(name: str, study: dict[str, Any], kind: str, paper: Paper) -> None:
    """Every key of a study is a generic one or one its study kind's paper declares, and a
    paper's key holds what the paper's schema for it says; errors name the study and the key."""
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


SEED_RANGE = (0, 2**32 - 1)  # what numpy's and torch's generators take
MAX_SEEDS = 1_000  # seeds in one list: each is a run of every task and variant it names
SIZES = ("n_train", "n_val", "n_test")  # a data spec's split sizes: an empty split trains nothing


def check_seeds(seeds: Any, where: str) -> None:
    """A list of at most MAX_SEEDS integer seeds in SEED_RANGE, none twice (the count first: a
    list of a million seeds is refused at once rather than resolved run by run)."""
    low, high = SEED_RANGE
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{where}: expected a list of seeds, got {seeds!r}")
    if len(seeds) > MAX_SEEDS:
        raise ConfigError(
            f"{where}: {len(seeds):,} seeds; a list holds at most {MAX_SEEDS:,} (each seed is a "
            "run of every task and variant of its study)"
        )
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high:
            raise ConfigError(
                f"{where}: seed {seed!r} is not an integer from {low} to {high}; use one"
            )
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}: a seed is given twice in {seeds}")


def check_profiles(params: dict[str, Any]) -> None:
    """What every run profile names exists: its tasks' layers name tasks, its data blocks
    registered tasks, its seeds are seeds, its learning rule a variant; an unknown name would
    be ignored silently, whichever profile is active."""
    tasks, variants = tuple(params.get("tasks", {})), tuple(params.get("variants", {}))
    for profile, block in params.get("profiles", {}).items():
        for task in block.get("tasks") or {}:
            check_name(task, tasks, f"profiles.{profile}.tasks.{task}: task")
        if "seeds" in block:
            check_seeds(block["seeds"], f"profiles.{profile}.seeds")
        for name, own in (block.get("studies") or {}).items():
            if "seeds" in (own or {}):
                check_seeds(own["seeds"], f"profiles.{profile}.studies.{name}.seeds")
        learning = block.get("learning") or {}
        if "variant" in learning:
            check_name(learning["variant"], variants, f"profiles.{profile}.learning.variant")
        check_learning(learning, f"profiles.{profile}.learning")
    for profile, block in (params.get("data") or {}).items():
        for task in block or {}:
            check_name(task, tuple(TASK_DATA.in_order()), f"data.{profile}: task")


# profiles.<profile>.learning's numbers (pdelab.report.learning.LearningRule): each key's
# range, (low, high, whether low itself is allowed, whether the key counts)
LEARNING_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "min_gain": (0.0, 1.0, True, False),  # accuracy over the majority rate, as a fraction
    "min_test_items": (1, math.inf, True, True),
    "max_ppl_ratio": (0.0, 1.0, False, False),  # at most the unigram perplexity
    "min_bleu_gain": (0.0, 100.0, True, False),  # BLEU points
}


def check_learning(learning: Mapping[str, Any], where: str) -> None:
    """The learning rule's numbers are numbers in their range: a NaN or a bound no score can
    meet would pass or fail every task whatever it learned."""
    for key, (low, high, low_allowed, whole) in LEARNING_RANGES.items():
        if key not in learning:
            continue
        value = learning[key]
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if whole:
            number = number and float(value).is_integer()
        inside = number and (low <= value if low_allowed else low < value) and value <= high
        if not inside:
            kind = "a whole number" if whole else "a number"
            bounds = f"{'[' if low_allowed else '('}{low:g}, {high:g}]"
            raise ConfigError(f"{where}.{key}: expected {kind} in {bounds}, got {value!r}")


def check_finite(node: Any, where: str) -> None:
    """No number anywhere in the params is a NaN or an infinity (YAML's .nan, .inf): no key
    means one, and a comparison with a NaN is false, so it would switch a check off silently.
    The error names the key (the caller's Sources.locate adds its file)."""
    if isinstance(node, dict):
        for key, value in node.items():
            check_finite(value, f"{where}.{key}")
    elif isinstance(node, list) and all(not isinstance(v, dict | list) for v in node):
        if not finite(node):
            raise ConfigError(
                f"{where}: expected a finite number in every item, got {node!r}; write numbers"
            )
    elif isinstance(node, list):
        for index, value in enumerate(node):
            check_finite(value, f"{where}[{index}]")
    elif not finite(node):
        raise ConfigError(f"{where}: expected a finite number, got {node!r}; write a number")


def check_data_sizes(params: dict[str, Any], profile: str, task: str) -> None:
    """A task's splits are not empty (n_train, n_val, n_test > 0 where its spec has them)."""
    spec = data_spec(params, profile, task)
    for size in SIZES:
        value = getattr(spec, size, 1)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"data.{profile}.{task}.{size}: must be at least 1, got {value!r}")


def check_paper_table(name: str, study: dict[str, Any], paper: Paper) -> None:
    """A study's paper_table is a file of its paper's paper_tables/."""
    table = study.get("paper_table")
    if table and not (paper.folder / "paper_tables" / table).is_file():
        shipped = sorted(p.name for p in (paper.folder / "paper_tables").glob("*.csv"))
        raise ConfigError(
            f"studies.{name}.paper_table: {table!r} is not in {paper.name}'s paper_tables/; "
            f"it has: {', '.join(shipped) or '(none)'}"
        )


def validate(params: dict[str, Any], profile: str | None = None) -> list[RunSpec]:
    """Resolve every run of the active profile; the first invalid key raises ConfigError."""
    unknown = set(params) - set(TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(
            f"{sorted(unknown)[0]}: unknown top-level key; valid keys are "
            f"{', '.join(TOP_LEVEL_KEYS)}"
        )
    for key, value in params.items():
        check_finite(value, str(key))
    profile = active_profile(params, profile)
    check_profile_variants(params)
    check_profile_studies(params)
    check_profiles(params)
    for name, study in params.get("studies", {}).items():
        kind = study_kind(name, study)  # params.yaml states it; each paper registers its own
        paper = STUDY_KINDS.get(kind)
        check_study_keys(name, study, kind, paper)
        check_paper_table(name, study, paper)
        if "seeds" in study:
            check_seeds(study["seeds"], f"studies.{name}.seeds")
        for t in study["tasks"]:
            check_name(t, tuple(params["tasks"]), f"studies.{name}.tasks")
            check_data_sizes(params, profile, t)
        for v in study["variants"]:
            check_name(v, tuple(params["variants"]), f"studies.{name}.variants")
        named = paper.named_variants(study)
        for v in [*named, *([study["baseline"]] if "baseline" in study else [])]:
            check_name(
                v,
                tuple(study["variants"]),
                f"studies.{name}: variant {v!r} is not in its variants list, which",
            )
    specs = [
        resolve(params, r.task, r.variant, r.seed, profile) for r in run_sheet(params, profile)
    ]
    for spec in specs:  # each run's options against its task kind, before any job starts
        task_kinds.check(spec)
    return specs
