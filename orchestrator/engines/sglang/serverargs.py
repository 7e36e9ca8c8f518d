"""The server args SGLang logs at startup, read back into {field: value}.

Releases up to 0.5.22 log the dataclass repr, `server_args=ServerArgs(model_path='m', tp_size=8, ...)`;
0.5.23 logs a dict, `server_args={'model_path': 'm', 'tp_size': 8, ...}` (`srt/entrypoints/engine.py`:
`logger.info(f"server_args={_server_args_for_logging(server_args)}")`, the `repr` of
`ServerArgs.resolved_dict()`, nested records as nested dicts). Values are read with
`ast.literal_eval`, never evaluated as code; one that is not a literal (an enum's repr) is kept as
its text. A line cut short (a terminal, a log cut at a size) gives the fields before the cut.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

REPR, DICT = "ServerArgs(...)", "{...}"
# Quoted strings, brackets (an enum's `<A.B: 1>` too) and commas: the walk looks at nothing else.
_TOKEN = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[()\[\]{}<>,]|['"]""")
_OPEN, _CLOSE = "([{<", ")]}>"
_REPR_HEAD = re.compile(r"\s*\w*\(")
_DICT_KEY = re.compile(r"""\s*(['"])(\w+)\1\s*:\s*(.*)\Z""", re.DOTALL)


@dataclass(frozen=True)
class ServerArgs:
    values: dict[str, Any] = field(default_factory=dict)
    form: str | None = None  # REPR, DICT, or None when the text is neither
    cut: bool = False  # the text ends before its closing bracket


def parse(text: str | None) -> ServerArgs:
    """The fields of a `server_args=` line's text (what follows the `=`)."""
    text = (text or "").strip()
    if text.startswith("{"):
        items, closed = _items(text)
        if closed:
            try:
                whole = ast.literal_eval(text)
                if isinstance(whole, dict):
                    return ServerArgs({str(k): v for k, v in whole.items()}, DICT)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                pass  # a value that is not a literal: read item by item below
        pairs = (_DICT_KEY.match(item) for item in items)
        return ServerArgs({m.group(2): _value(m.group(3)) for m in pairs if m}, DICT, not closed)
    if _REPR_HEAD.match(text):
        items, closed = _items(text)
        pairs = (item.partition("=") for item in items)
        return ServerArgs({name.strip(): _value(raw) for name, sep, raw in pairs if sep and name.strip().isidentifier()},
                          REPR, not closed)
    return ServerArgs()


def _items(text: str) -> tuple[list[str], bool]:
    """The top-level items of the bracketed text, split at its top-level commas, and whether the
    outer bracket closes (an item cut short is left out)."""
    items: list[str] = []
    depth, start = 0, 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in _OPEN:
            depth += 1
            if depth == 1:
                start = m.end()
        elif token in _CLOSE:
            depth -= 1
            if depth == 0:
                if text[start:m.start()].strip():
                    items.append(text[start:m.start()])
                return items, True
        elif token == "," and depth == 1:
            items.append(text[start:m.start()])
            start = m.end()
        elif token in ("'", '"'):
            break  # a string that never ends: the text was cut inside it
    return items, False


def _value(raw: str) -> Any:
    raw = raw.strip()
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw
