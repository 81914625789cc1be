"""The plug-in contract: what a paper brings, and the registries the core reads it from.

Each subpackage of ``pdelab.papers`` is one paper. Its ``__init__.py`` builds a :class:`Paper`
and passes it to :func:`register`; the core never imports a paper by name, it loads them all
by walking the ``pdelab.papers`` folder (:func:`load_all`). It stays
light (no torch, pandas or matplotlib), because params.yaml is validated from it when Snakemake
parses the workflow: the study kinds it names, the keys its studies may have, and its kernels'
option checks. The heavy parts load only when used:

* ``<paper>/report.py``: ``STUDY_WRITERS`` (kind -> writer of a study's figure, returning
  its table, :class:`pdelab.report.table_file.TableFile`, for the study step to write),
  ``claims(ctx)`` (its claims, :class:`pdelab.report.claims.Claim`, which REPORT.md renders
  before the studies), optionally ``claims_notes(ctx)`` (paragraphs after them), and
  ``appendix(ctx)`` (REPORT.md lines after the studies);
* ``mechanisms``: modules that register attention kernels or encoder blocks with
  ``pdelab.models`` (their options are registered, torch-free, with ``pdelab.spec.options``
  by ``__init__.py``);
* ``rules.smk`` beside ``__init__.py``, if present: the paper's own Snakemake rules;
* ``config.yaml`` beside it, if present: the paper's tasks, variants, variant grids, studies and
  what a run profile changes of them, which pdelab.spec.config.load_params merges with params.yaml
  (:func:`config_files` finds them in the order :func:`load_all` imports the papers).

Adding a paper is one folder here (docs/adding-a-paper.md); params.yaml is not edited.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pdelab.spec.registry import Registry


@dataclass(frozen=True)
class Paper:
    """What one paper brings to the pipeline."""

    name: str  # the package name, e.g. "diffusion_positions"
    title: str
    study_kinds: tuple[str, ...]  # the `kind`s of params.yaml studies its report module writes
    # the keys its studies may have besides every study's (pdelab.spec.studies.STUDY_KEYS), each
    # with the JSON schema of its value: the paper that reads a key says what it may hold, and
    # pdelab.spec.run_sheet rejects any other key before a job starts
    study_keys: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # a study's params.yaml block -> the variants its own keys name (a table's rows or
    # columns), which must be in the study's variants list
    named_variants: Callable[[dict[str, Any]], list[str]] = lambda study: []
    # a study's params.yaml block -> the variants its table has a row or column for, or None
    # where the table shows every variant of the study; the report adds the others below it
    table_variants: Callable[[dict[str, Any]], list[str] | None] = lambda study: None
    # params -> the result files (relative to results/) it builds besides its studies' tables
    # and figures; REPORT.md waits for them and CI checks them
    outputs: Callable[[dict[str, Any]], list[str]] = lambda params: []
    # modules (relative to the package) that register attention kernels or encoder blocks;
    # imported by the model factory, never at validation time
    mechanisms: tuple[str, ...] = ()
    # kinds whose studies also get a variants x tasks heatmap
    heatmap_kinds: tuple[str, ...] = ()
    # (study name, its params.yaml block) -> files (relative to results/) its table reads
    # besides the summary, e.g. a measurement made by the paper's own rules
    study_inputs: Callable[[str, dict[str, Any]], list[str]] = lambda name, study: []

    @property
    def package(self) -> str:
        return f"{PAPERS_PACKAGE}.{self.name}"

    @property
    def folder(self) -> Path:
        return Path(importlib.import_module(self.package).__file__).parent

    def report_module(self) -> ModuleType:
        """``<paper>/report.py``: study writers, claims and appendix (imports pandas)."""
        return importlib.import_module(f"{self.package}.report")

    def rules(self) -> Path | None:
        path = self.folder / "rules.smk"
        return path if path.exists() else None


PAPERS_PACKAGE = "pdelab.papers"  # walked, never imported by name from the core
PAPER_CONFIG = "config.yaml"  # a paper's own params, beside its __init__.py
PAPERS: Registry[Paper] = Registry("paper")
STUDY_KINDS: Registry[Paper] = Registry("study kind")  # kind -> the paper that writes it


def register(paper: Paper) -> Paper:
    PAPERS.register(paper.name)(paper)
    for kind in paper.study_kinds:
        STUDY_KINDS.register(kind)(paper)
    return paper


_loaded = False


def load_all() -> Registry[Paper]:
    """Import every paper package (each registers itself); returns the paper registry."""
    global _loaded
    if not _loaded:
        for name in paper_names(importlib.import_module(PAPERS_PACKAGE).__path__):
            importlib.import_module(f"{PAPERS_PACKAGE}.{name}")
        _loaded = True
    return PAPERS


def paper_names(folders: Iterable[str]) -> list[str]:
    """The paper packages in these folders, sorted by name: the order papers are imported in,
    and their config files merged in."""
    return sorted(info.name for info in pkgutil.iter_modules(list(folders)) if info.ispkg)


def config_files(folder: Path) -> list[Path]:
    """The config file of each paper package in ``folder`` (a papers folder, read without
    importing it: params are read before any paper is, and may be another tree's) that has
    one, in :func:`paper_names`' order."""
    # absolute: pkgutil caches a folder's listing under its name, so a relative name read
    # from another working directory would list the papers of the first
    found = [folder / name / PAPER_CONFIG for name in paper_names([str(folder.resolve())])]
    return [path for path in found if path.is_file()]


def study_paper(kind: str) -> Paper:
    """The paper that writes studies of this kind; an unknown kind lists the registered ones."""
    load_all()
    return STUDY_KINDS.get(kind)


def import_mechanisms() -> None:
    """Import every paper's mechanism modules, so their kernels and blocks are registered."""
    for name in load_all():
        paper = PAPERS.get(name)
        for module in paper.mechanisms:
            importlib.import_module(f"{paper.package}.{module}")


def active(kinds: Iterable[str]) -> list[Paper]:
    """The papers that write these study kinds, in the order of their first kind."""
    load_all()
    order: dict[str, Paper] = {}
    for kind in kinds:
        paper = STUDY_KINDS.get(kind)
        order.setdefault(paper.name, paper)
    return list(order.values())
