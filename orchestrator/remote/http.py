"""A small asyncio HTTP/1.1 client for the server's endpoints (GET, JSON POST).

Native asyncio, no thread pool: each request is one connection on the event loop, so every host's
workload keeps its `concurrency` requests in flight however many hosts run at once. One request per
connection (`Connection: close`); a body comes by Content-Length, chunked, or until the server
closes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import HTTPError

__all__ = ["HTTPError", "get", "post_json", "request"]
MAX_HEADER_BYTES = 64 << 10


async def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """Status and body; status 0 when nothing answered."""
    try:
        return await asyncio.wait_for(request("GET", url), timeout)
    except (TimeoutError, HTTPError, OSError):
        return 0, b""


async def post_json(url: str, payload: dict[str, Any], timeout: float = 600.0) -> Any:
    """The JSON body of a 200 answer; HTTPError for anything else."""
    try:
        status, body = await asyncio.wait_for(request("POST", url, json.dumps(payload).encode()), timeout)
    except TimeoutError:
        raise HTTPError(f"no answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise HTTPError(str(exc) or type(exc).__name__) from None
    if status != 200:
        raise HTTPError(f"HTTP {status}: {body[:200].decode(errors='replace').strip()}")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise HTTPError(f"the answer is not JSON ({exc})") from None


async def request(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a fresh connection: the status and the whole body."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HTTPError(f"not an http:// address: {url}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    reader, writer = await asyncio.open_connection(parts.hostname, port, limit=MAX_HEADER_BYTES)
    try:
        head = [f"{method} {target} HTTP/1.1", f"Host: {parts.hostname}:{port}", "Connection: close",
                "Accept: application/json"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b""))
        await writer.drain()
        status, headers = await _read_head(reader)
        return status, await _read_body(reader, headers)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass  # the server closed first: nothing left to send


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        raise HTTPError("the connection closed before an HTTP answer") from None
    except asyncio.LimitOverrunError:
        raise HTTPError(f"answer headers longer than {MAX_HEADER_BYTES} bytes") from None
    lines = raw.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not status_line[1].isdigit():
        raise HTTPError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(status_line[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader)
        if headers.get("content-length", "").isdigit():
            return await reader.readexactly(int(headers["content-length"]))
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise HTTPError("the connection closed in the middle of the answer") from None
    return await reader.read()  # neither: the body runs until the server closes


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b"".join([chunk async for chunk in chunks(reader)])
    while (await reader.readuntil(b"\r\n")) != b"\r\n":
        pass  # trailers
    return body


async def chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's chunks as they arrive, up to the last (empty) one; the trailers after it
    are the caller's to read."""
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise HTTPError(f"bad chunk size {size_line[:20]!r}") from None
        if size == 0:
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)
