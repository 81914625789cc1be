"""Continuous-Time Attention (arXiv 2505.20666): attention evolved in pseudo-time by a PDE.

Its attention kernels (``pde``, ``pde_reference``, ``longformer``, ``pde_longformer``) live in
attention.py; their params.yaml options are checked, torch-free, by options.py and registered
here. What is reproduced and what deviates: README.md beside this file.
"""

from typing import Any

from pdelab.papers.continuous_time_attention.options import KERNEL_OPTIONS, check_stability
from pdelab.spec.options import ATTENTION_OPTIONS, KernelOptions
from pdelab.spec.plugins import Paper, register

# The keys this paper's studies may have besides every study's, with the JSON schema of each.
STUDY_KEYS: dict[str, dict[str, Any]] = {
    "columns": {
        "type": "object",
        "description": "pde_classification: the paper's column -> our variant",
        "additionalProperties": {"type": "string"},
    },
    "key": {"type": "string", "description": "lm, lm_seq_len: the paper table's row-key column"},
    "rows": {
        "type": "object",
        "description": "lm, lm_seq_len: paper row key -> {as_described, leak_free[, standard]}",
        "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def named_variants(study: dict[str, Any]) -> list[str]:
    """The variants a study's table rows (language models) or paper columns name."""
    rows = [v for row in study.get("rows", {}).values() for v in row.values()]
    return rows + list(study.get("columns", {}).values())


def table_variants(study: dict[str, Any]) -> list[str] | None:
    """A language-model table has a row per entry of its rows; a classification table has a
    column per variant (None)."""
    if "rows" not in study:
        return None
    return [v for row in study["rows"].values() for v in row.values()]


PAPER = register(
    Paper(
        name="continuous_time_attention",
        title="Continuous-Time Attention",
        study_kinds=("pde_classification", "lm", "lm_seq_len"),
        study_keys=STUDY_KEYS,
        named_variants=named_variants,
        table_variants=table_variants,
        mechanisms=("attention",),
    )
)

for _kernel, _names in KERNEL_OPTIONS.items():
    ATTENTION_OPTIONS.register(_kernel)(
        KernelOptions(_names, check_stability, f"{PAPER.package}.attention")
    )
