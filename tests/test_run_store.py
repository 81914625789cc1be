"""The run store (pdelab.records.run_store): a finished run is kept under its version as hard
links, found and checked by version, put back; a version whose bytes changed is set aside."""

from __future__ import annotations

from pathlib import Path

from conftest import write_run
from pdelab.records import run_store
from pdelab.records.run import check_run

FOLDER = "results/runs/smoke/t/baseline/seed0"


def kept_run(tmp_path: Path, acc: float = 0.5) -> tuple[Path, Path, str]:
    folder = tmp_path / FOLDER
    record = write_run(folder, result={"test_acc": acc}, weights={"w": 1})
    root = tmp_path / "store"
    version = run_store.keep(folder, root)
    return folder, version, run_store.record_key(record)


def test_a_finished_run_is_kept_as_links_under_its_version(tmp_path: Path) -> None:
    folder, version, key = kept_run(tmp_path)
    assert version == run_store.seed_dir("smoke", "t", "baseline", 0, tmp_path / "store") / key
    for name in run_store.KEPT:
        assert (version / name).stat().st_ino == (folder / name).stat().st_ino  # no copy
    assert run_store.keep(folder, tmp_path / "store") == version  # once
    assert run_store.find("smoke", "t", "baseline", 0, key, tmp_path / "store") == version
    assert run_store.find("smoke", "t", "baseline", 0, "0" * 16, tmp_path / "store") is None


def test_a_run_overwritten_keeps_its_earlier_version_and_restores_it(tmp_path: Path) -> None:
    folder, version, key = kept_run(tmp_path, 0.5)
    for name in run_store.KEPT:
        (folder / name).unlink()  # what Snakemake does before it runs the job again
    write_run(folder, result={"test_acc": 0.9}, spec=None, data_hash="e" * 64)
    assert check_run(version)["result"]["test_acc"] == 0.5  # the kept bytes are untouched
    run_store.restore(version, folder)
    assert check_run(folder)["result"]["test_acc"] == 0.5
    assert (folder / "best.pt").exists()


def test_a_kept_version_whose_bytes_changed_is_set_aside(tmp_path: Path) -> None:
    folder, version, key = kept_run(tmp_path)
    (folder / "metrics.parquet").unlink()  # the folder lets go of its link first
    damaged = version / "metrics.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-7])
    assert run_store.find("smoke", "t", "baseline", 0, key, tmp_path / "store") is None
    assert version.with_name(version.name + ".damaged").is_dir()
    assert list(run_store.versions("smoke", root=tmp_path / "store")) == []


def test_versions_lists_each_kept_run(tmp_path: Path) -> None:
    folder, version, key = kept_run(tmp_path)
    (kept,) = run_store.versions("smoke", "t", "baseline", tmp_path / "store")
    assert (kept.task, kept.variant, kept.seed, kept.key) == ("t", "baseline", 0, key)
    assert kept.result["test_acc"] == 0.5 and kept.size_bytes() > 0


def test_an_unfinished_run_set_aside_comes_back_whole(tmp_path: Path) -> None:
    """What a resume reads (checkpoints, best weights, their digest lists) leaves the run
    folder under its version, the rest stays; taking it back replaces what was there."""
    folder, root = tmp_path / FOLDER, tmp_path / "store"
    folder.mkdir(parents=True)
    names = ["checkpoint.pt", "checkpoint.prev.pt", "checkpoint.sha256.json", "best.pt"]
    for name in [*names, "train.log"]:
        (folder / name).write_text(name)
    where = ("smoke", "t", "baseline", 0, "a" * 16)
    aside = run_store.set_aside(folder, *where, root=root)
    assert sorted(p.name for p in folder.iterdir()) == ["train.log"]
    assert sorted(p.name for p in aside.iterdir()) == sorted(names)
    assert [u[:4] for u in run_store.interrupted("smoke", root)] == [where[1:]]
    (folder / "checkpoint.pt").write_text("another version's")
    assert run_store.take_back(folder, *where, root=root) == aside
    assert {n: (folder / n).read_text() for n in names} == {n: n for n in names}
    assert not aside.exists() and list(run_store.interrupted("smoke", root)) == []
    assert run_store.take_back(folder, *where, root=root) is None
