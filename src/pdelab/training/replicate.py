"""Train one run again, as its run.json records it, beside the run (the nondeterminism floor).

    python -m pdelab.training.replicate --run RUN_DIR --out OUT_JSON [--threads N]

The run's spec, trained with the run's thread count (unless ``--threads``) and its micro-batches,
into a temporary folder: RUN_DIR is only read, and nothing of the replicate is kept but OUT_JSON
(pdelab.records.replicate: the run's identity, both trainings' final metrics, each metric's
absolute difference, whether the records are bitwise equal, the device and both environments).
A run whose code or data changed since it was trained is refused: its replicate would be
another experiment.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from pdelab.records.replicate import replicable_run, replicate_record, write_replicate
from pdelab.records.run import check_run, describe


def replicate(run_dir: Path | str, threads: int | None = None) -> dict[str, Any]:
    """Train the run in ``run_dir`` again in a temporary folder and return the replicate's
    record (OUT_JSON's content); ValueError (NotReplicable, ForeignRecord, DamagedRecord)
    names a run that cannot be replicated and why."""
    from pdelab.training.micro_batch import Execution
    from pdelab.training.train import run_training

    run_dir = Path(run_dir)
    record = check_run(run_dir)  # whose records, as written
    run = replicable_run(record, run_dir)
    threads = threads or (record.get("environment") or {}).get("threads")
    executed = record.get("execution") or {}
    execution = Execution(
        int(executed.get("micro_batch") or 0), bool(executed.get("checkpoint_blocks"))
    )
    with tempfile.TemporaryDirectory(prefix="replicate-") as folder:
        out = Path(folder)
        run_training(run, out, track=False, progress=False, threads=threads, execution=execution)
        return replicate_record(record, run_dir, out)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pdelab.training.replicate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run", type=Path, required=True, help="the run's folder (read only)")
    parser.add_argument("--out", type=Path, required=True, help="the replicate's JSON")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the run's own)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """The command line: replicate the run, write OUT_JSON, say whether the two are equal."""
    from pdelab.runtime import gpu_slots

    args = arguments(argv)
    try:
        gpu_slots.claim(check_run(args.run)["spec"]["device"])  # before CUDA starts
        found = replicate(args.run, args.threads)
    except (ValueError, OSError) as err:  # NotReplicable, ForeignRecord, DamagedRecord
        sys.exit(f"pdelab.training.replicate: {err}")
    write_replicate(args.out, found)
    equal = "bitwise equal to the run" if found["bitwise_equal"] else "not bitwise equal"
    print(f"{describe(found['identity'])}: replicate on {found['device']}, {equal}")


if __name__ == "__main__":
    main()
