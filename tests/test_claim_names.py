"""Each claim is named as the paper names things: built from the golden summary and params
(tests/golden), no claim name of the papers they hold studies of carries a task or variant
identifier of ours (FNA's and LDN's, which the golden params hold no study of, are checked in
their own tests on synthetic runs)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest

from conftest import named_by_identifiers
from pdelab.report.context import ReportContext
from pdelab.spec.config import active_profile, load_params
from pdelab.spec.studies import studies_of

GOLDEN = Path(__file__).parent / "golden"

# paper -> names its claims must include, as the paper writes them
EXPECTED = {
    "continuous_time_attention": [
        "(diffusion, wave, reaction-diffusion, advection-diffusion)",
        "(e) PDE-Longformer beats Longformer on WikiText-103",
    ],
    "diffusion_positions": [
        *(
            f"{p} improves on the baseline over seeds (ListOps)"
            for p in ("After Embedding (P1)", "After MLP (P2)", "Layer Diffusion (P3)")
        ),
        *(
            f"step-time overhead of {v}"
            for v in ("After Embedding (P1)", "After MLP (P2)", "multi-scale After Embedding")
        ),
    ],
}


def golden_context() -> tuple[ReportContext, dict]:
    params = load_params(GOLDEN / "params.yaml")
    profile = active_profile(params, None)
    summary = pd.read_parquet(GOLDEN / "summary.parquet")
    summary = summary[summary["profile"] == profile]
    studies = studies_of(params, profile)
    runs = {name: s.run_keys for name, s in studies.items()}
    return ReportContext(summary, studies, profile, GOLDEN / "no-results", runs), params


@pytest.mark.slow  # every claim of the golden report, per paper
@pytest.mark.parametrize("paper", list(EXPECTED))
def test_no_claim_is_named_by_an_identifier_of_ours(paper: str) -> None:
    ctx, params = golden_context()
    claims = importlib.import_module(f"pdelab.papers.{paper}.report").claims(ctx)
    assert len(claims) > 20
    assert not named_by_identifiers(claims, params)
    names = [c.claim for c in claims]
    for expected in EXPECTED[paper]:
        assert any(expected in n for n in names), expected
