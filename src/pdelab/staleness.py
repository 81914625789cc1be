"""Staleness decided from the records, so that Snakemake's own memory (``.snakemake/``) is never
the only thing that knows what a change reruns.

Snakemake reruns a job whose params or code changed only while ``.snakemake/`` remembers what
they were; once it is deleted (to clear a lock, a build restored from a backup or a CI cache)
only modification times are left. So each training job gets one more input, its *plan stamp*
(``results/stamps/<profile>/<task>/<variant>/seed<N>.json``): the spec and code digest a
run would be trained from now. The workflow writes it when it parses, and only when its content
changes; its modification time says what the run's records say:

* the run's run.json holds that very spec and code digest: the stamp is dated 1970, older than
  any output, so nothing reruns (a restored build with today's records trains nothing);
* run.json holds another spec or digest, or there is none: the stamp is dated now, newer than
  the outputs, so exactly that run is trained again, with or without ``.snakemake/``.

A stamp left as it is keeps its time, so ``snakemake --touch`` (the documented opt-out of a
cosmetic code edit) still keeps the runs it touched. ``pdelab status`` reads the same records
(:func:`run_is_current` is its reasoning too).

Tables, figures and the report declare their code the same way the cost plan does: the source
files their job imports (:func:`module_files`, read from the import graph) and the paper
numbers they read are inputs of their rule, so an edit rebuilds exactly the outputs that use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pdelab import provenance
from pdelab.records import read_run_json

STAMPS = Path("results/stamps")  # relative to the workflow's directory
LONG_AGO = 0.0  # a stamp's time when the records are current: older than any output


def stamp_path(profile: str, task: str, variant: str, seed: int, root: Path = STAMPS) -> Path:
    return root / profile / task / variant / f"seed{seed}.json"


def planned(spec: Mapping[str, Any], code_digest: str) -> dict[str, Any]:
    """What a run would be trained from now: its resolved spec and its code digest."""
    return {"spec": dict(spec), "code_digest": code_digest}


def run_is_current(run_dir: Path | str, plan: Mapping[str, Any]) -> bool:
    """Whether a run folder's run.json says it was trained from ``plan`` (spec and code)."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return False
    try:
        record = read_run_json(Path(run_dir))
    except ValueError:
        return False
    made = {
        "spec": record.get("spec"),
        "code_digest": record.get("provenance", {}).get("code_digest"),
    }
    return json.dumps(made, sort_keys=True) == json.dumps(dict(plan), sort_keys=True)


def write_stamp(stamp: Path | str, run_dir: Path | str, plan: Mapping[str, Any]) -> str:
    """Write a run's plan stamp if its content changed, dated by what the run's records say
    (see the module docstring); returns its path, the train rule's input."""
    stamp = Path(stamp)
    text = json.dumps(dict(plan), sort_keys=True, indent=1) + "\n"
    if stamp.exists() and stamp.read_text() == text:
        return str(stamp)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    if run_is_current(run_dir, plan):
        os.utime(tmp, (LONG_AGO, LONG_AGO))
    os.replace(tmp, stamp)
    return str(stamp)


def module_files(modules: Iterable[str]) -> list[str]:
    """The project source files (``src/pdelab/...``) that importing ``modules`` executes, read
    from the import graph: a report job's code, to declare as its rule's inputs."""
    found = provenance.closure(tuple(sorted(set(modules))))
    return sorted(f"src/{provenance.source_path(m)}" for m in found)
