"""A local HTTP receiver for HTTP-target tests: records each request (its exact body bytes
too, for signature checks), answers `status`, or with `echo` the request's headers."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    json: object
    body: bytes = b""


class Receiver:
    def __init__(self) -> None:
        self.status = 200
        self.echo = False  # answer with the request's headers, as some test endpoints do
        self.requests: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                receiver.requests.append(
                    Received(
                        self.command,
                        self.path,
                        dict(self.headers.items()),
                        json.loads(body) if body else None,
                        body,
                    )
                )
                payload = b'{"ok": true}'
                if receiver.echo:
                    payload = json.dumps({"headers": dict(self.headers.items())}).encode()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if receiver.echo and self.headers.get("Authorization"):
                    # httpcore logs response headers at DEBUG: a log line to redact.
                    self.send_header("X-Echo-Authorization", self.headers["Authorization"])
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
