"""One run per key in a shared MLflow store, whatever number of syncs write at once: MLflow
has no unique key and nodes share no disk for a lock, so each writer leases the run it logs,
seals it last, and keeps the first complete run in one order every writer shares
(:func:`settle`). Used by pdelab.tracking.sync for the seed runs and by
pdelab.tracking.parents for the settings' parents."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pdelab.records.run import now_ms

T = TypeVar("T")
LEASE_TAG = "sync_lease"  # "<host> <pid> <ms>" on a run a sync is logging; removed once sealed
LEASE_MS = 10 * 60_000  # a lease this old is abandoned (its sync died on another node)


def retried(what: str, fn: Callable[[], T], attempts: int = 4) -> T:
    """fn, retried with back-off: parallel sync jobs share one SQLite store, which may be
    locked for a moment."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - retried, then raised with context
            if attempt + 1 == attempts:
                raise RuntimeError(f"MLflow {what} failed {attempts} times: {err}") from err
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def find_runs(client: Any, experiment_id: str, where: str = "") -> list[Any]:
    """The experiment's active (not deleted) runs that match the search filter, every page."""
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], where, max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def lease() -> str:
    """This process's lease on a run it is logging: host, pid and the time."""
    return f"{socket.gethostname()} {os.getpid()} {now_ms()}"


def busy(run: Any, seal_tag: str) -> bool:
    """Another sync is logging this run now: it is not sealed yet, and its lease is recent
    and, when taken on this host, held by a live process other than this one. A run cut short
    (a killed sync's, a failed attempt of this one, a live job's) is not busy."""
    tags = run.data.tags
    if seal_tag in tags or LEASE_TAG not in tags:
        return False
    host, pid, ms = tags[LEASE_TAG].rsplit(" ", 2)
    if now_ms() - int(ms) >= LEASE_MS:
        return False
    if mine(run):
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def mine(run: Any) -> bool:
    """This process began the run (an attempt of its own, cut short and retried)."""
    held = run.data.tags.get(LEASE_TAG, "").rsplit(" ", 2)
    return len(held) == 3 and held[:2] == [socket.gethostname(), str(os.getpid())]


def choose(runs: list[Any], done: Callable[[Any], bool], prefer: str = "") -> Any | None:
    """The run a key keeps: ``prefer`` (a live training job's run) if active, else the
    complete run first in (start time, run id) order; None if none is complete."""
    for run in runs:
        if prefer and run.info.run_id == prefer:
            return run
    complete = [run for run in runs if done(run)]
    return min(complete, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def settle(
    client: Any,
    experiment_id: str,
    where: str,
    seal_tag: str,
    done: Callable[[Any], bool],
    log: Callable[[], object],
    prefer: str = "",
    found: list[Any] | None = None,
    keep: Callable[[Any], bool] = lambda run: False,
) -> tuple[Any, str]:
    """One key's run (the runs ``where`` selects): (the run kept, action). MLflow has no
    unique key and nodes share no disk for a lock, so any number of writers may settle one
    key at once; each searches the key's runs (``found``: a search made already); if none
    is complete (``done``), logs one (``log``, sealed last) and searches again; then keeps
    :func:`choose`'s run and deletes the others, except runs another writer is logging now
    (:func:`busy`), which it seals or leaves to a later sync, and runs ``keep`` keeps (the
    history: a sync deletes only duplicates and its own abandoned attempts). Why one
    complete run remains:
    every writer orders complete runs the same way (``prefer``, logged by a live training job
    before any sync, first), and deletes a complete run only when it sees one before it, so
    the first complete run is never deleted; and of two complete runs, the writer of the one
    sealed later searched after both were sealed, so it deleted one."""
    runs = found if found is not None else find_runs(client, experiment_id, where)
    chosen, action = choose(runs, done, prefer), "kept"
    if chosen is None:
        older = [run for run in runs if not busy(run, seal_tag) and not mine(run)]
        action = "replaced" if older else "logged"  # this sync's own retry replaces nothing
        log()
        runs = find_runs(client, experiment_id, where)
        chosen = choose(runs, done, prefer)
        if chosen is None:
            raise RuntimeError(f"the run just logged ({where}) is not among the active runs")
    for run in runs:
        if run.info.run_id != chosen.info.run_id and not busy(run, seal_tag) and not keep(run):
            client.delete_run(run.info.run_id)  # deleting a deleted run is a no-op
    return chosen, action
