"""What made each job's outputs, so that content alone decides whether a job runs again.

Snakemake reruns a job whose input is newer than its outputs; dates lie (a clock ahead or
behind, ``touch -r``, a copy or restore that does not keep them). So each job has one more
input, its *stamp* (``results/stamps/jobs/<rule>/<key>.json``), written when the workflow
parses: its *recipe*, what the job would be made from now:

* ``own``: its code (the source its command imports, by code digest: pdelab.records.provenance),
  the params it reads, and the digests of the other files it reads (the papers' numbers);
* ``inputs``: the sha256 of each file another job writes for it, or ``pending`` while that job
  is not current itself: it will run first and change them.

When the job ends, :func:`main` writes its *made record* beside the stamp: the recipe's own
part, its input files as they are then, and the sha256 of every output. When the workflow
parses, a job is current exactly when its made record holds the recipe and its outputs still
hold the bytes it wrote (:func:`is_current`), and the parse sets the dates Snakemake compares
to say so (:func:`date_stamp`): a current job's stamp is dated 1970 and its outputs no earlier
than its inputs; a stale job's stamp just after its oldest output, however the outputs are
dated. A job that ends dates its own stamp 1970 (it is current now, and Snakemake refuses a
finished job whose outputs are older than an input). So no rerun rests on a date, and an edit
put back before anything ran leaves the records as they were: nothing runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pdelab.records.atomic import write_text

JOB_STAMPS = Path("results/stamps/jobs")  # relative to the workflow's directory
LONG_AGO = 0.0  # a current stamp's time: older than any output
PENDING = "pending"  # an upstream job that will run first
SOURCE = "src/pdelab/"  # files read as code: digested without comments and docstrings


def stamp_path(rule: str, key: str = "all") -> Path:
    return JOB_STAMPS / rule / f"{key}.json"


def made_path(stamp: Path | str) -> Path:
    """A stamp's made record: written by the job when it ends."""
    stamp = Path(stamp)
    return stamp.with_name(f"{stamp.stem}.made.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path | str) -> str:
    """A file's content digest: a project source file's code (comments, docstrings and layout
    aside), any other file's bytes."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".py" and SOURCE in path.as_posix():
        from pdelab.records.provenance import code_sha256  # parses: only for source files

        return code_sha256(data)
    return sha256(data)


def files_digest(paths: Iterable[Path | str]) -> dict[str, str]:
    """{path: content digest} of the files a job reads (a missing one: ``missing``)."""
    found = {}
    for path in sorted({str(p) for p in paths}):
        try:
            found[path] = file_digest(path)
        except OSError:
            found[path] = "missing"
    return found


def output_files(outputs: Iterable[Path | str]) -> list[Path]:
    """The files of a job's outputs: a directory output's files, each output file itself."""
    files = []
    for out in map(Path, outputs):
        if out.is_dir():
            files += sorted(p for p in out.rglob("*") if p.is_file())
        else:
            files.append(out)
    return files


def output_digests(outputs: Iterable[Path | str]) -> dict[str, str]:
    """{file: sha256} of a job's outputs as they are now (missing files left out)."""
    found = {}
    for file in output_files(outputs):
        try:
            found[file.as_posix()] = sha256(file.read_bytes())
        except OSError:
            continue
    return found


def content_state(path: Path | str, current: bool) -> str:
    """What a recipe holds of a file another job writes: its sha256 while that job is current,
    else :data:`PENDING`."""
    if not current:
        return PENDING
    try:
        return sha256(Path(path).read_bytes())[:16]
    except OSError:
        return PENDING


def json_text(value: Mapping[str, Any]) -> str:
    """A stamp's or made record's content: canonical JSON, so one record is one text."""
    return json.dumps(value, sort_keys=True, indent=1) + "\n"


def canonical(value: Mapping[str, Any]) -> Any:
    """A recipe as it reads back from JSON (tuples as lists), to compare with a record."""
    return json.loads(json.dumps(dict(value)))


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds it (a stamp rewritten each parse
    would change nothing but churn the disk)."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def is_current(
    stamp: Path | str,
    own: Mapping[str, Any],
    inputs: Mapping[str, str],
    made: Mapping[str, Any] | None = None,
) -> bool:
    """Whether a job's made record (``made``, read from beside the stamp when not given) says
    its outputs were made from this recipe, and they still hold the bytes the job wrote."""
    made = read_json(made_path(stamp)) if made is None else made
    if not made or PENDING in inputs.values():
        return False
    if made.get("own") != canonical(own) or made.get("inputs") != dict(inputs):
        return False
    outputs = made.get("outputs") or {}
    return bool(outputs) and output_digests(outputs) == outputs


def after_oldest_output(outputs: Iterable[Path | str]) -> float:
    """A time just after the oldest output's (what Snakemake compares its inputs with), in the
    past however the outputs were dated (a clock ahead included): the job's new outputs are
    then never older than its stamp."""
    dates = [t for t in (mtime(f) for f in output_files(outputs)) if t is not None]
    return min(dates) + 1e-3 if dates else LONG_AGO


def mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def align_dates(outputs: Iterable[Path | str], inputs: Iterable[Path | str]) -> None:
    """Date a current job's outputs no earlier than the files it reads, so that Snakemake's
    comparison of dates says what the content says: after a copy, a restore or a clock that
    does not keep dates, an input can be newer than the outputs made from its very bytes."""
    newest = max((t for t in map(mtime, map(Path, inputs)) if t is not None), default=None)
    if newest is None:
        return
    for out in map(Path, outputs):
        stamped = [out, out / ".snakemake_timestamp"] if out.is_dir() else [out]
        for file in stamped:
            found = mtime(file)
            if found is not None and found < newest:
                os.utime(file, (newest, newest))


def date_stamp(
    stamp: Path, current: bool, outputs: Sequence[Path | str], inputs: Iterable[Path | str] = ()
) -> None:
    """A current job's stamp dated 1970 and its outputs no earlier than its inputs; a stale
    job's stamp dated just after its oldest output."""
    if current:
        os.utime(stamp, (LONG_AGO, LONG_AGO))
        align_dates(outputs, inputs)
    else:
        when = after_oldest_output(outputs)
        os.utime(stamp, (when, when))


def settle(
    stamp: Path | str,
    own: Mapping[str, Any],
    inputs: Mapping[str, str],
    outputs: Sequence[Path | str],
    reads: Iterable[Path | str] = (),
) -> bool:
    """Write a job's stamp (its recipe) and date it, and its outputs, by its made record (see
    the module docstring); ``reads``: the files the rule declares besides its stamp. Returns
    whether the job is current."""
    stamp = Path(stamp)
    made = read_json(made_path(stamp)) or {}
    current = is_current(stamp, own, inputs, made)
    write_if_changed(stamp, json_text({"own": dict(own), "inputs": dict(inputs)}))
    date_stamp(stamp, current, [*outputs, *(made.get("outputs") or {})], [*inputs, *reads])
    return current


def write_made(stamp: Path | str, outputs: Sequence[Path | str]) -> dict[str, Any]:
    """The record a job writes when it ends: its stamp's own part, its input files as they are
    now (each job that writes one ran before it), and the sha256 of each output."""
    stamp = Path(stamp)
    recipe = read_json(stamp)
    if recipe is None:
        raise ValueError(f"{stamp}: no recipe to record (the workflow writes it when it parses)")
    made = {
        "own": recipe["own"],  # what `pdelab status` names a change against, too
        "inputs": {path: content_state(path, True) for path in recipe["inputs"]},
        "outputs": output_digests(outputs),
    }
    write_text(made_path(stamp), json_text(made))
    date_stamp(stamp, True, outputs, recipe["inputs"])
    return made


def adopt(written: Iterable[Path | str], root: Path = JOB_STAMPS) -> list[Path]:
    """Record files a command rewrote in the jobs' stead (``pdelab.tracking rebuild`` writes
    what the MLflow rules would): each made record that lists one as an output or an input
    takes its bytes as they are now, so the jobs stay current. Returns the records changed."""
    paths = {Path(p).as_posix() for p in written}
    changed = []
    for record in sorted(root.glob("*/*.made.json")):
        made = read_json(record)
        if not made or not paths & {*(made.get("outputs") or {}), *(made.get("inputs") or {})}:
            continue
        outputs = made.get("outputs") or {}
        made["outputs"] = output_digests(outputs)
        made["inputs"] = {
            path: content_state(path, True) if path in paths else state
            for path, state in (made.get("inputs") or {}).items()
        }
        write_text(record, json_text(made))
        changed.append(record)
    return changed


def main(argv: list[str] | None = None) -> None:
    """``python -m pdelab.records.made STAMP OUTPUT...``: a rule's last command."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        raise SystemExit("usage: python -m pdelab.records.made STAMP OUTPUT...")
    write_made(args[0], args[1:])


if __name__ == "__main__":
    main()
