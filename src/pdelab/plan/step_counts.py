"""Every distinct training step of a plan counted once: keyed by what a count depends on,
cached on disk, and counted in worker processes, the longest first.

Why: a paper profile's hundreds of jobs share a few hundred models x batches, and counting one
at LRA's lengths takes minutes; a plan made again (another format, a new measurement) should
count nothing it counted before, and an interrupted one should keep what it counted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch

from pdelab.plan import counting, cuda_kernels, hardware, shapes, tracker
from pdelab.plan.counting import StepCost, count_step, device_model
from pdelab.plan.shapes import TaskShape
from pdelab.records import provenance
from pdelab.records.atomic import write_text
from pdelab.spec.config import RunSpec

CACHE_FILE = Path("results/plan/cache.json")
# the source a count depends on beyond the run's own (pdelab.records.provenance): a change to any of
# these modules makes every cached count stale
COUNTING_MODULES = (hardware, tracker, cuda_kernels, counting, shapes)


def cost_key(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> str:
    """What a step's count depends on: two jobs with equal keys are counted once."""
    spec = run.to_dict()
    train = {k: spec["train"].get(k) for k in ("batch_size", "seq_len", "precision")}
    train["loss_includes_pad"] = run.train.loss_includes_pad
    sizes = (shape.kind, len(shape.vocab), len(shape.tgt_vocab), shape.num_classes)
    sizes += (shape.sequence_length(run), shape.src_max_length, shape.pairs)
    doc = {"task": run.task, "shape": sizes, "model": spec["model"], "train": train}
    doc |= {"diffusion": spec["diffusion"], "device": device_model(run)}
    if checkpointed:
        doc["checkpoint_blocks"] = True
    return json.dumps(doc, sort_keys=True)


def cache_id(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> str:
    """A step count's key on disk: its :func:`cost_key`, the source the run executes
    (pdelab.records.provenance), this module's and :data:`COUNTING_MODULES`' source, and torch's
    version."""
    own = [Path(__file__), *(Path(str(m.__file__)) for m in COUNTING_MODULES)]
    code = [provenance.code_digest(run), *(hashlib.sha256(p.read_bytes()).hexdigest() for p in own)]
    text = json.dumps([cost_key(run, shape, checkpointed), code, torch.__version__])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def attention_size(run: RunSpec, shape: TaskShape, checkpointed: bool = False) -> int:
    """batch x heads x T^2 x layers (x2 for document pairs): what a kernel that loops over
    tiles of the attention matrix scales with, to start the longest counts first."""
    m, t = run.model, shape.sequence_length(run)
    towers = 2 if shape.pairs else 1
    return run.train.batch_size * m.heads * t * t * m.layers * towers


def count_steps(
    todo: Mapping[str, tuple[RunSpec, TaskShape] | tuple[RunSpec, TaskShape, bool]],
    workers: int = 1,
    cache: Path | None = None,
    progress: bool = False,
) -> dict[str, StepCost]:
    """Each key's step count: from ``cache`` (a JSON file of earlier counts) where it holds
    one, else counted here (``workers`` > 1: in that many processes, the largest attention
    first) and added to the cache as it is done, so an interrupted plan keeps what it
    counted. ``progress``: a line on stderr per count."""
    stored: dict[str, dict[str, int]] = {}
    if cache is not None and cache.exists():
        with contextlib.suppress(ValueError):
            stored = json.loads(cache.read_text())
    ids = {key: cache_id(*job) for key, job in todo.items()} if cache is not None else {}
    done = {k: StepCost(**stored[ids[k]]) for k in todo if ids.get(k) in stored}
    missing = sorted((k for k in todo if k not in done), key=lambda k: -attention_size(*todo[k]))
    start = time.perf_counter()

    def finished(key: str, cost: StepCost) -> None:
        done[key] = cost
        if cache is not None:
            stored[ids[key]] = vars(cost)
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text(cache, json.dumps(stored, sort_keys=True))
        if progress:
            run = todo[key][0]
            n = len(done) - (len(todo) - len(missing))
            print(
                f"counted {n}/{len(missing)} {run.task}/{run.variant} "
                f"({time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    if workers > 1 and len(missing) > 1:
        context = get_context("spawn")  # a forked child of a threaded torch may hang
        with ProcessPoolExecutor(min(workers, len(missing)), mp_context=context) as pool:
            futures = {pool.submit(count_step, *todo[k]): k for k in missing}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    else:
        for key in missing:
            finished(key, count_step(*todo[key]))
    return done
