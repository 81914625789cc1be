# Linear Diffusion Networks: what every run of its studies trained (terms, parameters, FLOPs;
# the tables read it) and the theory checks (random kernels and the trained models of each
# study's theory_probe variants).
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names
# (config, PROFILE, RUN_DIR, SAME_RUN, SPECS). Names here are global to the workflow: LDN_ prefix.

from pdelab.papers.linear_diffusion import (
    MODELS_FILE as LDN_MODELS_FILE,
    STUDY_KINDS as LDN_KINDS,
    THEORY_OUTPUTS as LDN_THEORY_OUTPUTS,
    reference_dims,
)
from pdelab.spec.run_sheet import pairs, trained_folders

LDN_DIR = "src/pdelab/papers/linear_diffusion"
LDN_STUDIES = [s for s in STUDIES.values() if s.kind in LDN_KINDS]


# "task/variant/seed" -> the folder trained for it: every LDN study's runs, and those of each
# study's theory_probe variants; the image study's reference widths
LDN_RUNS = trained_folders(LDN_STUDIES, SAME_RUN, RUN_DIR, PROFILE)
LDN_PROBED_RUNS = trained_folders(LDN_STUDIES, SAME_RUN, RUN_DIR, PROFILE, probe="theory_probe")
LDN_REFERENCE_DIMS = reference_dims(LDN_STUDIES, SPECS)


LDN_MODELS_INPUTS = [
    *(f"{d}/run.json" for d in sorted(set(LDN_RUNS.values()))),
    *sorted({f"data/{PROFILE}/prepared/{k.split('/')[0]}/manifest.json" for k in LDN_RUNS}),
]
LDN_MODELS_STAMP = stamped(
    "ldn_models",
    code=["pdelab.papers.linear_diffusion.models", "pdelab.papers.linear_diffusion.layer"],
    inputs=LDN_MODELS_INPUTS,
    pairs=pairs(LDN_RUNS),
    dims=LDN_REFERENCE_DIMS,
)


rule ldn_models:
    """Each LDN-study run's terms, parameters and FLOPs (one forward pass, counted)."""
    input:
        LDN_MODELS_INPUTS,
        stamp=LDN_MODELS_STAMP,
    output:
        f"results/{LDN_MODELS_FILE}",
    params:
        pairs=pairs(LDN_RUNS),
        dims=LDN_REFERENCE_DIMS,
    log:
        "results/logs/ldn_models.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.runtime.warm pdelab.papers.linear_diffusion.models "
        "--out {output} {params.dims} {params.pairs} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(LDN_MODELS_STAMP, rules.ldn_models.output)
LDN_THEORY_INPUTS = [
    *(f"{d}/{f}" for d in sorted(set(LDN_PROBED_RUNS.values())) for f in RECORD_FILES),
    *sorted({f"data/{PROFILE}/prepared/{k.split('/')[0]}/manifest.json" for k in LDN_PROBED_RUNS}),
]
LDN_THEORY_STAMP = stamped(
    "ldn_theory",
    code=["pdelab.papers.linear_diffusion.theory_report", "pdelab.papers.linear_diffusion.layer"],
    inputs=LDN_THEORY_INPUTS,
    pairs=pairs(LDN_PROBED_RUNS),
)


rule ldn_theory:
    """Row sums, Theorem 1, A.4's norm, mass drift and FLOPs in T on random kernels, and the
    same measures in the trained models of every theory_probe variant."""
    input:
        LDN_THEORY_INPUTS,
        stamp=LDN_THEORY_STAMP,
    output:  # LDN_THEORY_OUTPUTS (tests/test_ldn_theory.py keeps them equal)
        table=report_paper("results/tables/ldn_theory.md", "linear_diffusion", "theory", "theory"),
        page=report_paper("results/tables/ldn_theory.html", "linear_diffusion", "theory", "theory"),
        tex=report_paper("results/tables/ldn_theory.tex", "linear_diffusion", "theory", "theory"),
        data=report_paper("results/tables/ldn_theory.csv", "linear_diffusion", "theory", "theory"),
        # the claims with verdicts, what the audit reads (a download in the report)
        claims=report_paper("results/tables/ldn_theory_claims.csv", "linear_diffusion", "theory", "theory"),
        measures="results/ldn/theory.parquet",
        figure=report_paper("results/figures/ldn_theory.png", "linear_diffusion", "theory",
                            "theory"),
    params:
        pairs=pairs(LDN_PROBED_RUNS),
    log:
        "results/logs/ldn_theory.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.runtime.warm "
        "pdelab.papers.linear_diffusion.theory_report --out-dir results --profile {PROFILE} {params.pairs} > {log} 2>&1 "
        "&& python -m pdelab.records.made {input.stamp} {output}"


produces(LDN_THEORY_STAMP, rules.ldn_theory.output)
