"""A run's records (pdelab.records): a record that cannot be read names its file and repair."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdelab.records import read_run_json


def test_run_json_is_read(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"spec": {"task": "listops"}}')
    assert read_run_json(tmp_path) == {"spec": {"task": "listops"}}


@pytest.mark.parametrize("text", ['{"spec": ', None])
def test_a_corrupt_or_missing_run_json_names_its_path(tmp_path: Path, text: str | None) -> None:
    if text is not None:
        (tmp_path / "run.json").write_text(text)
    with pytest.raises(ValueError, match=rf"{tmp_path / 'run.json'}: cannot read.*train it again"):
        read_run_json(tmp_path)
