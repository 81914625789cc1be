"""`snakemake --lint` finds nothing but what workflow/lint-accepted.yaml keeps, with its reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACCEPTED = yaml.safe_load((ROOT / "workflow" / "lint-accepted.yaml").read_text())


def findings(text: str) -> set[str]:
    """The titles of snakemake --lint's findings ("    * <title>:" lines)."""
    return {m[1].rstrip(":").rstrip(".") for m in re.finditer(r"^    \* (.+)$", text, re.M)}


def test_findings_are_read() -> None:
    text = "Lints for rule a (line 1, Snakefile):\n    * Mixed rules and functions.:\n      x\n"
    assert findings(text) == {"Mixed rules and functions"}


@pytest.mark.slow
def test_the_workflow_lints_clean_but_for_what_it_justifies() -> None:
    lint = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = findings(lint.stdout + lint.stderr)
    accepted = {title.rstrip(".") for title in ACCEPTED}
    assert found - accepted == set(), lint.stdout + lint.stderr
    assert accepted <= found, (
        f"no longer reported, drop from lint-accepted.yaml: {accepted - found}"
    )
    assert all(len(reason) > 80 for reason in ACCEPTED.values())
