"""Atomic writes: a writer that fails (or is killed) part-way leaves the old file whole and no
temporary file behind; a complete one replaces the target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdelab.records.atomic import atomic_path, write_text


def test_complete_write_replaces_and_keeps_the_suffix(tmp_path: Path) -> None:
    target = tmp_path / "table.md"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".md" and tmp != target
        tmp.write_text("new")
        assert target.read_text() == "old"  # nothing visible until the rename
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.md"]


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "summary.parquet"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.parquet"]


def test_a_killed_writer_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """SIGKILL in the middle of a long write: the target still holds the old content."""
    target = tmp_path / "REPORT.md"
    write_text(target, "old report\n")
    writer = (
        "import sys, time\n"
        "from pdelab.records.atomic import atomic_path\n"
        "with atomic_path(sys.argv[1]) as tmp, open(tmp, 'w') as f:\n"
        "    f.write('new, partial'); f.flush(); print('writing', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", writer, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.1)
    assert target.read_text() == "old report\n"
