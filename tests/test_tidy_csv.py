"""Every study table's CSV is tidy (pdelab.report.tidy): it reads with pandas.read_csv into
numeric mean/low/high/n/paper columns, one row per (study, task, variant, metric, source),
and each metric has one unit across every table. The tables: every study of the golden
summary (tests/golden), written by the report's own study step."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from pdelab.report import tidy
from tests.test_latex import STUDIES, study_tables


@pytest.fixture(scope="module")
def csvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    out = tmp_path_factory.mktemp("tidy")
    return {tex.stem: pd.read_csv(tex.with_suffix(".csv")) for tex in study_tables(out)}


@pytest.mark.parametrize("study", STUDIES)
def test_a_study_csv_is_tidy_and_numeric(csvs: dict[str, pd.DataFrame], study: str) -> None:
    frame = csvs[study]
    assert tuple(frame.columns) == tidy.COLUMNS
    for column in tidy.NUMERIC:
        assert pd.api.types.is_numeric_dtype(frame[column]), (study, column)
    assert not frame.duplicated(subset=list(tidy.KEY)).any()
    assert set(frame["study"]) == {study} and set(frame["source"]) <= tidy.SOURCES
    assert frame["mean"].notna().any()


def test_one_unit_per_metric_across_tables(csvs: dict[str, pd.DataFrame]) -> None:
    every = pd.concat(csvs.values())
    units = every.groupby("metric")["unit"].nunique()
    assert (units == 1).all(), units[units > 1]
    accuracy = every[every["metric"] == "accuracy"]
    assert set(accuracy["unit"]) == {"%"}
    assert accuracy["mean"].dropna().gt(1).any()  # percent, not a fraction


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


def test_display_names_are_the_papers(tmp_path: Path) -> None:
    from pdelab.report.display_names import display_name, display_text

    assert display_name("imdb_bytes_lra") == "Text"
    assert display_name("lra_fna") == "FNA"
    assert display_name("some_new_variant") == "some new variant"  # the fallback: words
    assert display_text("imdb_bytes_lra ours") == "Text ours"
