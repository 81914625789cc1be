"""Every CSV the report writes is tidy (pdelab.report.tidy): it reads with pandas.read_csv
into numeric mean/low/high/n/paper columns, one row per (study, task, variant, metric,
source), and each metric has one unit across every table. The tables: every study of the
golden summary (tests/golden) and every other study of params.yaml (Fractional Neural
Attention, Linear Diffusion Networks, the mechanisms) on a small summary made here, each
written by the report's own study step; and the probe and theory tables (diagnostics,
fna_graphs, fna_tail, fna_theory, ldn_theory) from small inputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from pdelab.report import tidy
from pdelab.report.__main__ import main
from tests.test_latex import STUDIES, study_tables

PARAMS = ROOT / "params.yaml"
PROBES = ("diagnostics", "fna_graphs", "fna_tail", "fna_theory", "ldn_theory", "theory")


def other_studies() -> list[str]:
    """The studies of params.yaml the golden summary has no runs of."""
    from pdelab.spec.config import load_params

    return [name for name in load_params(str(PARAMS))["studies"] if name not in STUDIES]


OTHERS = other_studies()


def _summary_row(task: str, variant: str, seed: int) -> dict:
    """A finished run with an accuracy set by its names and seed (BLEU for translation)."""
    acc = 0.5 + (sum(map(ord, task + variant)) % 30) / 100 + 0.01 * seed
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "profile": "smoke",
        "status": "ok",
        "test_acc": acc,
        "test_bleu": 100 * acc / 3 if task == "multi30k" else math.nan,
        "median_step_s": 0.01 * (1 + 0.01 * seed),
        "peak_memory_mb": 300.0 + seed,
        "parameters": 1000 + len(variant),
        "stand_in": "",
        "same_run_as": "",
    }


def other_tables(out: Path) -> list[Path]:
    """Every study of OTHERS written by the study step from a small summary of its smoke
    runs, with the files its table reads (the resolved FNA models and curves, the LDN
    models)."""
    from pdelab.papers.fractional_attention import CURVES_FILE, RUNS_FILE
    from pdelab.papers.fractional_attention import runs as fna_runs
    from pdelab.papers.linear_diffusion import MODELS_FILE
    from pdelab.papers.linear_diffusion.models import terms
    from pdelab.spec.config import load_params, resolve
    from pdelab.spec.studies import study

    params = load_params(str(PARAMS))
    keys = sorted({(r.task, r.variant, r.seed) for n in OTHERS for r in study(params, n).runs})
    summary = pd.DataFrame([_summary_row(*key) for key in keys])
    fna, curves, ldn = [], [], []
    for r in summary.itertuples():
        spec = resolve(params, r.task, r.variant, r.seed).to_dict()
        identity = {"task": r.task, "variant": r.variant, "seed": r.seed, "trained_as": r.variant}
        fna.append(identity | fna_runs.model_row(spec))
        curves += [identity | {"epoch": e, "val_acc": r.test_acc - 0.1 / e} for e in (1, 2)]
        model = spec["model"]
        counted = {"parameters": 100_000, "macs": 2e7, "reference_dim": math.nan}
        counted |= {"reference_parameters": math.nan, "reference_macs": math.nan}
        ldn.append(identity | terms(spec) | counted | {k: model[k] for k in ("dim", "layers")})
    for name, rows in ((RUNS_FILE, fna), (CURVES_FILE, curves), (MODELS_FILE, ldn)):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(out / name)
    path = out / "summary.parquet"
    summary.to_parquet(path)
    (out / "tables").mkdir(exist_ok=True)
    common = ["--params", str(PARAMS), "--summary", str(path), "--profile", "smoke"]
    for name in OTHERS:
        md, tex = out / "tables" / f"{name}.md", out / "tables" / f"{name}.tex"
        main(["study", name, *common, "--md", str(md), "--tex", str(tex)]
             + ["--figure", str(out / f"{name}.png")])  # fmt: skip
    return [out / "tables" / f"{name}.csv" for name in OTHERS]


def probe_tables(out: Path) -> list[Path]:
    """The probe and theory tables' CSVs, each from small inputs: made-up diagnostics and
    probe rows, the FNA theory at two alphas, the LDN theory checks at small sizes."""
    from pdelab.papers.diffusion_positions.diagnostics_report import write_outputs
    from pdelab.papers.fractional_attention import graph_probe, tail
    from pdelab.papers.fractional_attention.theory_report import build
    from pdelab.papers.linear_diffusion import theory, theory_report

    (out / "tables").mkdir()
    diag, summary = diagnostics_inputs()
    write_outputs(diag, summary, None, out / "tables" / "diagnostics.md")
    made = tail.TableFile(data=tail.tail_data(tail_stats()))
    made.write(out / "tables" / "fna_tail.md", None, "smoke")
    made = graph_probe.TableFile(data=graph_probe.graph_data(graph_frames()))
    made.write(out / "tables" / "fna_graphs.md", None, "smoke")
    build(out, alphas=[1.2, 2.0], refine=1)
    sums = theory.row_sum_check(t=16, c=4, seeds=1)
    dependency = theory.global_dependency(lengths=(16,), sigmas=(2.0,))
    norms = theory.norm_search(lengths=(8,), draws=1, steps=2)
    cost = theory.cost_in_length(lengths=(32, 64), c=4)
    trained = pd.DataFrame(
        {"task": "listops", "variant": "ldn", "seed": [0, 1], "layer": 0, "norm_2": [1.5, 1.7]}
        | {"drift": [1e-7, 2e-7], "linked_share": [0.5, 0.75]}
    )
    table = pd.DataFrame({"check": ["a check", "another"], "verdict": ["holds", "fails"]})
    data = theory_report.theory_data(table, sums, dependency, norms, cost, trained)
    theory_report.TableFile(data=data).write(out / "tables" / "ldn_theory.md", None, "smoke")
    from pdelab.papers.diffusion_positions.theory_report import theory_tables, write_table

    write_table(out / "tables" / "theory.md", theory_tables())  # Layer I: seconds, no model
    return [out / "tables" / f"{name}.csv" for name in PROBES]


def diagnostics_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-point diagnostics of four variants on two tasks and two seeds, and their runs."""
    diag, summary = [], []
    for task in ("listops", "retrieval"):
        for i, variant in enumerate(("baseline", "a", "b", "c")):
            for seed in (0, 1):
                feature = 1.0 + i + 0.1 * seed
                for point in ("embedding", "after_attention"):
                    diag.append(
                        {"task": task, "variant": variant, "seed": seed, "layer": 0}
                        | {"point": point, "depth": 0, "site_active": point != "embedding"}
                        | {"roughness": feature, "roughness_scalefree": feature}
                        | {"commutator_exact_ref_rel": 2 * feature}
                        | {"commutator_linear_ref_rel": feature + seed}
                    )
                acc = 0.5 - 0.05 * i + 0.01 * seed * i
                summary.append(
                    {"task": task, "variant": variant, "seed": seed, "status": "ok"}
                    | {"test_acc": acc, "profile": "smoke"}
                )
    return pd.DataFrame(diag), pd.DataFrame(summary)


def tail_stats() -> pd.DataFrame:
    """tail.py's per-run, per-layer rows of two seeds of two layers."""
    rows = []
    for seed in (0, 1):
        for layer in (0, 1):
            rows.append(
                {"task": "imdb_wordpiece", "variant": "fna", "seed": seed, "layer": layer}
                | {"head_dim": 32, "kappa": 258.0, "exponent": 33.2, "pairs": 100 + layer}
                | {"z_median": 0.01 + 0.001 * seed, "z_p99": 0.05, "z_max": 0.2 + seed}
                | {"share_above_0.1": 0.01 * seed, "share_above_1": 0.0, "tv_laplace": 0.02}
            )
    return pd.DataFrame(rows)


def graph_frames() -> dict[str, pd.DataFrame]:
    """graph_probe.py's frames for a one-layer FNA and DP model of two seeds."""
    from pdelab.papers.fractional_attention.graph_probe import NULLS

    ablation, gaps, hops = [], [], []
    for variant, mechanism, alpha in (("fna_l1", "fna", 1.2), ("dp_l1", "dp", math.nan)):
        for seed in (0, 1):
            ident = {"task": "listops", "variant": variant, "seed": seed}
            ident |= {"mechanism": mechanism, "alpha": alpha, "dim": 8, "tied": False}
            for null in NULLS:
                for p in (0.0, 0.5, 1.0):
                    ablation.append(
                        ident | {"p": p, "null": null, "acc": 0.6 - 0.2 * p + seed / 100}
                    )
            gaps.append(ident | {"gap": 0.3 + seed / 10, "gap_std": 0.1, "sequences": 8})
            hops.append(ident | {"length": 40, "max_hops": 3.0 + seed, "mean_hops": 1.5})
    frames = {"ablation": ablation, "gaps": gaps, "hops": hops, "diffusion": []}
    return {name: pd.DataFrame(rows) for name, rows in frames.items()}


@pytest.fixture(scope="module")
def csvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    """Every CSV the report writes, by its table's name."""
    golden = [tex.with_suffix(".csv") for tex in study_tables(tmp_path_factory.mktemp("golden"))]
    files = golden + other_tables(tmp_path_factory.mktemp("others"))
    files += probe_tables(tmp_path_factory.mktemp("probes"))
    return {path.stem: pd.read_csv(path) for path in files}


ALL = [*STUDIES, *OTHERS, *PROBES]


@pytest.mark.parametrize("name", ALL)
def test_a_csv_is_tidy_and_numeric(csvs: dict[str, pd.DataFrame], name: str) -> None:
    frame = csvs[name]
    assert tuple(frame.columns) == tidy.COLUMNS
    for column in tidy.NUMERIC:
        assert pd.api.types.is_numeric_dtype(frame[column]), (name, column)
    assert not frame.duplicated(subset=list(tidy.KEY)).any()
    assert set(frame["study"]) == {name} and set(frame["source"]) <= tidy.SOURCES
    assert frame["mean"].notna().any()
    assert (frame["unit"] == frame["metric"].map(tidy.UNITS)).all()
    printed = frame[frame["source"] == "paper"]
    assert np.allclose(printed["mean"], printed["paper"], equal_nan=True)  # as printed


def test_one_unit_per_metric_across_tables(csvs: dict[str, pd.DataFrame]) -> None:
    assert set(csvs) == set(ALL)
    every = pd.concat(csvs.values())
    units = every.groupby("metric")["unit"].nunique()
    assert (units == 1).all(), units[units > 1]
    accuracy = every[every["metric"] == "accuracy"]
    assert set(accuracy["unit"]) == {"%"}
    assert accuracy["mean"].dropna().gt(1).any()  # percent, not a fraction
    shares = every[every["metric"] == "share"]["mean"].dropna()
    assert shares.gt(1).any() and shares.le(100).all()  # percent too


# the studies with a paper table the report reads back: each gives the paper's values
PAPER_FILLED = [n for n in [*STUDIES, *OTHERS] if n not in ("fna_ablations", "fna_shallow",
                "ldn_ablations", "mechanisms")]  # fmt: skip


@pytest.mark.parametrize("name", PAPER_FILLED)
def test_a_study_with_a_paper_table_carries_the_papers_numbers(
    csvs: dict[str, pd.DataFrame], name: str
) -> None:
    frame = csvs[name]
    assert frame["paper"].notna().any(), name


def test_our_rows_carry_the_papers_value_beside_them(csvs: dict[str, pd.DataFrame]) -> None:
    from pdelab.papers.fractional_attention.tables import paper_rows

    imdb = csvs["fna_imdb"].set_index(["task", "variant", "metric", "source"])
    printed = paper_rows("fna_imdb.csv")
    ours = imdb.loc[("imdb_wordpiece", "fna", "accuracy", "ours")]
    assert ours["paper"] == pytest.approx(printed.loc["fna", "mean"])
    median = imdb.loc[("imdb_wordpiece", "fna", "accuracy_median", "paper")]
    assert median["mean"] == pytest.approx(printed.loc["fna", "median"])
    lra = csvs["ldn_lra"].set_index(["task", "variant", "metric", "source"])
    assert lra.loc[("listops", "ldn", "accuracy", "ours"), "paper"] > 1  # percent
    steps = csvs["pde_steps"].set_index(["variant", "metric", "source"])
    assert steps.loc[("pde_s1", "perplexity", "ours"), "paper"] == pytest.approx(3.49)
    assert math.isnan(steps.loc[("pde_s1_causal", "perplexity", "ours"), "paper"])  # ours only


def test_a_probe_aggregates_its_runs_over_seeds(csvs: dict[str, pd.DataFrame]) -> None:
    tail = csvs["fna_tail"].set_index(["variant", "metric"])
    assert tail.loc[("fna", "z_max"), "n"] == 2
    assert tail.loc[("fna", "z_max"), "mean"] == pytest.approx(0.7)  # 0.2 and 1.2
    graphs = csvs["fna_graphs"].set_index(["variant", "metric"])
    hops = graphs.loc[("fna_l1: length 40", "hops_max")]
    assert hops["mean"] == pytest.approx(3.5) and hops["paper"] == 2  # fna_shortest_paths.csv
    diag = csvs["diagnostics"]
    pearson = diag[(diag["metric"] == "pearson") & (diag["task"] == "all")]
    assert pearson["n"].max() == 2 and pearson["mean"].between(-1, 1).all()
    theory = csvs["fna_theory"]
    slopes = theory[theory["metric"] == "slope"]
    assert set(slopes["paper"]) == {1.2, 2.0}  # the exponent the paper predicts
    ldn = csvs["ldn_theory"].set_index(["variant", "metric"])
    assert ldn.loc[("a check", "holds"), "mean"] == 1 and ldn.loc[("another", "holds"), "mean"] == 0


def test_an_unknown_metric_or_a_display_string_is_refused() -> None:
    with pytest.raises(KeyError):
        tidy.row("s", "t", "v", "accuracy_fraction", 0.5)
    rows = tidy.frame([tidy.row("s", "t", "v", "accuracy", "86.50 ± 0.87 (n=3)")])
    assert math.isnan(rows["mean"].iloc[0])  # a display string is never a number here
    with pytest.raises(ValueError):
        tidy.check(rows.assign(mean=["86.50 ± 0.87"]))


def test_from_std_is_the_t_interval() -> None:
    low, high = tidy.from_std(50.0, 2.0, 4)
    assert low < 50 < high and math.isclose(high - 50, 50 - low)
    assert all(math.isnan(x) for x in tidy.from_std(50.0, 2.0, 1))


def test_a_verdict_reads_as_a_number() -> None:
    assert tidy.verdict_number("holds") == 1 and tidy.verdict_number("agrees") == 1
    assert tidy.verdict_number("fails") == 0 and tidy.verdict_number("disagrees") == 0
    assert math.isnan(tidy.verdict_number("partly: nearer j^1.2 than j^2"))
    assert math.isnan(tidy.verdict_number("ambiguous as printed: agrees over 2-50"))


def test_display_names_are_the_papers(tmp_path: Path) -> None:
    from pdelab.spec.display_names import display_name, display_text

    assert display_name("imdb_bytes_lra") == "Text"
    assert display_name("lra_fna") == "FNA"
    assert display_name("some_new_variant") == "some new variant"  # the fallback: words
    assert display_text("imdb_bytes_lra ours") == "Text ours"
