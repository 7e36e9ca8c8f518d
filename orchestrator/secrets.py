"""Which environment values are secrets, and how they are kept out of logs and the database."""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


def secret_values(env: Mapping[str, str]) -> dict[str, str]:
    """{name: value} for env entries whose names say they hold a secret (and are non-trivial)."""
    return {k: v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 4}


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    secrets = secret_values(env)
    return {k: (f"<secret:{k}>" if k in secrets else v) for k, v in env.items()}


def redact(text: str, env: Mapping[str, str]) -> str:
    """Replace every secret value in `text` (longest first, so overlapping values stay hidden)."""
    for name, value in sorted(secret_values(env).items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, f"<secret:{name}>")
    return text


def redact_bytes(data: bytes, env: Mapping[str, str]) -> bytes:
    for name, value in sorted(secret_values(env).items(), key=lambda kv: -len(kv[1])):
        data = data.replace(value.encode(), f"<secret:{name}>".encode())
    return data
