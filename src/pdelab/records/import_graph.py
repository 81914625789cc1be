"""The package's import graph, read from the source (never by importing it).

Every ``import pdelab...`` / ``from pdelab... import`` statement counts, at any depth (a
function-level import still ties two modules together). ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``. Two readers use it: the floors test
(tests/test_imports.py), and a run's code provenance (pdelab.records.provenance), which needs the
modules a training job executes without paying for torch when Snakemake parses the workflow.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]  # the folder that holds the pdelab package


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package by name (a paper's tests/ folder holds tests, not modules).

    Folders are walked following symbolic links: a paper folder may be a link to a checkout
    elsewhere, and Python imports through it (``Path.rglob`` does not follow one before 3.13).
    A link back to a folder already walked is walked once."""
    found: dict[str, Path] = {}
    seen: set[Path] = set()
    for folder, subfolders, files in os.walk(src / "pdelab", followlinks=True):
        real = Path(folder).resolve()
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders[:] = sorted(d for d in subfolders if d not in ("tests", "__pycache__"))
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                found[module_name(path, src)] = path
    return dict(sorted(found.items(), key=lambda item: item[1]))


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included (an import is a statement: walking only these is
    several times faster than ``ast.walk`` over every expression, and a workflow parse pays
    for it)."""
    for node in body:
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from statements(getattr(node, name, []))


@cache
def imports(name: str, src: Path = SRC) -> frozenset[str]:
    """The pdelab modules this module imports, read from its source."""
    known = modules(src)
    tree = ast.parse(known[name].read_bytes())
    package = name if known[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in statements(tree.body):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return frozenset(m for m in found if m in known and m != name)


def graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the pdelab modules it imports, for the whole package."""
    return {name: set(imports(name, src)) for name in modules(src)}


def parents(name: str) -> list[str]:
    """The packages Python runs before a module: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]
