"""What the core's tests (tests/) and each paper's (src/pdelab/papers/<paper>/tests/) share:
the project's folder, its params.yaml, and a small HTTP server on 127.0.0.1 that serves
fixtures in the real formats to the download code (the tests never reach the internet)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pdelab.data.download import Source
from pdelab.records.run import identity, record_table, write_records
from pdelab.spec.config import load_params

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
