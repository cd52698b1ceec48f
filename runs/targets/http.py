"""The outbound HTTP target: one call to a tenant URL behind the SSRF guard.

Pure library: no Django. The worker passes settings in (allow-list, limits) and decides
about retries from the returned :class:`HttpOutcome`; :func:`send` never raises for
network problems, only for programming errors (bad method, unserialisable body, ...).

How the guard is applied (see core/ssrf.py):

* Every hop (the first request and each redirect) is checked and resolved once by
  ``resolve_destination``; a refused hop is never connected to.
* The request goes to the checked IP literal (pinned), with the original ``Host``
  header and, for https, ``extensions={"sni_hostname": host}``: httpcore passes that as
  ``server_hostname`` to ``SSLContext.wrap_socket`` (httpcore/_sync/connection.py
  ``_connect``), so SNI and certificate verification use the name, not the IP. A second
  DNS answer cannot redirect the connection because no second lookup happens.
* httpx never follows redirects; we do, re-running the whole check on every hop.
* One overall deadline bounds DNS, connect, TLS, headers, body and all redirects. httpx
  timeouts are per socket operation (a server dripping one byte per second would never
  trip them), so a watchdog timer also shuts the socket down when the deadline passes.

Over-size and slow bodies: the status line is the receiver's verdict ("2xx is success",
DESIGN section 7) and the body is only kept as an excerpt. A 2xx whose body is larger
than ``max_response_bytes``, or whose body is cut by the deadline or a reset after the
headers arrived, is still ``ok`` with ``truncated=True``: failing it would make the
worker retry, re-running a job the receiver already accepted.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from core.ssrf import (
    AllowList,
    Destination,
    RefusedDestination,
    Resolver,
    resolve_destination,
    system_resolver,
)

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
METHODS = frozenset({"GET", "HEAD"}) | BODY_METHODS
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Tickwork-Scheduler/1.0"

# Framing and routing headers are ours to set: a job header must not be able to change
# the Host we checked, or smuggle a second request through Content-Length games.
_OWNED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "accept-encoding",
    }
)
# Credentials are not forwarded to another origin on redirect (as browsers, httpx, curl).
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


@dataclass(frozen=True)
class HttpCall:
    method: str  # GET POST PUT PATCH DELETE HEAD
    url: str
    headers: Mapping[str, str]  # the job's headers plus the scheduler's (Idempotency-Key...)
    json_body: Any | None  # sent as JSON for POST/PUT/PATCH/DELETE; None = no body
    timeout_seconds: float  # overall deadline for the whole call including redirects
    max_response_bytes: int  # read at most this much of any body
    max_redirects: int = 5
    # Headers that depend on the exact body bytes of each hop (the Standard Webhooks
    # signature): called with the body about to be sent (b"" for none), on every hop.
    signer: Callable[[bytes], Mapping[str, str]] | None = field(
        default=None, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, not {self.method!r}")
        if not self.timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        if self.max_response_bytes < 0 or self.max_redirects < 0:
            raise ValueError("max_response_bytes and max_redirects must not be negative")


@dataclass(frozen=True)
class HttpOutcome:
    ok: bool  # True iff the final status is 2xx
    status_code: int | None  # of the last response received; None if none ended the call
    body_excerpt: str  # first max_excerpt_bytes of the final body, errors="replace"
    error: str | None  # human reason when not ok, else None
    refused: bool  # the SSRF guard refused a hop: nothing was sent to it
    elapsed_seconds: float
    final_url: str  # the URL of the last hop attempted (as written, not the pinned IP)
    truncated: bool = False  # the body was cut: over max_response_bytes, deadline or reset


@dataclass
class _Request:
    """What changes between redirect hops."""

    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None


@dataclass
class _Reply:
    status: int
    location: str | None
    excerpt: str = ""
    truncated: bool = False


class _Failure(Exception):
    """A hop that ended without a usable response."""

    def __init__(self, error: str, *, timed_out: bool = False) -> None:
        super().__init__(error)
        self.error = error
        self.timed_out = timed_out


class _DeadlineExceeded(Exception):
    """Raised inside the call when the overall deadline has passed."""


@dataclass
class _Deadline:
    seconds: float
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        left = self.seconds - self.elapsed()
        if left <= 0:
            raise _DeadlineExceeded
        return left


def send(
    call: HttpCall,
    *,
    allow: AllowList,
    resolver: Resolver | None = None,
    transport: httpx.BaseTransport | None = None,
    max_excerpt_bytes: int = 4096,
) -> HttpOutcome:
    """Make ``call`` behind the SSRF guard, following redirects ourselves."""
    deadline = _Deadline(call.timeout_seconds)
    request = _first_request(call)
    resolve = _bounded(resolver or system_resolver, deadline)
    excerpt_limit = min(max_excerpt_bytes, call.max_response_bytes)

    def outcome(**kwargs: Any) -> HttpOutcome:
        defaults = dict(status_code=None, body_excerpt="", error=None, refused=False)
        return HttpOutcome(
            **{**defaults, **kwargs}, elapsed_seconds=deadline.elapsed(), final_url=request.url
        )

    redirects = 0
    while True:
        if call.signer is not None:
            request = _signed(request, call.signer)
        try:
            destination = resolve_destination(request.url, allow=allow, resolver=resolve)
            reply = _exchange(
                destination, request, deadline, transport, call.max_response_bytes, excerpt_limit
            )
        except RefusedDestination as exc:
            return outcome(ok=False, error=f"refused destination: {exc}", refused=True)
        except _DeadlineExceeded:
            return outcome(ok=False, error=_timed_out(call))
        except _Failure as failure:
            error = _timed_out(call) if failure.timed_out else failure.error
            return outcome(ok=False, error=error)
        if reply.status not in REDIRECT_STATUSES or not reply.location:
            return outcome(**_verdict(reply))
        if redirects >= call.max_redirects:
            error = f"too many redirects (more than {call.max_redirects})"
            return outcome(ok=False, status_code=reply.status, error=error)
        redirects += 1
        request = _redirected(request, reply.status, reply.location)


def _verdict(reply: _Reply) -> dict[str, Any]:
    ok = 200 <= reply.status < 300
    return dict(
        ok=ok,
        status_code=reply.status,
        body_excerpt=reply.excerpt,
        error=None if ok else f"HTTP {reply.status}",
        truncated=reply.truncated,
    )


def _timed_out(call: HttpCall) -> str:
    return f"timed out after {float(call.timeout_seconds)}s"


# --- building requests ------------------------------------------------------------------


def _first_request(call: HttpCall) -> _Request:
    headers = {k: v for k, v in call.headers.items() if k.lower() not in _OWNED_HEADERS}
    content = None
    if call.method in BODY_METHODS and call.json_body is not None:
        # Encoded once, up front: an unserialisable body is a programming error, raised
        # before anything touches the network.
        content = json.dumps(call.json_body, separators=(",", ":"), ensure_ascii=False).encode()
        if not _has(headers, "content-type"):
            headers["Content-Type"] = "application/json"
    if not _has(headers, "user-agent"):
        headers["User-Agent"] = USER_AGENT
    # We read raw bytes and cap them; a compressed body would escape the cap when decoded.
    headers["Accept-Encoding"] = "identity"
    return _Request(call.method, call.url, headers, content)


def _signed(request: _Request, signer: Callable[[bytes], Mapping[str, str]]) -> _Request:
    signature = signer(request.content or b"")
    headers = {**_without(request.headers, {name.lower() for name in signature}), **signature}
    return _Request(request.method, request.url, headers, request.content)


def _has(headers: Mapping[str, str], name: str) -> bool:
    return any(key.lower() == name for key in headers)


def _without(headers: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    drop = set(names)
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def _redirected(request: _Request, status: int, location: str) -> _Request:
    """The next hop, with the method rules browsers use (RFC 9110 section 15.4)."""
    target = urlunsplit(urlsplit(urljoin(request.url, location))._replace(fragment=""))
    method, content, headers = request.method, request.content, dict(request.headers)
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, content = "GET", None
        headers = _without(headers, {"content-type"})
    if _origin(target) != _origin(request.url):
        headers = _without(headers, _CREDENTIAL_HEADERS)
    return _Request(method, target, headers, content)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), parts.hostname, port


# --- one hop ----------------------------------------------------------------------------


def _exchange(
    destination: Destination,
    request: _Request,
    deadline: _Deadline,
    transport: httpx.BaseTransport | None,
    max_body: int,
    excerpt_limit: int,
) -> _Reply:
    """Send ``request`` to the checked addresses in resolver order until one connects."""
    failure = _Failure("connection failed: no address")
    for address in destination.addresses:
        try:
            return _send_pinned(
                destination, address, request, deadline, transport, max_body, excerpt_limit
            )
        except _Failure as exc:
            failure = exc
            if not exc.error.startswith("connection failed"):
                raise  # only an unreachable address is worth trying the next one for
    raise failure


def _send_pinned(
    destination: Destination,
    address: str,
    request: _Request,
    deadline: _Deadline,
    transport: httpx.BaseTransport | None,
    max_body: int,
    excerpt_limit: int,
) -> _Reply:
    watchdog = _Watchdog(deadline.remaining())
    # A fresh pool per hop unless the caller brought a transport: pooled connections are
    # keyed by IP, and one verified for name A must not carry a request for name B.
    client = httpx.Client(
        transport=transport or httpx.HTTPTransport(verify=_tls_context()),
        trust_env=False,  # no HTTP(S)_PROXY: a proxy would connect to the name itself
        follow_redirects=False,
        timeout=httpx.Timeout(deadline.remaining()),
    )
    try:
        with watchdog:
            return _round_trip(
                client, destination, address, request, watchdog, max_body, excerpt_limit
            )
    finally:
        if transport is None:
            client.close()


def _round_trip(
    client: httpx.Client,
    destination: Destination,
    address: str,
    request: _Request,
    watchdog: _Watchdog,
    max_body: int,
    excerpt_limit: int,
) -> _Reply:
    try:
        built = client.build_request(
            request.method,
            _pinned_url(destination, address),
            headers={**request.headers, "Host": _host_header(destination)},
            content=request.content,
            extensions={"sni_hostname": destination.host, "trace": watchdog.trace},
        )
    except (UnicodeEncodeError, httpx.InvalidURL) as exc:  # a job header that is not ASCII
        raise _Failure(f"invalid request: {exc}") from None
    try:
        response = client.send(built, stream=True)
    except httpx.HTTPError as exc:
        raise _failure(exc, watchdog) from None
    try:
        location = response.headers.get("location")
        if response.status_code in REDIRECT_STATUSES and location:
            return _Reply(response.status_code, location)  # body unread: the pool is dropped
        excerpt, truncated = _read_capped(response, max_body, excerpt_limit)
        # A shut-down socket can look like a clean end of a close-delimited body.
        return _Reply(response.status_code, location, excerpt, truncated or watchdog.fired)
    finally:
        response.close()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~25 ms; one context is shared by all pools (SNI and the
    # hostname check are per connection, from server_hostname).
    return httpx.create_ssl_context()


def _failure(exc: httpx.HTTPError, watchdog: _Watchdog) -> _Failure:
    if watchdog.fired or isinstance(exc, httpx.TimeoutException):
        return _Failure("timed out", timed_out=True)
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return _Failure(f"connection failed: {detail}")
    if isinstance(exc, httpx.LocalProtocolError):
        return _Failure(f"invalid request: {detail}")
    return _Failure(f"request failed: {detail}")


def _read_capped(response: httpx.Response, max_body: int, excerpt_limit: int) -> tuple[str, bool]:
    """Read at most ``max_body`` bytes, keeping only the first ``excerpt_limit``."""
    kept = bytearray()
    seen = 0
    truncated = False
    try:
        for chunk in response.iter_raw():
            seen += len(chunk)
            kept += chunk[: max(0, excerpt_limit - len(kept))]
            if seen > max_body:  # stop reading; close() drops the rest with the socket
                truncated = True
                break
    except httpx.HTTPError:  # deadline or reset mid-body: the status already arrived
        truncated = True
    return bytes(kept).decode(_charset(response), errors="replace"), truncated


def _charset(response: httpx.Response) -> str:
    charset = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset


def _pinned_url(destination: Destination, address: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{destination.scheme}://{host}:{destination.port}{destination.path_and_query}"


def _host_header(destination: Destination) -> str:
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    default = {"http": 80, "https": 443}[destination.scheme]
    return host if destination.port == default else f"{host}:{destination.port}"


# --- the overall deadline -------------------------------------------------------------


def _bounded(resolver: Resolver, deadline: _Deadline) -> Resolver:
    """Run ``resolver`` within the deadline: getaddrinfo can block for many seconds."""

    def resolve(host: str, port: int) -> list[str]:
        box: dict[str, Any] = {}
        budget = deadline.remaining()

        def run() -> None:
            try:
                box["value"] = resolver(host, port)
            except BaseException as exc:  # handed back to the calling thread
                box["error"] = exc

        thread = threading.Thread(target=run, name="tickwork-resolve", daemon=True)
        thread.start()
        thread.join(budget)
        if thread.is_alive():
            raise _DeadlineExceeded  # the thread ends on its own when getaddrinfo does
        if "error" in box:
            raise box["error"]
        return box["value"]

    return resolve


class _Watchdog:
    """Shuts the hop's socket down when the deadline passes, waking any blocked read.

    The socket is learnt from httpcore's documented "trace" extension, which reports the
    stream returned by connect_tcp and start_tls.
    """

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._stream: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event.endswith(("connect_tcp.complete", "start_tls.complete")):
            with self._lock:
                self._stream = info.get("return_value")
                if self.fired:
                    self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        get_extra_info: Callable[[str], Any] | None = getattr(self._stream, "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info else None
        if sock is None:
            return
        with contextlib.suppress(OSError):  # already closed: nothing left to wake
            sock.shutdown(socket.SHUT_RDWR)
