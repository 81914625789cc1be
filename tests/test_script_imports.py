"""The project's names written outside Python files (CI and benchmark scripts, the workflow's
rules, the docs) name modules and objects that exist: a module moved or renamed breaks such a
line only when it runs, often on a CI machine or a GPU, never in a Python import."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    [
        *ROOT.glob(".ci/*"),
        *ROOT.glob("benchmarks/*.sh"),
        *ROOT.glob("workflow/rules/*.smk"),
        ROOT / "Snakefile",
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
    ]
)
FROM_IMPORT = re.compile(r"^\s*from (pdelab(?:\.\w+)*) import ([\w, ]+?)\s*(?:#.*)?$", re.M)
RUN_MODULE = re.compile(r"python -m (pdelab(?:\.\w+)*)")


def exists(module: str, name: str) -> bool:
    """Whether ``from module import name`` finds a submodule or an object."""
    if importlib.util.find_spec(module) is None:
        return False
    found = importlib.import_module(module)
    if hasattr(found, name):
        return True
    return hasattr(found, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None


def missing(text: str) -> list[str]:
    """The ``from pdelab... import name`` and ``python -m pdelab...`` lines of ``text`` that
    name no module or object of the installed package."""
    wrong = []
    for module, names in FROM_IMPORT.findall(text):
        for name in (n.split(" as ")[0].strip() for n in names.split(",")):
            if not exists(module, name):
                wrong.append(f"from {module} import {name}")
    for module in RUN_MODULE.findall(text):
        if importlib.util.find_spec(module) is None:
            wrong.append(f"python -m {module}")
    return wrong


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pdelab_name_a_script_uses_exists(script: Path) -> None:
    assert missing(script.read_text()) == []


def test_a_moved_module_is_caught() -> None:
    """The check can fail: the cluster module's name before it moved into pdelab.runtime."""
    old = "python - <<'EOF'\nfrom pdelab import cluster\nEOF\npython -m pdelab.cost_plan\n"
    assert missing(old) == ["from pdelab import cluster", "python -m pdelab.cost_plan"]
