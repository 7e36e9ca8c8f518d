"""SGLang server log text -> decode/prefill stats, readiness, server args, debug lines and a diagnosis.

Pure: callers hand in the text (str) or the raw bytes. The stats lines themselves are read by
`stats.py`.

Speed (a log can be gigabytes): nothing walks the log line by line. One literal search finds the
stats lines ("batch"), one finds the debug lines (the debug pattern's literal); only those lines
are cut out and handed on. Failure signatures are looked for in the log's head and tail only:
argparse fails before anything else is printed, and a crash is the last thing a dying server writes.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, repeat
from operator import contains
from collections.abc import Callable, Iterable

from .diagnosis import HEAD_NEEDLES, HEAD_SIZE, LINES_BEFORE, NEEDLES, PATCHED_MODULE_IMPORT, TRACEBACK_OPENERS, Diagnosis, diagnose
from orchestrator.engines.base import DebugLine
from orchestrator.engines.fields import parse_fields, required_literal
from .stats import DECODE, PREFILL, DecodeStats, PrefillStats, parse_decode_line, parse_prefill_line, parse_stats_lines

__all__ = [
    "READY_LINE", "DEFAULT_DEBUG_PATTERN", "DecodeStats", "PrefillStats", "DebugLine", "LogReport", "Diagnosis",
    "parse_decode_line", "parse_prefill_line", "parse_fields", "extract_debug_lines", "parse_log",
    "parse_log_bytes", "diagnose", "PATCHED_MODULE_IMPORT",
]

READY_LINE = "The server is fired up and ready to roll!"
DEFAULT_DEBUG_PATTERN = r"\[[A-Za-z0-9_.-]*-DEBUG\]"  # a bracketed tag ending in -DEBUG]
SERVER_ARGS = "server_args="
# Printed while a server starts (each rank's `[... TP0] Load weight begin. avail mem=78.38 GB`, `KV Cache
# is allocated. ...`, `Init torch distributed begin.`): a log holding only these is a run that never
# finished, not a file some other program wrote.
STARTUP_LINES = ("Load weight begin", "Load weight end", "KV Cache is allocated", "Memory pool end",
                 "Init torch distributed begin", "Capture cuda graph begin")
TAIL_SIZE = 4 << 20  # the end of the log searched for failure signatures (a traceback is far shorter)
# The date and time a line opens with: SGLang's own `[2026-10-30 12:00:06 TP0] ` (`.mmm` with
# SGLANG_LOG_MS=1; after a Ray actor's `(Engine pid=1) `), or another logger's `2026-06-07 10:59:31,659 `
# (engines/logspan.py); a bracket holding the time alone (`[04:40:55 TP0]`) has no date to give.
STAMP = (r"^[^\[\n]{0,64}?\[?(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)[ T]"
         r"(?P<clock>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?(?![\d:])")


@dataclass(frozen=True)
class LogReport:
    decode: tuple[DecodeStats, ...]
    prefill: tuple[PrefillStats, ...]
    ready: bool  # READY_LINE seen
    server_args: str | None  # the text after "server_args=" on its line
    debug_lines: tuple[DebugLine, ...]
    diagnosis: Diagnosis | None
    started: bool = False  # a STARTUP_LINES line, or server_args, seen in the log's head


# ---- debug lines ------------------------------------------------------------------------------

def extract_debug_lines(text: str, pattern: str = DEFAULT_DEBUG_PATTERN) -> list[DebugLine]:
    """Every line of `text` that the regex `pattern` matches, with its key=value fields."""
    return list(parse_log(text, pattern).debug_lines)


def _debug_line(line: str, tag: re.Pattern[str]) -> DebugLine | None:
    line = line.rstrip("\r\n")
    m = tag.search(line)
    return None if m is None else DebugLine(line, parse_fields(line[m.end():]))


# ---- whole logs -------------------------------------------------------------------------------

_TRACEBACK_WINDOW = 1 << 16  # bytes after a traceback header kept for the diagnosis


def parse_log(text: str, debug_pattern: str = DEFAULT_DEBUG_PATTERN, patched: Iterable[str] = ()) -> LogReport:
    """Everything known in a whole log given as text. `patched`: the files the run's patches touched,
    for the diagnosis (`diagnose`)."""
    with _collector_paused():
        return _report(text, debug_pattern, str, tuple(patched))


def parse_log_bytes(data: bytes, debug_pattern: str = DEFAULT_DEBUG_PATTERN, patched: Iterable[str] = ()) -> LogReport:
    """Like `parse_log`, on raw bytes; only the lines used are decoded (UTF-8, bad bytes replaced)."""
    with _collector_paused():
        return _report(bytes(data), debug_pattern, lambda part: part.decode("utf-8", "replace"), tuple(patched))


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


def _report(buf, debug_pattern: str, text: Callable, patched: tuple[str, ...]) -> LogReport:
    encode = (lambda s: s.encode()) if isinstance(buf, bytes) else str
    nl, decode_header, prefill_header = encode("\n"), encode(DECODE), encode(PREFILL)
    stats = _lines_with(buf, encode("batch"), nl)  # one search finds both kinds
    decode_lines = list(compress(stats, map(contains, stats, repeat(decode_header))))
    prefill_lines = list(compress(stats, map(contains, stats, repeat(prefill_header))))
    args = _lines_with(buf, encode(SERVER_ARGS), nl, first_only=True)
    server_args = text(args[0]).split(SERVER_ARGS, 1)[1].rstrip("\r") if args else None
    tag = re.compile(debug_pattern)
    literal = required_literal(debug_pattern)
    if literal:
        # Searched without leading punctuation: re scans for a literal's first byte, and "-", "[" or ":"
        # are on every timestamped line. The tag regex below still decides.
        candidates = _lines_with(buf, encode(literal.lstrip("-[]():. ") or literal), nl)
    elif isinstance(buf, bytes):  # no literal to search for: the pattern runs over the decoded text
        return _report(text(buf), debug_pattern, str, patched)
    else:
        candidates = [line for line in buf.split("\n") if tag.search(line)]
    texts = text(nl.join(candidates)).split("\n") if candidates else []  # one decode for all of them
    debug = tuple(line for line in map(_debug_line, texts, repeat(tag)) if line is not None)
    return LogReport(
        decode=parse_stats_lines(decode_lines, DECODE),
        prefill=parse_stats_lines(prefill_lines, PREFILL),
        ready=buf.find(encode(READY_LINE)) >= 0,
        server_args=server_args,
        debug_lines=debug,
        diagnosis=_diagnose_ends(buf, encode, nl, text, patched),
        started=server_args is not None or any(buf.find(encode(line), 0, HEAD_SIZE) >= 0 for line in STARTUP_LINES),
    )


def _lines_with(buf, literal, nl, *, first_only: bool = False) -> list:
    """Each line of buf holding `literal` (str or bytes, as buf), without its newline. The regex
    runs on to the line's end itself, so a hit costs one search back for the line's start."""
    finder = re.compile(re.escape(literal) + (b"[^\n]*" if isinstance(buf, bytes) else "[^\n]*"))
    matches = [finder.search(buf)] if first_only else finder.finditer(buf)
    lines = []
    for match in filter(None, matches):
        start, end = match.span()
        lines.append(buf[buf.rfind(nl, 0, start) + 1:end])
    return lines


def _diagnose_ends(buf, encode: Callable, nl, text: Callable, patched: tuple[str, ...]) -> Diagnosis | None:
    """Diagnose the lines around the failure phrases in the head and the tail (and the tracebacks
    they open)."""
    regions = ((HEAD_NEEDLES, 0, HEAD_SIZE), (NEEDLES, max(0, len(buf) - TAIL_SIZE), len(buf)))
    evidence = _evidence(buf, encode, nl, text, regions)
    return diagnose("\n".join(evidence), patched) if evidence else None


def diagnose_parts(head: bytes, tail: bytes, patched: Iterable[str] = ()) -> Diagnosis | None:
    """`_diagnose_ends` of a log read piece by piece (`logstream.py`): its first HEAD_SIZE bytes and
    its last TAIL_SIZE bytes, each cut at a line's end, kept apart."""
    def text(part: bytes) -> str:
        return part.decode("utf-8", "replace")

    evidence = [*_evidence(head, str.encode, b"\n", text, ((HEAD_NEEDLES, 0, len(head)),)),
                *_evidence(tail, str.encode, b"\n", text, ((NEEDLES, 0, len(tail)),))]
    return diagnose("\n".join(evidence), tuple(patched)) if evidence else None


def _evidence(buf, encode: Callable, nl, text: Callable, regions) -> list[str]:
    """The merged spans of lines around each failure phrase of each (phrases, start, end) region."""
    spans = []
    for names, start, end in regions:
        for name in names:
            at = buf.find(encode(name), start, end)
            while at >= 0:
                spans.append(_evidence_span(buf, nl, name, at))
                at = buf.find(encode(name), spans[-1][1], end)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [text(buf[s:e]) for s, e in merged]


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
    literal = required_literal(debug_pattern)
    if literal is None:
        return None
    return "|".join(re.sub(r"([.\[\](){}*+?|^$\\])", r"\\\1", text)
                    for text in ("batch", READY_LINE, SERVER_ARGS, literal, *STARTUP_LINES, *HEAD_NEEDLES))
