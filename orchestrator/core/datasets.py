"""Benchmark datasets read from local files, each format as published, into conversations: the
user turns a workload sends, in order. Pure: no download, no network; a file that does not parse
is one SpecError naming `file:line`.

  jsonl      one prompt per line: a string, or an object with `text` or `prompt` (orch's own)
  sharegpt   a JSON array (or JSONL) of {"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}:
             the first human turn (as SGLang's bench_serving takes it)
  mt-bench   FastChat's question.jsonl, {"question_id", "category", "turns": [first, second]}: both
             turns, the second sent after the first's answer
  gsm8k      {"question", "answer"} per line: the question
  humaneval  {"task_id", "prompt", ...} per line: the prompt (a function signature and docstring)
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError

__all__ = ["FORMATS", "Conversation", "conversations", "read"]

Conversation = tuple[str, ...]  # the user turns, in order


def _jsonl(item: Any) -> Conversation | str:
    text = item if isinstance(item, str) else item.get("text", item.get("prompt")) if isinstance(item, dict) else None
    return (text,) if isinstance(text, str) else "expected a string or an object with `text` or `prompt`"


def _sharegpt(item: Any) -> Conversation | str:
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        return "expected an object with a `conversations` list"
    for turn in turns:
        if isinstance(turn, dict) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
            return (turn["value"],)
    return "no turn `from: human` with a string `value` in `conversations`"


def _mt_bench(item: Any) -> Conversation | str:
    turns = item.get("turns") if isinstance(item, dict) else None
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        return "expected an object with `turns`, a list of strings"
    return tuple(turns)


def _field(name: str) -> Callable[[Any], Conversation | str]:
    def one(item: Any) -> Conversation | str:
        value = item.get(name) if isinstance(item, dict) else None
        return (value,) if isinstance(value, str) else f"expected an object with a string `{name}`"
    return one


FORMATS: dict[str, Callable[[Any], Conversation | str]] = {
    "jsonl": _jsonl, "sharegpt": _sharegpt, "mt-bench": _mt_bench, "gsm8k": _field("question"),
    "humaneval": _field("prompt"),
}


def read(path: str, fmt: str) -> tuple[Conversation, ...]:
    """Every conversation of the file, in file order (read once while the file stays as it is)."""
    try:
        changed = Path(path).stat().st_mtime_ns
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the dataset ({exc.strerror or exc}); check the path") from None
    return _read(path, fmt, changed)


@functools.lru_cache(maxsize=8)
def _read(path: str, fmt: str, changed: int) -> tuple[Conversation, ...]:
    if fmt not in FORMATS:
        raise SpecError(f"{path}: unknown dataset format {fmt!r}; use one of {', '.join(FORMATS)}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the dataset ({exc.__class__.__name__}: {exc}); check the path") from None
    found = []
    for line, item in _items(path, text):
        conversation = FORMATS[fmt](item)
        if isinstance(conversation, str):
            raise SpecError(f"{path}:{line}: {conversation} ({fmt} format)")
        found.append(conversation)
    if not found:
        raise SpecError(f"{path}: no prompts in the dataset")
    return tuple(found)


def conversations(path: str, fmt: str, num_prompts: int | None, seed: int) -> tuple[Conversation, ...]:
    """`num_prompts` conversations drawn without replacement with `seed` (the same every run), or
    all of them in file order."""
    every = read(path, fmt)
    if num_prompts is None:
        return every
    if num_prompts > len(every):
        raise SpecError(f"{path}: num_prompts {num_prompts} but the dataset has {len(every)}; lower num_prompts")
    return tuple(random.Random(seed).sample(every, num_prompts))


def _items(path: str, text: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of each item: of a JSON array, or of each non-blank line of JSONL."""
    if text.lstrip().startswith("["):
        yield from _array_items(path, text)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{path}:{number}: not JSON ({exc.msg}); one item per line") from None


def _array_items(path: str, text: str) -> Iterator[tuple[int, Any]]:
    """A JSON array's items one by one, so that a bad item is named by the line it starts on."""
    decoder, at = json.JSONDecoder(), text.index("[") + 1
    while True:
        at = _skip_space(text, at)
        if at < len(text) and text[at] == "]":
            return
        try:
            item, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
        yield text.count("\n", 0, at) + 1, item
        at = _skip_space(text, end)
        if at < len(text) and text[at] == ",":
            at += 1
        elif at >= len(text) or text[at] != "]":
            raise SpecError(f"{path}:{text.count(chr(10), 0, at) + 1}: expected `,` or `]` after an item")


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at
