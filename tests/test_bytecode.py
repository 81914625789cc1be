"""Bytecode checked by hash (pdelab.records.bytecode): an edit of the same size with its date put
back runs the new code, where Python's default bytecode would run the old."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pdelab.records import bytecode


def run(package_root: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import pkg.mod as m; print(m.VALUE)"],
        cwd=package_root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def same_size_edit_with_date_put_back(module: Path) -> None:
    stat = module.stat()
    module.write_text(module.read_text().replace("0.335", "0.450"))
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def make_package(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    module = tmp_path / "pkg" / "mod.py"
    module.write_text("VALUE = 0.335\n")
    past = time.time() - 100  # a source dated apart from its bytecode's writing
    os.utime(module, (past, past))
    return module


def test_default_bytecode_runs_the_old_code_after_a_dated_back_edit(tmp_path: Path) -> None:
    """The failure this module exists for, shown on Python's own bytecode."""
    module = make_package(tmp_path)
    assert run(tmp_path) == "0.335"  # writes a timestamp .pyc
    same_size_edit_with_date_put_back(module)
    assert run(tmp_path) == "0.335"  # stale: size and date match


def test_hash_checked_bytecode_runs_the_new_code(tmp_path: Path) -> None:
    module = make_package(tmp_path)
    assert run(tmp_path) == "0.335"
    assert not bytecode.is_hash_checked(module)
    rewritten = bytecode.hash_checked(tmp_path / "pkg")
    assert module in rewritten and bytecode.is_hash_checked(module)
    assert bytecode.hash_checked(tmp_path / "pkg") == []  # nothing left to rewrite
    same_size_edit_with_date_put_back(module)
    assert run(tmp_path) == "0.45"
    assert bytecode.is_hash_checked(module)  # Python keeps writing checked-hash bytecode
