# Linear Diffusion Networks: what every run of its studies trained (terms, parameters, FLOPs;
# the tables read it) and the theory checks (random kernels and the trained models of each
# study's theory_probe variants).
# Included by the Snakefile when params.yaml has a study of this paper; uses common.smk's names
# (config, PROFILE, RUN_DIR, SAME_RUN, SPECS). Names here are global to the workflow: ldn_ prefix.

from pdelab.papers.linear_diffusion import (
    MODELS_FILE as LDN_MODELS_FILE,
    STUDY_KINDS as LDN_KINDS,
    THEORY_OUTPUTS as LDN_THEORY_OUTPUTS,
)
from pdelab.run_sheet import study_runs

LDN_DIR = "src/pdelab/papers/linear_diffusion"
LDN_STUDIES = [s for s, c in config["studies"].items() if c.get("kind", "accuracy") in LDN_KINDS]


def ldn_runs(probe_only=False):
    """task/variant/seed -> the folder of the run trained for it (a variant whose spec repeats
    another's reads that one's), over the LDN studies as this profile runs them; with
    probe_only, the runs of each study's theory_probe variants."""
    found = {}
    for name in LDN_STUDIES:
        probed = set(config["studies"][name].get("theory_probe", []))
        for r in study_runs(config, name, PROFILE):
            if probe_only and r.variant not in probed:
                continue
            trained = SAME_RUN.get((r.task, r.variant, r.seed), r.variant)
            found[f"{r.task}/{r.variant}/{r.seed}"] = RUN_DIR.format(
                profile=PROFILE, task=r.task, variant=trained, seed=r.seed
            )
    return found


def ldn_reference_dims():
    """task/variant -> the width of its image study's reference model (the first row), at
    which each other row of the study is counted again."""
    dims = {}
    for name in LDN_STUDIES:
        cfg = config["studies"][name]
        if cfg.get("kind") != "ldn_image":
            continue
        reference, *others = cfg["rows"].values()
        for r in study_runs(config, name, PROFILE):
            if r.variant == reference:
                dim = SPECS[(r.task, r.variant, r.seed)].model.dim
                dims.update({f"{r.task}/{v}": dim for v in others})
    return " ".join(f"--reference-dim {k}={d}" for k, d in sorted(dims.items()))


def ldn_pairs(runs):
    return " ".join(f"{key}={folder}" for key, folder in runs.items())


rule ldn_models:
    """Each LDN-study run's terms, parameters and FLOPs (one forward pass, counted)."""
    input:
        records=[f"{d}/run.json" for d in sorted(set(ldn_runs().values()))],
        data=sorted({f"data/{PROFILE}/prepared/{k.split('/')[0]}/manifest.json"
                     for k in ldn_runs()}),
        code=[f"{LDN_DIR}/models.py", f"{LDN_DIR}/layer.py"],
    output:
        f"results/{LDN_MODELS_FILE}",
    params:
        pairs=ldn_pairs(ldn_runs()),
        dims=ldn_reference_dims(),
    log:
        "results/logs/ldn_models.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.warm pdelab.papers.linear_diffusion.models "
        "--out {output} {params.dims} {params.pairs} > {log} 2>&1"


rule ldn_theory:
    """Row sums, Theorem 1, A.4's norm, mass drift and FLOPs in T on random kernels, and the
    same measures in the trained models of every theory_probe variant."""
    input:
        records=[f"{d}/result.parquet" for d in sorted(set(ldn_runs(True).values()))],
        data=sorted({f"data/{PROFILE}/prepared/{k.split('/')[0]}/manifest.json"
                     for k in ldn_runs(True)}),
        code=[f"{LDN_DIR}/{m}.py" for m in ("theory", "theory_report", "layer")],
    output:  # LDN_THEORY_OUTPUTS (tests/test_ldn_theory.py keeps them equal)
        table=report_paper("results/tables/ldn_theory.md", "linear_diffusion", "theory", "theory"),
        tex=report_paper("results/tables/ldn_theory.tex", "linear_diffusion", "theory", "theory"),
        claims=report_paper("results/tables/ldn_theory.csv", "linear_diffusion", "theory",
                            "theory"),
        measures="results/ldn/theory.parquet",
        figure=report_paper("results/figures/ldn_theory.png", "linear_diffusion", "theory",
                            "theory"),
    params:
        pairs=ldn_pairs(ldn_runs(True)),
    log:
        "results/logs/ldn_theory.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m pdelab.warm "
        "pdelab.papers.linear_diffusion.theory_report --out-dir results --profile {PROFILE} {params.pairs} > {log} 2>&1"
