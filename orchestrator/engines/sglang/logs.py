"""SGLang server log text -> decode/prefill stats, readiness, server args, debug lines and a diagnosis.

Every "Decode batch" / "Prefill batch" format from 0.4.3 to 0.5.23 is read (see
shared/reference/sglang.md section 1): fields are taken by name, so order, optional fields and a
trailing comma do not matter. Pure: callers hand in the text (str) or the raw bytes.

Speed (a log can be gigabytes): nothing walks the log line by line. One literal search finds the
stats lines ("batch"), one finds the debug lines (the debug pattern's literal); only those lines
are cut out. A server prints one layout of stats line over and over, so a block of them is parsed
by one regex built for that layout (`findall` over the joined block) and converted column by
column. Failure signatures are looked for in the log's head and tail only: argparse fails before
anything else is printed, and a crash is the last thing a dying server writes.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, repeat
from operator import contains
from typing import Callable, NamedTuple

from .diagnosis import HEAD_NEEDLES, HEAD_SIZE, LINES_BEFORE, NEEDLES, TRACEBACK_OPENERS, Diagnosis, diagnose
from .fields import parse_fields

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
TAIL_SIZE = 4 << 20  # the end of the log searched for failure signatures (a traceback is far shorter)
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


# ---- one stats line ---------------------------------------------------------------------------

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
_PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)((?:\s+[A-Z][A-Z_]*\d+)*)\]\s*$")
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
    prefix = _PREFIX.search(line, 0, at)
    values["time"] = prefix.group(1) if prefix else None
    values["ranks"] = _ranks(prefix.group(2) if prefix else "")
    body = line[at + len(kind.header):]
    if body.startswith(" ["):
        close = body.find("]")
        values["iteration"] = _number(body[2:close], int)
        body = body[close + 1:]
    extra: dict[str, float] = {}
    seen = False
    for name, value in _items(body):
        if name in kind.known:
            field, convert = kind.known[name]
            values[field] = _number(value, convert)
            seen = True
        elif name in _GRAPHS:
            values["graph"] = {"True": True, "False": False}.get(value.strip())
        elif (number := _number(value.rstrip("% "), float)) is not None:
            extra[name] = number
    if not seen:
        return None
    values["extra"] = extra
    return kind.record(**values)


def _items(body: str) -> list[tuple[str, str]]:
    """("name", "value") of each "name: value" after the header ("." or "," and a trailing comma allowed)."""
    body = body.lstrip(".,").strip(" \t\r\n,")
    return [(name, value) for name, sep, value in (item.partition(": ") for item in body.split(", ")) if sep]


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

# Anything before the bracket (a Ray actor's "(Engine pid=1) ") holds no "[": no backtracking.
_LAYOUT_PREFIX = r"^[^\[\n]*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)((?:[ \t]+[A-Z][A-Z_]*\d+)*)\][ \t]*"
_BOOLS = {"True": True, "False": False, b"True": True, b"False": False}


@dataclass(frozen=True)
class _Layout:
    """The field names of one stats line in order: a regex that matches every line printed the same
    way, and per value group the record field (or extra name) and converter."""

    regex: re.Pattern
    columns: tuple[tuple[str, bool, Callable], ...]  # (name, is an extra, converter)


@lru_cache(maxsize=64)
def _layout(kind: _Kind, sample: str, is_bytes: bool) -> _Layout:
    items = _items(sample[sample.find(kind.header) + len(kind.header):].lstrip(" [0123456789]"))
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
    source = (_LAYOUT_PREFIX + re.escape(kind.header) + r"(?: \[(\d+)\])?[.,]? " + ", ".join(parts)
              + r"[, \t\r]*$")
    return _Layout(re.compile(source.encode() if is_bytes else source, re.MULTILINE), tuple(columns))


def _parse_lines(lines: list, kind: _Kind) -> list:
    """Records for the stats lines (all str or all bytes), in order, block by block."""
    records: list = []
    for start in range(0, len(lines), BLOCK_LINES):
        records += _parse_block(lines[start:start + BLOCK_LINES], kind)
    return records


def _parse_block(lines: list, kind: _Kind) -> list:
    """Fast when every line has the first line's layout (one server prints one); else line by line."""
    is_bytes = isinstance(lines[0], bytes)
    sample = lines[0].decode("utf-8", "replace") if is_bytes else lines[0]
    if _parse_line(sample, kind) is not None:
        layout = _layout(kind, sample, is_bytes)
        rows = layout.regex.findall((b"\n" if is_bytes else "\n").join(lines))
        if len(rows) == len(lines):
            try:
                return _records(rows, layout, kind)
            except (ValueError, KeyError):  # a value that is not a number: take the lines one by one
                pass
    texts = (line.decode("utf-8", "replace") for line in lines) if is_bytes else lines
    return [record for record in map(_parse_line, texts, repeat(kind)) if record is not None]


def _records(rows: list[tuple], layout: _Layout, kind: _Kind) -> list:
    """Records from the regex's rows, converted a column at a time (map over C builtins, no Python per line)."""
    n = len(rows)
    times, ranks, iterations, *values = zip(*rows)
    data: dict = {field: repeat(None, n) for field in kind.record._fields}
    data["time"] = map(bytes.decode, times) if isinstance(times[0], bytes) else times
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


# ---- debug lines ------------------------------------------------------------------------------

def extract_debug_lines(text: str, pattern: str = DEFAULT_DEBUG_PATTERN) -> list[DebugLine]:
    """Every line of `text` that the regex `pattern` matches, with its key=value fields."""
    return list(parse_log(text, pattern).debug_lines)


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

_TRACEBACK_WINDOW = 1 << 16  # bytes after a traceback header kept for the diagnosis


def parse_log(text: str, debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> LogReport:
    """Everything known in a whole log given as text."""
    with _collector_paused():
        return _report(text, debug_pattern, str)


def parse_log_bytes(data: bytes, debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> LogReport:
    """Like `parse_log`, on raw bytes; only the lines used are decoded (UTF-8, bad bytes replaced)."""
    with _collector_paused():
        return _report(bytes(data), debug_pattern, lambda part: part.decode("utf-8", "replace"))


@contextmanager
def _collector_paused():
    """Pause Python's cycle collector: a big log yields hundreds of thousands of small records, none
    of them in a cycle, and the collector would otherwise rescan them all again and again (about a
    fifth of the parse time). Turned back on only if it was on, so nested or concurrent parses and
    callers that keep it off are left as they were."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _report(buf, debug_pattern: str, text: Callable) -> LogReport:
    encode = (lambda s: s.encode()) if isinstance(buf, bytes) else str
    nl, decode_header, prefill_header = encode("\n"), encode(DECODE), encode(PREFILL)
    stats = _lines_with(buf, encode("batch"), nl)  # one search finds both kinds
    decode_lines = list(compress(stats, map(contains, stats, repeat(decode_header))))
    prefill_lines = list(compress(stats, map(contains, stats, repeat(prefill_header))))
    args = _lines_with(buf, encode(SERVER_ARGS), nl, first_only=True)
    server_args = text(args[0]).split(SERVER_ARGS, 1)[1].rstrip("\r") if args else None
    tag = re.compile(debug_pattern)
    literal = _required_literal(debug_pattern)
    if literal:
        # Searched without leading punctuation: re scans for a literal's first byte, and "-", "[" or ":"
        # are on every timestamped line. The tag regex below still decides.
        candidates = _lines_with(buf, encode(literal.lstrip("-[]():. ") or literal), nl)
    elif isinstance(buf, bytes):  # no literal to search for: the pattern runs over the decoded text
        return _report(text(buf), debug_pattern, str)
    else:
        candidates = _lines_with(buf, tag, nl)
    texts = text(nl.join(candidates)).split("\n") if candidates else []  # one decode for all of them
    debug = tuple(line for line in map(_debug_line, texts, repeat(tag)) if line is not None)
    return LogReport(
        decode=tuple(_parse_lines(decode_lines, _DECODE)) if decode_lines else (),
        prefill=tuple(_parse_lines(prefill_lines, _PREFILL)) if prefill_lines else (),
        ready=buf.find(encode(READY_LINE)) >= 0,
        server_args=server_args,
        debug_lines=debug,
        diagnosis=_diagnose_ends(buf, encode, nl, text),
    )


def _lines_with(buf, needle, nl, *, first_only: bool = False) -> list:
    """Each distinct line of buf holding `needle` (a literal, or a compiled regex), without its newline."""
    finder = needle if isinstance(needle, re.Pattern) else re.compile(re.escape(needle))
    lines, line_end = [], -1
    for match in finder.finditer(buf):
        at = match.start()
        if at < line_end:  # a second hit on a line already taken
            continue
        line_end = buf.find(nl, at)
        line_end = len(buf) if line_end < 0 else line_end
        lines.append(buf[buf.rfind(nl, 0, at) + 1:line_end])
        if first_only:
            break
    return lines


def _diagnose_ends(buf, encode: Callable, nl, text: Callable) -> Diagnosis | None:
    """Diagnose the lines around the failure phrases in the head and the tail (and the tracebacks
    they open)."""
    spans = []
    for names, start, end in ((HEAD_NEEDLES, 0, HEAD_SIZE), (NEEDLES, max(0, len(buf) - TAIL_SIZE), len(buf))):
        for name in names:
            at = buf.find(encode(name), start, end)
            while at >= 0:
                spans.append(_evidence_span(buf, nl, name, at))
                at = buf.find(encode(name), spans[-1][1], end)
    if not spans:
        return None
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return diagnose("\n".join(text(buf[s:e]) for s, e in merged))


def _evidence_span(buf, nl, name: str, at: int) -> tuple[int, int]:
    """The line holding `at`, with the traceback it opens or the lines it needs before it."""
    start = buf.rfind(nl, 0, at) + 1
    end = buf.find(nl, at)
    end = len(buf) if end < 0 else end
    if name in TRACEBACK_OPENERS:
        stop = buf.find(nl, min(len(buf), start + _TRACEBACK_WINDOW))
        end = len(buf) if stop < 0 else stop
    for _ in range(LINES_BEFORE.get(name, 0)):
        start = buf.rfind(nl, 0, max(0, start - 1)) + 1
    return start, end


def host_grep_pattern(debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> str | None:
    """An extended regex (for `grep -E` on the host) matching every line `parse_log` reads outside
    the log's last TAIL_SIZE bytes; None when the debug pattern has no literal to search for."""
    literal = _required_literal(debug_pattern)
    if literal is None:
        return None
    return "|".join(re.sub(r"([.\[\](){}*+?|^$\\])", r"\\\1", text)
                    for text in ("batch", READY_LINE, SERVER_ARGS, literal, *HEAD_NEEDLES))
