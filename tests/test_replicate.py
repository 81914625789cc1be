"""The nondeterminism floor: a run trained again with its own seed on the same machine is a
replicate of that run (its identity, not one of its own), bitwise equal on CPU; the floor per
task and metric, and the effects smaller than it."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pdelab.records.replicate import (
    NotReplicable,
    comparison,
    replicate_runs,
    values_sha256,
    write_replicate,
)
from pdelab.records.run import record_table, run_dir, write_parquet
from pdelab.report.claims import Interval
from pdelab.report.floor import below_floor, floors, paragraph, read_replicates


def test_the_replicated_run_is_each_tasks_first_in_the_run_sheet() -> None:
    runs = [
        ("listops", "baseline", 0),
        ("listops", "baseline", 1),
        ("imdb", "lra_fna", 2),
        ("listops", "after_embedding", 0),
        ("imdb", "baseline", 0),
    ]
    assert replicate_runs(runs) == {
        "listops": ("listops", "baseline", 0),
        "imdb": ("imdb", "lra_fna", 2),
    }


def fake_records(folder: Path, test_acc: float, val_loss: float, step_s: float) -> Path:
    """A run folder's two Parquet records, as the trainer writes them (timing columns too)."""
    folder.mkdir(parents=True)
    result = {"task": "listops", "test_acc": test_acc, "test_loss": 1.25, "best_epoch": 3}
    result |= {"median_step_s": step_s, "resumed": False}
    write_parquet(record_table([result]), folder / "result.parquet")
    history = [{"epoch": e, "val_loss": val_loss + e, "epoch_time_s": step_s * e} for e in (1, 2)]
    write_parquet(record_table(history), folder / "metrics.parquet")
    return folder


def test_two_trainings_compare_on_their_numbers_not_their_timings(tmp_path: Path) -> None:
    run = fake_records(tmp_path / "run", 0.5, 2.0, step_s=0.01)
    same = fake_records(tmp_path / "same", 0.5, 2.0, step_s=0.07)  # slower, same numbers
    moved = fake_records(tmp_path / "moved", 0.5 + 2**-40, 2.0, step_s=0.01)
    history_moved = fake_records(tmp_path / "history", 0.5, 2.0 + 2**-30, step_s=0.01)

    equal = comparison(run, same)
    assert equal["bitwise_equal"] and set(equal["metrics"]) == {
        "test_acc",
        "test_loss",
        "best_epoch",
    }
    assert equal["metrics"]["test_acc"] == {
        "run": 0.5,
        "replicate": 0.5,
        "abs_diff": 0.0,
        "bitwise_equal": True,
    }
    differs = comparison(run, moved)
    assert not differs["bitwise_equal"]
    assert differs["metrics"]["test_acc"]["abs_diff"] == pytest.approx(2**-40, rel=1e-6)
    assert not differs["metrics"]["test_acc"]["bitwise_equal"]
    assert differs["metrics"]["test_loss"]["bitwise_equal"]
    assert differs["result_values_sha256"]["run"] != differs["result_values_sha256"]["replicate"]
    # equal final metrics, a per-epoch value moved: not bitwise equal
    assert not comparison(run, history_moved)["bitwise_equal"]


def test_values_sha256_tells_nan_and_bits_apart() -> None:
    assert values_sha256([{"a": 1.0}]) == values_sha256([{"a": 1.0}])
    assert values_sha256([{"a": 0.0}]) != values_sha256([{"a": -0.0}])
    assert values_sha256([{"a": 1.0}]) != values_sha256([{"b": 1.0}])


def replicate_json(task: str, device: str, metrics: dict[str, tuple[float, float]]) -> dict:
    """A replicate JSON as pdelab.records.replicate writes it, with these (run, replicate)."""
    entries = {
        name: {
            "run": a,
            "replicate": b,
            "abs_diff": abs(a - b),
            "bitwise_equal": a == b,
        }
        for name, (a, b) in metrics.items()
    }
    ident = {"task": task, "variant": "baseline", "seed": 0, "spec_sha256": "s", "data_hash": "d"}
    equal = all(e["bitwise_equal"] for e in entries.values())
    return {"identity": ident, "device": device, "metrics": entries, "bitwise_equal": equal}


def test_floor_is_zero_when_bitwise_equal_and_the_difference_otherwise(tmp_path: Path) -> None:
    cpu = replicate_json("listops", "cpu", {"test_acc": (0.4, 0.4), "test_loss": (1.0, 1.0)})
    gpu = replicate_json("imdb", "cuda", {"test_acc": (0.7, 0.703), "test_loss": (0.5, 0.5)})
    for name, found in (("listops", cpu), ("imdb", gpu)):
        write_replicate(tmp_path / f"{name}.json", found)
    read = read_replicates([tmp_path / "listops.json", tmp_path / "imdb.json"])
    found = floors(read)
    assert found[("listops", "test_acc")] == 0.0 and found[("listops", "test_loss")] == 0.0
    assert found[("imdb", "test_acc")] == pytest.approx(0.003)
    assert found[("imdb", "test_loss")] == 0.0
    text = paragraph(read)
    assert text.startswith("### Nondeterminism floor")
    assert "- listops (baseline, seed 0), on cpu: bitwise equal, floor 0." in text
    assert "- imdb (baseline, seed 0), on cuda: not bitwise equal; floor test_acc 0.003" in text
    assert text.index("- imdb") < text.index("- listops")
    assert "the floor is not known" in paragraph([])


def test_a_missing_replicate_names_the_rule_that_writes_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.json.*snakemake"):
        read_replicates([tmp_path / "missing.json"])


def test_an_effect_within_the_floor_is_flagged() -> None:
    assert below_floor((0.001, 0.002), 0.003)
    assert below_floor((-0.002, 0.002), 0.003)
    assert not below_floor((0.001, 0.004), 0.003)  # part of it beyond the floor
    assert not below_floor((-0.004, 0.001), 0.003)
    assert not below_floor((0.0, 0.0), 0.0)  # a floor of 0 (CPU) flags nothing
    assert not below_floor((math.nan, math.nan), 1.0)  # nothing measured
    interval = Interval(estimate=0.1, low=-0.2, high=0.3, n=(5, 5))
    assert below_floor(interval, 0.5) and not below_floor(interval, 0.3)
    assert below_floor((0.1, 0.2), math.inf)  # one training diverged: nothing is told apart


@pytest.fixture(scope="module")
def trained_run(tiny_workdir, tmp_path_factory) -> tuple[Path, Path]:
    """(work folder, run folder): a tiny ListOps run trained where the train rule puts it."""
    from pdelab.spec.config import load_params, resolve
    from pdelab.training.train import train

    work = tiny_workdir(tmp_path_factory.mktemp("replicate"))
    here = Path.cwd()
    os.chdir(work)
    try:
        run = resolve(load_params("params.yaml"), "listops", "baseline", 0)
        run = replace(run, train=replace(run.train, epochs=2))
        folder = run_dir(run.profile, run.task, run.variant, run.seed)
        train(run, folder, track=False, progress=False, threads=1)
    finally:
        os.chdir(here)
    return work, work / folder


def folder_digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.mark.slow
def test_a_cpu_replicate_is_bitwise_equal_and_is_the_run(trained_run, monkeypatch) -> None:
    from pdelab.training.replicate import main

    work, folder = trained_run
    monkeypatch.chdir(work)
    before = folder_digest(folder)
    main(["--run", str(folder), "--out", "results/replicates/smoke/listops.json"])
    found = json.loads((work / "results/replicates/smoke/listops.json").read_text())
    record = json.loads((folder / "run.json").read_text())
    assert found["identity"] == record["identity"]
    assert found["identity"]["task"] == "listops" and found["identity"]["seed"] == 0
    assert found["device"] == "cpu" and found["bitwise_equal"]
    assert found["metrics"]["test_acc"]["abs_diff"] == 0.0
    assert found["metrics"]["test_acc"]["run"] == record["result"]["test_acc"]
    assert found["environment"]["replicate"]["threads"] == record["environment"]["threads"]
    assert found["environment_differences"] == []
    assert folder_digest(folder) == before  # the run's folder is only read
    assert not (work / "results/runs/smoke/listops/baseline/seed0/replicate").exists()
    assert floors([found])[("listops", "test_acc")] == 0.0


@pytest.mark.slow
def test_a_run_made_by_other_code_is_not_replicated(trained_run, monkeypatch) -> None:
    from pdelab.training.replicate import replicate

    work, folder = trained_run
    monkeypatch.chdir(work)
    original = (folder / "run.json").read_text()
    record = json.loads(original)
    record["provenance"]["code_digest"] = "0" * 16
    (folder / "run.json").write_text(json.dumps(record))
    try:
        with pytest.raises(NotReplicable, match=r"trained by code 0{16}.*snakemake"):
            replicate(folder)
    finally:
        (folder / "run.json").write_text(original)


def test_a_claim_within_its_floor_is_flagged() -> None:
    """A run claim declares where its floor is read (pdelab.report.declared); one whose whole
    interval lies within the floor of its task's metric says so in its reason, in its unit."""
    from pdelab.report.claims import Interval, measured
    from pdelab.report.floor import FLOOR_KEY, flagged

    interval = Interval(0.1, -0.2, 0.3, (3, 3), "points")
    judged = (interval, "not measurable here", "")
    claim = measured("smoke", "a gain", "Table 1", "q", "+1", "ours", judged)
    where = {"tasks": ["listops"], "metric": "test_acc", "scale": 100.0}
    claim = replace(claim, extra={FLOOR_KEY: json.dumps(where)})
    (marked,) = flagged([claim], {("listops", "test_acc"): 0.005})
    assert "smaller than the nondeterminism floor (0.5 points)" in marked.reason
    (kept,) = flagged([claim], {("listops", "test_acc"): 0.0})
    assert kept.reason == claim.reason
    (unknown,) = flagged([claim], {})
    assert unknown.reason == claim.reason
