"""What the core's tests (tests/) and each paper's (src/pdelab/papers/<paper>/tests/) share:
the project's folder, its params.yaml, and a small HTTP server on 127.0.0.1 that serves
fixtures in the real formats to the download code (the tests never reach the internet)."""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pdelab.config import load_params
from pdelab.data.download import Source

ROOT = Path(__file__).resolve().parent  # the project


@pytest.fixture(scope="session")
def params() -> dict:
    return load_params(ROOT / "params.yaml")


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
