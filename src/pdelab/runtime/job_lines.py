"""Snakemake's lines about each job, kept to a screen's width: ``snakemake -n`` is read.

Why: Snakemake prints each file list of a job (input, output, log, the files a reason names)
on one line, so a report job, whose inputs are every run's result and every source file its
code runs, prints lines of kilobytes, and a dry run after a one-key edit of params.yaml becomes
a wall that hides the few lines that matter: which jobs run, and why. The Snakefile puts
:class:`ShortLines` on Snakemake's logger, which changes only how a job is printed:

* a file list longer than :data:`WIDTH` keeps its first files and says how many more
  (``results/runs/.../result.parquet, and 41 more``); so does each part of a job's reason, and
  a long value a reason quotes (a param before and now) keeps its start and its end;
* a shell command longer than :data:`WIDTH` is broken between its words, outside quotes, with
  `` \\`` line continuations: the same command, runnable as printed.

What a job reads and runs is unchanged (``snakemake --summary`` lists every file); what changed
in a run is ``pdelab status``'s to say, from its records. Snakemake's events are read by the
names its logger-plugin interface gives them (snakemake-interface-logger-plugins).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

WIDTH = 240  # the characters a job's line may take (its label included)
FILE_LISTS = ("input", "output", "log")  # a job event's lists of files
JOB_INFO, SHELLCMD = "job_info", "shellcmd"  # LogEvent values
SHELL_PREFIX = "Shell command: "


def shortened(items: Sequence[str], width: int = WIDTH) -> list[str]:
    """``items``, or as many of the first as fit ``width`` once joined by ", " with "and N more"
    after them (at least one)."""
    items = [str(i) for i in items]
    if len(items) < 2 or len(", ".join(items)) <= width:
        return items
    kept = 1
    while kept < len(items) - 1:
        more = f"and {len(items) - kept - 1} more"
        if len(", ".join([*items[: kept + 1], more])) > width:
            break
        kept += 1
    return [*items[:kept], f"and {len(items) - kept} more"]


def short_reason(reason: str, width: int = WIDTH) -> str:
    """A job's reason with each of its long parts (``label: file, file, ...``, joined by "; ")
    cut to its share of what the short ones leave of ``width``: a file list as
    :func:`shortened`, quoted values as :func:`elided`, other text at a word."""
    if len(reason) <= width:
        return reason
    parts = reason.split("; ")
    budget = width - 2 * (len(parts) - 1)
    short = [len(part) for part in parts if len(part) <= budget // len(parts)]
    share = max(60, (budget - sum(short)) // max(1, len(parts) - len(short)))
    out = []
    for part in parts:
        label, colon, listed = part.partition(": ")
        if len(part) > share and colon:
            part = f"{label}: {', '.join(shortened(listed.split(', '), share - len(label) - 2))}"
        if len(part) > share:  # text: a params change quotes each value before and now
            part = elided(part, share)
        if len(part) > share:
            part = part[: share - 4].rsplit(" ", 1)[0] + " ..."
        out.append(part)
    return "; ".join(out)


QUOTED = re.compile(r"'[^']*'")


def elided(text: str, width: int) -> str:
    """``text`` with each quoted value cut in its middle (``'sqlite:///...elsewhere.db'``), the
    values sharing what the rest of the text leaves of ``width``; its end kept longer than its
    start (a path's file, a JSON's last keys)."""
    values = QUOTED.findall(text)
    if not values:
        return text
    room = max(16, (width - len(QUOTED.sub("''", text))) // len(values))

    def cut(match: re.Match[str]) -> str:
        value = match.group(0)[1:-1]
        if len(value) + 2 <= room:
            return match.group(0)
        head = (room - 5) // 3
        return f"'{value[:head]}...{value[len(value) - (room - 5 - head) :]}'"

    return QUOTED.sub(cut, text)


def words(command: str) -> list[str] | None:
    """``command`` split at the blanks outside quotes and escapes, each word as written; None
    where a line break could change what runs (a newline, a comment, a here-document, an
    unclosed quote)."""
    found, word, quote, escaped = [], "", "", False
    for char in command:
        if escaped:
            word, escaped = word + char, False
        elif char == "\\" and quote != "'":
            word, escaped = word + char, True
        elif quote:
            word += char
            quote = "" if char == quote else quote
        elif char in "'\"":
            word, quote = word + char, char
        elif char in " \t":
            if word:
                found.append(word)
            word = ""
        elif char == "\n" or (char == "#" and not word):
            return None
        else:
            word += char
    if quote or escaped:
        return None
    found += [word] if word else []
    return None if "<<" in found or any(w.startswith("<<") for w in found) else found


REDIRECTS = (">", ">>", "<", "2>", "&>")


def units(split: list[str]) -> list[str]:
    """Words kept together on one line: an option or a redirection with the value after it
    (``--out results/x``, ``> log``)."""
    out: list[str] = []
    for word in split:
        prev = out[-1] if out else ""
        takes = " " not in prev and (prev.startswith("-") or prev in REDIRECTS)
        if takes and not word.startswith("-"):
            out[-1] = f"{prev} {word}"
        else:
            out.append(word)
    return out


def wrapped(command: str, width: int = WIDTH, first: int = 0) -> str:
    """``command`` broken into lines of at most ``width`` characters where it is longer (the
    first line ``first`` characters shorter: its label), each but the last ending in a line
    continuation; unchanged where breaking it is not safe (:func:`words`)."""
    if first + len(command) <= width or (split := words(command)) is None:
        return command
    lines, line = [], ""
    for word in units(split):
        room = width - 2 - (first if not lines else 0)
        if line.strip() and len(line) + 1 + len(word) > room:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line.strip() else f"{line}{word}"
    return " \\\n".join([*lines, line])


class ShortLines(logging.Filter):
    """Shortens the file lists and reason of each job event and wraps its shell command, on
    the record itself (every handler, the log file's included, prints the short form)."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.width = width

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(getattr(record, "event", None), "value", None)
        if event == JOB_INFO:
            for name in FILE_LISTS:
                files = getattr(record, name, None)
                if isinstance(files, list):
                    label = len(f"    {name}: ")
                    setattr(record, name, shortened(files, self.width - label))
            if isinstance(reason := getattr(record, "reason", None), str):
                record.reason = short_reason(reason, self.width - len("    reason: "))
        elif event == SHELLCMD:
            if isinstance(cmd := getattr(record, "cmd", None), str):  # a command as it runs
                record.cmd = wrapped(cmd, self.width)
            elif isinstance(record.msg, str) and record.msg.startswith(SHELL_PREFIX):
                command = record.msg[len(SHELL_PREFIX) :]
                record.msg = SHELL_PREFIX + wrapped(command, self.width, len(SHELL_PREFIX))
        return True


def install(logger: logging.Logger, width: int = WIDTH) -> None:
    """Put :class:`ShortLines` on Snakemake's logger, once however often the Snakefile is
    parsed in one process."""
    if not any(isinstance(f, ShortLines) for f in logger.filters):
        logger.addFilter(ShortLines(width))
