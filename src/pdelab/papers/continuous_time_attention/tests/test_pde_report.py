"""Continuous-Time Attention report: the paper's numbers beside ours, leaky language models
withheld, diverged runs shown, units unified, and the claims audit."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from pdelab.papers.continuous_time_attention import PAPER, figures, findings
from pdelab.papers.continuous_time_attention.audit import claims, claims_notes
from pdelab.papers.continuous_time_attention.findings import (
    c6_finding,
    classification_baseline_finding,
    cost_findings,
    deviations_finding,
    distance_profile,
    euler_error,
    exp_agrees,
    gradient_bound_finding,
    hybrid_error,
    lm_baseline_finding,
    reach,
    reaction_variance,
    smoothing,
    step_matrix,
    steps_per_epoch,
    steps_stability_finding,
    table3_finding,
    table13_finding,
    theorem_findings,
    theorem_one_findings,
    theorem_two_finding,
    variance_rate,
)
from pdelab.papers.continuous_time_attention.tables import (
    LEAKS,
    LEAKY_COLUMN,
    WITHHELD,
    classification_caption,
    classification_frame,
    classification_paper,
    classification_table,
    lm_caption,
    lm_frame,
    lm_table,
    paper_table,
    probe_summary,
)
from pdelab.report.claims import (
    AMBIGUOUS,
    CONSISTENT,
    FAILS,
    FINDING_VERDICTS,
    HOLDS,
    INCONSISTENT,
    NEEDS_PAPER,
    NO_EXPERIMENT,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    RUN_VERDICTS,
    SIGN_ONLY,
    Claim,
    difference,
    render,
)
from pdelab.report.context import ReportContext
from pdelab.report.decide import PAIRED
from pdelab.report.stats import accuracy_per_seed
from pdelab.spec.studies import study

ROOT = Path(__file__).resolve().parents[5]  # the project, above src/pdelab/papers/<paper>/tests
PDE_STUDIES = ("pde_classification", "pde_steps", "pde_types", "pde_longformer", "pde_seq_len")
WIKI_STAND_IN = "CPython's documentation stands in for WikiText-103"
CLS_STAND_IN = "synthetic reviews with planted sentiment words stand in for the real texts"
LEAKY_PPL = (1.10, 1.12)  # mean 1.11: a number that must never reach an ours column
STANDARD_PPL = (400.0, 420.0)
LEAK_FREE_PPL = (380.0, 390.0)
STANDARD_LM = {"baseline", "longformer", "baseline_T256", "baseline_T512", "baseline_T1024"}


def _row(task: str, variant: str, seed: int, **values) -> dict:
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "profile": "smoke",
        "status": "ok",
        "test_acc": math.nan,
        "test_loss": math.nan,
        "test_ppl": math.nan,
        "causality": "",
        "max_leak": math.nan,
        "stand_in": WIKI_STAND_IN if task == "wikitext" else CLS_STAND_IN,
        "median_step_s": 0.1,
        "peak_memory_mb": 10.0,
        "memory_kind": "cpu_max_rss",
        "device": "cpu",
        "best_val_acc": 0.5,
        "best_epoch": 1,
        "epochs_run": 2,
        **values,
    }


def _lm_row(variant: str, seed: int) -> dict:
    if variant == "pde_s8":  # the paper's 8-step row diverged; ours too
        return _row("wikitext", variant, seed, status="diverged", causality=LEAKS, max_leak=0.4)
    if variant in STANDARD_LM:
        ppl, verdict = STANDARD_PPL[seed], "causal"
    elif variant.endswith("_causal") or "_causal_" in variant:
        ppl, verdict = LEAK_FREE_PPL[seed], "causal"
    else:  # the two-sided form as the paper describes it; wave_s4 leaks in one seed only
        ppl, verdict = LEAKY_PPL[seed], "causal" if variant == "wave_s4" and seed == 0 else LEAKS
    return _row(
        "wikitext",
        variant,
        seed,
        test_ppl=ppl,
        test_loss=math.log(ppl),
        test_acc=0.3,
        causality=verdict,
        max_leak=0.0 if verdict == "causal" else 0.4,
    )


def _cls_row(task: str, variant: str, seed: int) -> dict:
    if task == "imdb_wordpiece" and variant == "released" and seed == 1:
        return _row(task, variant, seed, status="diverged")
    # pde_s4 gains 9 then 11 points: per-seed differences that vary, so the paired interval
    # (the variants share their seeds) has a spread
    acc = {"baseline": (0.50, 0.52), "pde_s4": (0.59, 0.63), "released": (0.55, 0.57)}[variant]
    return _row(task, variant, seed, test_acc=acc[seed])


def make_summary(params: dict) -> pd.DataFrame:
    """Every run of the five studies at two seeds, plus an older study's rows that lack the
    language-model columns (as an older summary.parquet does)."""
    rows = {}
    for name in PDE_STUDIES:
        study = params["studies"][name]
        for task in study["tasks"]:
            for variant in study["variants"]:
                for seed in (0, 1):
                    make = _lm_row if task == "wikitext" else lambda v, s, t=task: _cls_row(t, v, s)
                    rows[(task, variant, seed)] = make(variant, seed)
    older = pd.DataFrame(
        [
            {"task": "listops", "variant": "baseline", "seed": s, "profile": "smoke"}
            | {"status": "ok", "test_acc": 0.3}
            for s in (0, 1)
        ]
    )
    return pd.concat([pd.DataFrame(list(rows.values())), older], ignore_index=True)


@pytest.fixture(scope="module")
def studies(params: dict) -> dict:
    return {name: study(params, name, "smoke") for name in PDE_STUDIES}


@pytest.fixture(scope="module")
def summary(params: dict) -> pd.DataFrame:
    return make_summary(params)


def _ours_cells(table: pd.DataFrame) -> list[str]:
    return [str(c) for col in table.columns if "ours" in col for c in table[col]]


def test_leaky_perplexity_never_in_an_ours_column(summary, studies) -> None:
    for name in ("pde_steps", "pde_types", "pde_longformer", "pde_seq_len"):
        table = lm_table(lm_frame(summary, studies[name]), studies[name])
        assert not any("1.11" in cell for cell in _ours_cells(table)), name
        assert any("1.11" in cell for cell in table[LEAKY_COLUMN]), name  # shown, labelled
        leaky = table["as described: probe"].str.startswith(LEAKS)
        assert leaky.any(), name
        assert (
            table.loc[leaky, "as described: ours ppl"]
            .str.startswith(("withheld", "diverged"))
            .all()
        )
    steps = lm_table(lm_frame(summary, studies["pde_steps"]), studies["pde_steps"]).set_index(
        "steps"
    )
    assert steps.loc["4", "as described: ours ppl"] == WITHHELD
    assert steps.loc["4", "leak-free: ours ppl"] == "385.00 ± 7.07 (n=2)"
    assert steps.loc["0", "as described: ours ppl"] == "410.00 ± 14.14 (n=2)"
    assert steps.loc["4", LEAKY_COLUMN] == "as described: 1.11 ± 0.01 (n=2)"
    assert steps.loc["0", LEAKY_COLUMN] == ""


def test_probe_verdict_columns(summary, studies) -> None:
    steps = lm_table(lm_frame(summary, studies["pde_steps"]), studies["pde_steps"]).set_index(
        "steps"
    )
    assert steps.loc["0", "as described: probe"] == "causal"
    assert steps.loc["4", "as described: probe"] == f"{LEAKS} (2/2 seeds)"
    assert steps.loc["4", "leak-free: probe"] == "causal"
    types = lm_table(lm_frame(summary, studies["pde_types"]), studies["pde_types"]).set_index("pde")
    assert types.loc["wave", "as described: probe"] == f"{LEAKS} (1/2 seeds)"
    assert types.loc["wave", "as described: ours ppl"] == WITHHELD  # one leaking seed suffices
    seq = lm_table(lm_frame(summary, studies["pde_seq_len"]), studies["pde_seq_len"])
    assert (seq["standard: probe"] == "causal").all()
    one = pd.DataFrame([{"causality": LEAKS}, {"causality": None}])
    assert probe_summary(one)["probe"] == LEAKS and probe_summary(one)["leaky"] == 1
    assert probe_summary(pd.DataFrame({"x": [1]}))["probe"] == "not probed"  # older summary


def test_unprobed_language_model_gets_no_perplexity(summary, studies) -> None:
    unprobed = summary.drop(columns=["causality", "max_leak"])
    table = lm_table(lm_frame(unprobed, studies["pde_steps"]), studies["pde_steps"])
    assert set(table["leak-free: ours ppl"]) <= {"withheld: not probed", "diverged (2/2 seeds)"}
    assert (table["leak-free: probe"] == "not probed").all()


def test_diverged_runs_are_counted_and_shown(summary, studies) -> None:
    steps = lm_table(lm_frame(summary, studies["pde_steps"]), studies["pde_steps"]).set_index(
        "steps"
    )
    assert steps.loc["8", "paper ppl"] == "NaN: training diverged"
    assert steps.loc["8", "as described: ours ppl"] == "diverged (2/2 seeds)"
    cls = classification_table(summary, studies["pde_classification"]).set_index("task")
    assert cls.loc["imdb_wordpiece", "ours released (%, ours only)"] == "55.00 (n=1), 1 diverged"
    frame = classification_frame(summary, studies["pde_classification"]).set_index(
        ["task", "variant"]
    )
    assert frame.loc[("imdb_wordpiece", "released"), "diverged"] == 1
    assert frame.loc[("imdb_wordpiece", "released"), "n"] == 1


def test_paper_numbers_beside_ours_match_the_csv(summary, studies) -> None:
    steps_csv = paper_table("pde_attention_steps_wikitext.csv")
    steps = lm_table(lm_frame(summary, studies["pde_steps"]), studies["pde_steps"]).set_index(
        "steps"
    )
    for key in ("0", "1", "2", "4"):
        assert steps.loc[key, "paper ppl"] == f"{steps_csv.loc[int(key), 'perplexity']:,.2f}"
    assert steps.loc["0", "paper ppl"] == "13,318.90"
    types = lm_table(lm_frame(summary, studies["pde_types"]), studies["pde_types"]).set_index("pde")
    assert types.loc["standard", "paper ppl"] == "9,096.30"
    assert types.loc["wave", "paper ppl"] == "2.27"
    assert types.loc["released_code", "paper ppl"] == "not reported"
    frame = lm_frame(summary, studies["pde_longformer"])
    longformer = lm_table(frame, studies["pde_longformer"]).set_index("model")
    # Table 3 lists epochs 5, 10 and 19: the final epoch is the one presented
    assert longformer.loc["pde_longformer", "paper ppl"] == "1.02"
    assert longformer.loc["longformer", "paper ppl"] == "1.04"
    assert "final (largest) epoch" in lm_caption(frame, studies["pde_longformer"], "smoke")
    seq = lm_table(lm_frame(summary, studies["pde_seq_len"]), studies["pde_seq_len"])
    seq = seq.set_index("seq_len")
    assert seq.loc["256", "paper standard ppl"] == "6,865.18"
    assert seq.loc["1024", "paper PDE ppl"] == "1.97"
    assert seq.loc["512", "paper PDE ppl"] == "not reported"


def test_classification_in_one_unit(summary, studies) -> None:
    paper = classification_paper()
    assert (paper["unit"] == "percent").all()
    assert math.isclose(paper.loc["imdb_bytes", "standard_transformer"], 64.68)
    table = classification_table(summary, studies["pde_classification"]).set_index("task")
    assert table.loc["imdb_bytes", "paper standard_transformer (%)"] == "64.68"
    assert table.loc["imdb_wordpiece", "paper pde_transformer (%)"] == "62.40"
    assert table.loc["imdb_bytes", "paper Δ (pp)"] == "+0.76"
    assert table.loc["sst2", "paper Δ (pp)"] == "+19.70"
    assert table.loc["imdb_wordpiece", "ours baseline (%)"] == "51.00 ± 1.41 (n=2)"  # 0.50, 0.52
    assert table.loc["imdb_wordpiece", "ours Δ (pp) [95% CI]"].startswith("+10.00 [")
    assert table.loc["imdb_bytes", "tokens"] == "bytes"
    assert table.loc["sst2", "tokens"] == "WordPiece (ours)"


def test_the_classification_gain_pairs_the_shared_seeds(summary, studies) -> None:
    """PDE and the baseline train on seeds 0 and 1 (one data order and initialisation per
    seed): the gain's interval is scipy's paired one (ttest_rel), not Welch's, and the row
    names its test. The table prints two decimals, so the text is compared."""
    pde, base = [59.0, 63.0], [50.0, 52.0]  # _cls_row's imdb_wordpiece, in percent

    def text(ci) -> str:
        return f"+10.00 [{ci.low:+.2f}, {ci.high:+.2f}]"

    paired = scipy_stats.ttest_rel(pde, base).confidence_interval(0.95)
    welch = scipy_stats.ttest_ind(pde, base, equal_var=False).confidence_interval(0.95)
    row = classification_table(summary, studies["pde_classification"]).set_index("task")
    row = row.loc["imdb_wordpiece"]
    assert row["ours Δ (pp) [95% CI]"] == text(paired) != text(welch)
    assert row["test"] == PAIRED
    caption = classification_caption(summary, studies["pde_classification"], "smoke")
    assert "paired t over shared seeds, Welch's otherwise" in caption


def test_captions_name_profile_stand_in_and_tokenizer(summary, studies) -> None:
    cls = classification_caption(summary, studies["pde_classification"], "smoke")
    assert "not a reproduction" in cls and CLS_STAND_IN in cls
    assert "bert-base-uncased" in cls and "WordPiece" in cls
    assert WIKI_STAND_IN not in cls  # only the study's own tasks
    frame = lm_frame(summary, studies["pde_steps"])
    lm = lm_caption(frame, studies["pde_steps"], "paper")
    assert "paper profile" in lm and WIKI_STAND_IN in lm and "bert-base-uncased" in lm
    assert WITHHELD in lm


def _claims(summary: pd.DataFrame, studies: dict, profile: str = "smoke") -> list[Claim]:
    return claims(ReportContext(summary, studies, profile, Path(".")), PAPER.study_kinds)


def _by_claim(found: list[Claim]) -> dict[str, Claim]:
    """The claims keyed '(letter)#i': the i-th claim of each letter ((a)..(g))."""
    out: dict[str, Claim] = {}
    for c in found:
        letter = c.claim[:3]
        if letter.startswith("("):
            out[f"{letter}#{sum(k.startswith(letter) for k in out)}"] = c
    return out


def _three_seeds(summary: pd.DataFrame) -> pd.DataFrame:
    """The language-model runs again at a third seed (perplexities 2% above seed 1's)."""
    third = summary[(summary["task"] == "wikitext") & (summary["seed"] == 1)].copy()
    third["seed"] = 2
    third["test_ppl"] = third["test_ppl"] * 1.02
    return pd.concat([summary, third], ignore_index=True)


def _set_ppl(summary: pd.DataFrame, variant: str, values: list[float], verdict: str) -> None:
    rows = (summary["task"] == "wikitext") & (summary["variant"] == variant)
    summary.loc[rows, "test_ppl"] = values
    summary.loc[rows, "causality"] = verdict


def test_audit_speaks_the_kit_vocabulary_and_marks_leaky_ones(summary, studies) -> None:
    """Every claim is a kit Claim: leaking LMs are not measurable here, two seeds decide
    nothing, and no verdict word of this paper's own survives."""
    found = _claims(summary, studies)
    by = _by_claim(found)
    assert {k[:3] for k in by} == {"(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "(g)"}
    for key in ("(b)#0", "(c)#0", "(d)#0", "(e)#0", "(f)#0"):
        assert (by[key].verdict, by[key].reason) == (NOT_MEASURABLE, "leaks future tokens"), key
        assert by[key].profile == "smoke"
    # +10 points in both seeds: two seeds a side are too few to decide anything
    assert by["(a)#0"].verdict == NOT_MEASURABLE and "fewer than 3 seeds" in by["(a)#0"].reason
    assert by["(a)#0"].interval.n == (2, 2) and by["(a)#0"].interval.unit == "points"
    assert math.isclose(by["(a)#0"].interval.estimate, 10.0)  # points, not a fraction
    assert by["(g)#0"].verdict == FAILS and by["(g)#0"].profile is None
    assert not any("1.11" in c.ours for c in found)  # leaky ppl never quoted
    assert "385.00" in by["(b)#0"].ours and "410.00" in by["(b)#0"].ours
    assert "13,318.9" in by["(b)#0"].paper and "9,096.3" in by["(b)#0"].paper
    assert all(c.verdict in RUN_VERDICTS + FINDING_VERDICTS for c in found)
    text = "\n".join(render("Continuous-Time Attention", found, "", []))
    for word in ("inconclusive", "not assessable", "not yet run", "not run in this profile"):
        assert word not in text, word


def test_eight_steps_diverging_needs_the_paper_scale(summary, studies) -> None:
    """0 (or 2) of 2 tiny runs say nothing of divergence at the paper's scale."""
    diverge = _by_claim(_claims(summary, studies))["(c)#1"]
    assert "diverge" in diverge.claim
    assert diverge.verdict == NEEDS_PAPER and "scale" in diverge.reason
    assert "2 of 2 runs diverged" in diverge.ours  # the count is shown, not judged
    ok = summary.copy()
    ok.loc[ok["variant"] == "pde_s8", "status"] = "ok"
    diverge = _by_claim(_claims(ok, studies))["(c)#1"]
    assert diverge.verdict == NEEDS_PAPER and "0 of 2 runs diverged" in diverge.ours
    # at the paper's scale, three runs: all diverged reproduces it, none leaves it open
    paper = _three_seeds(summary)
    paper.loc[paper["variant"] == "pde_s8", "status"] = "diverged"
    diverge = _by_claim(_claims(paper, studies, "paper"))["(c)#1"]
    assert diverge.verdict == REPRODUCED and diverge.interval.n == (3,)
    paper.loc[paper["variant"] == "pde_s8", "status"] = "ok"
    diverge = _by_claim(_claims(paper, studies, "paper"))["(c)#1"]
    assert diverge.verdict == NOT_MEASURABLE and "0 of 3" in diverge.reason


def test_audit_judges_a_causal_mechanism_on_ln_ppl_per_seed(summary, studies) -> None:
    """On the paper profile a causal PDE model is judged on ln ppl, paired over seeds; the
    smoke profile only checks the pipeline and leaves the verdict to the paper profile."""
    causal = _three_seeds(summary)
    _set_ppl(causal, "pde_s4", [1.10, 1.12, 1.13], "causal")
    b = _by_claim(_claims(causal, studies, "paper"))["(b)#0"]
    assert b.verdict == REPRODUCED  # 1.1 vs ~410 from a causal model, three seeds
    gap = dict(b.interval.pairs)["standard − PDE"]  # and "about 1-3": below perplexity 10
    assert gap.unit == "ln ppl" and gap.n == (3, 3)
    assert gap.measured.test == "paired t"  # both arms hold seeds 0-2
    expected = np.mean(np.log([400, 420, 428.4])) - np.mean(np.log([1.10, 1.12, 1.13]))
    assert math.isclose(gap.estimate, expected)
    assert "1.12" in b.ours  # a causal model's perplexity is a result
    smoke = _by_claim(_claims(causal, studies))["(b)#0"]
    assert smoke.verdict == NEEDS_PAPER and "not judged" in smoke.reason
    # lower than the standard by far less than the paper's ln(13,318.9 / 3.49)
    _set_ppl(causal, "pde_s4", [300.0, 310.0, 305.0], "causal")
    b = _by_claim(_claims(causal, studies, "paper"))["(b)#0"]
    assert b.verdict == NOT_REPRODUCED and "below 10" in b.reason  # nowhere near 1-3
    gap = dict(b.interval.pairs)["standard − PDE"]
    assert gap.high < math.log(13318.9 / 3.49) / 2  # and far less of a gap than the paper's
    two_seeds = summary.copy()
    _set_ppl(two_seeds, "pde_s4", [1.10, 1.12], "causal")
    b = _by_claim(_claims(two_seeds, studies, "paper"))["(b)#0"]
    assert b.verdict == NOT_MEASURABLE  # seeds needed shown for the gap
    assert dict(b.interval.pairs)["standard − PDE"].needed is not None


def test_four_steps_best_needs_every_pair(summary, studies) -> None:
    """An ordering holds only when 4 steps beat each other setting, one setting at a time."""
    causal = _three_seeds(summary)
    for variant, ppl in (
        ("pde_s1", [3.49, 3.52, 3.47]),
        ("pde_s2", [3.42, 3.44, 3.41]),
        ("pde_s4", [3.36, 3.37, 3.35]),
    ):
        _set_ppl(causal, variant, ppl, "causal")
    c = _by_claim(_claims(causal, studies, "paper"))["(c)#0"]
    assert c.verdict == REPRODUCED and c.interval.n == (3, 3)
    assert len(c.interval.pairs) == 2  # 4 vs 1 and 4 vs 2, both kept
    nearest = np.mean(np.log([3.36, 3.37, 3.35])) - np.mean(np.log([3.42, 3.44, 3.41]))
    assert math.isclose(c.interval.estimate, nearest)  # the pair nearest zero is shown
    smoke = _by_claim(_claims(causal, studies))["(c)#0"]
    assert smoke.verdict == NEEDS_PAPER and "not judged" in smoke.reason
    _set_ppl(causal, "pde_s2", [3.0, 3.02, 2.99], "causal")  # 2 steps now beat 4
    c = _by_claim(_claims(causal, studies, "paper"))["(c)#0"]
    assert c.verdict == NOT_REPRODUCED and c.interval.estimate > 0


def _classification(gains: dict[str, list[float]]) -> pd.DataFrame:
    """Classification runs at four seeds: the standard model at 60 % (a little spread), the
    PDE model ``gains`` points above it, per task and seed."""
    rows = [
        _row(task, variant, seed, test_acc=(60.0 + 0.3 * seed + (g if pde else 0.0)) / 100)
        for task, per_seed in gains.items()
        for seed, g in enumerate(per_seed)
        for variant, pde in (("baseline", False), ("pde_s4", True))
    ]
    return pd.DataFrame(rows)


def test_a_gain_on_three_tasks_needs_each_task(summary, studies) -> None:
    """A gain claimed "on IMDb, AG News and SST-2" holds only where it holds on each task: a
    clear loss on SST-2 refutes it, though the mean over the three tasks is a clear gain."""
    gains = {
        "imdb_wordpiece": [3.0, 3.4, 2.7, 3.2],
        "ag_news": [11.6, 12.1, 11.2, 11.9],
        "sst2": [-5.0, -4.6, -5.3, -4.9],
    }
    runs = pd.concat(
        [summary[summary["task"] == "wikitext"], _classification(gains)], ignore_index=True
    )
    a = _by_claim(_claims(runs, studies, "paper"))["(a)#0"]
    assert "IMDb, AG News and SST-2" in a.claim and "pde_s4" not in a.claim
    assert a.verdict == NOT_REPRODUCED and "SST-2" in a.reason
    assert a.interval.high < 0 and len(a.interval.pairs) == 3
    assert "SST-2 -4.95" in a.ours and "AG News +11.70" in a.ours  # the per-task rows stay
    # the mean over the tasks, as the claim was read before, is a gain
    task_names = list(gains)
    mean = difference(
        100 * accuracy_per_seed(runs, "pde_s4", task_names),
        100 * accuracy_per_seed(runs, "baseline", task_names),
        +1,
        float(np.mean([3.0, 11.6, 19.7])),
        "points",
        1.0,
    )
    assert mean[1] in (REPRODUCED, SIGN_ONLY) and mean[0].low > 0
    # every task a gain as the paper prints it: reproduced
    gains["sst2"] = [19.7, 20.1, 19.4, 19.9]
    runs = pd.concat(
        [summary[summary["task"] == "wikitext"], _classification(gains)], ignore_index=True
    )
    a = _by_claim(_claims(runs, studies, "paper"))["(a)#0"]
    assert a.verdict == REPRODUCED
    smoke = _by_claim(_claims(runs, studies))["(a)#0"]
    assert smoke.verdict == NEEDS_PAPER and "not judged" in smoke.reason


def test_audit_only_with_the_pde_studies(summary, studies, params) -> None:
    only_positions = {"positions": study(params, "positions", "smoke")}
    ctx = ReportContext(summary, only_positions, "smoke", Path("."))
    assert claims(ctx, PAPER.study_kinds) == [] and claims_notes(ctx, PAPER.study_kinds) == []


def test_notes_word_the_mechanism_as_our_reading_and_name_the_baseline_mask(
    summary, studies
) -> None:
    ctx = ReportContext(summary, studies, "smoke", Path("."))
    text = "\n".join(claims_notes(ctx, PAPER.study_kinds))
    assert "v[t+1]" in text and "Neumann" in text and "keys ≤ t" in text
    assert "nearly knows every next token" in text
    # what this build shows of the leak, not a perplexity "falling towards 1" it may not show
    assert "perplexity falls towards 1" not in text
    assert "wikitext: 11 leaky variants 1.11-1.11 (lowest pde_s1)" in text
    assert "17 causal 385.00-410.00 (baseline 410.00)" in text
    assert "without saying along which axis" in text and "our reading" in text
    assert "The paper evolves A along the key axis" not in text  # the paper never says so
    assert "no causal mask" in text and "baseline: causal" in text
    # a leaking baseline would score near 1: its thousands point away from a leak
    assert "could read future tokens too" not in text and "not known to come from" not in text
    assert "point away from a leak" in text and "30,522" in text
    assert "smoke profile" in text  # which profile made the run-based numbers
    probes = _by_claim(claims(ctx, PAPER.study_kinds))["(b)#0"].ours
    assert "baseline: causal (ours; the released baseline has no causal mask)" in probes
    caption = lm_caption(lm_frame(summary, studies["pde_steps"]), studies["pde_steps"], "smoke")
    assert "no causal mask" in caption and "our reading" in caption
    assert "could read future tokens too" not in caption and "near 1" in caption


def test_every_headline_claim_has_a_row(summary, studies) -> None:
    """Coverage: the claims with no experiment, the theorems, Fig. 5, the cost tables, C.6 and
    Table 13 each get a row."""
    found = _claims(summary, studies)
    wheres = " | ".join(c.where for c in found)
    for where in ("Theorem D.1", "Theorem D.2", "Theorem D.3", "Fig. 5", "Table 13", "C.6"):
        assert where in wheres, where
    for table in ("Table 14", "Tables 15-16", "Table 15", "Table 16"):
        assert table in wheres, table
    missing = {c.quote for c in found if c.verdict == NO_EXPERIMENT}
    assert {"including machine translation", "long-document question answering"} <= missing
    assert "time-series forecasting" in missing
    assert all(c.where and c.quote for c in found)
    cost = [c for c in found if c.where.startswith("Table 15")]
    assert cost[0].verdict == NEEDS_PAPER and "206.44" in cost[0].paper


PAPER_TEXT = [
    p / "continuous-time-attention.md"
    for p in (ROOT / "shared" / "papers", ROOT.parent / "shared" / "papers")
    if (p / "continuous-time-attention.md").exists()
]


@pytest.mark.skipif(not PAPER_TEXT, reason="the paper's text is not beside the project")
def test_quotes_are_the_papers_own_words(summary, studies) -> None:
    text = " ".join(PAPER_TEXT[0].read_text().split())
    for c in _claims(summary, studies):
        assert " ".join(c.quote.split()) in text, c.quote


def test_gradient_stability_the_gradient_bound_and_near_linear_runtime_have_rows(
    summary, studies
) -> None:
    """The abstract's gradient stability (no gradient norm recorded: not measurable here),
    Theorem D.1 (3) (no experiment in the paper or here) and the conclusion's near-linear
    runtime (near-linear for the hybrids, quadratic for the PDE-Transformer on standard
    attention: ambiguous as printed, each reading shown)."""
    found = {c.claim: c for c in _claims(summary, studies)}
    stability = found["PDE attention improves gradient stability during training"]
    assert stability.verdict == NOT_MEASURABLE and "no gradient norm" in stability.reason
    bound = found[
        "Theorem D.1 (3): the back-propagated gradient is bounded independently of L and N"
    ]
    assert bound.verdict == INCONSISTENT and bound.profile is None
    runtime = found["The PDE refinement preserves near-linear runtime"]
    assert runtime.verdict == AMBIGUOUS
    assert [r.verdict for r in runtime.readings] == [INCONSISTENT, CONSISTENT]


def test_table13_loss_contradicts_its_perplexities() -> None:
    found = table13_finding()
    assert found.verdict == INCONSISTENT and found.profile is None
    assert "7.47" in found.ours and "0.43" in found.ours and "1,148x" in found.ours


def test_table3_and_c6_checked_as_exp_of_loss() -> None:
    assert exp_agrees(0.02, 1.02) and not exp_agrees(0.25, 1.35)
    assert exp_agrees(9.95, 20990.31)  # rounding of the loss allows 20,847-21,057
    table3 = table3_finding()  # which split each column is, the paper does not say
    assert table3.verdict == AMBIGUOUS
    one_split, two_splits = table3.readings
    assert one_split.verdict == INCONSISTENT and "4 of 6" in one_split.result
    assert two_splits.verdict == CONSISTENT and "6 of 6 perplexities at or above" in (
        two_splits.result
    )
    c6 = c6_finding()
    assert c6.verdict == CONSISTENT and "11,470x" in c6.ours and "13,318.9" in c6.ours


def test_cost_tables_ratios_and_flops() -> None:
    ratios, flops = cost_findings()
    assert ratios.verdict == CONSISTENT and "1.441x" in ratios.ours
    assert flops.verdict == INCONSISTENT and "10,159,128,576" in flops.paper


def test_theorems_computed_on_the_diffusion_step() -> None:
    farthest, spread = reach(0.1, 4)
    assert farthest == 4 and math.isclose(spread, math.sqrt(2 * 0.1 * 4))
    assert reach(0.1, 16)[0] == 16  # the reach is the step count, whatever alpha
    monotone, rough_left, var_left = smoothing()
    assert monotone and rough_left < var_left < 1
    found = {c.where: c for c in theorem_findings()}
    assert found["Sec. 4.0.3; Theorem D.3"].verdict == INCONSISTENT


def test_theorem_two_fails_with_its_reaction_term_and_holds_for_diffusion() -> None:
    """Theorem D.2 includes a Lipschitz reaction term: the paper's own reaction-diffusion
    (Table 11's alpha 0.10, beta 0.02) raises the row variance about 9x by step 200, R = beta A
    without bound; diffusion alone obeys (12)."""
    mean, above, early = reaction_variance("logistic")
    assert 8 < mean < 11 and above > 190 and early < 1  # falls over N_t = 4, then grows
    linear, linear_above, _ = reaction_variance("linear")
    assert linear > 50 and linear_above == 200
    assert reaction_variance("none", steps=200)[1] == 0  # diffusion alone never rises
    assert variance_rate() > 0
    two = theorem_two_finding()
    assert two.verdict == FAILS and [r.verdict for r in two.readings] == [FAILS, FAILS]
    assert "for diffusion alone (12) holds" in two.reason and "9.2 times" in two.reason


def test_theorem_one_split_into_its_two_parts_with_readings() -> None:
    one, two = theorem_one_findings()
    assert "D.1 (1)" in one.claim and one.verdict == AMBIGUOUS
    assert [r.verdict for r in one.readings] == [HOLDS, FAILS]
    assert "interaction range" in one.readings[0].name and "speed" in one.readings[1].name
    assert "D.1 (2)" in two.claim and two.verdict == FAILS
    assert all(r.verdict == FAILS for r in two.readings) and len(two.readings) == 2
    weights = distance_profile()
    assert weights[5] == 0 and np.all(np.diff(weights[1:5] / weights[:4]) < 0)


def test_gradient_bound_judged_by_its_proof() -> None:
    """D.1 (3) is a theorem: its proof is judged (step (v) cites "(??)"), not marked as
    having no experiment."""
    bound = gradient_bound_finding()
    assert bound.verdict == INCONSISTENT and bound.profile is None
    assert "(??)" in bound.reason and "(??)" in bound.quote
    assert math.isclose(np.linalg.svd(step_matrix(), compute_uv=False).max(), 1.0)


def test_range_growth_and_propositions_d4_d5() -> None:
    found = {c.claim.split(":")[0]: c for c in theorem_findings()}
    growth = found["Theorem D.2 (3)"]
    assert growth.verdict == AMBIGUOUS
    assert [r.verdict for r in growth.readings] == [FAILS, HOLDS]
    d4 = found["Proposition D.4"]
    assert d4.verdict == AMBIGUOUS and [r.verdict for r in d4.readings] == [FAILS, HOLDS]
    assert max(euler_error().values()) < 0.01  # C dt (1 + t) for diffusion: C stays small
    d5 = found["Proposition D.5"]
    curvature, errors = hybrid_error()
    assert d5.verdict == FAILS and curvature > 0
    assert errors[4.0] < errors[400.0] < errors[40000.0]  # grows with T at epsilon_0 = 0


def test_eight_steps_nan_against_eq23() -> None:
    row = steps_stability_finding()
    assert row.verdict == INCONSISTENT and "Eq. 23" in row.where
    assert all(r.verdict == INCONSISTENT for r in row.readings)
    assert "= 5 " in row.readings[0].result and "3.33" in row.reason


def test_baselines_that_did_not_learn() -> None:
    lm = lm_baseline_finding()
    assert lm.verdict == FAILS and "30,522" in lm.ours and "near 1" in lm.ours
    assert "20,990.31" in lm.paper and "9,096.30" in lm.paper
    cls = classification_baseline_finding()
    assert cls.verdict == FAILS and "IMDb and SST-2" in cls.reason
    assert steps_per_epoch(6_920) == 2 and steps_per_epoch(67_349) == 17
    assert "at most 100 in 50 epochs" in cls.readings[0].result
    assert "at most 850 in 50 epochs" in cls.readings[1].result
    std = deviations_finding()
    assert std.verdict == INCONSISTENT and std.where == "App. B.5.4"


def test_the_lm_baseline_verdict_holds_at_every_listed_line() -> None:
    """ "Barely learnt" is our line (the paper draws none): the verdict is read at each listed
    share of a uniform guess's ln perplexity and is the one they agree on; the printed
    baselines reach 86 %-96 %, so at 90 % only three of five lie above and it still fails."""
    lm = lm_baseline_finding()
    assert [r.name for r in lm.readings] == [
        f"barely learnt: ln ppl above {line:.0%} of a uniform guess's"
        for line in findings.UNIFORM_SHARES
    ]
    assert [r.result[:1] for r in lm.readings] == ["5", "5", "3"]
    assert {r.verdict for r in lm.readings} == {FAILS} and lm.verdict == FAILS
    assert "Readings: barely learnt" in lm.found_text()


def test_every_new_row_is_in_the_audit(summary, studies) -> None:
    claims_made = [c.claim for c in _claims(summary, studies)]
    for start in (
        "Theorem 1 (D.1 (1))",
        "Theorem 1 (D.1 (2))",
        "Theorem D.2 (3)",
        "Proposition D.4",
        "Proposition D.5",
        "Table 4: eight PDE steps",
        "Table 1's standard Transformer",
        "The standard Transformer of Tables 4-5",
        "Every experiment is repeated over 5 seeds",
    ):
        assert sum(c.startswith(start) for c in claims_made) == 1, start


def test_standard_with_two_numbers_is_explained(summary, studies) -> None:
    """Table 4's study averages the standard's seeds 0 and 1, Table 5's (one seed in smoke)
    seed 0 only: the notes and the caption say which runs each uses."""
    runs = {
        "pde_steps": {("wikitext", "baseline", 0), ("wikitext", "baseline", 1)},
        "pde_types": {("wikitext", "baseline", 0)},
    }
    ctx = ReportContext(summary, studies, "smoke", Path("."), runs)
    text = "\n".join(claims_notes(ctx, PAPER.study_kinds))
    assert "seed 0: 400.00, seed 1: 420.00" in text
    assert "Table 4: seeds 0, 1 (mean 410.00, n=2)" in text
    assert "Table 5: seeds 0 (mean 400.00, n=1)" in text
    assert "spread between seeds, not between models" in text
    own = summary[summary["seed"] == 0]
    caption = lm_caption(lm_frame(own, studies["pde_types"]), studies["pde_types"], "smoke")
    assert "averages this study's seeds only (baseline: seed 0: 400.00)" in caption


def _capture(monkeypatch) -> list[matplotlib.figure.Figure]:
    """Record every figure saved, to look at what was drawn."""
    saved: list[matplotlib.figure.Figure] = []
    original = matplotlib.figure.Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


def _labels(fig: matplotlib.figure.Figure) -> set[str]:
    return {h.get_label() for ax in fig.axes for h in ax.get_legend_handles_labels()[0]}


def test_figures_are_written_and_leaky_variants_never_plain(
    summary, studies, tmp_path, monkeypatch
) -> None:
    saved = _capture(monkeypatch)
    figures.ppl_by_steps(lm_frame(summary, studies["pde_steps"]), "T4", "smoke", tmp_path / "s.png")
    labels = _labels(saved[-1])
    assert "ours leak-free" in labels and "ours as described" not in labels  # leaky: marked
    texts = [t.get_text() for ax in saved[-1].axes for t in ax.texts]
    assert "as described:\nleaks" in texts and "as described:\ndiverged" in texts
    assert "smoke profile" in saved[-1]._suptitle.get_text()
    figures.ppl_bars(
        lm_frame(summary, studies["pde_types"]), "pde", "T5", "smoke", tmp_path / "t.png"
    )
    assert any("leaks future tokens (not a result)" in label for label in _labels(saved[-1]))
    hatched = [p for ax in saved[-1].axes for p in ax.patches if p.get_hatch()]
    assert hatched and all(math.isclose(p.get_height(), 1.11) for p in hatched)
    figures.ppl_bars(
        lm_frame(summary, studies["pde_longformer"]), "model", "T3", "paper", tmp_path / "l.png"
    )
    figures.ppl_by_seq_len(
        lm_frame(summary, studies["pde_seq_len"]), "B4", "smoke", tmp_path / "q.png"
    )
    assert "ours standard" in _labels(saved[-1]) and "paper PDE" in _labels(saved[-1])
    for name in ("s", "t", "l", "q"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_study_cli_writes_md_tex_png_for_each_new_kind(summary, tmp_path) -> None:
    from pdelab.report.__main__ import main

    path = tmp_path / "summary.parquet"
    summary.to_parquet(path)
    for name in PDE_STUDIES:
        out = {ext: tmp_path / f"{name}.{ext}" for ext in ("md", "tex", "png")}
        main(
            ["study", name, "--summary", str(path), "--profile", "smoke"]
            + ["--params", str(ROOT / "params.yaml")]
            + ["--md", str(out["md"]), "--tex", str(out["tex"]), "--figure", str(out["png"])]
        )
        md, tex = out["md"].read_text(), out["tex"].read_text()
        assert "not a reproduction" in md and "\\begin{tabular}" in tex, name
        assert "bert-base-uncased" in md, name
        assert out["png"].read_bytes()[:4] == b"\x89PNG", name
        if name != "pde_classification":
            assert WITHHELD in md and "| 1.11" not in md, name
    md = (tmp_path / "pde_classification.md").read_text()
    assert "| 64.68 " in md and "| +0.76 " in md  # text cells are kept as formatted


def test_report_has_the_audit_and_runs_columns(summary, studies, tmp_path) -> None:
    from pdelab.report.document import runs_table, write_report
    from pdelab.spec.plugins import active

    (tmp_path / "tables").mkdir()
    for name in studies:
        (tmp_path / "tables" / f"{name}.md").write_text(f"table {name}\n")
    ctx = ReportContext(summary, studies, "smoke", tmp_path)
    write_report(ctx, active(s.kind for s in studies.values()), tmp_path / "REPORT.md")
    report = (tmp_path / "REPORT.md").read_text()  # the scoreboard; the paper on its page
    page = (tmp_path / "report" / "continuous_time_attention.md").read_text()
    assert "## Continuous-Time Attention: the claims audited" in page
    linked = "".join(f.read_text() for f in (tmp_path / "report").glob("*.md"))  # long tables
    assert "| test_ppl " in report + linked and "| causality " in report + linked
    runs = runs_table(summary).set_index(["task", "variant", "seed"])
    assert runs.loc[("wikitext", "pde_s4", 0), "test_ppl"] == "1.1000 (leaks)"
    assert runs.loc[("wikitext", "baseline", 0), "test_ppl"] == "400.0000"
    older = runs_table(summary[summary["task"] == "listops"].dropna(axis=1, how="all"))
    assert "test_ppl" not in older and "causality" not in older
