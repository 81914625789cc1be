"""Where to Add PDE Diffusion in Transformers: diffusion at seven insertion sites of the encoder.

The diffusion operator itself (pdelab.models.diffusion) and the sites (pdelab.models.transformer)
are part of the shared backbone; this package holds the paper's studies, claims, Layer I theory
checks and diagnostics. What is reproduced and what deviates: README.md beside this file.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pdelab.spec.plugins import Paper, register

# How the cost study times its steps (pdelab.plan.step_timing), unless its params.yaml block says
# otherwise under `timing:`. Kept here, torch-free, because the Snakefile reads them at parse
# time.
TIMING_DEFAULTS: dict[str, int] = {"repeats": 50, "warmup": 5, "batches": 8, "threads": 1}

# The keys this paper's studies may have besides every study's, with the JSON schema of each.
STUDY_KEYS: dict[str, dict[str, Any]] = {
    "diagnose": {
        "type": "boolean",
        "description": "measure roughness and commutators of its runs (rules.smk: diagnose)",
    },
    "grid": {
        "type": "object",
        "description": "multiscale: position -> {paper column: variant}",
        "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "timing": {
        "type": "object",
        "description": "cost: the interleaved step timing (one process, the cores to itself); "
        "unset settings take TIMING_DEFAULTS",
        "additionalProperties": False,
        "properties": {
            "repeats": {"type": "integer", "minimum": 6},  # fewer give no 95% interval
            "warmup": {"type": "integer", "minimum": 0},
            "batches": {"type": "integer", "minimum": 1},
            "threads": {"type": "integer", "minimum": 1},
        },
    },
}


def named_variants(study: dict[str, Any]) -> list[str]:
    """The variants a multiscale study's grid names."""
    return [v for scales in study.get("grid", {}).values() for v in scales.values()]


def table_variants(study: dict[str, Any]) -> list[str] | None:
    """A multiscale table has a cell per grid entry and the baseline's row; the other study
    kinds' tables have a row per variant (None)."""
    if study["kind"] != "multiscale":
        return None
    return [study.get("baseline", "baseline"), *named_variants(study)]


def timing_settings(study: dict[str, Any]) -> dict[str, int]:
    """A cost study's timing settings: the defaults, overridden by its `timing:` block."""
    return {**TIMING_DEFAULTS, **study.get("timing", {})}


@dataclass(frozen=True)
class CostTiming:
    """What the cost_timing rule times on one task: the variants of its cost studies (each
    once, params.yaml order), the baseline the ratios are over, the timing settings of its
    first cost study, and what the timing depends on in each variant's spec (so a change
    there reruns it while, say, a learning-rate change does not)."""

    variants: tuple[str, ...]
    baseline: str
    settings: dict[str, int]
    specs: str


def cost_timings(studies: Iterable[Any], params: dict[str, Any], profile: str) -> dict:
    """task -> its CostTiming, over the cost studies among ``studies`` (pdelab.spec.studies)."""
    from pdelab.spec.config import ConfigError, resolve

    cost = [s for s in studies if s.kind == "cost"]
    plans = {}
    for task in dict.fromkeys(t for s in cost for t in s.tasks):
        own = [s for s in cost if task in s.tasks]
        baselines = {s.baseline or "baseline" for s in own}
        if len(baselines) != 1:
            raise ConfigError(f"the cost studies of {task} name different baselines: {baselines}")
        variants = tuple(dict.fromkeys(v for s in own for v in s.variants))
        specs = {}
        for variant in variants:
            spec = resolve(params, task, variant, 0, profile).to_dict()
            specs[variant] = {k: spec[k] for k in ("model", "diffusion", "device")} | {
                k: spec["train"][k] for k in ("batch_size", "seq_len")
            }
        plans[task] = CostTiming(
            variants, baselines.pop(), timing_settings(own[0]), json.dumps(specs, sort_keys=True)
        )
    return plans


def cost_files(study: dict[str, Any]) -> list[str]:
    """The timing files (relative to results/) a cost study's table and claims read."""
    if study["kind"] != "cost":
        return []
    return [f"cost/{task}.parquet" for task in study["tasks"]]


def study_inputs(name: str, study: dict[str, Any]) -> list[str]:
    """Files (relative to results/) one study's table reads besides the summary: a cost study
    reads its interleaved step timing, never the training jobs' step times."""
    return cost_files(study)


def outputs(params: dict[str, Any]) -> list[str]:
    """The theory checks always; the diagnostics when a study asks for them (diagnose: true);
    the step timing of every cost study (REPORT.md's claims read it)."""
    studies = params.get("studies", {}).values()
    diagnosed = any(s.get("diagnose") for s in studies)
    timing = sorted({f for s in studies for f in cost_files(s)})
    return [
        "figures/theory.png",
        "tables/theory.md",
        "tables/theory.html",
        "tables/theory.csv",
        *(
            ["figures/diagnostics.png", "tables/diagnostics.md", "tables/diagnostics.html"]
            + ["tables/diagnostics.csv"]
            if diagnosed
            else []
        ),
        *timing,
    ]


PAPER = register(
    Paper(
        name="diffusion_positions",
        title="Where to Add PDE Diffusion in Transformers",
        study_kinds=("accuracy", "multiscale", "seeds", "cost"),
        study_keys=STUDY_KEYS,
        named_variants=named_variants,
        table_variants=table_variants,
        study_inputs=study_inputs,
        heatmap_kinds=("accuracy",),
        outputs=outputs,
    )
)
