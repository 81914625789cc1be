"""What the core's tests (tests/) and each paper's (src/pdelab/papers/<paper>/tests/) share:
the project's folder, its params.yaml, the tiny trees that take a subprocess or a workflow run
to make (made once per session, copied by each test module that needs one), and a small HTTP
server on 127.0.0.1 that serves fixtures in the real formats to the download code (the tests
never reach the internet)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdelab.data.download import Source
from pdelab.records.run import identity, record_table, write_records
from pdelab.spec.config import load_params
from pdelab.spec.plugins import study_paper

ROOT = Path(__file__).resolve().parent  # the project


@pytest.fixture(scope="session")
def params() -> dict:
    return load_params(ROOT / "params.yaml")


def relabel_run(source: Path, dest: Path, extra: dict[str, Any] | None = None, **spec: Any) -> Path:
    """A trained run's records copied as another run's (``spec``: the spec values to change,
    e.g. variant and seed), re-stamped with that run's identity as the trainer would have;
    ``extra``: run.json entries to set besides."""
    import pyarrow.parquet as pq

    doc = json.loads((source / "run.json").read_text())
    doc["spec"].update(spec)
    key = {k: v for k, v in spec.items() if k in ("task", "variant", "seed")}
    doc["result"].update(key)
    doc["identity"] = identity(doc["spec"], doc["result"]["data_hash"])
    result = pq.read_table(source / "result.parquet").to_pylist()
    history = pq.read_table(source / "metrics.parquet").to_pylist()
    dest.mkdir(parents=True, exist_ok=True)
    write_records(
        dest,
        doc | (extra or {}),
        record_table([row | key for row in history]),
        record_table([row | key for row in result]),
    )
    return dest


def write_run(
    folder: Path,
    task: str = "t",
    variant: str = "baseline",
    seed: int = 0,
    result: dict[str, Any] | None = None,
    data_hash: str = "d" * 64,
    spec: dict[str, Any] | None = None,
    weights: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run folder's records as the trainer writes them (pdelab.records.run.write_records), for
    tests of their readers: ``spec`` (default: a tiny one), one epoch, ``result``'s columns
    added to the row; with ``weights``, its best.pt as well."""
    spec = spec or {"task": task, "variant": variant, "seed": seed, "profile": "smoke"}
    task, variant, seed = spec["task"], spec["variant"], spec["seed"]
    row = {"task": task, "variant": variant, "seed": seed, "profile": "smoke"}
    row |= {"status": "ok", "test_acc": 0.5, "data_hash": data_hash} | (result or {})
    ident = identity(spec, data_hash)
    record = {"spec": spec, "identity": ident, "result": row, "tracking": {}}
    history = record_table([{"seed": seed, "epoch": 1, "val_acc": 0.5}])
    folder.mkdir(parents=True, exist_ok=True)
    write_records(folder, record, history, record_table([row]))
    if weights is not None:
        from pdelab.training.checkpoint import save_best

        save_best(weights, ident, folder / "best.pt")
    return record


# --------------------------------------------------------------------------------------------
# Tiny trees: each made once per test session, copied by the test modules that use one
# --------------------------------------------------------------------------------------------

PAPERS = Path("src/pdelab/papers")  # each paper's folder, relative to a project
TINY_DATA = {
    "source": "generate",
    "n_train": 480,
    "n_val": 60,
    "n_test": 60,
    "min_length": 10,
    "max_length": 50,
    "seed": 0,
}
TINY_MODEL = {"dim": 16, "layers": 1, "heads": 2, "mlp_dim": 32}


def copy_tree(source: Path, dest: Path) -> Path:
    """``cp -a source/. dest``: files with their modification times, links as links (what
    Snakemake, DVC and the data checks judge a tree by)."""
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
    return dest


TINY_TRAIN = {"batch_size": 16, "warmup_steps": 10, "epochs": 6, "patience": 6}


def make_workdir(
    work: Path, data: dict[str, Any] = TINY_DATA, train: dict[str, Any] = TINY_TRAIN
) -> Path:
    """A folder with a tiny params.yaml (the smoke profile's, tracking included: ListOps's
    ``data`` block, a one-layer model trained as ``train`` says) and its prepared ListOps
    data. Tests take a copy of the session's one (``tiny_workdir``)."""
    params = load_params(ROOT / "params.yaml")
    params["data"]["smoke"]["listops"] = data
    params["profiles"]["smoke"]["overrides"] = {"model": TINY_MODEL, "train": train}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("fetch", "prepare"):
        subprocess.run(
            [sys.executable, "-m", "pdelab.data", stage, "listops", "--profile", "smoke"],
            cwd=work,
            check=True,
            capture_output=True,
        )
    return work


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory) -> Callable[[Path], Path]:
    """``copy(dest) -> dest``: ``dest`` made a copy of make_workdir's folder, which is made
    once per session (two data subprocesses) and never written to."""
    made = make_workdir(tmp_path_factory.mktemp("tiny-workdir"))
    return lambda dest: copy_tree(made, dest)


def sh(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and out.returncode:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def set_studies(work: Path, studies: dict[str, dict[str, Any]]) -> None:
    """The copy's studies: these (name -> block), each in the config file of the paper that
    writes its kind, and no other, nor any run profile's part of another."""
    files = {path.parent.name: path for path in (work / PAPERS).glob("*/config.yaml")}
    papers = {name: yaml.safe_load(path.read_text()) for name, path in files.items()}
    for paper in papers.values():
        paper.pop("studies", None)
        for profile in (paper.get("profiles") or {}).values():
            profile.pop("studies", None)
    for name, study in studies.items():
        papers[study_paper(study["kind"]).name].setdefault("studies", {})[name] = study
    for name, paper in papers.items():
        files[name].write_text(yaml.safe_dump(paper, sort_keys=False))


def tiny_project(work: Path) -> Path:
    """A copy of the workflow with tiny params (one task, two variants, one seed), not yet
    built: a git and DVC repository, as a clone is."""
    for name in ("Snakefile", "dvc.yaml", "tasks.yaml", "workflow", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    (work / "profiles").symlink_to("workflow/profiles")
    studies = load_params(ROOT / "params.yaml")["studies"]
    set_studies(
        work,
        {
            "positions": {
                **studies["positions"],
                "tasks": ["listops"],
                "variants": ["baseline", "after_embedding"],
            },
            "cost": {**studies["cost"], "variants": ["baseline", "after_embedding"]},
        },
    )
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"]["smoke"]["listops"].update(n_train=64, n_val=16, n_test=16, max_length=40)
    params["profiles"]["smoke"]["seeds"] = [0]
    # 16 test items cannot pass the learning rule; without it the table is written unjudged
    params["profiles"]["smoke"].pop("learning", None)
    params["profiles"]["smoke"]["overrides"] = {
        "model": {"dim": 8, "layers": 1, "heads": 2, "mlp_dim": 16},
        "train": {"batch_size": 16, "epochs": 1, "warmup_steps": 2},
    }
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh(["git", "init", "-q"], work)
    sh(["dvc", "init", "-q"], work)
    return work


@dataclass(frozen=True)
class BuiltTree:
    """tiny_project's tree after `snakemake --cores 2`, and how long that build took."""

    path: Path
    seconds: float

    def copy(self, dest: Path) -> Path:
        return copy_tree(self.path, dest)


@pytest.fixture(scope="session")
def tiny_built(tmp_path_factory) -> BuiltTree:
    """The tiny workflow built once per session (a minute or so: data, two training runs,
    tables, report, MLflow); tests take copies (``tiny_built.copy(dest)``) and never write
    to it."""
    work = tiny_project(tmp_path_factory.mktemp("tiny-built"))
    start = time.monotonic()
    sh(["snakemake", "--cores", "2"], work)
    return BuiltTree(work, time.monotonic() - start)


# --------------------------------------------------------------------------------------------
# A small Range-capable HTTP server
# --------------------------------------------------------------------------------------------


@dataclass
class Route:
    data: bytes
    mode: str = "normal"  # "normal" | "truncate" (send half, then close) | "norange"


@dataclass
class Server:
    base: str
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path

    def serve(self, path: str, data: bytes, mode: str = "normal") -> Source:
        self.routes[path] = Route(data, mode)
        return Source(
            url=self.url(path), sha256=hashlib.sha256(data).hexdigest(), filename=path[1:]
        )


class Handler(BaseHTTPRequestHandler):
    timeout = 5  # a stuck client cannot hold a server thread for long

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        state: Server = self.server.state  # type: ignore[attr-defined]
        range_header = self.headers.get("Range")
        state.requests.append((self.path, range_header))
        route = state.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        data = route.data
        if range_header and route.mode != "norange":
            start = int(re.fullmatch(r"bytes=(\d+)-", range_header).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if route.mode == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state = Server(base=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------------------------
# Claims named as the papers name things
# --------------------------------------------------------------------------------------------


def named_by_identifiers(claims: list, params: dict) -> dict[str, set[str]]:
    """Each claim whose name carries one of params' task or variant identifiers (those with an
    underscore: words a paper never writes), with the identifiers it carries."""
    ours = {n for n in (*params["tasks"], *params["variants"]) if "_" in n}
    assert ours, "params hold no identifier to look for"
    return {
        c.claim: found
        for c in claims
        if (found := ours & set(re.findall(r"[A-Za-z0-9_]+", c.claim)))
    }
