"""The HTTP target against real local servers (real sockets, nothing in httpx mocked).

Servers listen on 127.0.0.1 (and 127.0.0.2, also loopback on Linux), which the guard
refuses by default; most tests therefore pass an allow-list for 127.0.0.0/8.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

from core.ssrf import parse_allow_networks
from runs.targets.http import HttpCall, HttpOutcome, send

LOOPBACK = parse_allow_networks("127.0.0.0/8")
ONLY_FIRST = parse_allow_networks("127.0.0.1/32")
HUGE_TOTAL = 64 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, port: int = 0) -> None:
        super().__init__((host, port), Handler)
        self.requests: list[Seen] = []
        self.connections = 0
        self.stopping = threading.Event()
        self.huge_sent = 0
        self.huge_done = threading.Event()
        self.sni: list[str | None] = []

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str) -> str:
        return f"http://{self.server_address[0]}:{self.port}{path}"

    def get_request(self):
        request = super().get_request()
        self.connections += 1  # counted before any byte is read
        return request


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args) -> None:
        pass

    def handle_one(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.requests.append(Seen(self.command, self.path, headers, body))
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        route = getattr(self, "route_" + parts.path.strip("/").split("/")[0], self.route_ok)
        route(parts.path, query)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_one

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def route_ok(self, path, query):
        self.reply(200, b"hello", {"Content-Type": "text/plain; charset=utf-8"})

    def route_status(self, path, query):
        code = int(path.split("/")[2])
        self.reply(code, f"status {code}".encode())

    def route_redirect(self, path, query):
        self.reply(int(query.get("code", 302)), b"moved", {"Location": query["to"]})

    def route_chain(self, path, query):
        left = int(path.split("/")[2])
        if left == 0:
            self.reply(200, b"end of chain")
        else:
            self.reply(302, b"", {"Location": f"/chain/{left - 1}"})

    def route_slow(self, path, query):
        if not self.server.stopping.wait(float(query["delay"])):
            self.reply(200, b"late")

    def route_huge(self, path, query):
        self.send_response(200)
        self.end_headers()  # no Content-Length: the body runs until the socket closes
        try:
            while self.server.huge_sent < HUGE_TOTAL:
                self.wfile.write(b"x" * CHUNK)
                self.server.huge_sent += CHUNK
        except OSError:  # the client hung up, as it should
            pass
        finally:
            self.server.huge_done.set()

    def route_drip_body(self, path, query):
        self.send_response(200)
        self.end_headers()
        self.drip(b"x")

    def route_drip_headers(self, path, query):
        self.wfile.write(b"HTTP/1.0 200 OK\r\n")
        self.drip(b"X-Slow: 1\r\n")

    def drip(self, piece: bytes) -> None:
        """One piece every 50 ms for up to 5 s: never idle long enough for a read timeout."""
        try:
            for _ in range(100):
                self.wfile.write(piece)
                self.wfile.flush()
                if self.server.stopping.wait(0.05):
                    return
        except OSError:
            pass


def start(host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> Server:
    server = Server(host, port)
    if tls is not None:
        server.socket = tls.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def stop(server: Server) -> None:
    server.stopping.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = start("127.0.0.1")
    yield srv
    stop(srv)


@pytest.fixture
def other() -> Iterator[Server]:
    """A second server, on 127.0.0.2: loopback too, but outside ONLY_FIRST."""
    srv = start("127.0.0.2")
    yield srv
    stop(srv)


def make(url: str, method: str = "GET", **overrides) -> HttpCall:
    fields = dict(
        method=method,
        url=url,
        headers={},
        json_body=None,
        timeout_seconds=2.0,
        max_response_bytes=1_000_000,
    )
    return HttpCall(**{**fields, **overrides})


def redirect(to: str, code: int = 302) -> str:
    return f"/redirect?code={code}&to={quote(to, safe='')}"


def assert_refused(outcome: HttpOutcome, *servers: Server) -> None:
    assert outcome.refused and not outcome.ok
    assert outcome.error.startswith("refused destination: ")
    for srv in servers:
        assert srv.connections == 0 and srv.requests == []


# --- what arrives -----------------------------------------------------------------------


def test_method_headers_and_json_body_arrive(server):
    headers = {
        "Idempotency-Key": "run-42",
        "X-Custom": "yes",
        "Host": "evil.example",  # ours to set: the checked host
        "Content-Length": "9999",  # ours to set: framing
    }
    body = {"a": 1, "text": "grüße"}
    outcome = send(
        make(server.url("/ok?x=1"), "POST", headers=headers, json_body=body), allow=LOOPBACK
    )

    assert outcome == HttpOutcome(
        ok=True,
        status_code=200,
        body_excerpt="hello",
        error=None,
        refused=False,
        elapsed_seconds=outcome.elapsed_seconds,
        final_url=server.url("/ok?x=1"),
    )
    [seen] = server.requests
    assert (seen.method, seen.path) == ("POST", "/ok?x=1")
    assert json.loads(seen.body) == body
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["idempotency-key"] == "run-42"
    assert seen.headers["x-custom"] == "yes"
    assert seen.headers["host"] == f"127.0.0.1:{server.port}"
    assert seen.headers["content-length"] == str(len(seen.body))
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["user-agent"].startswith("Tickwork")


@pytest.mark.parametrize(
    ("method", "has_body"),
    [("GET", False), ("HEAD", False), ("PUT", True), ("PATCH", True), ("DELETE", True)],
)
def test_each_method_arrives_with_a_body_only_where_it_has_one(server, method, has_body):
    outcome = send(make(server.url("/ok"), method, json_body=[1, 2]), allow=LOOPBACK)
    assert outcome.ok
    [seen] = server.requests
    assert seen.method == method
    assert seen.body == (b"[1,2]" if has_body else b"")
    assert outcome.body_excerpt == ("" if method == "HEAD" else "hello")


@pytest.mark.parametrize("status", [500, 503, 404, 304])
def test_non_2xx_is_not_ok(server, status):
    outcome = send(make(server.url(f"/status/{status}")), allow=LOOPBACK)
    assert not outcome.ok and not outcome.refused
    assert outcome.status_code == status
    assert outcome.error == f"HTTP {status}"
    assert outcome.body_excerpt == ("" if status == 304 else f"status {status}")


def test_connection_refused_is_an_outcome_not_an_exception():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the socket is
    outcome = send(make(f"http://127.0.0.1:{port}/"), allow=LOOPBACK)
    assert not outcome.ok and not outcome.refused
    assert outcome.status_code is None
    assert outcome.error.startswith("connection failed: ")


# --- deadlines and sizes ----------------------------------------------------------------


def test_slow_answer_times_out_within_about_the_timeout(server):
    outcome = send(make(server.url("/slow?delay=3"), timeout_seconds=0.3), allow=LOOPBACK)
    assert not outcome.ok and outcome.status_code is None
    assert outcome.error == "timed out after 0.3s"
    assert 0.25 <= outcome.elapsed_seconds < 0.8


def test_dripping_headers_cannot_outlive_the_overall_deadline(server):
    """Each byte arrives well within a read timeout; only the overall deadline stops it."""
    outcome = send(make(server.url("/drip_headers"), timeout_seconds=0.4), allow=LOOPBACK)
    assert outcome.error == "timed out after 0.4s"
    assert outcome.elapsed_seconds < 0.9


def test_dripping_body_of_a_2xx_is_cut_at_the_deadline_and_still_ok(server):
    outcome = send(make(server.url("/drip_body"), timeout_seconds=0.4), allow=LOOPBACK)
    assert outcome.ok and outcome.truncated
    assert outcome.status_code == 200
    assert outcome.body_excerpt.startswith("x")
    assert outcome.elapsed_seconds < 0.9


def test_huge_answer_is_read_only_up_to_the_cap(server):
    outcome = send(make(server.url("/huge"), max_response_bytes=100_000), allow=LOOPBACK)

    assert outcome.ok and outcome.truncated and outcome.error is None
    assert outcome.body_excerpt == "x" * 4096
    # Server side: the client hung up long before the 64 MiB were written (what was sent
    # is the cap plus what the kernel's socket buffers absorbed).
    assert server.huge_done.wait(2)
    assert server.huge_sent < HUGE_TOTAL / 4


def test_excerpt_is_capped_by_both_limits(server):
    small = send(make(server.url("/ok"), max_response_bytes=3), allow=LOOPBACK)
    assert (small.ok, small.truncated, small.body_excerpt) == (True, True, "hel")
    exact = send(make(server.url("/ok"), max_response_bytes=5), allow=LOOPBACK)
    assert (exact.truncated, exact.body_excerpt) == (False, "hello")
    short = send(make(server.url("/ok")), allow=LOOPBACK, max_excerpt_bytes=2)
    assert (short.truncated, short.body_excerpt) == (False, "he")


# --- redirects --------------------------------------------------------------------------


def test_redirect_chain_is_followed(server):
    outcome = send(make(server.url("/chain/3")), allow=LOOPBACK)
    assert outcome.ok and outcome.body_excerpt == "end of chain"
    assert outcome.final_url == server.url("/chain/0")
    assert [r.path for r in server.requests] == ["/chain/3", "/chain/2", "/chain/1", "/chain/0"]


def test_redirect_chain_is_capped(server):
    outcome = send(make(server.url("/chain/10"), max_redirects=2), allow=LOOPBACK)
    assert not outcome.ok and outcome.status_code == 302
    assert outcome.error == "too many redirects (more than 2)"
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("code", "method", "then", "keeps_body"),
    [
        (303, "POST", "GET", False),
        (303, "PUT", "GET", False),
        (302, "POST", "GET", False),
        (301, "POST", "GET", False),
        (302, "PUT", "PUT", True),
        (307, "POST", "POST", True),
        (308, "PATCH", "PATCH", True),
    ],
)
def test_redirect_method_rules(server, code, method, then, keeps_body):
    call = make(server.url(redirect("/ok", code)), method, json_body={"k": "v"})
    outcome = send(call, allow=LOOPBACK)
    assert outcome.ok
    first, second = server.requests
    assert (first.method, second.method) == (method, then)
    assert second.body == (b'{"k":"v"}' if keeps_body else b"")
    assert ("content-type" in second.headers) == keeps_body


def test_redirect_to_a_refused_address_is_refused_and_sends_nothing(server, other):
    outcome = send(make(server.url(redirect(other.url("/ok")))), allow=ONLY_FIRST)
    assert_refused(outcome, other)
    assert "loopback" in outcome.error
    assert outcome.final_url == other.url("/ok")
    assert len(server.requests) == 1


def test_redirect_to_a_name_resolving_to_loopback_is_refused(server, other):
    def resolver(host: str, port: int) -> list[str]:
        assert host == "internal.example"
        return ["127.0.0.2"]

    target = f"http://internal.example:{other.port}/ok"
    outcome = send(make(server.url(redirect(target))), allow=ONLY_FIRST, resolver=resolver)
    assert_refused(outcome, other)
    assert "internal.example" in outcome.error and "127.0.0.2" not in outcome.error


@pytest.mark.parametrize("location", ["ftp://example.com/", "http://user:pw@127.0.0.1/"])
def test_redirect_to_a_bad_url_is_refused(server, location):
    outcome = send(make(server.url(redirect(location))), allow=LOOPBACK)
    assert outcome.refused and len(server.requests) == 1


def test_credentials_are_not_forwarded_to_another_origin(server, other):
    headers = {"Authorization": "Bearer s3cret", "Cookie": "a=b", "X-Custom": "kept"}
    send(make(server.url(redirect("/chain/0")), headers=headers), allow=LOOPBACK)
    assert server.requests[1].headers["authorization"] == "Bearer s3cret"  # same origin

    outcome = send(make(server.url(redirect(other.url("/ok"))), headers=headers), allow=LOOPBACK)
    assert outcome.ok
    [seen] = other.requests
    assert "authorization" not in seen.headers and "cookie" not in seen.headers
    assert seen.headers["x-custom"] == "kept"


# --- the guard --------------------------------------------------------------------------


def test_without_the_allow_list_the_local_server_is_refused_and_receives_nothing(server):
    outcome = send(make(server.url("/ok"), "POST", json_body={"a": 1}), allow=())
    assert_refused(outcome, server)
    assert outcome.status_code is None and outcome.body_excerpt == ""
    assert "127.0.0.1 is a loopback address" in outcome.error


def test_the_checked_address_is_pinned_against_dns_rebinding(server):
    """The name resolves to 127.0.0.1 once; any later answer would point at the second
    server on 127.0.0.2, same port. Only the first server must see the request."""
    rebound = start("127.0.0.2", server.port)
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["127.0.0.2"]

    try:
        url = f"http://rebind.test:{server.port}/ok"
        outcome = send(make(url), allow=LOOPBACK, resolver=resolver)
    finally:
        stop(rebound)

    assert outcome.ok and outcome.final_url == url
    assert calls == ["rebind.test"]
    [seen] = server.requests
    assert seen.headers["host"] == f"rebind.test:{server.port}"
    assert rebound.connections == 0


def test_every_redirect_hop_is_resolved_and_checked_again(server, other):
    """Rebinding through a redirect: the second lookup of the same name is refused."""
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])
    url = f"http://rebind.test:{server.port}" + redirect(f"http://rebind.test:{other.port}/ok")
    outcome = send(make(url), allow=ONLY_FIRST, resolver=lambda host, port: next(answers))
    assert_refused(outcome, other)
    assert len(server.requests) == 1


def test_next_address_is_tried_when_one_does_not_connect(server):
    outcome = send(
        make(f"http://multi.test:{server.port}/ok"),
        allow=LOOPBACK,
        resolver=lambda host, port: ["127.0.0.3", "127.0.0.1"],  # nothing on 127.0.0.3
    )
    assert outcome.ok and len(server.requests) == 1


# --- https: SNI and certificate checked against the name, connection to the IP ------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=pinned.test",
            "-addext",
            "subjectAltName=DNS:pinned.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate) -> Iterator[Server]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    srv = start("127.0.0.1", tls=context)
    context.sni_callback = lambda sock, name, ctx: srv.sni.append(name)
    yield srv
    stop(srv)


@pytest.mark.parametrize(("name", "ok"), [("pinned.test", True), ("other.test", False)])
def test_https_uses_the_name_for_sni_and_certificate_while_connecting_to_the_ip(
    tls_server, certificate, name, ok
):
    transport = httpx.HTTPTransport(verify=ssl.create_default_context(cafile=certificate[0]))
    try:
        outcome = send(
            make(f"https://{name}:{tls_server.port}/ok"),
            allow=LOOPBACK,
            resolver=lambda host, port: ["127.0.0.1"],
            transport=transport,
        )
    finally:
        transport.close()
    assert tls_server.sni == [name]
    assert outcome.ok is ok
    if ok:
        assert tls_server.requests[0].headers["host"] == f"pinned.test:{tls_server.port}"
    else:  # the certificate is for pinned.test: verified against the name, so refused
        assert outcome.error.startswith("connection failed: ")
        assert "CERTIFICATE_VERIFY_FAILED" in outcome.error
        assert tls_server.requests == []


def test_refused_outcomes_are_quick(server):
    started = time.monotonic()
    send(make(server.url("/ok")), allow=())
    assert time.monotonic() - started < 0.5


def test_every_hop_is_signed_over_the_body_it_carries(server):
    """A 303 turns the POST into a bodiless GET: its signature must cover no body, or the
    receiver's verification fails on the hop that reaches it."""
    signed: list[bytes] = []

    def signer(body: bytes) -> dict[str, str]:
        signed.append(body)
        return {"webhook-signature": f"v1,{len(signed)}:{body.decode()}"}

    call = make(
        server.url(redirect("/ok", 303)),
        "POST",
        json_body={"k": "v"},
        headers={"Webhook-Signature": "forged"},
        signer=signer,
    )
    assert send(call, allow=LOOPBACK).ok
    first, second = server.requests
    assert signed == [b'{"k":"v"}', b""]
    assert first.headers["webhook-signature"] == 'v1,1:{"k":"v"}'
    assert second.headers["webhook-signature"] == "v1,2:"
