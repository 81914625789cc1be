"""A study, typed: one params.yaml ``studies.<name>`` block resolved for a run profile.

A study is a view over runs: its tasks and variants (the grid its table shows), the seeds and
the part of the grid a run profile trains (``profiles.<profile>.studies.<name>``), its study
kind (which paper writes its table) and its paper table. The workflow's rules, the report,
MLflow's sync and the papers all read studies from :func:`studies_of`, resolved once.

The keys a paper adds to its studies (``rows``, ``grid``, ``columns``, ...) are read as from a
mapping: ``study["rows"]``; a paper declares them, with their JSON schema, in its
:class:`pdelab.spec.plugins.Paper`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pdelab.spec.config import active_profile, check_name
from pdelab.spec.fields import ConfigError
from pdelab.spec.plugins import STUDY_KINDS, Paper, active, load_all

# The keys any study may have, whatever its study kind (the schema types them); the paper that
# owns the study kind adds its own (Paper.study_keys).
STUDY_KEYS = ("title", "kind", "tasks", "variants", "seeds", "baseline", "paper_table")
# What a run profile may set for a study (profiles.<profile>.studies.<study>): the part of its
# tasks and variants it trains, and its seeds.
PROFILE_STUDY_KEYS = ("tasks", "variants", "seeds")


@dataclass(frozen=True)
class RunKey:
    task: str
    variant: str
    seed: int


@dataclass(frozen=True)
class Study(Mapping[str, Any]):
    """One study as a run profile runs it. As a mapping it is its params.yaml block."""

    name: str
    kind: str  # the study kind: the paper that registered it writes the table
    title: str
    tasks: tuple[str, ...]  # the table's grid, as params.yaml declares it
    variants: tuple[str, ...]
    baseline: str | None
    paper_table: str | None  # a CSV of the paper's numbers beside the paper's package
    runs: tuple[RunKey, ...]  # what the run profile trains for it, in table order
    block: Mapping[str, Any]  # the params.yaml block

    @property
    def paper(self) -> Paper:
        return STUDY_KINDS.get(self.kind)

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(r.seed for r in self.runs))

    @property
    def run_keys(self) -> set[tuple[str, str, int]]:
        return {(r.task, r.variant, r.seed) for r in self.runs}

    @property
    def shown_variants(self) -> tuple[str, ...]:
        """The variants the paper's table has a row or column for (Paper.table_variants)."""
        shown = self.paper.table_variants(dict(self.block))
        return self.variants if shown is None else tuple(v for v in self.variants if v in shown)

    @property
    def unshown_variants(self) -> tuple[str, ...]:
        """Variants of the study that its paper's table has no place for: the report adds
        them to the table (pdelab.report.tables.extra_variants), so no trained run is hidden."""
        shown = set(self.shown_variants)
        return tuple(v for v in self.variants if v not in shown)

    @classmethod
    def from_block(
        cls, name: str, block: Mapping[str, Any], seeds: tuple[int, ...] = (0,)
    ) -> Study:
        """A study from its params.yaml block alone, outside any run profile: every task and
        variant of it at these seeds."""
        runs = tuple(
            RunKey(t, v, s) for t in block["tasks"] for v in block["variants"] for s in seeds
        )
        return cls(
            name=name,
            kind=study_kind(name, block),
            title=str(block.get("title", name)),
            tasks=tuple(block["tasks"]),
            variants=tuple(block["variants"]),
            baseline=block.get("baseline"),
            paper_table=block.get("paper_table"),
            runs=runs,
            block=block,
        )

    def __getitem__(self, key: str) -> Any:
        return self.block[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.block)

    def __len__(self) -> int:
        return len(self.block)


def study_kind(name: str, block: Mapping[str, Any]) -> str:
    """A study's kind, which params.yaml must state: the kinds belong to papers, none is a
    default."""
    load_all()
    if "kind" not in block:
        raise ConfigError(
            f"studies.{name}.kind: missing; name the study kind whose table this study "
            f"needs, one of: {', '.join(STUDY_KINDS.names())}"
        )
    kind = str(block["kind"])
    check_name(kind, STUDY_KINDS.names(), f"studies.{name}.kind")
    return kind


def study(params: dict[str, Any], name: str, profile: str | None = None) -> Study:
    """One study as a run profile runs it (its own tasks, variants and seeds)."""
    profile = active_profile(params, profile)
    check_name(name, tuple(params.get("studies", {})), "study")
    block = params["studies"][name]
    own = (params["profiles"][profile].get("studies") or {}).get(name) or {}
    ran = {**block, **own}
    seeds = ran.get("seeds", params["profiles"][profile].get("seeds", [0]))
    runs = tuple(RunKey(t, v, int(s)) for t in ran["tasks"] for v in ran["variants"] for s in seeds)
    return replace(Study.from_block(name, block), runs=runs)


def studies_of(params: dict[str, Any], profile: str | None = None) -> dict[str, Study]:
    """Every study of params.yaml, in file order, as the run profile runs it."""
    return {name: study(params, name, profile) for name in params.get("studies", {})}


@dataclass(frozen=True)
class ReportGroup:
    """The files of one study (or, with ``study`` None, a paper's own outputs), relative to
    results/: what Snakemake's report files under the paper and study, and what MLflow's
    report experiment holds as one run."""

    paper: str  # the paper's package name
    paper_title: str
    study: str | None
    title: str
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.study or f"{self.paper}-outputs"


# Keys a study block gained after tables were built, with the value every earlier block meant:
# left out of the rules' params while they hold it, so a finished tree's tables stay current.
KEYS_ADDED_LATER = {"kind": "accuracy"}


def rule_params(study: Study) -> str:
    """The study's block as the table rules' params: Snakemake rebuilds its table and figure
    when it changes."""
    block = {
        k: v
        for k, v in study.block.items()
        if k not in KEYS_ADDED_LATER or KEYS_ADDED_LATER[k] != v
    }
    return json.dumps(block, sort_keys=True)


def heatmap_studies(studies: Mapping[str, Study]) -> list[str]:
    """The studies whose study kind also gets a variants x tasks heatmap."""
    return [name for name, s in studies.items() if s.kind in s.paper.heatmap_kinds]


def report_groups(params: dict[str, Any], profile: str | None = None) -> list[ReportGroup]:
    """Every study's table (md, tex, csv, its HTML page), figure, learning curves and heatmap,
    then each paper's own outputs."""
    studies = studies_of(params, profile)
    heatmaps = set(heatmap_studies(studies))
    groups = []
    for name, s in studies.items():
        files = [f"tables/{name}.{ext}" for ext in ("md", "tex", "csv", "html")]
        files += [f"figures/{name}.png", f"figures/{name}_curves.png"]
        if name in heatmaps:
            files.append(f"figures/{name}_heatmap.png")
        groups.append(ReportGroup(s.paper.name, s.paper.title, name, s.title, tuple(files)))
    for paper in active(s.kind for s in studies.values()):
        if paper.outputs(params):
            title = f"{paper.title}: its own measurements"
            outputs = tuple(paper.outputs(params))
            groups.append(ReportGroup(paper.name, paper.title, None, title, outputs))
    return groups


def report_files(params: dict[str, Any], profile: str | None = None) -> list[str]:
    """Every file under results/ that the report of these params consists of."""
    files = ["REPORT.md", "tables/learning.md", "tables/learning.html"]
    for group in report_groups(params, profile):
        files += group.files
    return files
