"""The documentation a newcomer reads: README.md is a landing page (under 250 lines) whose index
names every guide in docs/, and every relative Markdown link in the README, the guides and the
other READMEs points at a file of the repository (and, with an anchor, at one of its
headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
CHECKED = [
    README,
    *DOCS,
    ROOT / "benchmarks" / "README.md",
    ROOT / "results" / "README.md",
    *sorted((ROOT / "src" / "pdelab" / "papers").glob("*/README.md")),
]

FENCE = re.compile(r"(?ms)^(```|~~~).*?^\1[^\n]*$")
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans: a link inside code is no link."""
    return CODE.sub("", FENCE.sub("", text))


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lowercased, punctuation dropped, spaces
    as hyphens, a repeated heading numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``path`` that points at no file under ``root``, or at a heading
    its file lacks, as ``file: target (why)``."""
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if SCHEME.match(target):
            continue  # http(s), mailto: not checked here (no network)
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path.resolve()
        where = f"{path.relative_to(root)}: {target}"
        if not dest.is_relative_to(root.resolve()):
            broken.append(f"{where} (outside the repository)")
        elif not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading #{anchor} in {dest.name})")
    return broken


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(path: Path) -> None:
    assert path.exists(), path
    broken = broken_links(path)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_is_a_landing_page() -> None:
    lines = README.read_text().count("\n")
    assert lines < 250, f"README.md has {lines} lines; move detail into docs/"


def test_the_readmes_index_names_every_guide() -> None:
    assert DOCS, "no docs/*.md"
    linked = set(LINK.findall(prose(README.read_text())))
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in linked]
    assert missing == [], f"README.md's index lacks {missing}"


def test_a_broken_link_is_named(tmp_path: Path) -> None:
    """The check can fail: a missing file, a missing heading and a link out of the tree are
    each reported with the file and the target; links in code and to the web are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title\n\n## The `pdelab` command\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Home\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#the-pdelab-command) [ok](#home) [web](https://x.org)\n"
        "[gone](docs/gone.md) [bad anchor](docs/a.md#nowhere) [out](../elsewhere.md)\n"
        "`[in code](docs/gone.md)`\n\n```\n[in a block](docs/gone.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/a.md#nowhere (no heading #nowhere in a.md)",
        "README.md: ../elsewhere.md (outside the repository)",
    ]
