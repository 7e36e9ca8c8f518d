"""Which environment values are secrets, and how they are kept out of scripts, logs, the database
and the screen.

A value is secret when its name has a word that says so (`HF_TOKEN`, `OPENAI_KEY`, `DB_PASSWORD`,
`AWS_SECRET_ACCESS_KEY`, `GITHUB_AUTH`, ...) or when the experiment or inventory lists the name
under `secrets:`. The server still receives it, from a 0600 file the launch reads and removes;
everywhere else the value is replaced by `<secret:NAME>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_WORDS = re.compile(
    r"(?:^|_)(?:[A-Z0-9]*KEYS?|[A-Z0-9]*TOKENS?|SECRETS?|PASS(?:WORD|WD|PHRASE)?|CREDENTIALS?|AUTH|PAT)(?:_|$)", re.I)
MIN_LENGTH = 4  # shorter values ("1", "on") would be hidden everywhere they occur by chance


def is_secret_name(name: str, listed: Iterable[str] = ()) -> bool:
    return name in set(listed) or bool(SECRET_WORDS.search(name))


def secret_values(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """{name: value} for env entries that hold a secret (and are long enough to hide)."""
    names = set(listed)
    return {k: v for k, v in env.items() if is_secret_name(k, names) and len(str(v)) >= MIN_LENGTH}


def public_env(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """The env without its secrets: what a launch script may hold in clear."""
    hidden = secret_values(env, listed)
    return {k: v for k, v in env.items() if k not in hidden}


def mask_env(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    secrets = secret_values(env, listed)
    return {k: (f"<secret:{k}>" if k in secrets else v) for k, v in env.items()}


def _ordered(secrets: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(secrets.items(), key=lambda kv: -len(kv[1]))  # longest first: overlapping values stay hidden


def hide(text: str, secrets: Mapping[str, str]) -> str:
    for name, value in _ordered(secrets):
        text = text.replace(value, f"<secret:{name}>")
    return text


def hide_bytes(data: bytes, secrets: Mapping[str, str]) -> bytes:
    for name, value in _ordered(secrets):
        data = data.replace(value.encode(), f"<secret:{name}>".encode())
    return data


def scrub(value: Any, secrets: Mapping[str, str]) -> Any:
    """`value` (text, bytes, or JSON-like lists and dicts of them) with every secret hidden."""
    if not secrets:
        return value
    if isinstance(value, str):
        return hide(value, secrets)
    if isinstance(value, bytes):
        return hide_bytes(value, secrets)
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v, secrets) for v in value)
    return value


def redact(text: str, env: Mapping[str, str], listed: Iterable[str] = ()) -> str:
    """Replace every secret value of `env` in `text`."""
    return hide(text, secret_values(env, listed))

