"""The audit's rows are named as the paper names things (no task or variant identifier of
ours), the tail rows read the share of pairs beyond z = 1 against its threshold, one row per
probed model, and Fig 2a's fit ranges are its readings. Run verdicts come from synthetic
per-seed numbers on the paper profile (the golden params hold no study of this paper)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from conftest import named_by_identifiers
from pdelab.papers.fractional_attention import TAIL_OUTPUTS, TAIL_SHARE, THEORY_OUTPUTS, audit
from pdelab.report.claims import AMBIGUOUS, FAILS, HOLDS, Reading, readings_cell
from pdelab.report.context import ReportContext
from pdelab.spec.studies import study

STUDIES = ("fna_imdb", "fna_vit", "fna_spherical", "fna_translation")
# the share of (query, key) pairs beyond z = 1 per seed, as the tail probe writes it
TAIL_SHARES = {"fna": (0.004, 0.006, 0.005), "fna_op": (0.02, 0.03, 0.025)}


def paper_context(params: dict, results: Path) -> ReportContext:
    """Every run of the accuracy studies on the paper profile, 0.80 + 0.01 per seed."""
    studies = {n: study(params, n, "paper") for n in STUDIES}
    rows = [
        {
            "task": t,
            "variant": v,
            "seed": s,
            "profile": "paper",
            "status": "ok",
            "test_acc": 0.8 + 0.01 * s,
            "test_bleu": 0.3 + 0.01 * s,
            "test_tf_bleu": 0.3 + 0.01 * s,
            "stand_in": "",
            "same_run_as": "",
        }  # fmt: skip
        for st in studies.values()
        for t in st["tasks"]
        for v in st["variants"]
        for s in range(3)
    ]
    return ReportContext(pd.DataFrame(rows), studies, "paper", results)


def write_tail(results: Path, shares: dict[tuple[str, str], tuple[float, ...]]) -> None:
    """The tail probe's per-seed stats (one layer each) for these (task, variant)s."""
    rows = [
        {
            "task": t,
            "variant": v,
            "seed": s,
            "layer": 0,
            "share_above_1": share,
            "pairs": 1000,
            "tv_laplace": 0.2,
            "kappa": 90.0,
            "head_dim": 16,
            "z_median": 0.05,
            "z_max": 1.5,
        }  # fmt: skip
        for (t, v), per_seed in shares.items()
        for s, share in enumerate(per_seed)
    ]
    path = results / TAIL_OUTPUTS["stats"]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)


def test_no_claim_is_named_by_an_identifier_of_ours(params, tmp_path) -> None:
    write_tail(tmp_path, {("imdb_wordpiece", v): s for v, s in TAIL_SHARES.items()})
    claims = audit.audit_claims(paper_context(params, tmp_path))
    assert len(claims) > 20
    assert not named_by_identifiers(claims, params)
    names = [c.claim for c in claims]
    for start in ("Table I (IMDb, general)", "Table I (IMDb, orthogonal)",
                  "Table III (IMDb, general)", "Fig. 7 (CIFAR-10 stand-in, general)"):  # fmt: skip
        assert any(n.startswith(start) for n in names), start


def test_each_tail_row_reads_the_share_against_its_threshold(params, tmp_path) -> None:
    """0.5 % of pairs beyond z = 1 is a share of 0.5 %, short of the 1 % threshold (never
    "-0.50 %"); each probed model has its own row, named by the paper's row and task."""
    write_tail(
        tmp_path,
        {("imdb_wordpiece", v): s for v, s in TAIL_SHARES.items()}
        | {("fashion_mnist32", "vit_fna"): TAIL_SHARES["fna"]},
    )
    rows = {
        c.claim.rsplit(" (", 1)[1]: c for c in audit.tail_claims(paper_context(params, tmp_path))
    }
    assert set(rows) == {"FNA, IMDb)", "op-FNA, IMDb)", "FNA, CIFAR-10 stand-in)"}
    short, above = rows["FNA, IMDb)"], rows["op-FNA, IMDb)"]
    assert math.isclose(short.interval.estimate, 0.5)  # percent of pairs, the share itself
    assert short.interval.unit == "% of pairs beyond z = 1"
    assert math.isclose(above.interval.estimate, 2.5)
    assert short.interval.claimed.threshold == 100 * TAIL_SHARE
    assert short.interval.low > 0  # a share, never a negative one


def write_theory(results: Path, verdict: str, readings: list[Reading]) -> None:
    path = results / THEORY_OUTPUTS["claims"]
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"figure": "2a", "claim": "S^1 spectrum of FNA at alpha=1.2 scales as j^1.2",
           "paper": "lambda_j ~ j^1.2", "ours": "slope 1.150 (even j=2..50)",
           "value": 1.15, "criterion": "slope within 0.1 of 1.2", "verdict": verdict,
           "readings": readings_cell(readings)}  # fmt: skip
    pd.DataFrame([row]).to_csv(path, index=False)


def test_fig_2a_fit_ranges_are_its_readings(tmp_path) -> None:
    """Ranges that disagree give ambiguous as printed, each range a reading in the kit's
    words (agrees holds, partly fails), never fails."""
    readings = [
        Reading("even j=2-50", "slope 1.150", "agrees"),
        Reading("even j=2-20", "slope 1.420", "partly"),
    ]
    write_theory(tmp_path, AMBIGUOUS, readings)
    (row,) = audit.theory_claims(tmp_path, "paper")
    assert row.verdict == AMBIGUOUS and row.profile is None
    assert [(r.name, r.verdict) for r in row.readings] == [
        ("even j=2-50", HOLDS),
        ("even j=2-20", FAILS),
    ]


def test_fig_2a_ranges_that_agree_decide_and_an_unknown_word_is_refused(tmp_path) -> None:
    agree = [Reading(f"even j=2-{hi}", "slope 1.2", "agrees") for hi in (20, 50)]
    write_theory(tmp_path, "agrees", agree)
    (row,) = audit.theory_claims(tmp_path, "paper")
    assert row.verdict == HOLDS and {r.verdict for r in row.readings} == {HOLDS}
    write_theory(tmp_path, "unsure", [])
    with pytest.raises(ValueError, match="'unsure'"):
        audit.theory_claims(tmp_path, "paper")
