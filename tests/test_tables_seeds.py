"""Study tables and seeds: a difference's interval paired where both arms share their seeds,
as the claims' is, and a note wherever one model's mean differs between two tables because
each averages its own study's seeds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pdelab.report.decide import PAIRED, WELCH
from pdelab.report.stats import seed_interval, welch_interval
from pdelab.report.tables import other_seeds_note, seeds_text, study_notes
from pdelab.spec.studies import RunKey, Study


def per_seed(values: list[float], seeds: list[int] | None = None) -> pd.Series:
    index = pd.Index(seeds if seeds is not None else range(len(values)), name="seed")
    return pd.Series(values, index=index, dtype=float)


def test_shared_seeds_are_paired_and_the_pairing_narrows_the_interval() -> None:
    """Each seed moves both arms alike (+0.10 then +0.12, +0.11): paired, the interval is the
    one-sample t interval of the three differences; Welch's, over the same values, is far
    wider because it counts the seeds' common spread as noise."""
    base = per_seed([0.30, 0.50, 0.70])
    gain = per_seed([0.40, 0.62, 0.81])
    diff, low, high, test = seed_interval(gain, base)
    d = pd.Series([0.10, 0.12, 0.11])
    half = 4.302652729911275 * d.std(ddof=1) / math.sqrt(3)  # t(0.975, 2 df)
    assert test == PAIRED and math.isclose(diff, 0.11)
    assert math.isclose(low, 0.11 - half) and math.isclose(high, 0.11 + half)
    assert low > 0  # the gain is shown
    welch = welch_interval(gain.reset_index(drop=True), base.reset_index(drop=True))
    assert welch[1] < 0 < welch[2]  # unpaired, the same numbers show nothing


def test_arms_on_different_seeds_take_welchs_interval() -> None:
    a, b = per_seed([0.40, 0.42, 0.44]), per_seed([0.30, 0.32, 0.34], [3, 4, 5])
    diff, low, high, test = seed_interval(a, b)
    expected = welch_interval(a, b)
    assert test == WELCH and math.isclose(diff, 0.10)
    assert math.isclose(low, expected[1]) and math.isclose(high, expected[2])


def test_a_seed_interval_refuses_values_not_indexed_by_seed_or_pooled() -> None:
    with pytest.raises(ValueError, match="index each side by seed"):
        seed_interval(pd.Series([0.4, 0.5]), per_seed([0.3, 0.4]))
    with pytest.raises(ValueError, match="more than once"):
        seed_interval(per_seed([0.4, 0.5, 0.6], [0, 1, 0]), per_seed([0.3, 0.4]))
    one = seed_interval(per_seed([0.4]), per_seed([0.3]))
    assert math.isclose(one[0], 0.1) and math.isnan(one[1]) and math.isnan(one[2])


def study(name: str, seeds: list[int], variants: tuple[str, ...] = ("baseline", "pde")) -> Study:
    runs = tuple(RunKey("wikitext", v, s) for v in variants for s in seeds)
    block = {"kind": "x", "tasks": ["wikitext"], "variants": list(variants)}
    return Study(name, "x", name, ("wikitext",), variants, "baseline", None, runs, block)


def test_seeds_in_words() -> None:
    assert seeds_text([0]) == "seed 0"
    assert seeds_text([1, 0]) == "seeds 0, 1"
    assert seeds_text([0, 1, 2, 3, 4, 7]) == "seeds 0-4, 7"


def test_a_row_another_study_averages_over_other_seeds_is_explained() -> None:
    """pde_steps trains the baseline over seeds 0, 1 and pde_types over seed 0 alone: the one
    model shows two means, and both tables say why; a study on the same seeds needs no note."""
    steps, types, same = study("pde_steps", [0, 1]), study("pde_types", [0]), study("s", [0, 1])
    others = {"pde_types": types, "other": study("other", [0, 1], ("extra",))}
    studies = {"pde_steps": steps, **others}
    note = other_seeds_note(steps, studies)
    assert note is not None
    assert "wikitext baseline: seeds 0, 1 here, seed 0 in the pde_types study" in note.text
    assert "wikitext pde: seeds 0, 1 here, seed 0 in the pde_types study" in note.text
    assert "the spread between seeds" in note.text and "extra" not in note.text
    back = other_seeds_note(types, studies)
    assert back is not None and "seed 0 here, seeds 0, 1 in the pde_steps study" in back.text
    assert other_seeds_note(same, {"s": same, "pde_steps": steps}) is None
    assert other_seeds_note(steps, {"pde_steps": steps}) is None  # itself is no other study


def test_the_study_step_adds_the_note_under_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pdelab.report.tables.extra_variants", lambda study, summary: [])
    steps, types = study("pde_steps", [0, 1]), study("pde_types", [0])
    summary = pd.DataFrame({"task": ["wikitext"], "variant": ["baseline"], "seed": [0]})
    notes = study_notes(steps, summary, {"pde_steps": steps, "pde_types": types})
    assert any("pde_types study" in getattr(n, "text", "") for n in notes)
    assert not any("other seeds" in getattr(n, "text", "") for n in study_notes(steps, summary))
