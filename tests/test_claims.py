"""The claims kit: one rule from interval to verdict, seeds never pooled with settings, the
seeds a claimed effect needs, and a renderer that keeps findings and run verdicts apart."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from pdelab.report.claims import (
    AMBIGUOUS,
    FAILS,
    FINDING_VERDICTS,
    HOLDS,
    MIN_SEEDS,
    NEEDS_PAPER,
    NO_EXPERIMENT,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    SIGN_ONLY,
    Claim,
    Interval,
    Reading,
    SettingsPooled,
    agreed,
    all_pairs,
    claims_table,
    correlation,
    coverage_line,
    difference,
    finding,
    judge,
    render,
)
from pdelab.report.stats import welch_interval


def seeds(*values: float) -> pd.Series:
    return pd.Series(values, index=range(len(values)), dtype=float)


@pytest.mark.parametrize(
    ("low", "high", "sign", "n", "expected"),
    [
        (0.5, 2.0, +1, (3, 3), REPRODUCED),
        (-2.0, -0.5, -1, (3, 3), REPRODUCED),
        (-2.0, -0.5, +1, (3, 3), NOT_REPRODUCED),
        (0.5, 2.0, -1, (5, 4), NOT_REPRODUCED),
        (-1.0, 1.0, +1, (10, 10), NOT_MEASURABLE),  # holds both outcomes
        (0.0, 1.0, +1, (10, 10), NOT_MEASURABLE),  # touches zero
        (0.5, 2.0, +1, (2, 2), NOT_MEASURABLE),  # too few seeds to trust any interval
        (0.5, 2.0, +1, (3, 2), NOT_MEASURABLE),
        (math.nan, math.nan, +1, (3, 3), NOT_MEASURABLE),
    ],
)
def test_one_rule_from_interval_to_verdict(low, high, sign, n, expected) -> None:
    assert judge(low, high, sign, n)[0] == expected


def test_two_identical_seeds_a_side_give_no_interval() -> None:
    """Zero spread on both sides is no certainty: no interval, so no verdict."""
    diff, low, high = welch_interval(seeds(0.5, 0.5, 0.5), seeds(0.4, 0.4, 0.4))
    assert math.isclose(diff, 0.1) and math.isnan(low) and math.isnan(high)
    _, verdict, reason = difference(seeds(0.5, 0.5, 0.5), seeds(0.4, 0.4, 0.4), +1, 10.0)
    assert verdict == NOT_MEASURABLE and "no interval" in reason


def test_welch_one_sample_and_hand_computation() -> None:
    a, b = seeds(0.40, 0.42, 0.44), seeds(0.30, 0.32, 0.34)
    diff, low, high = welch_interval(a, b)
    se = math.sqrt(2 * 0.0004 / 3)
    assert math.isclose(diff, 0.10) and math.isclose(high - diff, 2.7764451 * se, rel_tol=1e-5)
    diff, low, high = welch_interval(a, None)  # one sample: t with 2 degrees of freedom
    assert math.isclose(diff, 0.42) and math.isclose(
        high - diff, 4.3026527 * 0.02 / math.sqrt(3), rel_tol=1e-6
    )


def hand_welch(a: pd.Series, b: pd.Series | None, level: float = 0.95) -> tuple[float, ...]:
    """The interval as pdelab.report.stats wrote it out before it called scipy's t tests:
    Welch-Satterthwaite degrees of freedom (a side without spread adds no term), the t
    quantile times the standard error."""
    from scipy import stats

    va = a.var(ddof=1) / len(a)
    vb = 0.0 if b is None else b.var(ddof=1) / len(b)
    if b is None:
        df = len(a) - 1
    else:
        df = (va + vb) ** 2 / (
            (va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0)
        )
    diff = float(a.mean() - (0.0 if b is None else b.mean()))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


@pytest.mark.parametrize(
    ("a", "b", "level"),
    [
        (seeds(0.40, 0.42, 0.44), seeds(0.30, 0.32, 0.34), 0.95),  # equal spreads
        (seeds(0.61, 0.58, 0.66, 0.70), seeds(0.50, 0.41), 0.95),  # unequal sizes and spreads
        (seeds(1.0, 3.0, 2.5, 7.0, 4.0), seeds(2.0, 2.2, 1.9), 0.9),  # another level
        (seeds(0.5, 0.5, 0.5), seeds(0.30, 0.35, 0.41), 0.95),  # one side without spread
        (seeds(0.12, -0.03, 0.08, 0.05), None, 0.95),  # one sample against zero
        (seeds(12.5, 11.0), None, 0.99),
    ],
)
def test_welch_through_scipy_equals_the_hand_written_interval(a, b, level) -> None:
    """scipy's ttest_ind (unequal variances) and ttest_1samp give the interval the formula
    gave, to rounding."""
    got, expected = welch_interval(a, b, level), hand_welch(a, b, level)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_settings_pooled_as_seeds_are_refused() -> None:
    """Two settings x 2 seeds is 2 seeds, not 4: the repeated seed index gives it away."""
    pooled = pd.Series([0.5, 0.6, 0.55, 0.65], index=[0, 1, 0, 1])
    with pytest.raises(SettingsPooled, match="not seeds"):
        difference(pooled, seeds(0.1, 0.2, 0.3), +1, 5.0)


def test_a_decided_verdict_carries_an_interval_that_decides() -> None:
    wide = Interval(1.0, -1.0, 3.0, (3, 3))
    with pytest.raises(ValueError, match="cannot decide"):
        Claim("c", "Table 1", "", "+1", "+1", REPRODUCED, "paper", wide, judged=True)
    few = Interval(1.0, 0.5, 1.5, (2, 2))
    with pytest.raises(ValueError, match="cannot decide"):
        Claim("c", "Table 1", "", "+1", "+1", NOT_REPRODUCED, "paper", few, judged=True)
    with pytest.raises(ValueError, match="no interval"):
        Claim("c", "Table 1", "", "+1", "+1", REPRODUCED, "paper", judged=True)
    with pytest.raises(ValueError, match="not one of"):
        Claim("c", "Table 1", "", "+1", "+1", "inconclusive", "smoke")
    with pytest.raises(ValueError, match="not one of"):  # a finding has no run verdict
        finding("c", "Sec. 2", "", "", "", REPRODUCED)


def test_difference_reports_seeds_needed_only_when_undecided() -> None:
    a, b = seeds(0.40, 0.50, 0.45), seeds(0.41, 0.52, 0.40)
    interval, verdict, _ = difference(a, b, +1, claimed=3.0)
    assert verdict == NOT_MEASURABLE and interval.unit == "points" and interval.n == (3, 3)
    assert interval.needed is not None and interval.needed > MIN_SEEDS
    low, high = interval.needed_range
    assert low <= interval.needed <= high and low < high  # three seeds barely know the spread
    up = seeds(0.330, 0.342, 0.325, 0.331)
    interval, verdict, _ = difference(up, seeds(0.30, 0.31, 0.296, 0.30), +1, 3.0)
    assert verdict == REPRODUCED and interval.needed is None
    interval, _, _ = difference(a, b, +1, claimed=math.nan)  # the paper prints no effect
    assert interval.needed_text() == "n/a (the paper prints no effect)"


def models(values: list[list[float]]) -> pd.Series:
    """One value per (setting, seed): values[setting][seed]."""
    index = pd.MultiIndex.from_tuples(
        [(f"s{i}", seed) for i, row in enumerate(values) for seed in range(len(row))],
        names=["setting", "seed"],
    )
    return pd.Series([v for row in values for v in row], index=index, dtype=float)


def test_no_correlation_is_shown_by_equivalence_or_refuted() -> None:
    """A null claim is decided both ways: an interval inside ± the margin confirms it, one
    that excludes zero refutes it, one that holds zero but leaves the band says neither."""
    x = models([[1.0, 1.1, 0.9], [2.0, 2.1, 1.9], [3.0, 3.2, 2.8], [4.0, 4.1, 3.9]])
    y = models([[0.3, 0.5, 0.1], [0.1, 0.2, 0.6], [0.5, 0.1, 0.3], [0.2, 0.6, 0.2]])
    interval, verdict, _ = correlation(x, y, 0, 0.0, margin=0.1)
    assert verdict == NOT_MEASURABLE and interval.low < 0 < interval.high
    assert interval.margin_text() == "±0.1 (no effect)"
    interval, verdict, _ = correlation(x, y, 0, 0.0)  # the default margin in r: 0.2
    assert verdict == REPRODUCED and -0.2 < interval.low < 0 < interval.high < 0.2
    noisy = models([[2.0, 2.3, 1.9], [4.1, 4.0, 3.7], [6.0, 6.5, 5.6], [8.2, 7.9, 8.1]])
    interval, verdict, _ = correlation(x, noisy, 0, 0.0)
    assert verdict == NOT_REPRODUCED and interval.n == (3,)
    # eight seeds whose r scatters tightly around zero: no correlation, shown
    index = pd.MultiIndex.from_product([[f"s{i}" for i in range(4)], range(8)], names=["s", "seed"])
    xs = pd.Series([float(i) for i in range(4) for _ in range(8)], index=index)
    flat = [[0.0, 0.1, 0.0, -0.1], [0.1, 0.0, -0.1, 0.0], [0.0, -0.1, 0.0, 0.1]]
    ys = pd.Series([flat[s % 3][i] for i in range(4) for s in range(8)], index=index, dtype=float)
    interval, verdict, _ = correlation(xs, ys, 0, 0.0, margin=0.9)
    assert verdict == REPRODUCED and interval.low > -0.9 and interval.high < 0.9


def test_a_pooled_correlation_over_settings_and_two_seeds_is_refused() -> None:
    """Six settings x 2 seeds are 12 models but 2 seeds: the interval runs over seeds, so the
    seed rule leaves it not measurable here however strong r is; and values indexed as
    models, not as (setting, seed), are refused outright."""
    gap = models([[0.10 * i, 0.10 * i + 0.01] for i in range(6)])
    acc = models([[0.50 + 0.05 * i, 0.51 + 0.05 * i + 0.002 * (i % 2)] for i in range(6)])
    interval, verdict, reason = correlation(gap, acc, +1, 0.5)
    assert verdict == NOT_MEASURABLE and interval.n == (2,) and "fewer than 3 seeds" in reason
    assert interval.counts.startswith("seeds") and "6 settings" in interval.counts
    with pytest.raises(SettingsPooled, match="not independent"):
        correlation(gap.reset_index(drop=True), acc.reset_index(drop=True), +1, 0.5)
    pooled = Interval(0.9, 0.6, 0.98, (12,), "r", "models (6 settings × 2 seeds)")
    with pytest.raises(ValueError, match="cannot decide"):  # nor can a hand-made one pass
        Claim("gap predicts", "Fig. 5a", "", "", "", REPRODUCED, "paper", pooled, judged=True)


def test_a_correlation_is_decided_over_seeds_and_sized_on_the_papers_claim() -> None:
    gap = models([[0.1 * i + 0.01 * s * (i % 3) for s in range(4)] for i in range(6)])
    acc = models([[0.5 + 0.05 * i + 0.004 * s * (i % 2) for s in range(4)] for i in range(6)])
    interval, verdict, _ = correlation(gap, acc, +1, 0.5)
    assert verdict == SIGN_ONLY and interval.n == (4,) and interval.low > 0.5  # r near 1
    interval, verdict, _ = correlation(gap, acc, +1, 0.9, margin=0.35)
    assert verdict == REPRODUCED
    flat = models([[0.5 + 0.04 * ((i + s) % 3) for s in range(3)] for i in range(6)])
    interval, verdict, _ = correlation(gap, flat, +1, 0.5)
    assert verdict == NOT_MEASURABLE and interval.needed is not None
    stronger = correlation(gap, flat, +1, 0.9)[0].needed
    assert stronger is not None and stronger < interval.needed  # the paper's r sizes it


def test_render_separates_findings_from_run_verdicts_and_counts_coverage() -> None:
    claims = [
        finding("Eq. 3 holds", "Sec. 2", "we prove", "bound 1", "1.0", "holds"),
        Claim(
            "A beats B",
            "Table 1",
            "A wins",
            "+2.0",
            "+0.1",
            NOT_MEASURABLE,
            "smoke",
            Interval(0.1, -1.0, 1.2, (2, 2), needed=40),
            reason="fewer than 3 seeds a side",
        ),
        Claim("scales to 4k", "Abstract", "stable", "", "", NEEDS_PAPER, "smoke"),
        Claim("beats RNNs", "Conclusion", "outperforms RNNs", "", "", NO_EXPERIMENT, "smoke"),
    ]
    assert coverage_line(claims).startswith(
        "Coverage: 4 claims: 1 decided (1 holds); 1 undecided (1 not measurable here); 1 need "
        "the paper profile; 1 unsupported"
    )
    assert "judged" not in coverage_line(claims)  # an undecided claim is never counted so
    text = "\n".join(render("Paper X", claims, "Ours: smoke."))
    assert text.index("Findings that hold in any profile") < text.index("Verdicts of this")
    assert "40 a side" in text and "2 vs 2 seeds" in text
    assert "seeds needed (on this profile's spread)" in text
    # a finding may quote this profile's trained models beside a verdict that needs none
    assert "no trained model)" not in text and "trained models names them as such" in text


def test_every_run_cell_made_on_a_stand_in_is_marked() -> None:
    """A run verdict naming a stand-in task, or averaging over tasks one of which is a
    stand-in, carries the mark in its "ours" cell; one on real data, a finding, or a claim
    with no runs does not; the legend says what the mark means."""
    wide = Interval(0.1, -1.0, 1.2, (3, 3), needed=40)
    run = {"where": "Table 1", "quote": "A wins", "paper": "+2.0", "verdict": NOT_MEASURABLE}
    claims = [
        finding("Eq. 3 holds", "Sec. 2", "we prove", "", "1.0", "holds"),
        Claim(claim="A beats B on listops", ours="listops: +0.1", profile="smoke",
              interval=wide, **run),
        Claim(claim="A beats B on imdb", ours="imdb: +0.3", profile="smoke", interval=wide, **run),
        Claim(claim="A beats B on average", ours="+0.2 (mean over 2 tasks)", profile="smoke",
              interval=wide, **run),
        Claim("A scales", "Sec. 4", "it scales", "", "not run", NEEDS_PAPER, "smoke"),
        Claim("A beats C on listops", "Sec. 5", "A wins", "", "listops: 1 layer, +2.0", NEEDS_PAPER,
              "smoke"),
        Claim("A is stable", "Fig. 2", "", "", "not recorded", NOT_MEASURABLE, "smoke"),
    ]  # fmt: skip
    text = "\n".join(
        render("Paper X", claims, "Ours: smoke.", (), {"listops": "generated"}, ["listops", "imdb"])
    )
    assert "listops: +0.1 [stand-in]" in text and "+0.2 (mean over 2 tasks) [stand-in]" in text
    assert "imdb: +0.3" in text and "imdb: +0.3 [stand-in]" not in text
    assert "not run [stand-in]" not in text and "not recorded [stand-in]" not in text
    assert "listops: 1 layer, +2.0 [stand-in]" in text  # a number of ours, whatever the verdict
    assert "1.0 [stand-in]" not in text and "[stand-in]: made on a stand-in" in text
    assert "[stand-in]" not in "\n".join(render("Paper X", claims, "Ours: smoke."))


def test_an_accusation_needs_every_reading_and_ambiguity_shows_each() -> None:
    """A finding that charges the paper must hold under every declared reading; where the
    readings disagree the verdict is ambiguous as printed, and the row shows each."""
    spectral = Reading("||H|| spectral", "grows to 1.43", FAILS)
    infinity = Reading("max_t ||h_t||", "never grows (1.00)", HOLDS)
    words = "the norm never grows"
    with pytest.raises(ValueError, match="readings give 'ambiguous as printed'"):
        finding("A.4 bound", "App. A.4", words, "", "", FAILS, readings=[spectral, infinity])
    claim = finding(
        "A.4 bound", "App. A.4", words, "", "", AMBIGUOUS, readings=[spectral, infinity]
    )
    assert agreed([spectral, infinity]) == AMBIGUOUS and claim.coverage == "undecided"
    row = claims_table([claim], findings=True)
    assert "||H|| spectral: grows to 1.43 (fails)" in row.replace("\\|", "|")
    assert "never grows (1.00) (holds)" in row
    both = finding("bound", "App. A.4", words, "", "", FAILS, readings=[spectral, spectral])
    assert both.coverage == "decided" and AMBIGUOUS in FINDING_VERDICTS
    with pytest.raises(ValueError, match="names no readings"):
        finding("bound", "App. A.4", words, "", "", AMBIGUOUS)


def synthetic_summary(studies: dict, seed: int) -> pd.DataFrame:
    """One finished run per (task, variant, seed) the studies train, with random metrics."""
    import numpy as np

    rng = np.random.default_rng(seed)
    keys = sorted({k for s in studies.values() for k in s.run_keys})
    n = len(keys)
    return pd.DataFrame(
        {
            "task": [k[0] for k in keys],
            "variant": [k[1] for k in keys],
            "seed": [k[2] for k in keys],
            "profile": "smoke",
            "status": "ok",
            "test_acc": rng.uniform(0.3, 0.9, n),
            "test_loss": rng.uniform(1.0, 3.0, n),
            "test_ppl": rng.uniform(10.0, 100.0, n),
            "causality": "causal",
            "test_bleu": rng.uniform(1.0, 30.0, n),
            "test_tf_bleu": rng.uniform(1.0, 30.0, n),
            "stand_in": "",
            "median_step_s": 0.1,
            "peak_memory_mb": 100.0,
            "device": "cpu",
        }
    )


@pytest.mark.parametrize("seeds", [2, 5])
def test_every_claim_of_every_paper_obeys_the_rule(seeds: int, tmp_path) -> None:
    """Each registered paper's claims, from random runs of every study at 2 and 5 seeds: every
    one a Claim (so a decided run verdict carries an interval that decides, over seeds, not
    settings), located in the paper, and a paper section that covers at least one claim."""
    from pdelab.report.claims import DECIDED
    from pdelab.report.context import ReportContext
    from pdelab.spec.config import PARAMS_FILE, load_params
    from pdelab.spec.plugins import active
    from pdelab.spec.studies import studies_of

    params = load_params(PARAMS_FILE)
    params["profiles"]["smoke"]["seeds"] = list(range(seeds))
    for block in params["studies"].values():
        block.pop("seeds", None)
    studies = studies_of(params, "smoke")
    summary = synthetic_summary(studies, seeds)
    runs = {name: s.run_keys for name, s in studies.items()}
    ctx = ReportContext(summary, studies, "smoke", tmp_path, runs)
    checked = 0
    for paper in active(s.kind for s in studies.values()):
        claims = paper.report_module().claims(ctx)
        if paper.name == "mechanisms":  # a comparison across papers: no claims of its own
            continue
        assert claims, paper.name
        for claim in claims:
            assert isinstance(claim, Claim) and claim.where, (paper.name, claim)
            if claim.profile is not None and claim.verdict in DECIDED:
                assert claim.interval is not None and min(claim.interval.n) >= MIN_SEEDS
                # timing repeats are measurements; settings are never seeds, not even for r
                counts = claim.interval.counts
                assert "setting" not in counts or counts.startswith("seeds"), claim
            checked += 1
    assert checked


def part(low: float, high: float, verdict: str, needed: int | None = None) -> tuple:
    return Interval((low + high) / 2, low, high, (3, 3), needed=needed), verdict, ""


def test_an_ordering_is_reproduced_only_when_every_pair_is() -> None:
    interval, verdict, _ = all_pairs([part(1, 3, REPRODUCED), part(0.2, 2, REPRODUCED)])
    assert verdict == REPRODUCED and interval.low == 0.2  # the least decided pair shown
    interval, verdict, reason = all_pairs(
        [part(1, 3, REPRODUCED), part(-1, 2, NOT_MEASURABLE, 9), part(-1, 1, NOT_MEASURABLE, 30)]
    )
    assert verdict == NOT_MEASURABLE and interval.needed == 30 and "2 of 3" in reason
    _, verdict, _ = all_pairs([part(1, 3, REPRODUCED), part(-3, -1, NOT_REPRODUCED)])
    assert verdict == NOT_REPRODUCED


# -- notes and diagnostics ---------------------------------------------------------------------


def test_all_pairs_combines_an_ordering() -> None:
    up = Interval(1.0, 0.5, 1.5, (3, 3))
    near = Interval(0.3, 0.1, 0.5, (3, 3))
    down = Interval(-1.0, -1.5, -0.5, (3, 3))
    wide = Interval(0.2, -1.0, 1.4, (3, 3))
    assert all_pairs([(up, REPRODUCED, ""), (near, REPRODUCED, "")]) == (near, REPRODUCED, "")
    assert all_pairs([(up, REPRODUCED, ""), (down, NOT_REPRODUCED, "")])[1] == NOT_REPRODUCED
    assert all_pairs([(up, REPRODUCED, ""), (wide, NOT_MEASURABLE, "x")]) == (
        wide,
        NOT_MEASURABLE,
        "x",
    )
    assert all_pairs([])[1] == NOT_MEASURABLE


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("pde_s4", "Table 4"),  # a variant id
        ("imdb_wordpiece", "Table I"),  # a task id
        ("fna_imdb.csv", "Table I"),  # a file of pdelab's
        ("Table I: FNA beats DP", "fna_imdb.csv"),  # a file given as where the paper says it
    ],
)
def test_a_claim_named_by_an_internal_name_is_refused(name: str, where: str) -> None:
    with pytest.raises(ValueError, match="the paper's"):
        finding(name, where, "we find", "", "", HOLDS)


def test_a_claim_in_words_that_mention_a_variant_passes() -> None:
    """Only a name that is nothing but an identifier is refused, not words around one."""
    claim = finding("S_alpha is non-expansive", "Sec. 4.1", "non-expansive", "", "", HOLDS)
    assert claim.claim == "S_alpha is non-expansive"


def test_only_a_figure_may_go_without_the_papers_words() -> None:
    with pytest.raises(ValueError, match="no quote of the paper's words"):
        finding("Table 2's averages", "Table 2", "", "", "", HOLDS)
    with pytest.raises(ValueError, match="no quote"):
        Claim("A beats B", "Sec. 5", " ", "", "", NEEDS_PAPER, "smoke")
    for where in ("Fig. 5a", "Table 1; Fig 2", "Figs 2a-c", "Figure 3"):
        assert Claim("A is stable", where, "", "", "", NOT_MEASURABLE, "smoke").quote == ""


def test_a_seed_rule_verdict_says_the_rule_overrides_its_interval() -> None:
    """An interval that excludes zero beside *not measurable here* says the seed rule decides,
    in one sentence (the reason's own "fewer than 3 seeds a side" is not repeated)."""
    from pdelab.report.claims import verdict_cell

    two = Interval(0.5, 0.04, 0.98, (2, 2))
    claim = Claim("A beats B", "Fig. 5a", "", "", "", NOT_MEASURABLE, "smoke", two,
                  reason="fewer than 3 seeds a side")  # fmt: skip
    assert verdict_cell(claim) == (
        "not measurable here (the interval excludes zero, but fewer than 3 seeds a side: the "
        "seed rule decides)"
    )
    pair = replace(claim, reason="least decided pair A − B; fewer than 3 seeds a side")
    assert verdict_cell(pair).startswith("not measurable here (least decided pair A − B; the ")
    both_sides = replace(claim, interval=Interval(0.5, -0.5, 1.5, (2, 2)))
    assert verdict_cell(both_sides) == "not measurable here (fewer than 3 seeds a side)"
    enough = replace(claim, interval=Interval(0.5, 0.04, 0.98, (3, 3)), reason="")
    assert verdict_cell(enough) == NOT_MEASURABLE  # another rule left it open: nothing added


def test_a_verdict_on_our_one_reading_says_so() -> None:
    """A finding that rests on the single reading it declares of what the paper leaves open
    says "(our reading)" in its verdict cell; one with no reading, or several, does not."""
    from pdelab.report.claims import verdict_cell

    ours = Reading("dt = 1 (the paper gives none)", "grows as sqrt(t)", FAILS)
    one = finding("Range grows linearly", "Eq. 13", "grows linearly", "", "", FAILS,
                  reason="it grows as sqrt(t)", readings=[ours])  # fmt: skip
    assert verdict_cell(one) == "fails (our reading) (it grows as sqrt(t))"
    assert "fails (our reading) (it grows" in claims_table([one], findings=True)
    plain = finding("Range grows", "Eq. 13", "grows", "", "", FAILS, reason="it does not")
    assert verdict_cell(plain) == "fails (it does not)"
    two = replace(one, readings=(ours, ours))
    assert "our reading" not in verdict_cell(two)
