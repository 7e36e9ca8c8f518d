"""Small blocking HTTP helpers for the server's endpoints (called in threads by async code)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """Status and body; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def post_json(url: str, payload: dict[str, Any], timeout: float = 600.0) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())
