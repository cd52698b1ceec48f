"""The outbound HTTP target on an asyncio event loop: the same call as :func:`http.send`,
behind the same SSRF guard, for the I/O-bound execution mode (runs/http_executor.py).

Pure library: no Django. Built on asyncio streams and h11 (the HTTP/1.1 state machine
httpx itself uses) rather than httpx.AsyncClient: measured on this machine, a shared
httpx pool spends O(connections) per request assigning requests to connections (97 s
of ramp for 5,000 requests in flight), and a client per request costs ~3.5 ms of CPU each;
a bare stream costs a fraction of both (docs/adr/0018-io-bound-execution.md).

The guard is applied as in the threaded path, reusing its pieces:

* Every hop is parsed by ``check_url_syntax``; a name is resolved once, on the loop's
  resolver (``getaddrinfo`` in its executor), and the answer goes through
  ``resolve_destination`` unchanged: refused if ANY address is refused.
* The connection is opened to a checked address (pinned), never to the name; for https
  with ``server_hostname`` = the name, so SNI and certificate verification use it.
* Redirects are never followed by a library: each hop is checked again from the start,
  credentials are dropped across origins and methods rewritten (``http._redirected``).
* One overall deadline bounds DNS, connect, TLS, headers, body and all redirects; it is a
  loop deadline (cancellation wakes any pending read: no watchdog thread is needed). A
  body cut by the deadline after a 2xx status is still ``ok`` with ``truncated=True``.
* At most ``max_response_bytes`` of any body is read; ``max_excerpt_bytes`` are kept.

Each hop uses its own connection, closed when the hop ends (as the threaded path's fresh
pool per hop): a connection verified for one name never carries a request for another.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import h11

from core.ssrf import AllowList, Destination, RefusedDestination, check_url_syntax
from core.ssrf import resolve_destination as _check_destination

from .http import (
    REDIRECT_STATUSES,
    HttpCall,
    HttpOutcome,
    _Failure,
    _first_request,
    _host_header,
    _redirected,
    _Reply,
    _Request,
    _signed,
    _timed_out,
    _tls_context,
    _verdict,
)

AsyncResolver = Callable[[str, int], Awaitable[list[str]]]
READ_CHUNK = 65536
_CHARSET = re.compile(rb"charset\s*=\s*\"?([A-Za-z0-9._:-]+)", re.IGNORECASE)


async def system_resolver_async(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


async def send_async(
    call: HttpCall,
    *,
    allow: AllowList,
    resolver: AsyncResolver | None = None,
    max_excerpt_bytes: int = 4096,
    tls: ssl.SSLContext | None = None,
) -> HttpOutcome:
    """Make ``call`` behind the SSRF guard, following redirects ourselves. Never raises
    for network problems; ``asyncio.CancelledError`` (a cancelled run) propagates."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + call.timeout_seconds
    request = _first_request(call)
    if not any(key.lower() == "accept" for key in request.headers):
        request.headers["Accept"] = "*/*"
    excerpt_limit = min(max_excerpt_bytes, call.max_response_bytes)
    hop = _Hop(deadline, call.max_response_bytes, excerpt_limit, tls or _tls_context())

    def outcome(**kwargs: Any) -> HttpOutcome:
        defaults = dict(status_code=None, body_excerpt="", error=None, refused=False)
        elapsed = loop.time() - started
        return HttpOutcome(**{**defaults, **kwargs}, elapsed_seconds=elapsed, final_url=request.url)

    redirects = 0
    while True:
        if call.signer is not None:
            request = _signed(request, call.signer)
        try:
            destination = await _destination(request.url, allow, resolver, deadline)
            reply = await hop.exchange(destination, request)
        except RefusedDestination as exc:
            return outcome(ok=False, error=f"refused destination: {exc}", refused=True)
        except TimeoutError:
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


async def _destination(
    url: str, allow: AllowList, resolver: AsyncResolver | None, deadline: float
) -> Destination:
    """``core.ssrf.resolve_destination`` with the name resolved on the loop, within the
    deadline; the checks themselves are the threaded path's, unchanged."""
    _, host, port, _ = check_url_syntax(url)
    answer: list[str] = []
    if not _is_literal(host):
        try:
            async with asyncio.timeout_at(deadline):
                answer = list(await (resolver or system_resolver_async)(host, port))
        except (OSError, UnicodeError):  # unresolvable: refused below, as in the sync path
            answer = []
    return _check_destination(url, allow=allow, resolver=lambda _host, _port: answer)


def _is_literal(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


class _Hop:
    """One request and its response on a connection of its own."""

    def __init__(self, deadline: float, max_body: int, excerpt_limit: int, tls: ssl.SSLContext):
        self.deadline, self.max_body, self.excerpt_limit, self.tls = (
            deadline,
            max_body,
            excerpt_limit,
            tls,
        )

    async def exchange(self, destination: Destination, request: _Request) -> _Reply:
        """Send to the checked addresses in resolver order until one connects."""
        failure = _Failure("connection failed: no address")
        for address in destination.addresses:
            try:
                return await self._pinned(destination, address, request)
            except _Failure as exc:
                failure = exc
                if not exc.error.startswith("connection failed"):
                    raise
        raise failure

    async def _pinned(self, destination: Destination, address: str, request: _Request) -> _Reply:
        payload = _encode(destination, request)
        https = destination.scheme == "https"
        async with asyncio.timeout_at(self.deadline):
            try:
                reader, writer = await asyncio.open_connection(
                    address,
                    destination.port,
                    ssl=self.tls if https else None,
                    server_hostname=destination.host if https else None,
                    limit=READ_CHUNK,
                )
            except (OSError, ssl.SSLError, ssl.CertificateError) as exc:
                raise _Failure(f"connection failed: {exc or type(exc).__name__}") from None
        try:
            return await self._round_trip(reader, writer, request.method, payload)
        finally:
            writer.transport.abort()  # no keep-alive: the fd and buffers go now

    async def _round_trip(self, reader, writer, method: str, payload: bytes) -> _Reply:
        conn = h11.Connection(h11.CLIENT)
        async with asyncio.timeout_at(self.deadline):
            try:
                writer.write(payload)
                await writer.drain()
                response = await _response(conn, reader)
            except (OSError, h11.ProtocolError) as exc:
                raise _Failure(f"request failed: {exc or type(exc).__name__}") from None
        headers = {name.lower(): value for name, value in response.headers}
        location = headers.get(b"location", b"").decode("latin-1") or None
        if response.status_code in REDIRECT_STATUSES and location:
            return _Reply(response.status_code, location)  # body unread, connection dropped
        if method == "HEAD":
            return _Reply(response.status_code, location)
        excerpt, truncated = await self._body(conn, reader)
        text = excerpt.decode(_charset(headers.get(b"content-type", b"")), errors="replace")
        return _Reply(response.status_code, location, text, truncated)

    async def _body(self, conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        kept, seen = bytearray(), 0
        try:
            async with asyncio.timeout_at(self.deadline):
                while True:
                    event = await _next_event(conn, reader)
                    if isinstance(event, h11.Data):
                        seen += len(event.data)
                        kept += event.data[: max(0, self.excerpt_limit - len(kept))]
                        if seen > self.max_body:
                            return bytes(kept), True
                    elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                        return bytes(kept), False
        except (TimeoutError, OSError, h11.ProtocolError):  # the status already arrived
            return bytes(kept), True


def _encode(destination: Destination, request: _Request) -> bytes:
    headers = [("Host", _host_header(destination)), ("Connection", "close")]
    headers += list(request.headers.items())
    if request.content is not None or request.method in {"POST", "PUT", "PATCH"}:
        headers.append(("Content-Length", str(len(request.content or b""))))
    conn = h11.Connection(h11.CLIENT)
    try:
        encoded = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers]
        head = conn.send(
            h11.Request(method=request.method, target=destination.path_and_query, headers=encoded)
        )
        body = conn.send(h11.Data(data=request.content)) if request.content else b""
        end = conn.send(h11.EndOfMessage())
    except (UnicodeEncodeError, h11.LocalProtocolError) as exc:  # a job header not ASCII
        raise _Failure(f"invalid request: {exc}") from None
    return (head or b"") + (body or b"") + (end or b"")


async def _response(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Response:
    while True:
        event = await _next_event(conn, reader)
        if isinstance(event, h11.Response):
            return event
        if isinstance(event, h11.ConnectionClosed):
            raise _Failure("request failed: the server closed the connection")
        # InformationalResponse (1xx): wait for the final one


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await reader.read(READ_CHUNK)
        conn.receive_data(data)  # b"" is the end of the stream


def _charset(content_type: bytes) -> str:
    match = _CHARSET.search(content_type)
    charset = match.group(1).decode("ascii") if match else "utf-8"
    with contextlib.suppress(LookupError):
        import codecs

        codecs.lookup(charset)
        return charset
    return "utf-8"
