"""Fixtures for the data tests: a local HTTP file server on 127.0.0.1 (Range support, request
log, optional dropped connection) and an isolated $LINREC_DATA."""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field

import pytest


@dataclass
class FileServer:
    """Serves `files` (URL path -> bytes). `drop_after[path] = n` sends only the first n bytes
    of the next response (announcing the full length) and closes the connection;
    `ignore_range` answers 200 with the whole file even to Range requests."""

    base_url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    drop_after: dict[str, int] = field(default_factory=dict)
    ignore_range: bool = False

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def _handler(server_state: FileServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.lstrip("/")
            range_header = self.headers.get("Range")
            server_state.requests.append((path, range_header))
            body = server_state.files.get(path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            start = 0
            if range_header and not server_state.ignore_range:
                start = int(range_header.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            limit = server_state.drop_after.pop(path, None)
            self.wfile.write(payload if limit is None else payload[:limit])
            if limit is not None:
                self.close_connection = True

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture
def file_server():
    """A FileServer running in a thread on 127.0.0.1 (random port), shut down after the test."""
    state = FileServer()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def linrec_data_home(tmp_path, monkeypatch):
    """An empty $LINREC_DATA for the test."""
    home = tmp_path / "linrec_data"
    monkeypatch.setenv("LINREC_DATA", str(home))
    return home
