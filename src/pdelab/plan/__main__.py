"""``python -m pdelab.plan check TASK VARIANT``: one run's estimated peak against a measured
one; and :func:`command`, what ``pdelab plan`` prints or writes.

Why a command line of its own: the check measures real steps, on a GPU where one is asked
for, which ``pdelab plan`` (a plan from params.yaml alone) never does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pdelab.plan.check import estimated_peak, measured_peak
from pdelab.plan.cost import Plan, plan
from pdelab.plan.measured import MEASURED_FILE
from pdelab.plan.render import jobs_section, plan_data, render
from pdelab.plan.step_counts import CACHE_FILE
from pdelab.records.atomic import write_text
from pdelab.spec.config import PARAMS_FILE, active_profile, load_params


def command(
    params: dict[str, Any],
    profile: str,
    fmt: str = "text",
    out: Path | None = None,
    measured: Path | None = MEASURED_FILE,
    workers: int | None = None,
    cache: Path | None = CACHE_FILE,
    only: Sequence[str] = (),
    card_gib: float | None = None,
    sections: Sequence[Callable[[Plan, str], str]] = (),
    gpus: int = 1,
) -> list[str]:
    """``pdelab plan``: the lines to print (with ``out``: the plan written there instead);
    ``measured`` None reads :data:`MEASURED_FILE`, ``cache`` None counts every step afresh,
    ``card_gib`` None fits the profile's card (``gpu_memory_gb``, else the visible GPU's);
    ``sections``: more of the plan, from layers above (what each claim costs: the report's);
    ``gpus``: the GPUs of a kind the booking's wall-clock is on."""
    if gpus < 1:
        raise ValueError(f"--gpus {gpus}: book at least one GPU")
    workers = workers or min(8, os.cpu_count() or 1)
    measured = MEASURED_FILE if measured is None else measured
    made = plan(params, profile, measured, workers, cache, only, progress=True, card_gib=card_gib)
    parts = [render(made, fmt, with_jobs=False, gpus=gpus)]
    parts += [section(made, fmt) for section in sections]  # before the long table of jobs
    text = "\n".join([*parts, jobs_section(made, fmt)])
    if out is None:
        return text.rstrip("\n").split("\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, text)
    data = out.with_suffix(".json")  # the plan's data beside it
    write_text(data, json.dumps(plan_data(made), indent=1) + "\n")
    return [f"-> {out}", f"-> {data}"]


def main(argv: list[str] | None = None) -> int:
    """``python -m pdelab.plan check TASK VARIANT``: one run's estimated peak against a
    measured one (on a GPU: the check of the CUDA model). The plan itself: ``pdelab plan``."""
    parser = argparse.ArgumentParser(prog="python -m pdelab.plan", description=main.__doc__)
    parser.add_argument("what", choices=("check",))
    parser.add_argument("task")
    parser.add_argument("variant")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--device", help="override the profile's device (cpu, cuda)")
    parser.add_argument("--profile")
    parser.add_argument("--params", type=Path, default=PARAMS_FILE)
    args = parser.parse_args(argv)
    params = load_params(args.params)
    profile = active_profile(params, args.profile)
    what = (params, profile, args.task, args.variant, args.batch, args.device)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        measured = pool.submit(measured_peak, *what).result()  # nothing else allocates there
    estimate = estimated_peak(*what)
    print(
        f"{args.task}/{args.variant} batch {args.batch}: estimated {estimate / 2**20:.1f} MiB, "
        f"measured {measured / 2**20:.1f} MiB ({100 * (estimate / measured - 1):+.1f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
