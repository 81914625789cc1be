"""The scoreboard: each paper's claims counted by verdict, the first thing the report shows.

A claim falls in one group: a finding about the paper (its text, theory or released code, true
under any profile), a run verdict (decided by this profile's runs: reproduced, in sign only,
not reproduced), not measurable here, needs the paper profile, or no experiment in the paper
(a claim the runs would judge but the paper never tested). A check of pdelab's own code is
listed but never counted, as the coverage line does not count it.

REPORT.md shows one row per paper (:func:`scoreboard`), each count a link to the group's
table on the paper's page; the paper's page opens with its own rows, one per group with the
verdicts inside it (:func:`paper_board`), and lists its claims group by group, each table with
every column the claims kit gives it (:func:`claims_section`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tabulate import tabulate

from pdelab.report.claims import (
    DECIDED,
    NEEDS_PAPER,
    NO_EXPERIMENT,
    NOT_MEASURABLE,
    RULE,
    STAND_IN_LEGEND,
    Claim,
    adjust,
    claims_table,
    coverage_line,
    mark_stand_ins,
)
from pdelab.report.page import anchor


@dataclass(frozen=True)
class Group:
    """One column of the scoreboard: its heading on a paper's page and the claims it holds."""

    name: str
    holds: Callable[[Claim], bool]

    @property
    def anchor(self) -> str:
        return anchor(self.name)


def _run(claim: Claim) -> bool:
    return claim.profile is not None and not claim.own_code


GROUPS = (
    Group("findings about the paper", lambda c: c.profile is None and not c.own_code),
    Group("run verdicts", lambda c: _run(c) and c.verdict in DECIDED),
    Group("not measurable here", lambda c: _run(c) and c.verdict == NOT_MEASURABLE),
    Group("needs the paper profile", lambda c: _run(c) and c.verdict == NEEDS_PAPER),
    Group("no experiment in the paper", lambda c: _run(c) and c.verdict == NO_EXPERIMENT),
)
OWN_CODE = "checks of pdelab's own implementation"
INTROS = {
    "findings about the paper": "The paper's text, its theory computed, its released code "
    "read: no verdict here rests on a trained model; a cell that also quotes this profile's "
    "trained models names them as such.",
    OWN_CODE: "They test our code against the paper's definitions; not findings about the "
    "paper, and not counted.",
}


def judged(
    claims: Sequence[Claim], stand_ins: Mapping[str, str] | None, tasks: Sequence[str]
) -> list[Claim]:
    """A paper's claims as the report shows them: stand-ins marked, run verdicts at the level
    Holm's step-down gives them (what the counts count)."""
    return adjust(mark_stand_ins(claims, stand_ins or {}, tasks))


def grouped(claims: Sequence[Claim]) -> dict[str, list[Claim]]:
    """The claims of each group (every group present, in GROUPS order)."""
    return {g.name: [c for c in claims if g.holds(c)] for g in GROUPS}


def count_cell(n: int, href: str, refs: list[str] | None = None) -> str:
    """A count linked to where its claims are listed (a zero lists nothing: plain). With
    ``refs``, a reference link (``[3][7]``, its address added to ``refs``), so that the table's
    text stays narrow enough to read in a terminal."""
    if not n:
        return "0"
    if refs is None:
        return f"[{n}]({href})"
    refs.append(href)
    return f"[{n}][{len(refs)}]"


def claims_heading(title: str) -> str:
    return f"{title}: the claims audited"


def scoreboard(rows: Sequence[tuple[str, str, Sequence[Claim]]]) -> list[str]:
    """REPORT.md's scoreboard: per paper (title, its page, its judged claims), the claims in
    each group, each count a link to the group on the paper's page (reference links, their
    addresses listed under the table)."""
    header = ["paper", "claims", *(g.name for g in GROUPS)]
    body, refs = [], []
    for title, page, claims in rows:
        groups = grouped(claims)
        total = sum(map(len, groups.values()))
        refs.append(page)
        body.append(
            [
                f"[{title}][{len(refs)}]",
                count_cell(total, f"{page}#{anchor(claims_heading(title))}", refs),
                *(count_cell(len(groups[g.name]), f"{page}#{g.anchor}", refs) for g in GROUPS),
            ]
        )
    table = tabulate(body, headers=header, tablefmt="github", disable_numparse=True)
    return [*table.split("\n"), "", *(f"[{k}]: {ref}" for k, ref in enumerate(refs, 1)), ""]


def paper_board(claims: Sequence[Claim]) -> list[str]:
    """A paper page's own scoreboard: one row per group, its count linked to its table and
    its claims counted by verdict."""
    rows = []
    for group, members in grouped(claims).items():
        verdicts = Counter(c.verdict for c in members)
        rows.append(
            [
                group,
                count_cell(len(members), f"#{anchor(group)}"),
                ", ".join(f"{n} {v}" for v, n in verdicts.most_common()),
            ]
        )
    table = tabulate(
        rows, headers=["claims", "count", "by verdict"], tablefmt="github", disable_numparse=True
    )
    return [*table.split("\n"), ""]


def claims_section(
    title: str, claims: Sequence[Claim], profile_note: str, notes: Sequence[str] = ()
) -> list[str]:
    """A paper's claims (already :func:`judged`), group by group under headings the
    scoreboard links to, each group's table with every column; then the paper's notes."""
    groups = grouped(claims)
    checks = [c for c in claims if c.own_code]
    lines = [f"## {claims_heading(title)}", "", coverage_line(claims), ""]
    ruled = False
    for group in GROUPS:
        members = groups[group.name]
        if not members:
            continue
        findings = group is GROUPS[0]
        lines += [f"### {group.name[0].upper()}{group.name[1:]}", ""]
        if findings:
            lines += [INTROS[group.name], ""]
        elif not ruled:
            lines += [f"**Verdicts of this profile's runs.** {profile_note} {RULE}", ""]
            ruled = True
        lines += [claims_table(members, findings=findings), ""]
        if any(c.stand_in for c in members):
            lines += [STAND_IN_LEGEND, ""]
    if checks:
        lines += [
            f"### {OWN_CODE[0].upper()}{OWN_CODE[1:]}",
            "",
            INTROS[OWN_CODE],
            "",
            claims_table(checks, findings=True),
            "",
        ]
    return lines + [n for note in notes for n in (note, "")]
