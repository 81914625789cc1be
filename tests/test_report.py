"""Report tables: the paper's number beside ours, seeds counted, divergence shown."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pdelab.papers.diffusion_positions.claims import multiscale_claims, position_claims
from pdelab.papers.diffusion_positions.tables import (
    cost_frame,
    multiscale_frame,
    paper_table,
    seeds_frame,
)
from pdelab.plan.step_timing import summarize
from pdelab.report.claims import NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, SIGN_ONLY, Claim
from pdelab.report.context import ReportContext
from pdelab.report.document import (
    CELL_MAX,
    FULL_ROWS,
    ROWS_MAX,
    anchor,
    contents,
    headline,
    row_cells,
)
from pdelab.report.stats import welch_interval
from pdelab.report.tables import accuracy_tables, gains, render
from pdelab.report.tables import study_frame as generic_study_frame
from pdelab.spec.studies import Study


def study_frame(summary: pd.DataFrame, study: dict) -> pd.DataFrame:
    return generic_study_frame(summary, study, paper_table(study["paper_table"]))


STUDY = {
    "tasks": ["listops"],
    "variants": ["baseline", "after_embedding", "after_attention"],
    "paper_table": "diffusion_positions_lra.csv",
}


def summary() -> pd.DataFrame:
    rows = [
        ("baseline", 0, "ok", 0.30),
        ("baseline", 1, "ok", 0.34),
        ("after_embedding", 0, "ok", 0.40),
        ("after_embedding", 1, "diverged", math.nan),
        ("after_attention", 0, "diverged", math.nan),
    ]
    return pd.DataFrame(
        [
            {
                "task": "listops",
                "variant": v,
                "seed": s,
                "status": st,
                "test_acc": a,
                "profile": "smoke",
            }
            for v, s, st, a in rows
        ]
    )


def test_paper_values_and_seed_statistics() -> None:
    frame = study_frame(summary(), STUDY).set_index("variant")
    assert (
        frame.loc["baseline", "paper"]
        == paper_table("diffusion_positions_lra.csv").loc["baseline", "listops"]
        == 0.374
    )
    assert frame.loc["baseline", "n"] == 2 and math.isclose(frame.loc["baseline", "mean"], 0.32)
    assert math.isclose(frame.loc["baseline", "std"], pd.Series([0.30, 0.34]).std())
    assert math.isclose(frame.loc["baseline", "diff"], 0.32 - 0.374)
    assert frame.loc["after_embedding", "n"] == 1 and frame.loc["after_embedding", "diverged"] == 1


def test_rendered_table_names_profile_and_divergence(tmp_path) -> None:
    frame = study_frame(summary(), STUDY)
    wide = render(frame, "smoke").set_index("variant")
    assert wide.loc["after_attention", "listops ours"] == "diverged"
    assert "1 diverged" in wide.loc["after_embedding", "listops ours"]
    assert wide.loc["baseline", "listops ours"].startswith("32.00 ± 2.83 (n=2)")
    assert wide.loc["baseline", "listops paper"] == "37.40"  # percent, as the paper prints
    assert wide.loc["baseline", "listops Δ"] == "-5.40"  # points
    assert (wide["profile"] == "smoke").all()
    accuracy_tables(frame, "Positions", "smoke").write(
        tmp_path / "t.md", tmp_path / "t.tex", "smoke"
    )
    md, tex = (tmp_path / "t.md").read_text(), (tmp_path / "t.tex").read_text()
    assert "not a reproduction" in md and "| baseline" in md
    assert "\\begin{tabular}" in tex and "smoke" in tex


def test_gains_over_the_baseline_match_the_papers_table_6() -> None:
    frame = study_frame(summary(), STUDY)
    g = gains(frame).set_index("variant")
    assert math.isclose(g.loc["after_embedding", "paper Δ"], 100 * (0.3962 - 0.3740))  # points
    assert math.isclose(g.loc["after_embedding", "paper %"], 100 * 0.0222 / 0.374, rel_tol=1e-9)
    assert math.isclose(g.loc["after_embedding", "ours Δ"], 100 * (0.40 - 0.32))
    assert math.isnan(g.loc["after_attention", "ours Δ"])  # every seed diverged


def ablation_summary() -> pd.DataFrame:
    rows = []
    for variant, accs in {
        "baseline": [0.30, 0.32, 0.34],
        "after_embedding": [0.40, 0.42, 0.44],
        "after_mlp": [0.31, 0.33, 0.35],
    }.items():
        for seed, acc in enumerate(accs):
            rows.append(
                {
                    "task": "listops",
                    "variant": variant,
                    "seed": seed,
                    "status": "ok",
                    "test_acc": acc,
                    "profile": "smoke",
                    "median_step_s": 0.1 + 0.01 * (variant != "baseline"),
                    "peak_memory_mb": 100.0,
                    "memory_kind": "cpu_max_rss",
                }
            )
    return pd.DataFrame(rows)


def test_welch_interval_matches_a_hand_computation() -> None:
    a, b = pd.Series([0.40, 0.42, 0.44]), pd.Series([0.30, 0.32, 0.34])
    diff, lo, hi = welch_interval(a, b)
    se = math.sqrt(2 * 0.0004 / 3)  # both samples have variance 0.0004
    assert math.isclose(diff, 0.10) and math.isclose(hi - diff, 2.7764451 * se, rel_tol=1e-5)
    assert math.isnan(welch_interval(a[:1], b)[1])


def test_seeds_table_has_intervals_and_counts() -> None:
    study = {
        "tasks": ["listops"],
        "variants": ["baseline", "after_embedding", "after_mlp"],
        "paper_table": "diffusion_seeds_listops.csv",
    }
    summary = ablation_summary()  # gains that vary by seed, as trained ones do (paired t)
    spread = {("after_embedding", 1): 0.43, ("after_mlp", 1): 0.31, ("after_mlp", 2): 0.36}
    for (variant, seed), acc in spread.items():
        summary.loc[(summary["variant"] == variant) & (summary["seed"] == seed), "test_acc"] = acc
    frame = seeds_frame(summary, study).set_index("variant")
    assert frame.loc["after_embedding", "n"] == 3
    assert frame.loc["after_embedding", "95% CI low"] > 0  # a clear gain excludes zero
    assert frame.loc["after_mlp", "95% CI low"] < 0 < frame.loc["after_mlp", "95% CI high"]
    assert frame.loc["baseline", "paper mean"] == 0.3740


def test_cost_table_reads_the_interleaved_timing_not_the_runs() -> None:
    study = {
        "tasks": ["listops"],
        "variants": ["baseline", "after_embedding", "after_mlp"],
        "paper_table": "diffusion_cost_listops.csv",
    }
    timing = summarize({"baseline": [0.10, 0.20], "after_embedding": [0.11, 0.22]}, "baseline")
    frame = cost_frame(timing.assign(repeats=2), study).set_index("variant")
    assert math.isclose(frame.loc["after_embedding", "ours time %"], 10.0)
    assert math.isclose(frame.loc["after_embedding", "step ms"], 165.0)
    assert frame.loc["after_embedding", "paper time %"] == 5.6
    assert frame.loc["baseline", "ours time %"] == 0
    assert math.isnan(frame.loc["baseline", "95% CI low"])  # the reference has no interval
    assert math.isnan(frame.loc["after_mlp", "ours time %"])  # not timed: n/a, not zero
    assert math.isnan(frame.loc["after_embedding", "ours memory %"])  # CPU: not measured


def test_multiscale_table_best_single_and_gain() -> None:
    summary = ablation_summary()
    summary = pd.concat(
        [
            summary.assign(
                variant=summary["variant"].replace(
                    {"after_embedding": "ae_ms", "after_mlp": "ae_h1"}
                )
            ),
            summary[summary.variant == "after_mlp"].assign(variant="ae_h2", test_acc=0.5),
        ]
    )
    study = {
        "tasks": ["listops"],
        "paper_table": "diffusion_multiscale_listops.csv",
        "grid": {
            "after_embedding": {"fast_h1": "ae_h1", "medium_h2": "ae_h2", "multiscale": "ae_ms"}
        },
    }
    row = multiscale_frame(summary, study).set_index("position").loc["after_embedding"]
    assert math.isclose(row["best_single ours"], 0.5)
    assert math.isclose(row["multiscale_gain ours"], 0.42 - 0.5)
    assert row["multiscale_gain paper"] == 0.0090
    # the claims' comparison, named apart: against our run of the paper's best single scale
    comparator = row["paper's best"]
    assert comparator in ("fast_h1", "medium_h2")
    assert math.isclose(row["vs paper's best ours"], 0.42 - row[f"{comparator} ours"])


def position_rows(seeds: int) -> list[dict]:
    """Every position on listops, each seed moving each variant a little differently (paired
    differences need a spread to give an interval)."""
    accuracy = {
        "baseline": 0.30,
        "after_embedding": 0.40,
        "after_mlp": 0.33,
        "layer_diffusion": 0.32,
        "before_layernorm": 0.31,
        "in_attention": 0.30,
        "head_diffusion": 0.30,
        "after_attention": 0.25,
    }
    return [
        {
            "task": "listops",
            "variant": variant,
            "seed": seed,
            "status": "ok",
            "test_acc": acc + 0.001 * (((seed + 1) * (i + 3)) % 11),  # a spread of its own
            "median_step_s": 0.1,
        }
        for seed in range(seeds)
        for i, (variant, acc) in enumerate(accuracy.items())
    ]


def position_context(profile: str, seeds: int = 4) -> ReportContext:
    block = {
        "kind": "accuracy",
        "tasks": ["listops"],
        "paper_table": "diffusion_positions_lra.csv",
        "variants": [],
    }
    studies = {"positions": Study.from_block("positions", block)}
    return ReportContext(pd.DataFrame(position_rows(seeds)), studies, profile, Path("."))


def test_position_claims_on_a_clear_gain() -> None:
    """On a judged profile a clear gain shows on the claimed side (P1's +10 points are far
    above the paper's +2.2: in sign only); the smoke profile decides nothing."""
    claims = {
        c.claim.split(":")[0].split(" (")[0]: c for c in position_claims(position_context("paper"))
    }
    p1 = claims["P1 after embedding raises average accuracy over the baseline"]
    assert math.isclose(p1.interval.estimate, 10.0, abs_tol=0.5) and p1.verdict == SIGN_ONLY
    assert p1.paper == f"{100 * (0.3962 - 0.3740):+.2f} points"
    assert p1.interval.measured.test == "paired t"  # the same seeds on both sides
    p7 = claims["P7 after attention lowers average accuracy below the baseline"]
    assert p7.verdict in (REPRODUCED, SIGN_ONLY) and p7.interval.estimate < 0
    assert p7.interval.n == (4, 4) and p7.profile == "paper"
    early = claims["Contribution 2"]  # as the paper states it: P1 against P7 directly
    assert math.isclose(early.interval.estimate, 15.0, abs_tol=0.5)
    assert early.verdict in (REPRODUCED, SIGN_ONLY)
    smoke = position_claims(position_context("smoke"))
    assert all(c.verdict not in (REPRODUCED, SIGN_ONLY, NOT_REPRODUCED) for c in smoke)
    assert any("not judged" in c.reason for c in smoke)


def test_tables_name_stand_ins(tmp_path) -> None:
    data = summary().assign(stand_in="a synthetic task stands in for IMDb")
    frame = study_frame(data, STUDY)
    accuracy_tables(frame, "Positions", "smoke").write(
        tmp_path / "t.md", tmp_path / "t.tex", "smoke"
    )
    assert (
        "**listops** is a stand-in: a synthetic task stands in for IMDb."
        in (tmp_path / "t.md").read_text()
    )
    # a stand-in's accuracy minus the paper's is no difference: none is shown
    assert (render(frame, "smoke")["listops Δ"] == "n/a (stand-in)").all()
    real = accuracy_tables(study_frame(summary(), STUDY), "P", "smoke")
    real.write(tmp_path / "u.md", tmp_path / "u.tex", "smoke")
    assert "stand-in" not in (tmp_path / "u.md").read_text()  # real data: no note


def test_claims_use_only_their_studys_runs() -> None:
    data = ablation_summary()  # 3 seeds per variant
    noise = data["seed"].map({0: 0.0, 1: 0.004, 2: -0.003}) * (data["variant"] == "after_mlp")
    data = data.assign(test_acc=data["test_acc"] + noise)
    block = {
        "multiscale": {
            "kind": "multiscale",
            "tasks": ["listops"],
            "variants": ["after_mlp", "after_embedding"],
            "paper_table": "diffusion_multiscale_listops.csv",
            "grid": {"after_embedding": {"fast_h1": "after_mlp", "multiscale": "after_embedding"}},
        }
    }
    study = {"multiscale": Study.from_block("multiscale", block["multiscale"])}

    def at_p1(keys: dict | None) -> Claim:
        claims = multiscale_claims(ReportContext(data, study, "paper", Path("."), keys))
        return next(c for c in claims if c.claim.endswith("at After Embedding (P1)"))

    every = at_p1(None)
    keys = {("listops", v, s) for v in ("after_mlp", "after_embedding") for s in (0, 1)}
    own = at_p1({"multiscale": keys})
    assert every.interval.n == (3, 3) and own.interval.n == (2, 2)
    assert every.verdict in (REPRODUCED, SIGN_ONLY) and own.verdict == NOT_MEASURABLE
    assert math.isclose(own.interval.estimate, 100 * (0.41 - 0.32), abs_tol=0.5)
    assert "Fast (h=1)" in every.ours  # each single scale the claim compares with is named


def test_figures_mark_stand_ins() -> None:
    from pdelab.report.figures import task_label

    frame = study_frame(summary().assign(stand_in="synthetic"), STUDY)
    assert task_label(frame, "listops") == "ListOps (stand-in)"  # the paper's name for it
    assert task_label(study_frame(summary(), STUDY), "listops") == "ListOps"


def test_report_md_shows_headline_tables_and_links_the_long_ones(tmp_path: Path) -> None:
    wide = "x " * CELL_MAX  # a cell of 2 * CELL_MAX characters
    table = ["| claim | note |", "|:--|--:|", f"| {wide} | `code span {wide}` |", "| a | b |"]
    long = ["| n |", "|---|", *(f"| {i} |" for i in range(ROWS_MAX + 1))]
    short = ["| n |", "|---|", "| 1 |"]
    lines = ["# A", "", *table, "", "## B", "", *long, "", *short]
    out = headline(lines, tmp_path)
    assert (tmp_path / "a.md").read_text().split("\n")[2:6] == table  # the whole, unchanged
    assert (tmp_path / "b.md").read_text().split("\n")[2:-1] == long
    cells = [c.strip() for line in out if line.startswith("|") for c in line.split("|")[1:-1]]
    assert max(map(len, cells)) <= CELL_MAX and "|:---|---:|" in out
    shown = next(line for line in out if line.startswith("| x"))
    assert shown.count("`") % 2 == 0 and "…" in shown  # no code span left open
    assert "[report/a.md](report/a.md)" in "\n".join(out)
    assert f"{ROWS_MAX + 1} rows, too many to show here: [report/b.md](report/b.md)" in out
    assert out[-3:] == short  # a short, narrow table stays as it is


def test_a_cut_row_links_to_itself_in_full_and_a_verdict_is_never_cut(tmp_path: Path) -> None:
    """No word of a cut row leaves REPORT.md: its last cut cell links to the row in full at
    the end of its section (before the next ``## ``), under a heading whose anchor is the
    link's; the verdict column, where the reason a verdict rests on stands, is never cut."""
    found = "we find " * 20
    reason = "not measurable here (" + "the seed rule decides " * 8 + ")"
    table = [
        "| claim | we find | verdict |",
        "|---|---|---|",
        f"| A beats B | {found.strip()} | {reason} |",
        f"| C beats D | short | {reason} |",
        "| E beats F | short | holds |",
    ]
    lines = ["## Paper X", "", *table, "", "A note.", "", "## Paper Y", "", *table]
    out = headline(lines, tmp_path)
    rows = [line for line in out if line.startswith("| ") and "beats" in line]
    assert [row_cells(r)[2] for r in rows] == [reason, reason, "holds"] * 2  # never cut
    first, second = row_cells(rows[0]), row_cells(rows[3])
    assert first[1].endswith("… [full](#claim-1)") and len(first[1]) <= CELL_MAX
    assert second[1].endswith("… [full](#claim-2)")  # numbered on through the document
    assert rows[1] == table[3] and rows[2] == table[4]  # nothing cut: no link, no full row
    text = "\n".join(out)
    assert text.index("A note.") < text.index("##### claim 1") < text.index("## Paper Y")
    assert anchor("claim 1") == "claim-1"
    at = out.index("##### claim 1")
    assert out[at + 2 : at + 5] == [
        "- **claim**: A beats B",
        f"- **we find**: {found.strip()}",
        f"- **verdict**: {reason}",
    ]
    assert out.count(FULL_ROWS) == 2 and text.rstrip().endswith(f"- **verdict**: {reason}")


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading, spelled out: lower case, keep letters, digits, ``_``, ``-``
    and spaces, then each space a ``-``."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in "_- ")
    return kept.replace(" ", "-")


def test_report_md_opens_with_contents_linking_every_section(tmp_path: Path) -> None:
    from pdelab.report.__main__ import main

    golden = Path(__file__).parent / "golden"
    shutil.copytree(golden / "expected" / "tables", tmp_path / "tables")
    shutil.copytree(golden / "cost", tmp_path / "cost")
    out = tmp_path / "REPORT.md"
    params, summary = str(golden / "params.yaml"), str(golden / "summary.parquet")
    main(["report", "--params", params, "--summary", summary, "--out", str(out)])
    lines = out.read_text().split("\n")
    assert lines[0] == "# pdelab report" and lines[2].startswith("Made by the **")
    assert lines[4] == "## Scoreboard"  # first, then the contents of what follows it
    start = lines.index("Contents:") + 2
    end = lines.index("", start)
    links = [re.fullmatch(r"- \[(.+)\]\(#(.+)\)", line) for line in lines[start:end]]
    assert all(links)
    headings = [line[3:] for line in lines[end:] if line.startswith("## ")]
    assert [m[1] for m in links] == headings  # every section, in order
    assert [m[2] for m in links] == [github_anchor(h) for h in headings]
    # each paper's claims and appendix on its page, which opens with its own contents
    page = (tmp_path / "report" / "diffusion_positions.md").read_text().split("\n")
    start = page.index("Contents:") + 2
    entries = page[start : page.index("", start)]
    anchors = [re.fullmatch(r"- \[(.+)\]\(#(.+)\)", line)[2] for line in entries]
    assert "where-to-add-pde-diffusion-in-transformers-the-claims-audited" in anchors
    assert "theory-checks-layer-i" in anchors


def test_contents_numbers_repeated_anchors_and_skips_code() -> None:
    lines = ["# Title", "", "## Runs", "```", "## not a heading", "```", "### Runs", "## Runs"]
    assert contents(lines) == ["Contents:", "", "- [Runs](#runs)", "- [Runs](#runs-2)", ""]


@pytest.mark.parametrize(
    ("environments", "note"),
    [
        (['{"threads": 1, "torch": "2.13"}', '{"threads": 2, "torch": "2.13"}'], "threads 1, 2"),
        (['{"torch": "2.12"}', '{"torch": "2.13"}', "{}"], "torch 2.12, 2.13"),
        (['{"threads": 1}', '{"threads": 1}'], None),
    ],
)
def test_a_table_of_runs_from_mixed_environments_says_so(
    tmp_path: Path, environments: list[str], note: str | None
) -> None:
    from pdelab.report.table_file import Grid, TableFile
    from pdelab.report.tables import environments_note

    found = environments_note(pd.DataFrame({"environment": environments}))
    if note is None:
        assert found is None
        return
    table = TableFile(["**T**", Grid(pd.DataFrame({"a": [1]}), "T.")]).add(found)
    table.write(tmp_path / "t.md", tmp_path / "t.tex", "smoke")
    md, tex = (tmp_path / "t.md").read_text(), (tmp_path / "t.tex").read_text()
    assert f"Built from runs made in different environments: {note}." in md
    assert note in tex and "\\footnotesize Built from" in tex


def test_a_study_writer_that_writes_its_own_files_is_told_to_return_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study step adds its notes before anything is written, so a writer hands its table
    back; one that returns nothing (writing files itself) is named, not half-written."""
    from pdelab.papers.diffusion_positions import report as positions
    from pdelab.report.__main__ import main

    monkeypatch.setitem(positions.STUDY_WRITERS, "accuracy", lambda s: None)
    golden = Path(__file__).parent / "golden"
    md, tex = tmp_path / "positions.md", tmp_path / "positions.tex"
    common = ["--params", str(golden / "params.yaml"), "--summary", str(golden / "summary.parquet")]
    paths = ["--md", str(md), "--tex", str(tex), "--figure", str(tmp_path / "p.png")]
    with pytest.raises(TypeError, match=r"returned NoneType: a study writer returns its table"):
        main(["study", "positions", *common, *paths])
    assert not md.exists() and not tex.exists()
