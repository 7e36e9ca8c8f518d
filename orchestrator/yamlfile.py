"""YAML documents that remember where each key was written, so errors can say file:line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError


class Located(dict):
    """A mapping from a YAML file; `line_of(key)` gives the 1-based line a key was written on."""

    def __init__(self, *args: Any, source: str = "?", line: int = 0):
        super().__init__(*args)
        self.source = source
        self.line = line
        self.lines: dict[str, int] = {}

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)

    def where(self, key: str | None = None) -> str:
        return f"{self.source}:{self.line_of(key) if key else self.line}"


class _Loader(yaml.SafeLoader):
    source = "?"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)
    result = Located(source=loader.source, line=node.start_mark.line + 1)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        if key in result:
            raise SpecError(
                f"{loader.source}:{key_node.start_mark.line + 1}: key '{key}' is written twice; keep one"
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(path: Path) -> Located:
    """Read a YAML mapping; a missing file or a syntax error is a SpecError naming file:line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found; check the path") from None
    return loads(text, str(path))


def loads(text: str, source: str) -> Located:
    loader = _Loader(text)
    loader.source = source
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark else ""
        raise SpecError(f"{source}{line}: YAML syntax error: {exc.problem}") from None
    finally:
        loader.dispose()
    if data is None:
        data = Located(source=source, line=1)
    if not isinstance(data, Located):
        raise SpecError(f"{source}:1: expected a mapping of keys at the top level")
    return data


def require_mapping(value: Any, where: str, what: str) -> Located:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: {what} must be a mapping (key: value), got {type(value).__name__}")
    return value  # type: ignore[return-value]


def check_keys(data: Located, allowed: set[str], what: str) -> None:
    for key in data:
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise SpecError(f"{data.where(key)}: unknown key '{key}' in {what}; known keys: {known}")
