"""What the report hands a paper's writers: one study's runs and output paths, or the whole
summary for its claims and appendix. Papers see studies through these, never by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pdelab.report.stats import own_runs
from pdelab.spec.studies import Study


@dataclass(frozen=True)
class StudyContext:
    """One study (typed; as a mapping, its params.yaml block), its own runs (its seeds only)
    and where to write its table and figure."""

    study: Study
    summary: pd.DataFrame
    profile: str
    md: Path
    tex: Path
    figure: Path

    @property
    def name(self) -> str:
        return self.study.name

    @property
    def title(self) -> str:
        return self.study.title


@dataclass(frozen=True)
class ReportContext:
    """Every run of the profile, every study (params.yaml order) and, when given, each
    study's (task, variant, seed) keys; without them a study's claims read every run."""

    summary: pd.DataFrame
    studies: Mapping[str, Study]
    profile: str
    results: Path
    runs: Mapping[str, set] | None = None

    def find(self, kind: str, key: str | None = None) -> tuple[str, Study] | None:
        """The first study (params.yaml order) of a study kind, and with this `key` if given."""
        for name, study in self.studies.items():
            if study.kind == kind and (key is None or study.get("key") == key):
                return name, study
        return None

    def of_kinds(self, kinds: tuple[str, ...]) -> dict[str, Study]:
        return {n: s for n, s in self.studies.items() if s.kind in kinds}

    def own(self, name: str | None) -> pd.DataFrame:
        """The runs of one study, as its table uses them (every run when runs is not given)."""
        if name is None or self.runs is None or name not in self.runs:
            return self.summary
        return own_runs(self.summary, self.runs[name])
