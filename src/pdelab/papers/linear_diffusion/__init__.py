"""Linear Diffusion Networks (Fein-Ashley): sequence layers as explicit diffusion steps.

Its layer is an encoder block (``model.block: ldn``) in layer.py; its params.yaml options
(``model.block_options``) are checked, torch-free, by options.py and registered here, with the
paper's study kinds: ``ldn_lra`` (Table 2), ``ldn_image`` (Table 1's offline stand-in) and
``ldn_ablation`` (the ablations the paper implies). What is reproduced and what deviates, and
every choice where the paper is silent or contradicts itself: README.md.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from pdelab.papers.linear_diffusion.options import BLOCK, OPTION_NAMES, check_options
from pdelab.spec.options import BLOCK_OPTIONS, KernelOptions
from pdelab.spec.plugins import Paper, register

# Files under results/ that this paper's rules write (rules.smk) and its report reads. Kept
# here, torch- and pandas-free, because the Snakefile asks for them at parse time.
MODELS_FILE = "ldn/models.parquet"  # each run's model: terms, parameters, FLOPs (models.py)
THEORY_OUTPUTS = {  # row sums, Theorem 1, A.4's norm, mass drift, cost in T (theory_report.py)
    "table": "tables/ldn_theory.md",
    "page": "tables/ldn_theory.html",  # the table as Snakemake's report shows it
    "tex": "tables/ldn_theory.tex",
    "data": "tables/ldn_theory.csv",  # the numbers, tidy (pdelab.report.tidy)
    "claims": "tables/ldn_theory_claims.csv",  # the claims with verdicts the audit reads
    "measures": "ldn/theory.parquet",
    "figure": "figures/ldn_theory.png",
}
STUDY_KINDS = ("ldn_lra", "ldn_image", "ldn_ablation")

# The keys this paper's studies may have besides every study's, with the JSON schema of each.
STUDY_KEYS: dict[str, dict[str, Any]] = {
    "rows": {
        "type": "object",
        "description": "the paper table's row (transformer, ldn, vit, ...) -> our variant",
        "additionalProperties": {"type": "string"},
    },
    "columns": {
        "type": "object",
        "description": "ldn_lra: the paper table's column (listops, byte_level, ...) -> our "
        "task; a column in no entry has no task of ours, a task in none is ours only",
        "additionalProperties": {"type": "string"},
    },
    "theory_probe": {
        "type": "array",
        "description": "variants whose trained models' kernels the theory checks measure "
        "(row sums, global dependency, norm, mass drift)",
        "items": {"type": "string"},
    },
}


def named_variants(study: dict[str, Any]) -> list[str]:
    """The variants a study's rows and theory probe name."""
    return [*study.get("rows", {}).values(), *study.get("theory_probe", [])]


def table_variants(study: dict[str, Any]) -> list[str] | None:
    """The LRA and image tables have a row per entry of their rows; the ablation table has
    one per variant (None)."""
    return list(study["rows"].values()) if "rows" in study else None


def reference_dims(studies: Iterable[Any], specs: Mapping[tuple[str, str, int], Any]) -> str:
    """ "--reference-dim task/variant=d ...": each image study's reference width (its first
    row's model.dim), at which each other row of the study is counted again."""
    dims = {}
    for study in studies:
        if study.kind != "ldn_image":
            continue
        reference, *others = study["rows"].values()
        for r in study.runs:
            if r.variant == reference:
                dim = specs[(r.task, r.variant, r.seed)].model.dim
                dims.update({f"{r.task}/{v}": dim for v in others})
    return " ".join(f"--reference-dim {k}={d}" for k, d in sorted(dims.items()))


def has_studies(params: dict[str, Any]) -> bool:
    return any(s["kind"] in STUDY_KINDS for s in params.get("studies", {}).values())


def outputs(params: dict[str, Any]) -> list[str]:
    """The theory checks and every LDN study's models (their tables read them)."""
    return [*THEORY_OUTPUTS.values(), MODELS_FILE] if has_studies(params) else []


def study_inputs(name: str, study: dict[str, Any]) -> list[str]:
    """Each table reads what every run trained (the terms of an ablation, parameters and
    FLOPs) from the run records, not from the variant's name."""
    return [MODELS_FILE]


PAPER = register(
    Paper(
        name="linear_diffusion",
        title="Linear Diffusion Networks: Harnessing Diffusion Processes for Global Interactions",
        study_kinds=STUDY_KINDS,
        study_keys=STUDY_KEYS,
        named_variants=named_variants,
        table_variants=table_variants,
        outputs=outputs,
        study_inputs=study_inputs,
        mechanisms=("layer",),
    )
)

BLOCK_OPTIONS.register(BLOCK)(KernelOptions(OPTION_NAMES, check_options, f"{PAPER.package}.layer"))
