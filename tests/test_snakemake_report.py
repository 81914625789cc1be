"""`snakemake --report`: every table and figure of every paper's report (what
``python -m pdelab.report outputs`` lists, apart from the data frames) is an output marked
with report(), filed under its paper and study, with a caption file that exists; every table
has its HTML page (what the report shows inline) marked beside it, made by the same job.

The workflow is loaded through Snakemake's API (no job runs); tests/test_workflow.py builds a
tiny tree and checks the report archive itself."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import ROOT
from pdelab.spec.plugins import study_paper
from pdelab.spec.studies import report_groups

SHOWN = (".png", ".md", ".tex", ".csv")  # what the report holds: tables and figures


@pytest.fixture(scope="module")
def marked() -> list[tuple[str, re.Pattern, Any]]:
    """(rule, output pattern, its report flag) of every output marked with report()."""
    from snakemake.api import SnakemakeApi
    from snakemake.io import get_flag_value, is_flagged, regex_from_filepattern
    from snakemake.settings.types import OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(), snakefile=ROOT / "Snakefile", workdir=ROOT
        )
        workflow = wf._workflow  # noqa: SLF001 - the rules as parsed; the API exposes no other
        return [
            (rule.name, re.compile(regex_from_filepattern(str(out))), get_flag_value(out, "report"))
            for rule in workflow.rules
            for out in rule.output
            if is_flagged(out, "report")
        ]


def flag_of(marked: list, path: str) -> tuple[Any, dict[str, str]]:
    """The report flag of the output pattern that makes ``path``, and its wildcards."""
    return marking(marked, path)[1:]


def marking(marked: list, path: str) -> tuple[str, Any, dict[str, str]]:
    """The rule, report flag and wildcards of the output marked for the report that makes
    ``path``."""
    found = [
        (rule, flag, m.groupdict()) for rule, pattern, flag in marked if (m := pattern.match(path))
    ]
    assert len(found) == 1, f"{path}: {len(found)} outputs marked for the report make it"
    return found[0]


def expand(value: Any, wildcards: dict[str, str]) -> str:
    return value(SimpleNamespace(**wildcards)) if callable(value) else value.format(**wildcards)


def test_every_table_and_figure_of_every_paper_is_in_the_report(params, marked) -> None:
    groups = report_groups(params)
    assert {g.paper for g in groups} >= {
        study_paper(s["kind"]).name for s in params["studies"].values()
    }
    for group in groups:
        for name in group.files:
            if not name.endswith(SHOWN):
                continue
            flag, wildcards = flag_of(marked, f"results/{name}")
            assert expand(flag.category, wildcards) == group.paper_title, name
            subcategory = expand(flag.subcategory, wildcards)
            assert subcategory == (group.study or subcategory), name
            assert Path(flag.caption).is_file(), f"{name}: no caption {flag.caption}"
    assert flag_of(marked, "results/tables/learning.md")[0].category == "Pipeline checks"


def tables(params: dict[str, Any]) -> list[str]:
    """Every Markdown table of the report: each study's, each paper's own, the learning
    check's."""
    listed = [f for g in report_groups(params) for f in g.files if f.endswith(".md")]
    return [*listed, "tables/learning.md"]


def test_every_table_has_its_page_filed_beside_it(params, marked) -> None:
    """Snakemake's report shows an HTML file inline, Markdown/LaTeX/CSV only as download
    links: each table's page (tables/X.md -> tables/X.html, pdelab.report.page) is marked,
    made by the job that writes the Markdown and filed where the Markdown is."""
    names = tables(params)
    assert {"tables/learning.md", "tables/theory.md"} < set(names)
    assert {f"tables/{s}.md" for s in params["studies"]} < set(names)
    for md in names:
        page = str(Path(md).with_suffix(".html"))
        md_rule, md_flag, md_wildcards = marking(marked, f"results/{md}")
        page_rule, page_flag, page_wildcards = marking(marked, f"results/{page}")
        assert page_rule == md_rule, f"{page} is made by {page_rule}, {md} by {md_rule}"
        for key in ("category", "subcategory"):
            place = expand(getattr(page_flag, key), page_wildcards)
            assert place == expand(getattr(md_flag, key), md_wildcards), (page, key)
        assert Path(page_flag.caption).is_file(), f"{page}: no caption {page_flag.caption}"


def test_each_study_caption_names_the_study(params, marked) -> None:
    """Study captions are Jinja templates over the study's params.yaml block."""
    from jinja2 import Environment

    study = next(iter(params["studies"]))
    flag, _ = flag_of(marked, f"results/figures/{study}.png")
    page = Environment().from_string(Path(flag.caption).read_text())
    snake = SimpleNamespace(config=params, wildcards=SimpleNamespace(study=study))
    text = page.render(snakemake=snake)
    assert params["studies"][study]["title"] in text and f"``{study}``" in text


def test_each_papers_claims_are_a_page_filed_under_the_paper(params, marked) -> None:
    """The verdicts, not only a REPORT.md download: each active paper's claims section is an
    HTML page (shown inline) filed under the paper, and REPORT.md has its page too."""
    papers = {g.paper: g.paper_title for g in report_groups(params)}
    assert len(papers) >= 4
    for name, title in papers.items():
        rule, flag, _ = marking(marked, f"results/claims/{name}.html")
        assert rule == "report" and flag.category == title and flag.subcategory == "claims"
        assert Path(flag.caption).is_file()
    assert flag_of(marked, "results/REPORT.html")[0].category == "Pipeline checks"
