"""The prepared store checks what it loads: sizes on every load, sha256 when asked (and by
`python -m pdelab.data verify`); a mismatch names the file, what differs and the repair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pdelab.data.store import CorruptDataError, load_manifest, load_split, write_prepared
from pdelab.data.translation import load_pairs, write_manifest


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    """A tiny prepared task where the workflow keeps one: data/smoke/prepared/toy."""
    out = tmp_path / "data/smoke/prepared/toy"
    rng = np.random.default_rng(0)
    splits = {
        s: ([rng.integers(2, 9, size=n) for n in (3, 5, 4)], np.array([0, 1, 0]))
        for s in ("train", "val", "test")
    }
    write_prepared(out, splits, ["<pad>", "<cls>", *"abcdefg"], 2, {"task": "toy"})
    return out


def test_manifest_records_every_files_size(prepared: Path) -> None:
    manifest = load_manifest(prepared)
    assert set(manifest["sizes"]) == set(manifest["files"])
    assert all(manifest["sizes"][n] == (prepared / n).stat().st_size for n in manifest["files"])
    assert load_split(prepared, "train").batch(np.arange(3))["ids"].shape == (3, 5)


def test_a_truncated_file_fails_at_load_naming_file_sizes_and_repair(prepared: Path) -> None:
    path = prepared / "train.tokens.npy"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    with pytest.raises(CorruptDataError) as err:
        load_split(prepared, "train")
    message = str(err.value)
    assert f"{path} has {size // 2:,} bytes, its manifest says {size:,}" in message
    assert f"dvc checkout {prepared}" in message and "dvc repro prepare@toy" in message
    load_split(prepared, "val")  # the other splits are untouched


def test_same_size_damage_is_found_by_the_hash_only(prepared: Path) -> None:
    path = prepared / "test.labels.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    load_split(prepared, "test")  # the size check cannot see it
    expected = r"test\.labels\.npy fails its checksum: sha256 .* manifest says"
    with pytest.raises(CorruptDataError, match=expected):
        load_split(prepared, "test", verify=True)


def test_a_missing_file_is_named(prepared: Path) -> None:
    (prepared / "val.offsets.npy").unlink()
    with pytest.raises(CorruptDataError, match=r"val\.offsets\.npy is missing: restore it"):
        load_split(prepared, "val")


def test_translation_pairs_are_checked_the_same_way(tmp_path: Path) -> None:
    out = tmp_path / "data/smoke/prepared/pairs"
    out.mkdir(parents=True)
    files = {}
    for name in ("src", "src_lengths", "tgt", "tgt_lengths"):
        np.save(out / f"train.{name}.npy", np.arange(6).reshape(2, 3), allow_pickle=False)
        files[f"train.{name}.npy"] = "0" * 64
    write_manifest(out, {"files": files})
    (out / "train.tgt.npy").write_bytes(b"\x93NUMPY")
    with pytest.raises(CorruptDataError, match=r"train\.tgt\.npy has 6 bytes"):
        load_pairs(out, "train")


def test_verify_command_checks_hashes_and_exits_nonzero_on_damage(prepared: Path) -> None:
    project = prepared.parents[3]

    def verify(*tasks: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pdelab.data", "verify", *tasks, "--profile", "smoke"]
        return subprocess.run(command, cwd=project, capture_output=True, text=True)

    ok = verify()  # every prepared task of the profile
    assert ok.returncode == 0 and ok.stdout.startswith("toy: ok, 9 files")
    manifest = json.loads((prepared / "manifest.json").read_text())
    manifest["files"]["train.labels.npy"] = "f" * 64
    (prepared / "manifest.json").write_text(json.dumps(manifest))
    bad = verify("toy")
    assert bad.returncode == 1
    assert "toy: CORRUPT" in bad.stderr and "train.labels.npy fails its checksum" in bad.stderr
    missing = verify("nope")
    assert missing.returncode == 1 and "nope/manifest.json is missing" in missing.stderr


def test_a_same_size_swap_is_found_however_often_the_folder_was_verified(
    prepared: Path, monkeypatch
) -> None:
    """Verified once, a folder's hashes are kept while its files are unchanged, so a reader
    after the first hashes nothing; two splits swapped (same sizes, modification times put
    back) are hashed again and refused, by the trainer's, the report's and the probes' check."""
    from pdelab.data import store
    from pdelab.report.learning import input_blind

    store.verified_manifest(prepared)
    hashed: list[Path] = []
    real = store.sha256_file
    monkeypatch.setattr(store, "sha256_file", lambda path: hashed.append(path) or real(path))
    store.verified_manifest(prepared)
    assert hashed == []  # kept: nothing changed
    val, test = prepared / "val.tokens.npy", prepared / "test.tokens.npy"
    assert val.stat().st_size == test.stat().st_size and val.read_bytes() != test.read_bytes()
    times = {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in (val, test)}
    val.rename(prepared / "swap")
    test.rename(val)
    (prepared / "swap").rename(test)
    for path, ns in times.items():
        os.utime(path, ns=ns)
    expected = r"tokens\.npy fails its checksum: sha256 .* manifest says"
    with pytest.raises(CorruptDataError, match=expected):
        store.verified_manifest(prepared)
    with pytest.raises(CorruptDataError, match=expected):
        input_blind(prepared)


def test_a_rewritten_cache_cannot_hide_a_same_size_swap(tmp_path: Path, monkeypatch) -> None:
    """The attack on the verified-hash cache: swap two same-size label files (modification
    times put back), then rewrite the cache with each file's new stat key beside its old hash.
    The cache is no longer the file the check wrote (its change time moved), so every file is
    hashed again and the swap refused; an untouched cache is still trusted (nothing hashed)."""
    from pdelab.data import store

    out = tmp_path / "data/smoke/prepared/toy"
    seqs = [np.array([2, 3]), np.array([4, 5, 6])]
    labels = {"train": [0, 1], "val": [0, 1], "test": [1, 0]}
    write_prepared(out, {s: (seqs, np.array(y)) for s, y in labels.items()}, ["<pad>", "<cls>",
                   *"abcde"], 2, {"task": "toy"})  # fmt: skip
    store.verified_manifest(out)
    hashed: list[str] = []
    real = store.sha256_file
    monkeypatch.setattr(store, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    store.verified_manifest(out)
    assert hashed == []  # the cache, as written, is trusted

    val, test = out / "val.labels.npy", out / "test.labels.npy"
    assert val.stat().st_size == test.stat().st_size and val.read_bytes() != test.read_bytes()
    times = {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in (val, test)}
    val.rename(out / "swap")
    test.rename(val)
    (out / "swap").rename(test)
    for path, ns in times.items():
        os.utime(path, ns=ns)
    cache = store.verified_path(out)
    kept = json.loads(cache.read_text())
    forged = {name: [store.file_key(out / name), digest] for name, (_, digest) in kept.items()}
    assert forged["val.labels.npy"][1] == load_manifest(out)["files"]["val.labels.npy"]
    cache.write_text(json.dumps(forged, sort_keys=True))

    with pytest.raises(CorruptDataError, match=r"labels\.npy fails its checksum"):
        store.verified_manifest(out)
    assert "test.labels.npy" in hashed  # the first swapped file in the manifest's order
