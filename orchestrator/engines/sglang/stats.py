"""SGLang "Decode batch" / "Prefill batch" lines -> stats records, one line or many at a time.

Every format from 0.4.3 to 0.5.23 is read (see shared/reference/sglang.md section 1): fields are
taken by name, so order, optional fields and a trailing comma do not matter. A server prints one
layout of stats line over and over, so a block of them is parsed by one regex built for that
layout (`findall` over the joined block) and converted column by column, with no Python per line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from typing import NamedTuple
from collections.abc import Callable

DECODE = "Decode batch"
PREFILL = "Prefill batch"
BLOCK_LINES = 4096  # stats lines parsed by one layout regex at a time


class DecodeStats(NamedTuple):
    time: str | None  # "2026-10-30 12:00:06" or with ".mmm"
    ranks: dict[str, int]  # {"DP": 1, "TP": 0, ...} from the log prefix
    iteration: int | None  # the optional " [N]" after "Decode batch"
    running_req: int | None
    tokens: int | None  # "#token", or "#full token" on hybrid models
    token_usage: float | None  # "token usage", or "full token usage"
    accept_len: float | None
    accept_rate: float | None
    graph: bool | None  # cuda|cpu|npu|musa graph
    gen_throughput: float | None
    queue_req: int | None
    extra: dict[str, float]  # every other "name: number" field, named as printed ("#prealloc-req", "cap len", ...)


class PrefillStats(NamedTuple):
    time: str | None
    ranks: dict[str, int]
    iteration: int | None
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    token_usage: float | None
    running_req: int | None
    queue_req: int | None
    pending_token: int | None
    graph: bool | None
    input_throughput: float | None
    extra: dict[str, float]  # "#replay-token", "cache hit rate" (percent), PD-prefill counters, ...


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class _Kind:
    header: str
    record: type
    known: dict[str, tuple[str, type]]  # printed name -> (record field, converter)


_GRAPHS = {"cuda graph", "cpu graph", "npu graph", "musa graph"}
_DECODE = _Kind(DECODE, DecodeStats, {
    "#running-req": ("running_req", int), "#token": ("tokens", int), "#full token": ("tokens", int),
    "token usage": ("token_usage", float), "full token usage": ("token_usage", float),
    "accept len": ("accept_len", float), "accept rate": ("accept_rate", float),
    "gen throughput (token/s)": ("gen_throughput", float), "#queue-req": ("queue_req", int),
})
_PREFILL = _Kind(PREFILL, PrefillStats, {
    "#new-seq": ("new_seq", int), "#new-token": ("new_token", int), "#cached-token": ("cached_token", int),
    "token usage": ("token_usage", float), "full token usage": ("token_usage", float),
    "#running-req": ("running_req", int), "#queue-req": ("queue_req", int), "#pending-token": ("pending_token", int),
    "input throughput (token/s)": ("input_throughput", float),
})
_TIME = r"\d\d:\d\d:\d\d(?:[.,]\d+)?"
# What a stats line may carry before its header, in the styles seen in real logs. Group 1: a bare
# timestamp opening the line (another logger's: `2026-06-07 10:59:31,659 [INFO] `, `2025-12-04
# 20:35:53 INFO 151972 [...] `, `... - __main__ - INFO - `). Group 2, 3: SGLang's own bracket, its
# time (with or without the date: `[04:40:55 TP0]`) and ranks; a bracket without a time counts only
# when it opens with a rank SGLang prints. Other brackets (`[INFO]`, a CI stamp) are passed over.
_PREFIX_SOURCE = (
    rf"(?:(\d{{4}}-\d\d-\d\d[ T]{_TIME})(?![\d:]))?[^\[\n]*"
    r"(?:\[[^\]\n]*\][^\[\n]*?)*?"
    rf"(?:\[(?=\d|(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d)((?:\d{{4}}-\d\d-\d\d )?{_TIME})?"
    r"((?:[ \t]*[A-Z][A-Z_]*\d+)*)\][ \t]*)?"
)
_PREFIX = re.compile(_PREFIX_SOURCE + r"\Z")
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")


def parse_decode_line(line: str) -> DecodeStats | None:
    """The stats on one "Decode batch" line, or None if the line is not one."""
    return _parse_line(line, _DECODE)


def parse_prefill_line(line: str) -> PrefillStats | None:
    """The stats on one "Prefill batch" line, or None if the line is not one."""
    return _parse_line(line, _PREFILL)


def _parse_line(line: str, kind: _Kind):
    at = line.find(kind.header)
    if at < 0:
        return None
    values: dict = dict.fromkeys(kind.record._fields)
    prefix = _PREFIX.match(line, 0, at)
    values["time"] = (prefix.group(2) or prefix.group(1)) if prefix else None
    values["ranks"] = _ranks(prefix.group(3) or "" if prefix else "")
    body = line[at + len(kind.header):]
    if body.startswith(" ["):
        close = body.find("]")
        values["iteration"] = _number(body[2:close], int)
        body = body[close + 1:]
    extra: dict[str, float] = {}
    seen = False
    items, cut = _items(body)
    for name, value in items:
        if name in kind.known:
            field, convert = kind.known[name]
            values[field] = _number(value, convert)
            seen = True
        elif name in _GRAPHS:
            values["graph"] = {"True": True, "False": False}.get(value.strip())
        elif not cut and (number := _number(value.rstrip("% "), float)) is not None:
            extra[name] = number
    if not seen:
        return None
    values["extra"] = extra
    return kind.record(**values)


def _items(body: str) -> tuple[list[tuple[str, str]], bool]:
    """("name", "value") of each "name: value" after the header ("." or "," and a trailing comma
    allowed), and whether the line was cut short: a line cut by a terminal ends in a piece of a field
    (`#queue-req`, `input th`), and its other names may be pieces of two names run together
    (`token usaccept rate`), so none of its unknown names is taken for a field."""
    body = body.lstrip(".,").strip(" \t\r\n,")
    parts = [item.partition(": ") for item in body.split(", ")]
    cut = bool(parts) and not parts[-1][1] and bool(parts[-1][0])
    return [(name, value) for name, sep, value in parts if sep], cut


def _ranks(text: str | bytes) -> dict[str, int]:
    return dict(_rank_pairs(text))


@lru_cache(maxsize=256)
def _rank_pairs(text: str | bytes) -> tuple[tuple[str, int], ...]:
    text = text.decode() if isinstance(text, bytes) else text
    return tuple((name, int(num)) for name, num in _RANK.findall(text))


def _number(text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        return None


# ---- many stats lines: one regex per layout ----------------------------------------------------

# SGLang's own style (`[time ranks] ` after text without a bracket, such as a Ray actor's
# "(Engine pid=1) ") matches without backtracking; other styles cost a short walk back per line.
_LAYOUT_PREFIX = "^" + _PREFIX_SOURCE
# SGLang's own style alone (`[date time ranks] `, nothing bracketed before it), with the same
# groups: tried first on each block, it matches in one pass, where the general prefix walks.
_OWN_PREFIX = r"^()[^\[\n]*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)((?:[ \t]+[A-Z][A-Z_]*\d+)*)\][ \t]*"
_BOOLS = {"True": True, "False": False, b"True": True, b"False": False}


@dataclass(frozen=True)
class _Layout:
    """The field names of one stats line in order: a regex that matches every line printed the same
    way, and per value group the record field (or extra name) and converter."""

    regex: re.Pattern
    columns: tuple[tuple[str, bool, Callable], ...]  # (name, is an extra, converter)


@lru_cache(maxsize=64)
def _layout(kind: _Kind, sample: str, is_bytes: bool, own_prefix: bool = False) -> _Layout:
    items, _ = _items(sample[sample.find(kind.header) + len(kind.header):].lstrip(" [0123456789]"))
    parts, columns = [], []
    for name, value in items:
        percent = value.rstrip().endswith("%")
        parts.append(re.escape(name) + (r": ([^,%\n]*)%" if percent else r": ([^,\n]*)"))
        if name in kind.known:
            columns.append((*kind.known[name][:1], False, kind.known[name][1]))
        elif name in _GRAPHS:
            columns.append(("graph", False, _BOOLS.__getitem__))
        else:
            columns.append((name, True, float))
    source = ((_OWN_PREFIX if own_prefix else _LAYOUT_PREFIX) + re.escape(kind.header) + r"(?: \[(\d+)\])?[.,]? " + ", ".join(parts)
              + r"[, \t\r]*$")
    return _Layout(re.compile(source.encode() if is_bytes else source, re.MULTILINE), tuple(columns))


def parse_stats_lines(lines: list, header: str) -> tuple:
    """Records for the `header` (DECODE or PREFILL) lines, all str or all bytes, in order."""
    kind = _DECODE if header == DECODE else _PREFILL
    records: list = []
    for start in range(0, len(lines), BLOCK_LINES):
        records += _parse_block(lines[start:start + BLOCK_LINES], kind)
    return tuple(records)


def _parse_block(lines: list, kind: _Kind) -> list:
    """Fast when every line has the first line's layout (one server prints one); else line by line."""
    is_bytes = isinstance(lines[0], bytes)
    sample = lines[0].decode("utf-8", "replace") if is_bytes else lines[0]
    if _parse_line(sample, kind) is not None:
        block = (b"\n" if is_bytes else "\n").join(lines)
        for own_prefix in (True, False):
            layout = _layout(kind, sample, is_bytes, own_prefix)
            rows = layout.regex.findall(block)
            if len(rows) == len(lines):
                try:
                    return _records(rows, layout, kind)
                except (ValueError, KeyError):  # a value that is not a number: take the lines one by one
                    break
    texts = (line.decode("utf-8", "replace") for line in lines) if is_bytes else lines
    return [record for record in map(_parse_line, texts, repeat(kind)) if record is not None]


def _records(rows: list[tuple], layout: _Layout, kind: _Kind) -> list:
    """Records from the regex's rows, converted a column at a time (map over C builtins, no Python per line)."""
    n = len(rows)
    outer, inner, ranks, iterations, *values = zip(*rows)
    data: dict = {field: repeat(None, n) for field in kind.record._fields}
    data["time"] = _times(inner, outer)
    distinct = {text: _rank_pairs(text) for text in set(ranks)}  # a server prints one or a few prefixes
    data["ranks"] = map(dict, map(distinct.__getitem__, ranks))
    data["iteration"] = (int(i) if i else None for i in iterations) if any(iterations) else repeat(None, n)
    extra_names, extra_columns = [], []
    for (name, is_extra, convert), column in zip(layout.columns, values):
        if is_extra:
            extra_names.append(name)
            extra_columns.append(map(convert, column))
        else:
            data[name] = map(convert, column)
    data["extra"] = map(dict, map(zip, repeat(extra_names), zip(*extra_columns))) if extra_names else (
        {} for _ in range(n))
    return list(map(kind.record._make, zip(*(data[field] for field in kind.record._fields))))


def _times(inner: tuple, outer: tuple):
    """Each row's time: SGLang's own stamp, else the other logger's, else None (a server prints one
    style, so one column is taken whole)."""
    times = inner if all(inner) else outer if not any(inner) else [a or b for a, b in zip(inner, outer)]
    if isinstance(times[0], bytes):
        return (t.decode() if t else None for t in times)
    return times if all(times) else (t or None for t in times)
