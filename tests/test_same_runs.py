"""Variants whose resolved specs coincide in a profile share one trained run."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import write_run
from pdelab.report.aggregate import aggregate
from pdelab.report.table_file import TableFile
from pdelab.report.tables import same_runs_note
from pdelab.spec.run_sheet import RunKey, same_runs, trained_runs, validate
from pdelab.spec.studies import study


def test_the_smoke_length_variants_repeat_the_base_runs(params: dict) -> None:
    """In the smoke profile wikitext's own length is 256, so each *_T256 variant repeats the
    run without the suffix; no other pair of variants coincides."""
    specs = validate(params, "smoke")
    same = same_runs(specs)
    seq_len = {s.train.seq_len for s in specs if s.task == "wikitext" and s.variant == "baseline"}
    expected = {}
    if seq_len == {256}:  # the seeds the length study (where the *_T256 variants are) runs
        for seed in {r.seed for r in list(study(params, "pde_seq_len", "smoke").runs)}:
            for variant in ("baseline", "pde_s4", "pde_s4_causal"):
                key = RunKey("wikitext", f"{variant}_T256", seed)
                expected[key] = RunKey("wikitext", variant, seed)
    assert same == expected
    assert len(trained_runs(params, "smoke")) == len(specs) - len(expected)


def test_a_changed_key_makes_a_run_of_its_own(params: dict) -> None:
    edited = copy.deepcopy(params)
    edited["variants"]["baseline_T256"] = {"train": {"seq_len": 256, "lr": 1.0e-4}}
    same = same_runs(validate(edited, "smoke"))
    assert not any(k.variant == "baseline_T256" for k in same)


def _result(tmp_path, variant: str, acc: float) -> str:
    folder = tmp_path / "runs" / "smoke" / "t" / variant / "seed0"
    write_run(folder, "t", variant, 0, {"test_acc": acc})
    return str(folder / "result.parquet")


def test_aggregate_gives_a_shared_run_its_row_and_says_so(tmp_path) -> None:
    files = [_result(tmp_path, "baseline", 0.7), _result(tmp_path, "pde", 0.6)]
    summary = aggregate(files, tmp_path / "s.parquet", {("t", "baseline_T256", 0): "baseline"})
    row = summary.set_index("variant").loc["baseline_T256"]
    assert row["test_acc"] == 0.7 and row["same_run_as"] == "baseline"
    assert list(summary["same_run_as"]) == ["", "baseline", ""]
    note = same_runs_note(summary)
    assert note is not None and "t baseline_T256 = baseline" in note.text
    assert same_runs_note(summary.assign(same_run_as="")) is None
    md, tex = tmp_path / "t.md", tmp_path / "t.tex"
    TableFile(["| table |"]).add(note).write(md, tex, "smoke")  # no float: a LaTeX comment
    assert "t baseline_T256 = baseline" in md.read_text().splitlines()[-1]
    assert tex.read_text().splitlines()[-1].startswith("% Same run")


def test_aggregate_refuses_a_shared_run_without_its_result(tmp_path) -> None:
    with pytest.raises(ValueError, match="repeats baseline, which has no result"):
        aggregate(
            [_result(tmp_path, "pde", 0.6)], tmp_path / "s.parquet", {("t", "x", 0): "baseline"}
        )


LENGTH_PAIRS = [("baseline", "baseline_T256"), ("pde_s4", "pde_s4_T256")]
LENGTH_PAIRS += [("pde_s4_causal", "pde_s4_causal_T256")]


def _pair(params: dict, first: str, second: str) -> list:
    """The smoke runs of two variants whose specs coincide (wikitext, seed 0)."""
    specs = [s for s in validate(params, "smoke") if s.task == "wikitext" and s.seed == 0]
    return [s for s in specs if s.variant in (first, second)]


@pytest.mark.parametrize(("first", "second"), LENGTH_PAIRS)
def test_the_trained_copy_does_not_depend_on_file_order(params, tmp_path, first, second) -> None:
    """Moving a block in a paper's config reorders the run sheet; the run trained for two
    coinciding variants stays the same: the first by name where neither is trained."""
    pair = _pair(params, first, second)
    assert len(pair) == 2
    expected = {RunKey("wikitext", second, 0): RunKey("wikitext", first, 0)}
    assert same_runs(pair, tmp_path) == expected
    assert same_runs(pair[::-1], tmp_path) == expected


@pytest.mark.parametrize(("first", "second"), LENGTH_PAIRS)
@pytest.mark.parametrize("older_form", [False, True])
def test_the_copy_already_trained_is_kept(params, tmp_path, first, second, older_form) -> None:
    """Where one of the coinciding runs' folder holds the spec already (in this form, or in
    the older form that wrote every diffusion key), that run is the trained one, whatever the
    order: no run identical to a trained one is trained again."""
    pair = _pair(params, first, second)
    trained = next(s for s in pair if s.variant == second)
    spec = trained.to_dict()
    if older_form and not spec["diffusion"]["sites"]:
        spec["diffusion"] = {
            "sites": [],
            "strides": [1],
            "alpha": [0.1],
            "learnable": True,
            "layernorm": False,
        }
    folder = tmp_path / "smoke" / "wikitext" / second / "seed0"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"spec": spec}))
    expected = {RunKey("wikitext", first, 0): RunKey("wikitext", second, 0)}
    assert same_runs(pair, tmp_path) == expected
    assert same_runs(pair[::-1], tmp_path) == expected
    other = copy.deepcopy(spec) | {"seed": 1}  # a record of another run holds no spec of this
    (folder / "run.json").write_text(json.dumps({"spec": other}))
    assert same_runs(pair, tmp_path) == {
        RunKey("wikitext", second, 0): RunKey("wikitext", first, 0)
    }
