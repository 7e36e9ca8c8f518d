"""Server-sent events from a JSON POST, on orch's asyncio HTTP client: each `data:` payload with the
moment it arrived, as the server flushes it (the workload times tokens by them).

The body comes chunked (uvicorn) or until the server closes; events are split on the blank line
that ends each, whatever the chunk boundaries.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import HTTPError
from orchestrator.remote.http import MAX_HEADER_BYTES, _read_body, _read_head, chunks

__all__ = ["post_events"]


async def post_events(url: str, payload: dict[str, Any]) -> AsyncGenerator[tuple[float, str], None]:
    """(time.monotonic() at arrival, data) of each event; HTTPError for an answer other than 200
    or a connection that fails. The caller bounds the whole with its own timeout."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HTTPError(f"not an http:// address: {url}")
    port, body = parts.port or 80, json.dumps(payload).encode()
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, port, limit=MAX_HEADER_BYTES)
    except OSError as exc:
        raise HTTPError(str(exc) or type(exc).__name__) from None
    try:
        head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {parts.hostname}:{port}", "Connection: close",
                "Accept: text/event-stream", "Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status, headers = await _read_head(reader)
        if status != 200:
            raise HTTPError(f"HTTP {status}: {(await _read_body(reader, headers))[:200].decode(errors='replace').strip()}")
        buffer = b""
        async for piece in _pieces(reader, "chunked" in headers.get("transfer-encoding", "").lower()):
            buffer += piece
            *events, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
            arrived = time.monotonic()
            for event in events:
                for line in event.decode("utf-8", "replace").split("\n"):
                    if line.startswith("data:"):
                        yield arrived, line[5:].strip()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise HTTPError(f"the stream broke: {exc or type(exc).__name__}") from None
    finally:
        writer.close()


async def _pieces(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """The body as it arrives: chunk by chunk, or read by read until the server closes."""
    if chunked:
        async for chunk in chunks(reader):
            yield chunk
        return
    while piece := await reader.read(1 << 16):
        yield piece
