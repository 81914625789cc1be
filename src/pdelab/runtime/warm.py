"""Warm job start: run ``python -m MODULE ARGS`` in a process forked from one that has torch
imported already.

    python -m pdelab.runtime.warm pdelab.training.train --task listops --variant baseline --seed 0
    --out ...

Why: ``import torch`` (and the torch._dynamo / torch._inductor modules that torch.optim and
``use_deterministic_algorithms`` pull in on first use) costs a fresh interpreter more time
than a smoke run trains, and the default workflow starts hundreds of training jobs. Its other
jobs (data, tables, figures, MLflow sync) pay for pandas, matplotlib or mlflow the same way: the
server imports a job's module (and so what that module imports) the first time one is asked
for, and every later job of that module starts with it loaded. This client imports
nothing heavy: it hands its argv, working directory, environment and stdin/stdout/stderr to a
server that has those modules loaded, the server forks, and the fork runs ``MODULE.main(argv)``
as the cold command would. The client forwards SIGINT/SIGTERM/SIGHUP to the job and exits with
its status; when the client dies (Snakemake killed it), the job is terminated.

The first client starts the server (one per user, interpreter and source tree, found by a
socket in the temp folder); it exits after ``PDELAB_WARM_IDLE`` seconds (default 120) without
a job, or as soon as a file a job can import from the project changes (by content: its sha256,
not its size and time), a ``sitecustomize.py`` appears on the path, or its tree is replaced (a
stale server would run old code).
The server only imports: it never runs a torch operation or starts a thread, so each fork
starts from a clean process, and each job seeds itself. ``PDELAB_WARM=0``, or a SLURM job
(each job on its own allocation), runs the cold command instead: the same results, by test.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import select
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the pdelab package
# imported by the server before its first fork: what every training job would import itself
PRELOAD = ("pdelab.training.train", "torch._dynamo", "torch._inductor.config")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
START_TIMEOUT_S = 60.0
KILL_GRACE_S = 10.0
MAX_MESSAGE = 1 << 20


def enabled(env: dict[str, str] | None = None) -> bool:
    """Warm start unless switched off (``PDELAB_WARM=0``) or inside a SLURM job."""
    env = os.environ if env is None else env
    return env.get("PDELAB_WARM", "1") != "0" and "SLURM_JOB_ID" not in env


def socket_path() -> Path:
    """One server per user, interpreter and source tree (two checkouts never share one);
    ``PDELAB_WARM_SOCKET`` names another (tests use their own)."""
    if os.environ.get("PDELAB_WARM_SOCKET"):
        return Path(os.environ["PDELAB_WARM_SOCKET"])
    key = hashlib.sha256(f"{sys.executable}\0{PACKAGE_DIR}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"pdelab-warm-{os.getuid()}-{key}.sock"


def installed_dirs() -> tuple[str, ...]:
    """The interpreter's own folders (its prefix and site-packages), each ending in a slash."""
    return tuple(
        os.path.realpath(d) + os.sep for d in {sys.prefix, sys.base_prefix, *site.getsitepackages()}
    )


def own_code() -> set[Path]:
    """The files a job's code comes from that can change: every file of this package, the
    loaded modules that live outside the interpreter's own folders, and the start-up hooks of
    the folders on the path (:func:`startup_hooks`)."""
    installed = installed_dirs()
    files = {p for p in PACKAGE_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files |= startup_hooks()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and os.path.isabs(file) and not os.path.realpath(file).startswith(installed):
            files.add(Path(file))
    return files


def stamp(path: Path) -> tuple[int, str]:
    """A watched file's size and content digest ((-1, "") while it does not exist): an edit
    of the same size with its modification time put back is still an edit."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return (-1, "")
    return (len(data), hashlib.sha256(data).hexdigest())


def tree_identity() -> tuple[int, int]:
    """The package folder itself (device, inode): a tree deleted and copied back at the same
    path is another tree, whose server this one is not."""
    try:
        st = PACKAGE_DIR.stat()
    except FileNotFoundError:
        return (-1, -1)
    return (st.st_dev, st.st_ino)


def startup_hooks() -> set[Path]:
    """The files Python runs at every interpreter's start from the folders on its path that are
    not the interpreter's own (``sitecustomize.py``, ``usercustomize.py``), present or not: a
    cold job would run one added after the server started, so the server must not outlive it."""
    installed = installed_dirs()
    folders = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    return {
        Path(folder) / name
        for folder in folders
        if not (folder + os.sep).startswith(installed)
        for name in ("sitecustomize.py", "usercustomize.py")
    }


def send_message(conn: socket.socket, message: dict[str, Any], fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    header = len(data).to_bytes(4, "big")
    if fds:
        socket.send_fds(conn, [header + data], list(fds))
    else:
        conn.sendall(header + data)


def receive_exactly(conn: socket.socket, size: int, nfds: int = 0) -> tuple[bytes, list[int]]:
    """size bytes (fewer if the other side closed), and the file descriptors sent with them."""
    data, fds = b"", []
    while len(data) < size:
        chunk, received, _, _ = socket.recv_fds(conn, size - len(data), max(nfds, 1))
        fds += received
        if not chunk:
            break
        data += chunk
    return data, fds


def receive_message(conn: socket.socket, nfds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One length-prefixed JSON message (and up to nfds file descriptors sent with it); an
    empty dict when the other side closed the connection. Reads no byte past the message."""
    header, fds = receive_exactly(conn, 4, nfds)
    if len(header) < 4:
        return {}, fds
    size = int.from_bytes(header, "big")
    if size > MAX_MESSAGE:
        raise ValueError(
            f"pdelab.runtime.warm: a message of {size} bytes (the limit is {MAX_MESSAGE})"
        )
    body, _ = receive_exactly(conn, size)
    return (json.loads(body) if len(body) == size else {}), fds


# ----------------------------------------------------------------------------- client


def process_start_s() -> float:
    """When the kernel started this process (10 ms resolution), the job's true start."""
    fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


def connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    return conn


def start_server(path: Path) -> socket.socket:
    """Start a server in its own session (it outlives this job) and wait for its socket."""
    log = path.with_suffix(".log")
    with open(log, "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "pdelab.runtime.warm", "--serve", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            cwd="/",
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = connect(path)
        if conn is not None:
            return conn
        time.sleep(0.05)
    raise RuntimeError(
        f"the warm job server did not start within {START_TIMEOUT_S:.0f} s (its log: {log}); "
        "run with PDELAB_WARM=0 to start each job in its own interpreter"
    )


def submit(module: str, argv: list[str]) -> dict[str, Any]:
    """Hand the job to a server (starting one if none answers, or a fresh one if the one that
    answered runs old code); returns the server's first reply, with ``conn`` attached."""
    path = socket_path()
    request = {
        "module": module,
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "started": process_start_s(),
    }
    for _ in range(3):
        conn = connect(path) or start_server(path)
        try:
            send_message(conn, request, [0, 1, 2])
            reply, _ = receive_message(conn)
        except (ConnectionResetError, BrokenPipeError):  # a server exiting as we connected
            conn.close()  # no job started: the next try starts a fresh server
            time.sleep(0.1)
            continue
        if reply.get("pid"):
            return {**reply, "conn": conn}
        conn.close()
        if not reply.get("stale"):
            raise RuntimeError(f"the warm job server refused the job: {reply or 'no reply'}")
        time.sleep(0.1)  # the stale server is exiting; the next try starts a fresh one
    raise RuntimeError("the warm job server kept running old code; run with PDELAB_WARM=0")


def forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def run_client(module: str, argv: list[str]) -> int:
    """Run the job warm; forward signals to it; its exit status is ours."""
    job = submit(module, argv)
    conn: socket.socket = job["conn"]
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: forward(job["pid"], signum))
    while True:
        try:
            reply, _ = receive_message(conn)
        except InterruptedError:
            continue
        if "status" in reply:
            return int(reply["status"])
        if not reply:
            print("pdelab.runtime.warm: the server lost the job (killed?)", file=sys.stderr)
            return 1


def run_cold(module: str, argv: list[str]) -> None:
    """The same job in a fresh interpreter (replaces this process)."""
    os.execv(sys.executable, [sys.executable, "-m", module, *argv])


# ----------------------------------------------------------------------------- server


def entry_point(name: str) -> Any:
    """The module whose ``main`` ``python -m NAME`` runs: NAME, or NAME.__main__ for a package."""
    module = importlib.import_module(name)
    if hasattr(module, "__path__") and not hasattr(module, "main"):
        module = importlib.import_module(f"{name}.__main__")
    return module


def run_job(request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
    """In the forked job: take over the client's stdio, folder and environment, then run
    ``MODULE.main(argv)`` as ``python -m MODULE`` would; never returns."""
    status = 0
    try:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the job's own stdio
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["PDELAB_JOB_STARTED"] = str(request["started"])  # the client's start
        os.environ["PDELAB_JOB_IMPORTED"] = str(time.time())  # its imports: the server's
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        sys.argv = [request["module"], *request["argv"]]
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and "torch" in sys.modules:  # torch read it at import, in the server
            sys.modules["torch"].set_num_threads(int(threads))
        returned = entry_point(request["module"]).main(request["argv"])
        status = returned if isinstance(returned, int) else 0  # `sys.exit(main())` commands
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - report any failure as the cold command would
        traceback.print_exc()
        status = 1
    with contextlib.suppress(Exception):
        import atexit

        atexit._run_exitfuncs()  # e.g. MLflow's, when the job tracks live
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def supervise(request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
    """In a fork of the server: fork the job, tell the client its pid, then wait for whichever
    comes first, the job's exit (its status goes to the client) or the client's death (the job
    is terminated, then killed). Never returns."""
    pid = os.fork()
    if pid == 0:
        run_job(request, fds, conn)
    for fd in fds:
        os.close(fd)
    job = os.pidfd_open(pid)
    try:
        send_message(conn, {"pid": pid})
    except OSError:  # the client died before it heard of its job
        end_job(pid, job)
    while True:
        ready, _, _ = select.select([job, conn], [], [])
        if job in ready:
            _, wait_status = os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                code = os.waitstatus_to_exitcode(wait_status)  # -N: killed by signal N
                send_message(conn, {"status": code if code >= 0 else 128 - code})
            os._exit(0)
        if conn in ready and not receive_exactly(conn, 1)[0]:  # the client is gone
            end_job(pid, job)


def end_job(pid: int, job: int) -> None:
    """Terminate the job of a client that is gone, then kill it after a grace period; the
    supervisor then exits. Never returns."""
    os.kill(pid, signal.SIGTERM)
    if not select.select([job], [], [], KILL_GRACE_S)[0]:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os._exit(0)


def serve(path: Path, idle_s: float) -> None:
    """Load PRELOAD, then fork a supervisor per request until idle or the source changes."""
    lock = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 - held for the server's life
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # one server at a time; a stale one still exiting holds the lock briefly
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            live = connect(path)
            if live is not None:
                live.close()
                return  # another server answers; clients will find it
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
    for name in PRELOAD:
        importlib.import_module(name)
    if sys.modules["torch"].cuda.is_initialized():  # a fork could neither pick nor use a GPU
        print(
            "pdelab.runtime.warm: loading initialised CUDA; not serving",
            file=sys.stderr,
            flush=True,
        )
        return
    watched = {path: stamp(path) for path in own_code()}
    tree = tree_identity()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    listener.settimeout(idle_s)
    print(f"pdelab.runtime.warm: serving on {path} (pid {os.getpid()})", flush=True)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            conn.settimeout(None)
            request, fds = receive_message(conn, nfds=3)
            if not request:  # a probe, or a client that died before asking
                conn.close()
                continue
            if tree_identity() != tree or any(stamp(p) != s for p, s in watched.items()):
                path.unlink(missing_ok=True)
                listener.close()
                send_message(conn, {"stale": True})
                return
            if request["module"] not in sys.modules:
                with contextlib.suppress(Exception):  # loaded once here; a failure is the job's
                    entry_point(request["module"])
                watched |= {p: stamp(p) for p in own_code() - watched.keys()}
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                try:
                    supervise(request, fds, conn)
                finally:  # never back into this loop: its `finally` removes the server's socket
                    os._exit(1)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        path.unlink(missing_ok=True)
        listener.close()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    if argv[0] == "--serve":
        serve(Path(argv[1]), float(os.environ.get("PDELAB_WARM_IDLE", "120")))
        return
    module, job_argv = argv[0], argv[1:]
    if not enabled():
        run_cold(module, job_argv)
    sys.exit(run_client(module, job_argv))


if __name__ == "__main__":
    main()
