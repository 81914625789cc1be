"""Whether a training run is current, decided from its records, never from a file's date or
Snakemake's own memory (``.snakemake/``).

Each training job gets one more input, its *plan stamp*
(``results/stamps/<profile>/<task>/<variant>/seed<N>.json``): the spec, code digest and data
a run would be trained from now. The workflow writes it when it parses, and sets the dates
Snakemake compares by what the run's records say (pdelab.records.made.date_stamp):

* the run's run.json holds that very spec, code digest and data hash: the stamp is dated 1970
  and the run's files no earlier than its data manifest, so nothing reruns (a restored or
  copied build trains nothing, whatever its dates);
* run.json holds another spec, digest or data hash, or there is none, or the run's records
  would be refused by their readers (another run's, edited or damaged since), or the task's
  data job is not current (it runs first): the stamp is dated just after the oldest of the
  run's files, so exactly that run is trained again; the job dates it 1970 when it ends.

``pdelab status`` reads the same records, and says what differs (``train.lr: 0.001 -> 0.02``,
``code: pdelab/models/transformer.py ...``). Every other job is decided the same way by
:mod:`pdelab.records.made`.

The stamp is also the job's plan: the train rule hands its path to the job (``python -m
pdelab.training.train --plan``), with the digest of the text it wrote
(pdelab.records.run.plan_sha256), and the job trains the spec it holds as it is, never resolving
params.yaml again, so what the workflow planned, what the job trained and what its run.json records
are one spec. No param holds the spec (the digest is derived from the input, which Snakemake does
not compare), so a dry run says only "Updated input files: results/stamps/...": the records say
why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pdelab.records import made, provenance
from pdelab.records.run import RECORD_FILES, check_run, plan_text

STAMPS = Path("results/stamps")  # relative to the workflow's directory


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
    return made.canonical(
        {"spec": record.get("spec"), "code_digest": digest}
        | {"data_hash": record["identity"]["data_hash"]}
    )


def run_is_current(run_dir: Path | str, plan: Mapping[str, Any]) -> bool:
    """Whether a run folder's records say it was trained from ``plan`` (spec and code)."""
    return made_from(run_dir) == made.canonical(plan)


def write_stamp(
    stamp: Path | str,
    run_dir: Path | str,
    plan: Mapping[str, Any],
    data_current: bool = True,
    reads: Iterable[Path | str] = (),
) -> bool:
    """Write a run's plan stamp, dated by what the run's records say (see the module
    docstring): 1970 when they hold this plan and its task's data job is current (and the run's
    files then no earlier than the ``reads``, its data manifest), else just after the oldest of
    the run's files. Returns whether the run is current."""
    stamp = Path(stamp)
    current = data_current and run_is_current(run_dir, plan)
    made.write_if_changed(stamp, plan_text(plan))
    made.date_stamp(stamp, current, [Path(run_dir) / name for name in RECORD_FILES], reads)
    return current


def module_files(modules: Iterable[str]) -> list[str]:
    """The project source files (``src/pdelab/...``) that importing ``modules`` executes, read
    from the import graph: a report job's code, to declare as its rule's inputs."""
    found = provenance.closure(tuple(sorted(set(modules))))
    return sorted(f"src/{provenance.source_path(m)}" for m in found)
