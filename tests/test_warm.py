"""Warm job start (pdelab.runtime.warm): a job forked from the server gives the cold command's
results and behaves like a process of its own (exit status, stdio, signals, death of its client),
the server is shared by concurrent clients and replaced when the code it loaded changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pdelab.runtime import warm

JOB = """
import os, signal, sys, time
from pathlib import Path

def main(argv):
    what = argv[0]
    if what == "echo":
        print("out:", " ".join(argv[1:]), os.getcwd(), os.environ.get("JOB_TAG"))
        print("err: here", file=sys.stderr)
    elif what == "exit":
        raise SystemExit(int(argv[1]))
    elif what == "raise":
        raise ValueError("the job failed")
    elif what == "sleep":
        Path(argv[1]).write_text(str(os.getpid()))
        signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(7)))
        time.sleep(60)
    elif what == "version":
        print(VERSION)
    elif what == "return":  # `sys.exit(main())` commands return their status
        return int(argv[1])
    elif what == "threads":
        import torch

        print(torch.get_num_threads())

VERSION = 1

if __name__ == "__main__":  # the cold command
    main(sys.argv[1:])
"""


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # reaped between the two looks: gone
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return False
    return stat[0] != "Z"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, str]:
    """An environment whose server (own socket) can import the test job module."""
    folder = tmp_path_factory.mktemp("warm")
    (folder / "warmjob.py").write_text(JOB)
    (folder / "warmpkg").mkdir()  # a package: `python -m warmpkg` runs its __main__
    (folder / "warmpkg" / "__init__.py").write_text("")
    (folder / "warmpkg" / "__main__.py").write_text(JOB)
    env = {
        **os.environ,
        "PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PDELAB_WARM_SOCKET": str(folder / "w.sock"),
        "PDELAB_WARM_IDLE": "60",
        "PDELAB_WARM": "1",
    }
    env.pop("SLURM_JOB_ID", None)
    yield env
    stop_server(env)


def stop_server(env: dict[str, str]) -> None:
    log = Path(env["PDELAB_WARM_SOCKET"]).with_suffix(".log")
    for line in log.read_text().splitlines() if log.exists() else []:
        pid = int(line.rsplit("pid ", 1)[1].rstrip(")"))
        if alive(pid):
            os.kill(pid, signal.SIGTERM)


def client(env: dict[str, str], *argv: str, cwd: Path | None = None, module="warmjob", **kw):
    return subprocess.run(
        [sys.executable, "-m", "pdelab.runtime.warm", module, *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_stdio_folder_and_environment_are_the_clients(jobs, tmp_path):
    done = client({**jobs, "JOB_TAG": "tag-7"}, "echo", "a", "b", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"out: a b {tmp_path} tag-7"
    assert done.stderr.strip() == "err: here"


@pytest.mark.parametrize(
    ("argv", "status", "stderr"),
    [
        (("exit", "3"), 3, ""),
        (("exit", "0"), 0, ""),
        (("raise",), 1, "ValueError: the job failed"),
        (("return", "4"), 4, ""),
    ],
)
@pytest.mark.parametrize("module", ["warmjob", "warmpkg"])
def test_exit_status_is_the_jobs(jobs, argv, status, stderr, module):
    done = client(jobs, *argv, module=module)
    assert done.returncode == status
    assert stderr in done.stderr


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_job_gets_the_thread_count_its_environment_asks_for(jobs, threads):
    """torch read OMP_NUM_THREADS when the server imported it; the job's own value wins, as
    in a fresh interpreter."""
    done = client({**jobs, "OMP_NUM_THREADS": threads}, "threads")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == threads


@pytest.mark.slow
def test_concurrent_clients_share_one_server(tmp_path):
    (tmp_path / "warmjob.py").write_text(JOB)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "PDELAB_WARM_SOCKET": str(tmp_path / "c.sock"),
        "PDELAB_WARM": "1",
    }
    try:
        started = [
            subprocess.Popen(
                [sys.executable, "-m", "pdelab.runtime.warm", "warmjob", "echo", str(i)],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        outs = [p.communicate(timeout=120)[0] for p in started]
        assert [p.returncode for p in started] == [0] * 4
        assert [o.split()[1] for o in outs] == ["0", "1", "2", "3"]
        log = (tmp_path / "c.log").read_text()
        assert log.count("serving on") == 1, log
    finally:
        stop_server(env)


def test_signals_reach_the_job_and_a_dead_client_takes_it_along(jobs, tmp_path):
    pidfile = tmp_path / "job.pid"
    term = subprocess.Popen(
        [sys.executable, "-m", "pdelab.runtime.warm", "warmjob", "sleep", str(pidfile)],
        env=jobs,
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_for(pidfile.exists)
    term.send_signal(signal.SIGTERM)
    out, _ = term.communicate(timeout=30)
    assert term.returncode == 7  # the job's own SIGTERM handler ran and chose the status
    assert "got SIGTERM" in out

    pidfile.unlink()
    killed = subprocess.Popen(
        [sys.executable, "-m", "pdelab.runtime.warm", "warmjob", "sleep", str(pidfile)],
        env=jobs,
        stdout=subprocess.DEVNULL,
    )
    wait_for(pidfile.exists)
    job = int(pidfile.read_text())
    killed.kill()  # SIGKILL: the client cannot forward anything
    killed.wait()
    wait_for(lambda: not alive(job))


def test_a_client_gone_before_its_reply_leaves_the_server_serving(jobs, tmp_path):
    """A client killed between its request and the server's reply (Snakemake killed mid-start):
    its job is ended, and the server keeps its socket for the next client."""
    assert client(jobs, "echo").returncode == 0  # the server is up
    path, pidfile = Path(jobs["PDELAB_WARM_SOCKET"]), tmp_path / "job.pid"
    conn = warm.connect(path)
    request = {
        "module": "warmjob",
        "argv": ["sleep", str(pidfile)],
        "cwd": str(tmp_path),
        "env": jobs,
        "started": time.time(),
    }
    warm.send_message(conn, request, [0, 1, 2])
    conn.close()
    time.sleep(1.0)
    assert path.exists()
    done = client(jobs, "echo", "again")
    assert done.returncode == 0 and "out: again" in done.stdout
    if pidfile.exists():  # the job may have been ended before it wrote its pid
        wait_for(lambda: not alive(int(pidfile.read_text())))


@pytest.mark.slow
def test_a_changed_module_gets_a_fresh_server(tmp_path):
    module = tmp_path / "warmjob.py"
    module.write_text(JOB)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "PDELAB_WARM_SOCKET": str(tmp_path / "s.sock"),
        "PDELAB_WARM": "1",
    }
    try:
        assert client(env, "version").stdout.strip() == "1"
        assert client(env, "version").stdout.strip() == "1"
        module.write_text(JOB.replace("VERSION = 1", "VERSION = 22"))
        assert client(env, "version").stdout.strip() == "22"
        assert (tmp_path / "s.log").read_text().count("serving on") == 2
    finally:
        stop_server(env)


@pytest.mark.slow
def test_a_same_size_edit_with_its_time_put_back_gets_a_fresh_server(tmp_path):
    """Staleness is the content's: an edit of the same size whose modification time is set
    back (a checkout, a copy keeping times) still gets the new code."""
    module = tmp_path / "warmjob.py"
    module.write_text(JOB)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "PDELAB_WARM_SOCKET": str(tmp_path / "s.sock"),
        "PDELAB_WARM": "1",
    }
    try:
        assert client(env, "version").stdout.strip() == "1"
        stat = module.stat()
        module.write_text(JOB.replace("VERSION = 1", "VERSION = 2"))
        assert module.stat().st_size == stat.st_size
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert client(env, "version").stdout.strip() == "2"
    finally:
        stop_server(env)


@pytest.mark.slow
def test_a_sitecustomize_added_on_the_path_gets_a_fresh_server(tmp_path):
    """A cold job runs the ``sitecustomize.py`` of a folder on its path; a server started
    before one was added there must not serve the next job."""
    (tmp_path / "warmjob.py").write_text(JOB)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "PDELAB_WARM_SOCKET": str(tmp_path / "s.sock"),
        "PDELAB_WARM": "1",
    }
    try:
        assert client(env, "echo", "a").returncode == 0
        (tmp_path / "sitecustomize.py").write_text("HOOKED = True\n")
        assert client(env, "echo", "b").returncode == 0
        assert (tmp_path / "s.log").read_text().count("serving on") == 2
    finally:
        stop_server(env)


@pytest.mark.parametrize("switch", [{"PDELAB_WARM": "0"}, {"SLURM_JOB_ID": "12"}])
def test_switched_off_runs_cold(tmp_path, switch):
    (tmp_path / "warmjob.py").write_text(JOB)
    env = {
        **os.environ,
        # the job's folder, then the pdelab under test (as the jobs fixture has it)
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PDELAB_WARM_SOCKET": str(tmp_path / "o.sock"),
        **switch,
    }
    done = client(env, "echo", "x", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("out: x")
    assert not (tmp_path / "o.sock").exists() and not (tmp_path / "o.log").exists()
    assert warm.enabled(env) is False


@pytest.mark.slow
def test_a_warm_training_job_equals_the_cold_one(tiny_workdir, tmp_path):
    """Same records, bit for bit, except the wall-clock measurements; the warm job's start-up
    is the client's, so run.json's timing still measures the whole job."""
    work = tiny_workdir(tmp_path / "work")
    env = {**os.environ, "PDELAB_WARM_SOCKET": str(tmp_path / "t.sock"), "PDELAB_WARM": "1"}
    env |= {"PDELAB_RETRAIN": "1"}  # the warm job trains too: the cold one's run is kept
    args = ["--task", "listops", "--variant", "baseline", "--seed", "0", "--threads", "1"]
    args += ["--no-progress", "--tracking", "batch"]
    try:
        for name, launcher in (("cold", []), ("warm", ["pdelab.runtime.warm"])):
            command = [
                sys.executable,
                "-m",
                *launcher,
                "pdelab.training.train",
                *args,
                "--out",
                name,
            ]
            subprocess.run(command, cwd=work, env=env, check=True, capture_output=True)
    finally:
        stop_server(env)
    measured = ["median_step_s", "peak_memory_mb", "mlflow_run_id"]
    for name, drop in (("result", measured), ("metrics", ["epoch_time_s"])):
        cold = pd.read_parquet(work / "cold" / f"{name}.parquet").drop(columns=drop)
        hot = pd.read_parquet(work / "warm" / f"{name}.parquet").drop(columns=drop)
        pd.testing.assert_frame_equal(cold, hot)
    timing = pd.read_json(work / "warm" / "run.json", typ="series")["timing"]
    assert timing["process_start"] <= timing["imported"] <= timing["built"]
    assert timing["built"] <= timing["first_step"] <= timing["last_test_batch"]
