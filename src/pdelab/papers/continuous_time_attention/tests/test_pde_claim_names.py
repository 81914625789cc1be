"""Each claim is named as the paper names things: built from the golden summary and params
(tests/golden), no claim name carries a task or variant identifier of ours."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from pdelab.papers.continuous_time_attention import report
from pdelab.report.context import ReportContext
from pdelab.spec.config import active_profile, load_params
from pdelab.spec.studies import studies_of

GOLDEN = Path(__file__).resolve().parents[5] / "tests" / "golden"


def golden_context() -> tuple[ReportContext, set[str]]:
    """The report's context on the golden files, and params' task and variant identifiers
    (those with an underscore: a word the paper never writes)."""
    params = load_params(GOLDEN / "params.yaml")
    profile = active_profile(params, None)
    summary = pd.read_parquet(GOLDEN / "summary.parquet")
    summary = summary[summary["profile"] == profile]
    studies = studies_of(params, profile)
    runs = {name: s.run_keys for name, s in studies.items()}
    ctx = ReportContext(summary, studies, profile, GOLDEN / "no-results", runs)
    identifiers = {n for n in (*params["tasks"], *params["variants"]) if "_" in n}
    return ctx, identifiers


@pytest.mark.slow  # every claim of the golden report
def test_no_claim_is_named_by_an_identifier_of_ours() -> None:
    ctx, identifiers = golden_context()
    claims = report.claims(ctx)
    assert len(claims) > 20 and identifiers
    named = {
        c.claim: found
        for c in claims
        if (found := identifiers & set(re.findall(r"[A-Za-z0-9_]+", c.claim)))
    }
    assert not named
    names = [c.claim for c in claims]
    assert any("(diffusion, wave, reaction-diffusion, advection-diffusion)" in n for n in names)
    assert any(n.startswith("(e) PDE-Longformer beats Longformer on WikiText-103") for n in names)
