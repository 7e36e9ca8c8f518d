"""SGLang server log text -> decode/prefill stats, readiness, server args, debug lines and a diagnosis.

Every "Decode batch" / "Prefill batch" format from 0.4.3 to 0.5.23 is read (see
shared/reference/sglang.md section 1): fields are taken by name, so order, optional fields and a
trailing comma do not matter. Pure: callers hand in the text (str) or the raw bytes.

Speed: a log can be gigabytes, so nothing here walks it line by line. Each literal we look for
("Decode batch", the failure phrases, the debug tag, ...) is located with `find`; only the lines
that hold one are cut out, decoded and parsed. `find` of one character is memchr-fast, so each
literal is searched by its rarest character (measured on a sample of the log) and then checked in
place; the log is walked in cache-sized chunks so the several searches reuse the cached bytes.
"""

from __future__ import annotations

import gc
import re
from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import Callable

from .diagnosis import HEAD_NEEDLES, HEAD_SIZE, LINES_BEFORE, NEEDLES, TRACEBACK_OPENERS, Diagnosis, diagnose

__all__ = [
    "READY_LINE", "DEFAULT_DEBUG_PATTERN", "DecodeStats", "PrefillStats", "DebugLine", "LogReport", "Diagnosis",
    "parse_decode_line", "parse_prefill_line", "parse_fields", "extract_debug_lines", "parse_log",
    "parse_log_bytes", "diagnose",
]

READY_LINE = "The server is fired up and ready to roll!"
DEFAULT_DEBUG_PATTERN = r"\[[A-Za-z0-9_.-]*-DEBUG\]"  # a bracketed tag ending in -DEBUG]
DECODE = "Decode batch"
PREFILL = "Prefill batch"
SERVER_ARGS = "server_args="


@dataclass(frozen=True)
class DecodeStats:
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


@dataclass(frozen=True)
class PrefillStats:
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


@dataclass(frozen=True)
class DebugLine:
    text: str  # the line as printed, without the trailing newline
    fields: dict[str, str]  # key=value pairs after the debug tag


@dataclass(frozen=True)
class LogReport:
    decode: tuple[DecodeStats, ...]
    prefill: tuple[PrefillStats, ...]
    ready: bool  # READY_LINE seen
    server_args: str | None  # the text after "server_args=" on its line
    debug_lines: tuple[DebugLine, ...]
    diagnosis: Diagnosis | None


# ---- decode / prefill lines -------------------------------------------------------------------

_PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)((?:\s+[A-Z][A-Z_]*\d+)*)\]\s*$")
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_GRAPHS = {"cuda graph", "cpu graph", "npu graph", "musa graph"}
_DECODE_FIELDS: dict[str, tuple[str, type]] = {
    "#running-req": ("running_req", int), "#token": ("tokens", int), "#full token": ("tokens", int),
    "token usage": ("token_usage", float), "full token usage": ("token_usage", float),
    "accept len": ("accept_len", float), "accept rate": ("accept_rate", float),
    "gen throughput (token/s)": ("gen_throughput", float), "#queue-req": ("queue_req", int),
}
_PREFILL_FIELDS: dict[str, tuple[str, type]] = {
    "#new-seq": ("new_seq", int), "#new-token": ("new_token", int), "#cached-token": ("cached_token", int),
    "token usage": ("token_usage", float), "full token usage": ("token_usage", float),
    "#running-req": ("running_req", int), "#queue-req": ("queue_req", int), "#pending-token": ("pending_token", int),
    "input throughput (token/s)": ("input_throughput", float),
}
_rank_cache: dict[str, tuple[tuple[str, int], ...]] = {}


def parse_decode_line(line: str) -> DecodeStats | None:
    """The stats on one "Decode batch" line, or None if the line is not one."""
    parsed = _parse_stats(line, DECODE, _DECODE_FIELDS)
    return None if parsed is None else DecodeStats(**parsed)


def parse_prefill_line(line: str) -> PrefillStats | None:
    """The stats on one "Prefill batch" line, or None if the line is not one."""
    parsed = _parse_stats(line, PREFILL, _PREFILL_FIELDS)
    return None if parsed is None else PrefillStats(**parsed)


def _parse_stats(line: str, header: str, known: dict[str, tuple[str, type]]) -> dict | None:
    at = line.find(header)
    if at < 0:
        return None
    values: dict = {name: None for name, _ in known.values()}
    prefix = _PREFIX.search(line, 0, at)
    values["time"] = prefix.group(1) if prefix else None
    values["ranks"] = dict(_ranks(prefix.group(2)) if prefix else ())
    rest = line[at + len(header):]
    values["iteration"] = None
    if rest.startswith(" ["):
        close = rest.find("]")
        values["iteration"] = _number(rest[2:close], int)
        rest = rest[close + 1:]
    if rest[:1] in (".", ","):
        rest = rest[1:]
    values["graph"] = None
    extra: dict[str, float] = {}
    seen = False
    for item in rest.strip(" \t\r\n,").split(", "):
        name, sep, value = item.partition(": ")
        if not sep:
            continue
        if name in known:
            field, kind = known[name]
            values[field] = _number(value, kind)
            seen = True
        elif name in _GRAPHS:
            values["graph"] = {"True": True, "False": False}.get(value.strip())
        else:
            number = _number(value.rstrip("% "), float)
            if number is not None:
                extra[name] = number
    if not seen:
        return None
    values["extra"] = extra
    return values


def _ranks(text: str) -> tuple[tuple[str, int], ...]:
    cached = _rank_cache.get(text)
    if cached is None:
        cached = _rank_cache[text] = tuple((name, int(num)) for name, num in _RANK.findall(text))
    return cached


def _number(text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        return None


# ---- many stats lines at once -----------------------------------------------------------------
# A log repeats one or two line layouts (the field names in order) thousands of times. Each layout
# seen gets one regex that matches the whole line; all lines are matched, converted column by
# column and turned into records with C-level map() calls, so no Python code runs per line.
# Lines no layout matches go through `_parse_stats` one at a time.

_LAYOUT_PREFIX = r"[^\[\n]*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)((?:[ \t]+[A-Z][A-Z_]*\d+)*)\][ \t]*"
_layouts: dict[tuple, tuple] = {}  # (header, names, percent flags, is bytes) -> (regex, converters)
_BOOLS = {"True": True, "False": False, b"True": True, b"False": False}


class _Kind:
    def __init__(self, cls: type, header: str, known: dict[str, tuple[str, type]]):
        self.cls, self.header, self.known = cls, header, known
        self.fields = tuple(cls.__dataclass_fields__)


_DECODE_KIND = _Kind(DecodeStats, DECODE, _DECODE_FIELDS)
_PREFILL_KIND = _Kind(PrefillStats, PREFILL, _PREFILL_FIELDS)


def _parse_many(lines: list, kind: _Kind) -> list:
    """Records for the lines (str or bytes) that are stats lines of `kind`, in order."""
    out: list = [None] * len(lines)
    todo = list(range(len(lines)))
    tried: set = set()
    is_bytes = bool(lines) and isinstance(lines[0], bytes)
    while todo:
        layout = next((key for key in _layouts if key[0] == kind.header and key[3] == is_bytes and key not in tried),
                      None)
        if layout is None:
            first = todo.pop(0)
            out[first], layout = _parse_one(lines[first], kind)
            if layout is None or layout in tried:
                continue
        tried.add(layout)
        regex, columns = _layouts[layout]
        matches = [regex.match(lines[i]) for i in todo]
        hit = [i for i, m in zip(todo, matches) if m is not None]
        todo = [i for i, m in zip(todo, matches) if m is None]
        if hit:
            try:
                records = _records([m for m in matches if m is not None], columns, kind)
            except (ValueError, KeyError):  # a value that is not a number: take these lines one by one
                records = [_parse_one(lines[i], kind)[0] for i in hit]
            for i, record in zip(hit, records):
                out[i] = record
    return [record for record in out if record is not None]


def _parse_one(line, kind: _Kind) -> tuple:
    """One record the slow way, and the key of its layout (registered for the next lines)."""
    is_bytes = isinstance(line, bytes)
    text = line.decode("utf-8", "replace") if is_bytes else line
    values = _parse_stats(text, kind.header, kind.known)
    if values is None:
        return None, None
    body = text[text.find(kind.header) + len(kind.header):].lstrip(" [0123456789]").lstrip(".,").strip(" \t\r\n,")
    items = [item.partition(": ") for item in body.split(", ")]
    names = tuple(name for name, sep, _ in items if sep)
    percent = tuple(value.rstrip().endswith("%") for name, sep, value in items if sep)
    key = (kind.header, names, percent, is_bytes)
    if key not in _layouts and len(names) == len(items):
        if len(_layouts) > 64:
            _layouts.clear()
        _layouts[key] = _compile_layout(kind, names, percent, is_bytes)
    return kind.cls(**values), key if key in _layouts else None


def _compile_layout(kind: _Kind, names: tuple, percent: tuple, is_bytes: bool) -> tuple:
    parts = [re.escape(name) + (r": ([^,%]*)%" if pct else r": ([^,]*)") for name, pct in zip(names, percent)]
    source = _LAYOUT_PREFIX + re.escape(kind.header) + r"(?: \[(\d+)\])?[.,]? " + ", ".join(parts) + r"[,\s]*$"
    columns = []  # per value group: (field or extra name, converter)
    for name in names:
        if name in kind.known:
            field, convert = kind.known[name]
            columns.append((field, convert))
        elif name in _GRAPHS:
            columns.append(("graph", _BOOLS.__getitem__))
        else:
            columns.append((("extra", name), float))
    return re.compile(source.encode() if is_bytes else source), columns


def _records(matches: list, columns: list, kind: _Kind) -> list:
    n = len(matches)
    groups = list(zip(*map(re.Match.groups, matches)))
    times, ranks, iterations, values = groups[0], groups[1], groups[2], groups[3:]
    if times and isinstance(times[0], bytes):
        times = map(bytes.decode, times)
        ranks = [r.decode() for r in ranks]
    data: dict = {field: repeat(None, n) for field in kind.fields}
    data["time"] = times
    data["ranks"] = map(dict, map(_ranks, ranks))
    data["iteration"] = repeat(None, n) if not any(iterations) else [int(i) if i else None for i in iterations]
    extra_names, extra_values = [], []
    for (field, convert), column in zip(columns, values):
        if isinstance(field, tuple):
            extra_names.append(field[1])
            extra_values.append(map(convert, column))
        else:
            data[field] = map(convert, column)
    data["extra"] = map(dict, map(zip, repeat(extra_names), zip(*extra_values))) if extra_names else (
        {} for _ in range(n))
    rows = map(dict, map(zip, repeat(kind.fields), zip(*(data[field] for field in kind.fields))))
    records = list(map(object.__new__, repeat(kind.cls, n)))
    # Frozen dataclass __init__ costs ~1.5 us a record; filling __dict__ directly gives the same
    # object (equal, same repr, asdict-able) for a fraction of that. The classes have no __post_init__.
    deque(map(object.__setattr__, records, repeat("__dict__"), rows), maxlen=0)
    return records


# ---- debug lines ------------------------------------------------------------------------------

# A value the regex takes whole: plain text, quoted strings and brackets nested two deep.
_QUOTED = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
_NEST1 = r"\((?:[^()\[\]{{}}'\"]|{q})*\)|\[(?:[^()\[\]{{}}'\"]|{q})*\]|\{{(?:[^()\[\]{{}}'\"]|{q})*\}}".format(q=_QUOTED)
_NEST2 = r"\((?:[^()\[\]{{}}'\"]|{q}|{n})*\)|\[(?:[^()\[\]{{}}'\"]|{q}|{n})*\]|\{{(?:[^()\[\]{{}}'\"]|{q}|{n})*\}}".format(
    q=_QUOTED, n=_NEST1)
_FIELD = re.compile(r"([A-Za-z_][\w.\-]*)=((?:[^\s,()\[\]{{}}'\"]+|{q}|{n})*)".format(q=_QUOTED, n=_NEST2))
_VALUE_ENDS = frozenset(" \t\r\n\f\v,")
_PLAIN = re.compile(r"[^\s,()\[\]{}'\"]*")
_SPECIAL = re.compile(r"[()\[\]{}'\"]")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def parse_fields(text: str) -> dict[str, str]:
    """key=value pairs; a value runs to whitespace or a comma outside brackets and quotes."""
    fields: dict[str, str] = {}
    pos = 0
    while (m := _FIELD.search(text, pos)) is not None:
        end = m.end()
        if end < len(text) and text[end] not in _VALUE_ENDS:  # nested deeper or unbalanced: walk it
            end = _value_end(text, m.start(2))
        fields[m.group(1)] = text[m.start(2):end]
        pos = max(end, m.end(1) + 1)
    return fields


def _value_end(text: str, i: int) -> int:
    n = len(text)
    stack: list[str] = []
    while i < n:
        if not stack:
            i = _PLAIN.match(text, i).end()
            if i >= n or text[i] not in _CLOSER and text[i] not in "'\"":
                return i  # whitespace, a comma, or a stray closer ends the value
        else:
            m = _SPECIAL.search(text, i)
            if m is None:
                return n
            i = m.start()
        c = text[i]
        if c in "'\"":
            i = _quote_end(text, i)
        elif c in _CLOSER:
            stack.append(_CLOSER[c])
            i += 1
        else:
            if c == stack[-1]:
                stack.pop()
            i += 1
    return n


def _quote_end(text: str, i: int) -> int:
    quote, i = text[i], i + 1
    while (j := text.find(quote, i)) >= 0:
        if text[j - 1] != "\\":
            return j + 1
        i = j + 1
    return len(text)


def extract_debug_lines(text: str, pattern: str = DEFAULT_DEBUG_PATTERN) -> list[DebugLine]:
    """Every line of `text` that the regex `pattern` matches, with its key=value fields."""
    tag = re.compile(pattern)
    literal = _required_literal(pattern)
    positions = _find_all(text, [literal])[0] if literal else _regex_hits(text, tag, False)
    return list(_debug_lines(text, positions, tag, "\n", lambda part: part))


def _debug_lines(buf, positions: list[int], tag: re.Pattern[str], nl, text: Callable) -> tuple[DebugLine, ...]:
    lines = (_debug_line(text(buf[s:e]), tag) for s, e in _line_spans(buf, positions, nl))
    return tuple(line for line in lines if line is not None)


def _debug_line(line: str, tag: re.Pattern[str]) -> DebugLine | None:
    line = line.rstrip("\r\n")
    m = tag.search(line)
    return None if m is None else DebugLine(line, parse_fields(line[m.end():]))


def _required_literal(pattern: str) -> str | None:
    """A literal every match of `pattern` contains (the longest top-level run), if one is obvious."""
    try:
        from re import _parser  # the stdlib's own pattern parser; any failure just means "no prefilter"

        parsed = _parser.parse(pattern)
        if parsed.state.flags & re.IGNORECASE:
            return None
        best, run = "", ""
        for op, arg in parsed:
            if op is _parser.LITERAL:
                run += chr(arg)
            else:
                best, run = max(best, run, key=len), ""
        best = max(best, run, key=len)
    except Exception:
        return None
    return best if len(best) >= 3 else None


# ---- whole logs -------------------------------------------------------------------------------

_CHUNK = 1 << 18  # walked chunk: stays in the CPU cache across the per-character searches
_SAMPLE = 1 << 16
_TRACEBACK_WINDOW = 1 << 16  # bytes after a traceback header kept for the diagnosis


def parse_log(text: str, debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> LogReport:
    """Everything known in a whole log given as text."""
    return _report(text, debug_pattern, lambda part: part)


def parse_log_bytes(data: bytes, debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> LogReport:
    """Like `parse_log`, on raw bytes; only the lines used are decoded (UTF-8, bad bytes replaced)."""
    return _report(data, debug_pattern, lambda part: part.decode("utf-8", "replace"))


def _report(buf, debug_pattern: str, text: Callable) -> LogReport:
    # Hundreds of thousands of records and nothing cyclic: collector passes over them only cost time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _report_unsafe(buf, debug_pattern, text)
    finally:
        if was_enabled:
            gc.enable()


def _report_unsafe(buf, debug_pattern: str, text: Callable) -> LogReport:
    is_bytes = isinstance(buf, (bytes, bytearray))
    nl = b"\n" if is_bytes else "\n"
    tag = re.compile(debug_pattern)
    literal = _required_literal(debug_pattern)
    names = [DECODE, PREFILL, READY_LINE, *NEEDLES] + ([literal] if literal else [])
    found = _find_all(buf, [name.encode() if is_bytes else name for name in names])
    hits = dict(zip(names, found))
    head = buf[:HEAD_SIZE]
    for name in (SERVER_ARGS, *HEAD_NEEDLES):  # printed once, at the start: the first one is enough
        at = (head if name in HEAD_NEEDLES else buf).find(name.encode() if is_bytes else name)
        hits[name] = [at] if at >= 0 else []

    def raw_lines(name: str) -> list:
        return [buf[s:e] for s, e in _line_spans(buf, hits[name], nl)]

    def lines(name: str) -> list[str]:
        return [text(line) for line in raw_lines(name)]

    decode = tuple(_parse_many(raw_lines(DECODE), _DECODE_KIND))
    prefill = tuple(_parse_many(raw_lines(PREFILL), _PREFILL_KIND))
    args = lines(SERVER_ARGS)[:1]
    server_args = args[0].split(SERVER_ARGS, 1)[1].rstrip("\r") if args else None
    positions = hits[literal] if literal else _regex_hits(buf, tag, is_bytes)
    if positions is None:  # the pattern has no bytes form: scan the decoded text instead
        return _report_unsafe(text(buf), debug_pattern, lambda part: part)
    debug = _debug_lines(buf, positions, tag, nl, text)
    return LogReport(decode, prefill, bool(hits[READY_LINE]), server_args, debug,
                     _diagnose_hits(buf, hits, nl, text))


def _diagnose_hits(buf, hits: dict[str, list[int]], nl, text: Callable) -> Diagnosis | None:
    """Diagnose only the lines around the failure phrases found (and the tracebacks they open)."""
    spans = []
    for name in (*NEEDLES, *HEAD_NEEDLES):
        for start, end in _line_spans(buf, hits[name], nl):
            if name in TRACEBACK_OPENERS:
                stop = buf.find(nl, min(len(buf), start + _TRACEBACK_WINDOW))
                end = len(buf) if stop < 0 else stop
            for _ in range(LINES_BEFORE.get(name, 0)):
                start = buf.rfind(nl, 0, max(0, start - 1)) + 1
            spans.append((start, end))
    if not spans:
        return None
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return diagnose("\n".join(text(buf[s:e]) for s, e in merged))


def _find_all(buf, needles: list) -> list[list[int]]:
    """Sorted start offsets of every occurrence of each needle in buf (str or bytes)."""
    n = len(buf)
    sample = buf if n <= 3 * _SAMPLE else buf[:_SAMPLE] + buf[n // 2:n // 2 + _SAMPLE] + buf[-_SAMPLE:]
    counts = {c: sample.count(c) for needle in needles for c in set(needle)}
    by_char: dict = {}
    plain = []
    for index, needle in enumerate(needles):
        rarest = min(set(needle), key=counts.__getitem__)
        if counts[rarest] * 1024 > len(sample):  # over one per KiB: checking each costs more than a find
            plain.append((index, needle))
        else:
            by_char.setdefault(rarest, []).extend((index, needle, at) for at, c in enumerate(needle) if c == rarest)
    found: list[list[int]] = [[] for _ in needles]
    find, startswith = buf.find, buf.startswith
    for start in range(0, n, _CHUNK):
        end = min(n, start + _CHUNK)
        for c, targets in by_char.items():
            at = find(c, start, end)
            while at >= 0:
                for index, needle, offset in targets:
                    if at >= offset and startswith(needle, at - offset):
                        found[index].append(at - offset)
                at = find(c, at + 1, end)
        for index, needle in plain:
            stop = min(n, end + len(needle) - 1)
            at = find(needle, start, stop)
            while at >= 0:
                found[index].append(at)
                at = find(needle, at + 1, stop)
    return [sorted(set(positions)) for positions in found]


def _regex_hits(buf, tag: re.Pattern[str], is_bytes: bool) -> list[int] | None:
    """Match offsets of a debug pattern with no usable literal (a full regex scan, slower); None if
    the pattern cannot be applied to bytes."""
    if is_bytes:
        try:
            tag = re.compile(tag.pattern.encode("utf-8"), tag.flags & ~re.UNICODE)
        except (re.error, ValueError):
            return None
    return [m.start() for m in tag.finditer(buf)]


def _line_spans(buf, positions: list[int], nl) -> list[tuple[int, int]]:
    """(start, end) of each distinct line holding one of the sorted positions, without the newline."""
    spans = []
    line_end = -1
    for at in positions:
        if at < line_end:
            continue
        start = buf.rfind(nl, 0, at) + 1
        line_end = buf.find(nl, at)
        if line_end < 0:
            line_end = len(buf)
        spans.append((start, line_end))
    return spans
