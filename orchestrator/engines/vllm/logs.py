"""A vLLM server log (bytes or text) -> one LogReport: spec-decoding and throughput series,
readiness, the non-default args line, debug lines and a diagnosis.

Speed: nothing walks the log line by line. Each kind of line is found by a regex that starts with
its literal header (`SpecDecoding metrics: `, `Avg prompt throughput: `, the debug pattern's
literal), run over the whole buffer; only the lines found are cut out and decoded. Failure
signatures are looked for around their needles in the log's head and tail only (argparse fails
first, a crash is the last thing a dying server writes).

Readiness (either is printed once the HTTP server listens): uvicorn's `Application startup
complete.` and vLLM's own route listing `Available routes are:` (0.10.1.1
`vllm/entrypoints/launcher.py:36`, 0.33.0 `vllm/entrypoints/launchers/launcher.py:188`), which comes
just before uvicorn starts; the route listing alone is not enough (the socket may still fail).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.engines.base import DebugLine, Diagnosis, LogReport, Measure, SeriesPoint
from orchestrator.engines.fields import parse_fields, required_literal

from .diagnosis import NEEDLES, diagnose
from .stats import SPEC_HEADER, THROUGHPUT_HEADER, spec_row, throughput_row

READY_LINE = "Application startup complete."
ARGS_HEADER = "non-default args: "  # 0.10.1.1 vllm/entrypoints/utils.py:326, 0.33.0 entrypoints/common/startup.py:96
DEFAULT_DEBUG_PATTERN = r"\[[A-Za-z0-9_.-]*-DEBUG\]"
HEAD_SIZE = 16 << 20
TAIL_SIZE = 4 << 20
LINES_AROUND = 2  # lines kept on each side of a needle (a raise prints its message on the next line)
SPEC_SERIES, THROUGHPUT_SERIES = "spec_decode", "throughput"
LOG_SOURCE = "spec_decode_log"


def parse_log(log: bytes | str, debug_pattern: str = DEFAULT_DEBUG_PATTERN, patched: Sequence[str] = ()) -> LogReport:
    """Everything known in a whole log. `patched` is accepted for the Engine seam; vLLM logs no
    per-module import failures to match it against."""
    data = log.encode("utf-8", "replace") if isinstance(log, str) else bytes(log)
    spec = [spec_row(*_split(line, SPEC_HEADER)) for line in _lines(data, SPEC_HEADER)]
    throughput = [throughput_row(*_split(line, THROUGHPUT_HEADER)) for line in _lines(data, THROUGHPUT_HEADER)]
    args = _lines(data, ARGS_HEADER, first_only=True)
    return LogReport(
        series=tuple(_points(SPEC_SERIES, spec)) + tuple(_points(THROUGHPUT_SERIES, throughput)),
        debug_lines=tuple(_debug_lines(data, debug_pattern)),
        diagnosis=diagnose_bytes(data),
        ready=is_ready(data),
        launch_args=_split(args[0], ARGS_HEADER)[1] if args else None,
        measures=tuple(log_measures(spec)),
    )


def _points(kind: str, rows: list[dict[str, object]]) -> list[SeriesPoint]:
    return [SeriesPoint(kind, seq, row["time"] if isinstance(row["time"], str) else None,
                        {k: v for k, v in row.items() if k != "time" and v is not None}) for seq, row in enumerate(rows)]


def log_measures(spec: list[dict[str, object]]) -> list[Measure]:
    """The whole run's accept length as the SpecDecoding lines print it: the mean of the intervals'
    means (the lines carry no draft count, so intervals cannot be weighted; /metrics has the exact
    counters)."""
    means = [float(r["mean_accept_len"]) for r in spec if isinstance(r.get("mean_accept_len"), float)]
    plain = sum(means) / len(means) if means else None
    return [Measure("accept_len", plain, LOG_SOURCE, f"mean of {len(means)} SpecDecoding-line intervals"),
            Measure("spec_decode_intervals", float(len(spec)), "orch")]


def is_ready(log: bytes) -> bool:
    return log.find(READY_LINE.encode()) >= 0


def diagnose_bytes(log: bytes) -> Diagnosis | None:
    """The diagnosis of the lines around each needle in the head and the tail of the log."""
    spans: list[tuple[int, int]] = []
    for start, end in ((0, min(len(log), HEAD_SIZE)), (max(0, len(log) - TAIL_SIZE), len(log))):
        for needle in NEEDLES:
            at = log.find(needle.encode(), start, end)
            while at >= 0:
                spans.append(_around(log, at))
                at = log.find(needle.encode(), spans[-1][1], end)
    if not spans:
        return None
    merged: list[list[int]] = []
    for start, end in sorted(set(spans)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return diagnose("\n".join(log[s:e].decode("utf-8", "replace") for s, e in merged))


def _around(log: bytes, at: int) -> tuple[int, int]:
    start, end = log.rfind(b"\n", 0, at) + 1, log.find(b"\n", at)
    end = len(log) if end < 0 else end
    for _ in range(LINES_AROUND):
        start = log.rfind(b"\n", 0, max(0, start - 1)) + 1
        nxt = log.find(b"\n", end + 1)
        end = len(log) if nxt < 0 else nxt
    return start, end


def _lines(data: bytes, literal: str, *, first_only: bool = False) -> list[str]:
    """Each line holding `literal`, decoded, without its newline."""
    finder = re.compile(re.escape(literal.encode()) + rb"[^\n]*")
    matches = [finder.search(data)] if first_only else finder.finditer(data)
    return [data[data.rfind(b"\n", 0, m.start()) + 1:m.end()].decode("utf-8", "replace").rstrip("\r")
            for m in matches if m is not None]


def _split(line: str, header: str) -> tuple[str, str]:
    at = line.find(header)
    return line[:at], line[at + len(header):] if header != THROUGHPUT_HEADER else line[at:]


def _debug_lines(data: bytes, pattern: str) -> list[DebugLine]:
    tag = re.compile(pattern)
    literal = _literal(pattern)
    if literal is None:  # no literal to search for: the pattern runs over the decoded text
        candidates = data.decode("utf-8", "replace").split("\n")
    else:
        candidates = _lines(data, literal)
    found = []
    for line in candidates:
        m = tag.search(line)
        if m:
            found.append(DebugLine(line.rstrip("\r"), parse_fields(line[m.end():])))
    return found


def _literal(pattern: str) -> str | None:
    """The longest literal run every match of `pattern` holds, without leading punctuation; None
    when there is none of 3 characters."""
    found = (required_literal(pattern) or "").lstrip("-[]():. ")
    return found if len(found) >= 3 else None


def host_grep_pattern(debug_pattern: str = DEFAULT_DEBUG_PATTERN) -> str | None:
    """An extended regex (`grep -E` on the host) for every line `parse_log` reads outside the log's
    last TAIL_SIZE bytes; None when the debug pattern has no literal to search for."""
    literal = _literal(debug_pattern)
    if literal is None:
        return None
    return "|".join(re.sub(r"([.\[\](){}*+?|^$\\])", r"\\\1", text)
                    for text in (SPEC_HEADER, THROUGHPUT_HEADER, READY_LINE, ARGS_HEADER, literal, *NEEDLES))
