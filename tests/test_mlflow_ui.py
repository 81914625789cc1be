"""``pdelab mlflow`` ends what it started: a stop signal (Ctrl-C, SIGTERM) ends the UI and all
its workers, and nothing of it keeps the port (pdelab.cli.serve_until_stopped).

The processes left are read from /proc by session: the server runs in a session of its own, so
a worker of it that outlived the command would still be found there. Zombies are left out: an
orphan's zombie runs nothing and holds no port, and not every container's init reaps it.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import ROOT
from pdelab.cli import POLL_S, STOP_GRACE_S

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").is_file(), reason="reads the processes from /proc"
)
# each stop signal `pdelab mlflow` is sent, and its exit status then
STOPS = {"SIGINT": (signal.SIGINT, 0), "SIGTERM": (signal.SIGTERM, 128 + signal.SIGTERM)}
HANGUP = {"SIGHUP": (signal.SIGHUP, 128 + signal.SIGHUP)}  # the terminal closed


class Proc(NamedTuple):
    state: str
    parent: int
    session: int


def processes() -> dict[int, Proc]:
    """Every process now, from /proc/PID/stat."""
    table = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:  # ended while listed
            continue
        if stat:
            state, parent, _group, session = stat[stat.rindex(")") + 2 :].split()[:4]
            table[int(entry.name)] = Proc(state, int(parent), int(session))
    return table


def descendants(root: int, table: dict[int, Proc]) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, p in table.items() if p.parent in frontier} - found
        found |= frontier
    return found


def running_in(sessions: set[int]) -> dict[int, Proc]:
    """The processes of these sessions that still run (zombies aside)."""
    return {pid: p for pid, p in processes().items() if p.session in sessions and p.state != "Z"}


@contextmanager
def started(command: list[str], **options) -> Iterator[tuple[subprocess.Popen, set[int]]]:
    """``command`` in a session of its own, with the set of sessions to clear afterwards
    (its own; the test adds those it finds); whatever of them still runs is killed after."""
    with subprocess.Popen(command, start_new_session=True, **options) as proc:
        sessions = {proc.pid}
        try:
            yield proc, sessions
        finally:
            for session in sessions:
                with suppress(ProcessLookupError):
                    os.killpg(session, signal.SIGKILL)


def sessions_below(root: int) -> set[int]:
    """The sessions of ``root``'s descendants other than its own."""
    table = processes()
    return {table[pid].session for pid in descendants(root, table)} - {table[root].session}


# --------------------------------------------------------------------------------------------
# The mechanism, on a stand-in server: fast
# --------------------------------------------------------------------------------------------

SUPERVISE = "import sys; from pdelab.cli import serve_until_stopped as s; "
SUPERVISE += "sys.exit(s(sys.argv[1:], grace_s=float({grace})))"
GRACE_S = 1.0
# a stand-in server's worker: ignores SIGINT and SIGTERM if told, says "ready PID", sleeps
WORKER = """
import os, signal, sys, time
how = signal.SIG_IGN if sys.argv[1] == "ignores" else signal.SIG_DFL
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, how)
print("ready", os.getpid(), flush=True)
time.sleep(600)
"""
# a stand-in server: starts the worker, passes on its line; ends (status 3) or waits for it
SERVER = """
import signal, subprocess, sys
worker_does, server_does, then = sys.argv[1:]
how = signal.SIG_IGN if server_does == "ignores" else signal.SIG_DFL
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, how)
worker = subprocess.Popen([sys.executable, "-c", WORKER, worker_does], stdout=subprocess.PIPE)
sys.stdout.write(worker.stdout.readline().decode())
sys.stdout.flush()
sys.exit(3 if then == "exits" else worker.wait())
"""
SERVERS = {  # what the worker and the server do on a stop signal
    "obliging": ("ends", "ends"),
    "stubborn worker": ("ignores", "ends"),  # killed after the grace; its server ends at once
    "stubborn server": ("ignores", "ignores"),
}


Started = AbstractContextManager[tuple[subprocess.Popen, set[int]]]


def start_stand_in(
    worker_does: str, server_does: str, then: str = "waits", nohup: bool = False
) -> Started:
    """``serve_until_stopped`` running a stand-in server in a child (its own session); under
    ``nohup`` (SIGHUP ignored) if told."""
    server = [sys.executable, "-c", f"WORKER = {WORKER!r}\n{SERVER}"]
    server += [worker_does, server_does, then]
    command = [sys.executable, "-c", SUPERVISE.format(grace=GRACE_S), *server]
    command = ["nohup", *command] if nohup else command
    return started(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def worker_session(proc: subprocess.Popen) -> int:
    """The session of the stand-in's worker, once it is ready; not the supervisor's."""
    readable, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().split() if readable else []
    assert line[:1] == ["ready"], "the stand-in server did not start"
    session = os.getsid(int(line[1]))
    assert session != os.getsid(proc.pid), "the server runs in a session of its own"
    return session


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("stop", STOPS | HANGUP)
def test_a_stop_ends_every_process_the_server_started(server: str, stop: str) -> None:
    """At once when they end on SIGTERM, else killed when the grace runs out; the status is
    a shell's (Ctrl-C: 0)."""
    signum, status = (STOPS | HANGUP)[stop]
    with start_stand_in(*SERVERS[server]) as (proc, sessions):
        sessions.add(worker_session(proc))
        sent = time.monotonic()
        proc.send_signal(signum)
        assert proc.wait(timeout=GRACE_S + 20) == status
        took = time.monotonic() - sent
        assert running_in(sessions) == {}
        if server == "obliging":
            assert took < GRACE_S  # ended at once, not killed at the grace's end
        else:
            assert GRACE_S <= took < 2 * GRACE_S + 5  # killed once the grace ran out


def test_what_a_server_leaves_behind_when_it_ends_is_ended_too() -> None:
    """A server that exits (status 3) leaving a worker that ignores SIGTERM: the worker is
    killed after the grace, and the server's status is returned."""
    with start_stand_in("ignores", "ends", then="exits") as (proc, sessions):
        sessions.add(worker_session(proc))
        assert proc.wait(timeout=GRACE_S + 20) == 3
        assert running_in(sessions) == {}


def test_a_hangup_ignored_under_nohup_leaves_the_server_running() -> None:
    with start_stand_in("ends", "ends", nohup=True) as (proc, sessions):
        server_session = worker_session(proc)
        sessions.add(server_session)
        proc.send_signal(signal.SIGHUP)
        time.sleep(5 * POLL_S)  # a stop would be passed on within one poll
        assert proc.poll() is None and running_in({server_session})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GRACE_S + 20) == 128 + signal.SIGTERM
        assert running_in(sessions) == {}


# --------------------------------------------------------------------------------------------
# `pdelab mlflow` itself: a real `mlflow ui` and its uvicorn workers
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listened_on(port: int) -> bool:
    """Whether a process listens on ``port`` (a bind fails only then: SO_REUSEADDR lets the
    closed connections' TIME_WAIT pass)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def wait_for_http(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:  # not listening yet (URLError is an OSError)
            pass
        assert proc.poll() is None, f"pdelab mlflow ended: {log.read_text()}"
        assert time.monotonic() < deadline, f"the UI did not answer: {log.read_text()}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("stop", STOPS)
def test_pdelab_mlflow_leaves_no_process_behind(stop: str, tmp_path: Path) -> None:
    """The UI answers on its port; after the stop, no process of `pdelab mlflow` or of the
    session it started the UI in runs, the port is free, and the status is a shell's."""
    signum, status = STOPS[stop]
    port, log = free_port(), tmp_path / "pdelab.log"
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    command = [sys.executable, "-m", "pdelab.cli", "--params", str(ROOT / "params.yaml")]
    command += ["mlflow", "--port", str(port)]
    with (
        log.open("w") as out,
        started(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT) as (
            proc,
            sessions,
        ),
    ):
        wait_for_http(port, proc, log)
        ui_sessions = sessions_below(proc.pid)
        sessions |= ui_sessions
        assert len(running_in(sessions)) >= 4  # pdelab, mlflow, uvicorn, its workers
        sent = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=STOP_GRACE_S + 20)
        took = time.monotonic() - sent
        assert running_in(sessions) == {}, log.read_text()
        assert not listened_on(port)
        assert len(ui_sessions) == 1, "the UI runs in a session of its own"
        assert code == status, log.read_text()
        assert took < STOP_GRACE_S  # every process ended on SIGTERM: none was killed
    assert f"MLflow UI at http://127.0.0.1:{port}" in log.read_text()
