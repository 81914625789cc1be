"""Fractional Neural Attention (Qu et al.): attention weights from a Lévy heat kernel.

Its kernels (``fna``, ``fna_reference``, ``fna_dp``) live in attention.py; their params.yaml
options are checked, torch-free, by options.py and registered here, with the paper's study
kinds: ``fna_accuracy`` (Tables I and III, the ViT of Fig 7), ``fna_shallow`` (Fig 3) and
``fna_ablation`` (the Q = K diagonal, the Laplace kernel). What is reproduced and what
deviates: README.md beside this file.
"""

from typing import Any

from pdelab.papers.fractional_attention.options import KERNEL_OPTIONS, check_options
from pdelab.spec.options import ATTENTION_OPTIONS, KernelOptions
from pdelab.spec.plugins import Paper, register

# Files under results/ that this paper's rules write (rules.smk) and its report reads. Kept
# here, torch- and pandas-free, because the Snakefile asks for them at parse time.
THEORY_OUTPUTS = {  # Figs 2a-c, no trained model (theory_report.py)
    "table": "tables/fna_theory.md",
    "page": "tables/fna_theory.html",  # the table as Snakemake's report shows it
    "tex": "tables/fna_theory.tex",
    "data": "tables/fna_theory.csv",  # the numbers, tidy (pdelab.report.tidy)
    "claims": "tables/fna_theory_claims.csv",  # the claims with verdicts the audit reads
    "spectrum": "figures/fna_spectrum.png",
    "toy_graph": "figures/fna_toy_graph.png",
}
RUNS_FILE = "fna/runs.parquet"  # every FNA run's resolved model (runs.py)
CURVES_FILE = "fna/curves.parquet"  # and its per-epoch history
TAIL_OUTPUTS = {  # z = dist / kappa in trained models (tail.py)
    "stats": "fna/tail.parquet",
    "histogram": "fna/tail_histogram.parquet",
    "table": "tables/fna_tail.md",
    "page": "tables/fna_tail.html",
    "tex": "tables/fna_tail.tex",
    "data": "tables/fna_tail.csv",
    "figure": "figures/fna_tail.png",
}
GRAPH_OUTPUTS = {  # Figs 4-5 on the trained one-layer models (graph_probe.py)
    "ablation": "fna/edge_ablation.parquet",
    "gaps": "fna/spectral_gaps.parquet",
    "hops": "fna/hops.parquet",
    "diffusion": "fna/diffusion_map.parquet",
    "table": "tables/fna_graphs.md",
    "page": "tables/fna_graphs.html",
    "tex": "tables/fna_graphs.tex",
    "data": "tables/fna_graphs.csv",
    "ablation_figure": "figures/fna_edge_ablation.png",
    "graph_figure": "figures/fna_graphs.png",
}
# How the z probe and the audit read z: the tail of (1 + z)^-(d_M + alpha) begins near z = 1,
# where its log-weights leave exp(-(d_M + alpha) z) by (d_M + alpha)(z - log1p z); rows within
# this total variation of the Laplace kernel's are that kernel in effect; and a layer uses the
# tail when this share of its (query, key) pairs lies beyond z = 1.
TAIL_Z, NEAR_Z = 1.0, 0.1
TV_LAPLACE = 0.05
TAIL_SHARE = 0.01

# The keys this paper's studies may have besides every study's, with the JSON schema of each.
STUDY_KEYS: dict[str, dict[str, Any]] = {
    "rows": {
        "type": "object",
        "description": "fna_accuracy: the paper table's row (fna, la, dp, op_fna, ...) -> our "
        "variant; a variant in no row is ours only",
        "additionalProperties": {"type": "string"},
    },
    "metric": {
        "enum": ["test_acc", "test_bleu"],
        "description": "fna_accuracy: the result column the table reports (default test_acc; "
        "test_bleu: greedy-decoding corpus BLEU, Table II)",
    },
    "tail_probe": {
        "type": "array",
        "description": "variants (alpha < 2) whose trained models' z = dist / kappa is measured",
        "items": {"type": "string"},
    },
    "ablations": {
        "type": "object",
        "description": "fna_ablation: name -> {reference: the variant as the paper describes "
        "it, ablated: the variant that changes one thing}",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "required": ["reference", "ablated"],
            "properties": {"reference": {"type": "string"}, "ablated": {"type": "string"}},
        },
    },
}
STUDY_KINDS = ("fna_accuracy", "fna_shallow", "fna_ablation")


def named_variants(study: dict[str, Any]) -> list[str]:
    """The variants a study's rows, ablations and tail probe name."""
    pairs = [v for pair in study.get("ablations", {}).values() for v in pair.values()]
    return [*study.get("rows", {}).values(), *pairs, *study.get("tail_probe", [])]


def probes_tail(params: dict[str, Any]) -> bool:
    return any(s.get("tail_probe") for s in params.get("studies", {}).values())


def probes_graphs(params: dict[str, Any]) -> bool:
    """Figs 4-5 read the trained models of the shallow study (Fig 3's)."""
    return any(s["kind"] == "fna_shallow" for s in params.get("studies", {}).values())


def outputs(params: dict[str, Any]) -> list[str]:
    """Figs 2a-c always; every FNA run's model and curves (the studies read them); the z
    probe when a study asks for one; Figs 4-5 when the shallow study runs."""
    files = [*THEORY_OUTPUTS.values(), RUNS_FILE, CURVES_FILE]
    files += list(TAIL_OUTPUTS.values()) if probes_tail(params) else []
    return files + (list(GRAPH_OUTPUTS.values()) if probes_graphs(params) else [])


def study_inputs(name: str, study: dict[str, Any]) -> list[str]:
    """Each table reads the resolved models (d, L, alpha of a Fig 3 cell come from the spec
    that was trained, not from the variant's name) and the curves."""
    return [RUNS_FILE, CURVES_FILE]


PAPER = register(
    Paper(
        name="fractional_attention",
        title="Fractional neural attention for efficient multiscale sequence processing",
        study_kinds=STUDY_KINDS,
        study_keys=STUDY_KEYS,
        named_variants=named_variants,
        outputs=outputs,
        study_inputs=study_inputs,
        mechanisms=("attention",),
    )
)

for _kernel, _names in KERNEL_OPTIONS.items():
    ATTENTION_OPTIONS.register(_kernel)(
        KernelOptions(_names, check_options, f"{PAPER.package}.attention")
    )
