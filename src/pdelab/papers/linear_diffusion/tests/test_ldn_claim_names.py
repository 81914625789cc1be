"""The audit's rows are named as the paper names things: no task or variant identifier of
ours in a claim's name. Built from every run of the paper's studies in the smoke profile at
synthetic accuracies (the golden params hold no study of this paper)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from conftest import named_by_identifiers
from pdelab.papers.linear_diffusion import PAPER
from pdelab.papers.linear_diffusion.audit import IMAGE_TASK_NAMES, audit_claims
from pdelab.report.context import ReportContext
from pdelab.spec.studies import study

STUDIES = ("ldn_lra", "ldn_image", "ldn_ablations")


def smoke_context(params: dict, results: Path) -> ReportContext:
    """Every smoke run of the studies, at 0.60 + 0.01 per seed."""
    studies = {n: study(params, n, "smoke") for n in STUDIES}
    keys = {n: {(r.task, r.variant, r.seed) for r in list(s.runs)} for n, s in studies.items()}
    rows = [
        {
            "task": t,
            "variant": v,
            "seed": s,
            "profile": "smoke",
            "status": "ok",
            "test_acc": 0.6 + 0.01 * s,
            "stand_in": "",
            "same_run_as": "",
        }  # fmt: skip
        for t, v, s in sorted(set().union(*keys.values()))
    ]
    return ReportContext(pd.DataFrame(rows), studies, "smoke", results, keys)


def test_no_claim_is_named_by_an_identifier_of_ours(params, tmp_path) -> None:
    claims = audit_claims(smoke_context(params, tmp_path), PAPER.study_kinds)
    assert len(claims) > 10
    assert not named_by_identifiers(claims, params)
    image = [c.claim for c in claims if c.claim.startswith("LDN trails ViT")]
    tasks = study(params, "ldn_image", "smoke")["tasks"]
    assert image == [
        f"LDN trails ViT by about 0.5 top-1, with fewer parameters and FLOPs "
        f"({IMAGE_TASK_NAMES[t]})"
        for t in tasks
    ]
