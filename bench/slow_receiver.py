"""A slow local HTTP receiver: holds each request, then answers. For the in-flight benchmark
(`python -m bench.slow_receiver PORT`, one process per port) and the asyncio execution tests.

Paths: `/hold/<seconds>` holds that long, then answers 200; `/status/<code>` answers that
status at once; `/redirect?to=<url>` answers 302 to it. Every other path: 200 at once.
It counts requests held at once (`live`, `peak`) and the connections the client dropped
while held (`aborted`)."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit


@dataclass
class Counts:
    live: int = 0
    peak: int = 0
    served: int = 0
    aborted: int = 0
    heads: list[dict[str, str]] = field(default_factory=list)
    keep_heads: bool = False


async def _handle(reader, writer, counts: Counts) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int(headers.get("Content-Length", "0"))
        body = await reader.readexactly(length) if length else b""
        if counts.keep_heads:
            counts.heads.append({**headers, ":method": method, ":path": target, ":body": body})
        status, extra = await _answer(target, reader, counts)
        payload = b'{"ok": true}'
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        counts.served += 1
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def _answer(target: str, reader, counts: Counts) -> tuple[int, str]:
    parts = urlsplit(target)
    if parts.path.startswith("/hold/"):
        counts.live += 1
        counts.peak = max(counts.peak, counts.live)
        try:
            # A client that drops the connection ends the hold at once (EOF on read).
            done = await _closed_within(reader, float(parts.path.split("/")[2]))
            if done:
                counts.aborted += 1
                raise ConnectionResetError
        finally:
            counts.live -= 1
        return 200, ""
    if parts.path.startswith("/status/"):
        return int(parts.path.split("/")[2]), ""
    if parts.path == "/redirect":
        return 302, f"Location: {parse_qs(parts.query)['to'][0]}\r\n"
    return 200, ""


async def _closed_within(reader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def serve(host: str, port: int, counts: Counts, started: asyncio.Event | None = None):
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, counts), host, port, backlog=65535
    )
    if started is not None:
        started.set()
    async with server:
        await server.serve_forever()


async def _main(port: int, report: str) -> None:
    counts = Counts()

    async def write_report() -> None:
        while True:
            await asyncio.sleep(0.5)
            with open(report, "w") as out:
                json.dump({"live": counts.live, "peak": counts.peak, "served": counts.served}, out)

    asyncio.get_running_loop().create_task(write_report())
    await serve("127.0.0.1", port, counts)


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]), sys.argv[2]))
