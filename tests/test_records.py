"""A run's records (pdelab.records.run): a record that cannot be read names its file and repair;
every record carries its run's identity, and a record of another run or spec is refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import write_run
from pdelab.records.run import (
    DamagedRecord,
    ForeignRecord,
    check_run,
    describe,
    identity,
    read_run_json,
)
from pdelab.report.aggregate import aggregate


def test_run_json_is_read(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"spec": {"task": "listops"}}')
    assert read_run_json(tmp_path) == {"spec": {"task": "listops"}}


@pytest.mark.parametrize("text", ['{"spec": ', None])
def test_a_corrupt_or_missing_run_json_names_its_path(tmp_path: Path, text: str | None) -> None:
    if text is not None:
        (tmp_path / "run.json").write_text(text)
    with pytest.raises(ValueError, match=rf"{tmp_path / 'run.json'}: cannot read.*train it again"):
        read_run_json(tmp_path)


RUNS = Path("runs/smoke/listops/baseline")


@pytest.mark.parametrize("copied", ["result.parquet", "metrics.parquet"])
def test_a_record_copied_from_another_seed_stops_the_summary(tmp_path: Path, copied: str) -> None:
    """Seed 1's result (or metrics) in seed 0's folder: the summary would hold seed 1 twice
    (``0.4150 ± 0.0000 (n=2)``); instead it stops, naming the file and both runs."""
    seed0, seed1 = tmp_path / RUNS / "seed0", tmp_path / RUNS / "seed1"
    write_run(seed0, "listops", "baseline", 0, {"test_acc": 0.335})
    write_run(seed1, "listops", "baseline", 1, {"test_acc": 0.415})
    (seed0 / copied).write_bytes((seed1 / copied).read_bytes())
    with pytest.raises(ForeignRecord) as stop:
        aggregate([seed0 / "result.parquet", seed1 / "result.parquet"], tmp_path / "s.parquet")
    said = str(stop.value)
    assert f"{seed0 / copied} belongs to listops/baseline/seed1" in said
    assert "not to listops/baseline/seed0" in said and "train the run again" in said


def test_a_whole_run_folder_moved_under_another_seed_is_refused(tmp_path: Path) -> None:
    write_run(tmp_path / RUNS / "seed1", "listops", "baseline", 1)
    (tmp_path / RUNS / "seed1").rename(tmp_path / RUNS / "seed0")
    with pytest.raises(ForeignRecord, match="belongs to listops/baseline/seed1.*not to "):
        check_run(tmp_path / RUNS / "seed0")


def test_a_record_of_a_spec_params_yaml_no_longer_resolves_is_refused(tmp_path: Path) -> None:
    record = write_run(tmp_path / RUNS / "seed0", "listops", "baseline", 0)
    now = record["spec"] | {"model": {"dim": 64}}
    with pytest.raises(ForeignRecord, match=r"belongs to listops/baseline/seed0 \(spec"):
        aggregate(
            [tmp_path / RUNS / "seed0" / "result.parquet"],
            tmp_path / "s.parquet",
            expected_specs={("listops", "baseline", 0): now},
        )
    summary = aggregate(
        [tmp_path / RUNS / "seed0" / "result.parquet"],
        tmp_path / "s.parquet",
        expected_specs={("listops", "baseline", 0): record["spec"]},
    )
    assert list(summary["seed"]) == [0]


def test_a_record_without_an_identity_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / RUNS / "seed0"
    write_run(folder, "listops", "baseline", 0)
    pd.read_parquet(folder / "result.parquet").to_parquet(folder / "result.parquet")
    with pytest.raises(ForeignRecord, match="carries no identity"):
        check_run(folder)


def test_identity_names_the_run_its_spec_and_its_data() -> None:
    spec = {"task": "listops", "variant": "fna", "seed": 2, "model": {"dim": 32}}
    ident = identity(spec, "ab" * 32)
    assert ident["task"] == "listops" and ident["seed"] == 2 and ident["data_hash"] == "ab" * 32
    assert identity(spec | {"model": {"dim": 64}}, "ab" * 32)["spec_sha256"] != ident["spec_sha256"]
    assert describe(ident).startswith("listops/fna/seed2 (spec ")


def rewritten(path: Path, column: str, value: float) -> None:
    """A record Parquet file with one column's value changed and its metadata (the identity)
    kept, as a hand edit through pyarrow leaves it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    index = table.schema.get_field_index(column)
    column_values = pa.array([value] * table.num_rows, table.schema.field(column).type)
    pq.write_table(table.set_column(index, table.schema.field(column), column_values), path)


@pytest.mark.parametrize(
    ("name", "column"), [("result.parquet", "test_acc"), ("metrics.parquet", "val_acc")]
)
def test_a_record_edited_after_its_run_stops_every_reader(
    tmp_path: Path, name: str, column: str
) -> None:
    """test_acc 0.335 -> 0.999 in result.parquet, its identity kept: run.json's sha256 of the
    file no longer holds, and the summary (and every reader, through check_run) stops,
    naming the file and the repair."""
    folder = tmp_path / RUNS / "seed0"
    write_run(folder, "listops", "baseline", 0, {"test_acc": 0.335})
    assert set(read_run_json(folder)["records"]) == {"result.parquet", "metrics.parquet"}
    rewritten(folder / name, column, 0.999)
    with pytest.raises(DamagedRecord, match=rf"{folder / name}: its bytes .* train the run again"):
        check_run(folder)
    with pytest.raises(DamagedRecord):
        aggregate([folder / "result.parquet"], tmp_path / "summary.parquet")


@pytest.mark.parametrize("recorded", [True, False])
def test_a_truncated_metrics_file_names_the_repair(tmp_path: Path, recorded: bool) -> None:
    """A truncated metrics.parquet gives the repair, not a pyarrow traceback, whether or not
    run.json holds the records' digests (records written before it did)."""
    import json

    folder = tmp_path / RUNS / "seed0"
    write_run(folder, "listops", "baseline", 0)
    if not recorded:
        doc = read_run_json(folder)
        del doc["records"]
        (folder / "run.json").write_text(json.dumps(doc))
    data = (folder / "metrics.parquet").read_bytes()
    (folder / "metrics.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedRecord, match=r"metrics\.parquet: .*delete .* run `snakemake`"):
        check_run(folder)


def test_a_run_trained_on_other_data_stays_out_of_the_summary(tmp_path: Path) -> None:
    """A consistent run folder whose data hash is not the task's prepared data today (a copy
    from a build on other data) stops the summary, naming both hashes."""
    folder = tmp_path / RUNS / "seed0"
    write_run(folder, "listops", "baseline", 0, data_hash="a" * 64)
    aggregate(
        [folder / "result.parquet"], tmp_path / "ok.parquet", data_hashes={"listops": "a" * 64}
    )
    with pytest.raises(
        ForeignRecord, match=r"trained on data aaaaaaaaaaaa, and listops's prepared"
    ):
        aggregate(
            [folder / "result.parquet"], tmp_path / "s.parquet", data_hashes={"listops": "b" * 64}
        )
