"""Every trained run kept by what it is: a params change never destroys a run, a revert trains
nothing.

A run folder (results/runs/profile/task/variant/seedN) holds the run that is current for
today's params. Each run that finishes is also kept, as hard links to the same bytes, under its
version: ``results/store/profile/task/variant/seedN/<version>/``, where the version is a digest
of what decides whether a run is current (pdelab.records.staleness): its spec, its data's hash
and the digest of the code it executes. The environment stays out, as it does of staleness.
When a params change plans a run again, its folder is overwritten; its earlier version stays
in the store. When params return to that version, the training job finds it there, checks it
(the records' identity and the bytes run.json recorded, pdelab.records.run.check_run) and puts
it back instead of training: seconds, not hours. An unfinished run's checkpoints are kept
the same way when a params change starts another version in its folder
(``<version>/interrupted/``), and resume once its params return. ``pdelab history`` lists the
versions, ``pdelab gc`` removes those no current params use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdelab.records.run import RECORD_FILES, DamagedRecord, ForeignRecord, check_run

STORE_DIR = Path("results/store")  # relative to the workflow's directory
KEPT = (*RECORD_FILES, "best.pt")  # a version's files: its records and its best weights
INTERRUPTED = "interrupted"  # a version's unfinished training: what a resume reads
IN_PROGRESS = ("checkpoint*", "best*")  # the run folder's files a resume reads


def version_key(spec_sha256: str, data_hash: str, code_digest: str) -> str:
    """A run version's name: what decides whether it is current, digested."""
    text = json.dumps([spec_sha256, data_hash, code_digest])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record_key(record: dict[str, Any]) -> str:
    """The version of a run.json's run."""
    ident = record["identity"]
    code = record.get("provenance", {}).get("code_digest", "unrecorded")
    return version_key(ident["spec_sha256"], ident["data_hash"], code)


def seed_dir(profile: str, task: str, variant: str, seed: int, root: Path = STORE_DIR) -> Path:
    """Where the versions of one (task, variant, seed) are kept."""
    return Path(root) / profile / task / variant / f"seed{seed}"


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` holding ``source``'s bytes: a hard link (no space), a copy across devices."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def keep(run_folder: Path, root: Path = STORE_DIR) -> Path:
    """Keep a finished run's files under its version (once; the same version again is the
    same bytes). Returns the version's folder."""
    run_folder = Path(run_folder)
    record = check_run(run_folder)
    ident = record["identity"]
    profile = record["spec"]["profile"]
    target = seed_dir(profile, ident["task"], ident["variant"], ident["seed"], root)
    target = target / record_key(record)
    if (target / "run.json").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in KEPT:
        if (run_folder / name).exists():
            link_or_copy(run_folder / name, staging / name)
    staging.rename(target)
    return target


def find(
    profile: str, task: str, variant: str, seed: int, key: str, root: Path = STORE_DIR
) -> Path | None:
    """The kept version ``key`` of a run, checked (identity and bytes); None where it is not
    kept, or where its files no longer hold what its run wrote (then it is set aside)."""
    folder = seed_dir(profile, task, variant, seed, root) / key
    if not (folder / "run.json").exists():
        return None
    try:
        record = check_run(folder)
    except (DamagedRecord, ForeignRecord, ValueError):
        shutil.move(folder, folder.with_name(folder.name + ".damaged"))
        return None
    return folder if record_key(record) == key else None


def restore(version: Path, run_folder: Path) -> None:
    """Put a kept version back as the run folder's records (hard links: no copy)."""
    run_folder = Path(run_folder)
    run_folder.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        target = run_folder / name
        if target.exists() or target.is_symlink():
            target.unlink()
        if (version / name).exists():
            link_or_copy(version / name, target)


def set_aside(
    run_folder: Path,
    profile: str,
    task: str,
    variant: str,
    seed: int,
    key: str,
    root: Path = STORE_DIR,
) -> Path:
    """Move an unfinished run's checkpoints (version ``key``) out of its run folder into the
    store, so another version can train there and this one resume when its params return."""
    target = seed_dir(profile, task, variant, seed, root) / key / INTERRUPTED
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for pattern in IN_PROGRESS:
        for path in Path(run_folder).glob(pattern):
            os.replace(path, target / path.name)
    return target


def take_back(
    run_folder: Path,
    profile: str,
    task: str,
    variant: str,
    seed: int,
    key: str,
    root: Path = STORE_DIR,
) -> Path | None:
    """Move version ``key``'s set-aside checkpoints back into the run folder (the caller has
    set aside or finished what was there); the folder they came from, or None."""
    source = seed_dir(profile, task, variant, seed, root) / key / INTERRUPTED
    if not source.is_dir():
        return None
    Path(run_folder).mkdir(parents=True, exist_ok=True)
    for pattern in IN_PROGRESS:
        for path in Path(run_folder).glob(pattern):
            path.unlink()
    for path in source.iterdir():
        os.replace(path, Path(run_folder) / path.name)
    source.rmdir()
    with contextlib.suppress(OSError):  # the version's folder, where nothing else is kept
        source.parent.rmdir()
    return source


def interrupted(profile: str, root: Path = STORE_DIR) -> Iterator[tuple[str, str, int, str, Path]]:
    """(task, variant, seed, version, folder) of every set-aside unfinished run."""
    for folder in sorted(Path(root, profile).glob(f"*/*/seed*/*/{INTERRUPTED}")):
        version = folder.parent
        seed = int(version.parent.name.removeprefix("seed"))
        task, variant = version.parent.parent.parent.name, version.parent.parent.name
        yield task, variant, seed, version.name, folder


@dataclass(frozen=True)
class Version:
    """One kept version of one run."""

    task: str
    variant: str
    seed: int
    key: str
    path: Path
    record: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        return self.record["spec"]

    @property
    def result(self) -> dict[str, Any]:
        return self.record["result"]

    @property
    def finished_ms(self) -> int:
        return int(self.record.get("tracking", {}).get("end_ms") or 0)

    def size_bytes(self) -> int:
        """The bytes its files hold (hard-linked ones are shared with the run folder)."""
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())


def versions(
    profile: str, task: str | None = None, variant: str | None = None, root: Path = STORE_DIR
) -> Iterator[Version]:
    """Every kept version of a profile's runs (of one task, one variant), oldest first within
    each run."""
    base = Path(root) / profile
    tasks = [task] if task else sorted(p.name for p in base.glob("*") if p.is_dir())
    for t in tasks:
        variants = [variant] if variant else sorted(p.name for p in (base / t).glob("*"))
        for v in variants:
            for seed_folder in sorted((base / t / v).glob("seed*")):
                found = []
                for folder in seed_folder.iterdir():
                    if folder.suffix or not (folder / "run.json").exists():
                        continue  # .partial, .damaged
                    record = json.loads((folder / "run.json").read_text())
                    seed = int(seed_folder.name.removeprefix("seed"))
                    found.append(Version(t, v, seed, folder.name, folder, record))
                yield from sorted(found, key=lambda x: x.finished_ms)
