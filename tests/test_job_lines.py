"""Snakemake's lines about each job kept to a screen's width (pdelab.runtime.job_lines): file lists
say how many more, reasons keep their parts, long commands wrap into the same runnable command."""

from __future__ import annotations

import logging
import shlex
import subprocess

import pytest
from snakemake.logging import DefaultFormatter
from snakemake_interface_logger_plugins.common import LogEvent

from pdelab.runtime.job_lines import ShortLines, install, short_reason, shortened, words, wrapped

RESULTS = [f"results/runs/smoke/listops/variant{i}/seed0/result.parquet" for i in range(40)]


def test_a_short_list_is_kept_whole_and_a_long_one_says_how_many_more() -> None:
    assert shortened(RESULTS[:2]) == RESULTS[:2]
    short = shortened(RESULTS, 200)
    assert (
        short[-1] == f"and {40 - len(short) + 1} more" and short[:-1] == RESULTS[: len(short) - 1]
    )
    assert len(", ".join(short)) <= 200 and len(short) > 2
    assert shortened(RESULTS[:1], 10) == RESULTS[:1]  # one file is named, however long


def test_a_reason_keeps_each_part_and_its_first_files() -> None:
    updated = "Input files updated by another job: " + ", ".join(RESULTS)
    missing = "Missing output files: results/summary.parquet"
    reason = short_reason(f"{missing}; {updated}", 200)
    assert len(reason) <= 200 and reason.startswith(missing + "; Input files updated by another")
    assert RESULTS[0] in reason and reason.endswith("more")
    assert short_reason(missing, 200) == missing
    params = "Params have changed since last execution: before: " + "x" * 500 + " now: y"
    assert len(short_reason(params, 200)) <= 200
    uri = "sqlite:////tmp/pytest-of-someone/pytest-1234/a-long-test-name0/elsewhere.db"
    changed = f"Params have changed: before: 'sqlite:///results/mlflow/mlflow.db' now: '{uri}'"
    said = short_reason(changed, 120)
    assert len(said) <= 120 and "elsewhere.db'" in said and "before: 'sqlite:///" in said
    assert short_reason(changed, 240) == changed


COMMAND = (
    "python -m pdelab.runtime.warm pdelab.report aggregate "
    + " ".join(RESULTS)
    + " --profile smoke --out results/summary.parquet > results/logs/aggregate.log 2>&1"
)


def test_a_long_command_wraps_between_words_with_options_kept_with_their_values() -> None:
    lines = wrapped(COMMAND, 200, first=15).split("\n")
    assert len(lines) > 2 and len(lines[0]) + 15 <= 200 and all(len(x) <= 200 for x in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(" ".join(x.removesuffix("\\") for x in lines)) == shlex.split(COMMAND)
    assert "--out results/summary.parquet" in wrapped(COMMAND, 60)  # never split apart
    assert wrapped("python -m x", 200) == "python -m x"


def test_a_wrapped_command_runs_as_the_original() -> None:
    """bash runs the wrapped command to the same output: quoted blanks and escapes stay."""
    command = " ".join(["printf '%s|'", *(f'"word {i}"' for i in range(30)), "a\\ b 'c  d'"])
    command += " | tr -s ' ' _"
    lines = wrapped(command, 60)
    assert lines != command and all(len(x) <= 60 for x in lines.split("\n"))
    run = [
        subprocess.run(["bash", "-c", c], capture_output=True, text=True) for c in (command, lines)
    ]
    assert run[0].stdout == run[1].stdout and "word_29|a_b|c_d|" in run[0].stdout


@pytest.mark.parametrize(
    "command",
    [
        "echo 'an unclosed quote " + "x " * 120,
        "cat <<EOF " + "x " * 120,
        "echo a # a comment " + "x " * 120,
        "echo a\n" + "x " * 120,
    ],
)
def test_a_command_a_line_break_could_change_is_left_as_it_is(command: str) -> None:
    assert words(command) is None and wrapped(command, 80) == command


def job_info(**fields) -> logging.LogRecord:
    """A job's record as Snakemake 9 logs it (snakemake.jobs.Job.log_info)."""
    record = logging.LogRecord("snakemake.logging", logging.INFO, "", 0, "", None, None)
    info = dict(jobid=8, rule_msg=None, rule_name="aggregate", local=False, benchmark=None)
    info |= dict(input=RESULTS, output=["results/summary.parquet"], log=["results/logs/a.log"])
    info |= dict(wildcards={}, priority=0, threads=1, indent=False, is_checkpoint=False)
    info |= dict(resources={}, reason="Input files updated by another job: " + ", ".join(RESULTS))
    record.__dict__.update(info | fields | {"event": LogEvent.JOB_INFO})
    return record


def test_snakemake_prints_a_job_in_lines_of_the_width() -> None:
    plain = DefaultFormatter().format(job_info())
    assert max(map(len, plain.splitlines())) > 1000  # what Snakemake prints by itself
    record = job_info()
    assert ShortLines(200).filter(record)
    shown = DefaultFormatter().format(record).splitlines()
    assert max(map(len, shown)) <= 200
    assert any(line.startswith("    input: results/runs/") for line in shown)
    assert any(line.startswith("    reason: Input files updated") for line in shown)
    shell = logging.LogRecord("snakemake.logging", logging.INFO, "", 0, "", None, None)
    shell.__dict__.update(event=LogEvent.SHELLCMD, msg=f"Shell command: {COMMAND}")
    ShortLines(200).filter(shell)
    assert max(map(len, DefaultFormatter().format(shell).splitlines())) <= 200


def test_the_filter_is_put_on_the_logger_once() -> None:
    logger = logging.getLogger("pdelab.test_job_lines")
    install(logger)
    install(logger)  # the Snakefile parsed again in one process
    assert sum(isinstance(f, ShortLines) for f in logger.filters) == 1
