"""Readers of an experiment file's fields: each checks a value's shape and names its line when it
is wrong."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import SpecError

from . import yamlfile
from .yamlfile import Located

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def mapping(data: Located, key: str) -> Located:
    value = data.get(key)
    if value is None:
        return Located(source=data.source, line=data.line_of(key))
    return yamlfile.require_mapping(value, data.where(key), f"`{key}`")


def names(data: Located, key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{data.where(key)}: `{key}` must be a list of names, e.g. [a, b]")
    return tuple(value)


def boolean(data: Located, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{data.where(key)}: `{key}` must be true or false, got {value!r}")
    return value


def env_names(data: Located, key: str) -> tuple[str, ...]:
    found = names(data, key)
    for name in found:
        if not ENV_NAME.match(name):
            raise SpecError(f"{data.where(key)}: {name!r} in `{key}` is not an environment variable name")
    return found


def env(data: Located, key: str) -> dict[str, str]:
    values = {}
    given = mapping(data, key)
    for name, value in given.items():
        if not ENV_NAME.match(name):
            raise SpecError(f"{given.where(name)}: {name!r} is not a valid environment variable name")
        if isinstance(value, (dict, list)) or value is None:
            raise SpecError(f"{given.where(name)}: env value of {name} must be a string or number")
        values[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


def positive_int(data: Located, key: str, default: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"{data.where(key)}: `{key}` must be a whole number >= 1, got {value!r}")
    return value


def number(data: Located, key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SpecError(f"{data.where(key)}: `{key}` must be a number, got {value!r}")
    return float(value)


def positive_number(data: Located, key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{data.where(key)}: `{key}` must be a number > 0, got {value!r}")
    return value


def is_file(path: Path) -> bool:
    """`path.is_file()`, False for a name the system cannot look up at all (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False
