"""Staleness decided from the records, so that Snakemake's own memory (``.snakemake/``) is never
the only thing that knows what a change reruns.

Snakemake reruns a job whose params or code changed only while ``.snakemake/`` remembers what
they were; once it is deleted (to clear a lock, a build restored from a backup or a CI cache)
only modification times are left. So each training job gets one more input, its *plan stamp*
(``results/stamps/<profile>/<task>/<variant>/seed<N>.json``): the spec, code digest and data
a run would be trained from now. The workflow writes it when it parses; its modification time
says what the run's records say:

* the run's run.json holds that very spec, code digest and data hash: the stamp is dated 1970,
  older than any output, so nothing reruns (a restored build with today's records trains
  nothing);
* run.json holds another spec, digest or data hash, or there is none, or the run's records
  would be refused by their readers (another run's, edited or damaged since): the stamp is
  dated now, newer than the outputs, so exactly that run is trained again, with or without
  ``.snakemake/``.

A stamp whose content has not changed keeps its time while the records are usable, so
``snakemake --touch`` (the documented opt-out of a cosmetic code edit) still keeps the runs it
touched. ``pdelab status`` reads the same records, and says what differs (``train.lr: 0.001 ->
0.02``, ``code: pdelab/models/transformer.py ...``).

The stamp is also the job's plan: the train rule hands its path to the job (``python -m
pdelab.training.train --plan``), with the digest of the text it wrote
(pdelab.records.run.plan_sha256), and the job trains the spec it holds as it is, never resolving
params.yaml again, so what the workflow planned, what the job trained and what its run.json records
are one spec. No param holds the spec (the digest is derived from the input, which Snakemake does
not compare), so a dry run says only "Updated input files: results/stamps/...": the date decides,
the records say why.

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

from pdelab.records import provenance
from pdelab.records.run import check_run, plan_text

STAMPS = Path("results/stamps")  # relative to the workflow's directory
LONG_AGO = 0.0  # a stamp's time when the records are current: older than any output


def stamp_path(profile: str, task: str, variant: str, seed: int, root: Path = STAMPS) -> Path:
    return root / profile / task / variant / f"seed{seed}.json"


def planned(
    spec: Mapping[str, Any], code_digest: str, data_hash: str | None = None
) -> dict[str, Any]:
    """What a run would be trained from now: its resolved spec, its code digest and its task's
    prepared data (their content hash; None before they are prepared)."""
    return {"spec": dict(spec), "code_digest": code_digest, "data_hash": data_hash}


def made_from(run_dir: Path | str) -> dict[str, Any] | None:
    """What a run folder's records say made the run (its spec and code digest), once they pass
    every reader's check (pdelab.records.run.check_run: whose they are, and the bytes they were
    written with); None for a folder without them, or with records no reader would take."""
    if not (Path(run_dir) / "run.json").exists():
        return None
    try:
        record = check_run(Path(run_dir))
    except (ValueError, OSError):  # ForeignRecord and DamagedRecord are ValueErrors
        return None
    digest = (record.get("provenance") or {}).get("code_digest")
    made = {"spec": record.get("spec"), "code_digest": digest}
    return json.loads(json.dumps(made | {"data_hash": record["identity"]["data_hash"]}))


def run_is_current(run_dir: Path | str, plan: Mapping[str, Any]) -> bool:
    """Whether a run folder's records say it was trained from ``plan`` (spec and code)."""
    return made_from(run_dir) == json.loads(json.dumps(dict(plan)))


def write_stamp(stamp: Path | str, run_dir: Path | str, plan: Mapping[str, Any]) -> str:
    """Write a run's plan stamp, dated by what the run's records say (see the module
    docstring); returns its path, the train rule's input. A stamp whose content is already
    ``plan`` keeps its date while the records are usable (``--touch`` keeps runs so), and is
    dated now when they are not (damaged, another run's, missing)."""
    stamp = Path(stamp)
    text = plan_text(plan)
    made = made_from(run_dir)
    if stamp.exists() and stamp.read_text() == text:
        if made is None:
            os.utime(stamp)
        return str(stamp)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    if made == json.loads(json.dumps(dict(plan))):
        os.utime(tmp, (LONG_AGO, LONG_AGO))
    os.replace(tmp, stamp)
    return str(stamp)


def module_files(modules: Iterable[str]) -> list[str]:
    """The project source files (``src/pdelab/...``) that importing ``modules`` executes, read
    from the import graph: a report job's code, to declare as its rule's inputs."""
    found = provenance.closure(tuple(sorted(set(modules))))
    return sorted(f"src/{provenance.source_path(m)}" for m in found)
