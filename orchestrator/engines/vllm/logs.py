"""A vLLM server log (bytes or text) -> one LogReport: spec-decoding and throughput series,
readiness, startup, the non-default args line, debug lines and a diagnosis.

Speed: nothing walks the log line by line. Each kind of line is found by a regex that starts with
its literal header (`SpecDecoding metrics: `, `Avg prompt throughput: `, the debug pattern's
literal), run over the whole buffer; only the lines found are cut out and decoded. Failure
signatures are looked for around their needles in the log's head and tail only (argparse fails
first, a crash is the last thing a dying server writes).

Readiness (either is printed once the HTTP server listens): uvicorn's `Application startup
complete.` and vLLM's own route listing `Available routes are:` (0.10.1.1
`vllm/entrypoints/launcher.py:36`, 0.33.0 `vllm/entrypoints/launchers/launcher.py:188`), which comes
just before uvicorn starts; the route listing alone is not enough (the socket may still fail).

Startup (a log that ends before readiness is a run that never finished, not a foreign file): the
engine's config print `Initializing a V1 LLM engine (v0.32.0) with config: ...` (0.32.0
`vllm/v1/engine/core.py:134`), a worker's `distributed_init_method=` (multi-node and TP init),
`Loading weights took` / `Model loading took` (weights loaded), `Available KV cache memory` and
`KV cache size:` (`GPU KV cache size: N tokens`, `CPU KV cache size: ...`: the KV cache allocated).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.engines.base import DebugLine, Diagnosis, LogReport, Measure, SeriesPoint
from orchestrator.engines.fields import parse_fields, required_literal

from . import engineconfig
from .diagnosis import CRASH_HEADERS, NEEDLES, diagnose
from .stats import SPEC_HEADER, THROUGHPUT_HEADER, spec_row, throughput_row, weighted_spec

READY_LINE = "Application startup complete."
ARGS_HEADER = "non-default args: "  # 0.10.1.1 vllm/entrypoints/utils.py:326, 0.33.0 entrypoints/common/startup.py:96
CONFIG_HEADER = "Initializing a V1 LLM engine"  # the engine-config line (engineconfig.py), 0.32.0 v1/engine/core.py:134
DEFAULT_DEBUG_PATTERN = r"\[[A-Za-z0-9_.-]*-DEBUG\]"
STARTUP_LINES = ("Initializing a V1 LLM engine", "distributed_init_method=", "Loading weights took",
                 "Model loading took", "Available KV cache memory", "KV cache size: ")
HEAD_SIZE = 16 << 20
TAIL_SIZE = 4 << 20
# The time a line opens with, no year in it: `(APIServer pid=12) INFO 08-20 10:00:06 [loggers.py:123] `
# (ANSI colours where the server wrote to a terminal; `.mmm` with a custom logging config). The year
# comes from the file (engines/logspan.py).
STAMP = (r"^(?:\x1b\[[0-9;]*m)*(?:\([^()\s]+ pid=\d+\)\s*)?(?:\x1b\[[0-9;]*m)*[A-Z]+(?:\x1b\[[0-9;]*m)*[ \t]+"
         r"(?P<month>\d\d)-(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?(?![\d:])")

LINES_AROUND = 2  # lines kept on each side of a needle (a raise prints its message on the next line)
TRACEBACK_WINDOW = 1 << 16  # bytes kept after a crash header: the traceback it opens and the exception ending it
SPEC_SERIES, THROUGHPUT_SERIES = "spec_decode", "throughput"
LOG_SOURCE = "spec_decode_log"


def parse_log(log: bytes | str, debug_pattern: str = DEFAULT_DEBUG_PATTERN, patched: Sequence[str] = ()) -> LogReport:
    """Everything known in a whole log. `patched` is accepted for the Engine seam; vLLM logs no
    per-module import failures to match it against."""
    data = log.encode("utf-8", "replace") if isinstance(log, str) else bytes(log)
    spec = [spec_row(*_split(line, SPEC_HEADER)) for line in _lines(data, SPEC_HEADER)]
    throughput = [throughput_row(*_split(line, THROUGHPUT_HEADER)) for line in _lines(data, THROUGHPUT_HEADER)]
    args = _lines(data, ARGS_HEADER, first_only=True)
    launch_args = _split(args[0], ARGS_HEADER)[1] if args else None
    configs = _lines(data, CONFIG_HEADER, first_only=True)
    return LogReport(
        series=tuple(_points(SPEC_SERIES, spec)) + tuple(_points(THROUGHPUT_SERIES, throughput)),
        debug_lines=tuple(_debug_lines(data, debug_pattern)),
        diagnosis=diagnose_bytes(data),
        ready=is_ready(data),
        launch_args=launch_args,
        engine_config=configs[0].partition(engineconfig.HEADER)[2] or None if configs else None,
        measures=tuple(log_measures(spec, throughput, _num_speculative_tokens(launch_args))),
        started=launch_args is not None or any(data.find(line.encode(), 0, HEAD_SIZE) >= 0 for line in STARTUP_LINES),
    )


def _points(kind: str, rows: list[dict[str, object]]) -> list[SeriesPoint]:
    return [SeriesPoint(kind, seq, row["time"] if isinstance(row["time"], str) else None,
                        {k: v for k, v in row.items() if k != "time" and v is not None}) for seq, row in enumerate(rows)]


def log_measures(spec: Sequence[dict[str, object]], throughput: Sequence[dict[str, object]] = (),
                 num_speculative_tokens: int | None = None) -> list[Measure]:
    """What the stats lines say of the whole run. accept_len and draft_accept_rate over the
    intervals as /metrics' counters give them over the run: each interval weighted by its drafts
    (stats.weighted_spec), not a mean of the intervals' means. gen_throughput: the mean `Avg
    generation throughput` of the intervals that generated tokens (vLLM prints one more idle line
    after the load stops)."""
    spec_found = weighted_spec(spec, num_speculative_tokens)
    rates = [r.get("generation_throughput") for r in throughput]
    generating = [rate for rate in rates if isinstance(rate, float) and rate > 0]
    return [Measure("accept_len", spec_found.accept_len, LOG_SOURCE, spec_found.note),
            Measure("draft_accept_rate", spec_found.accept_rate, LOG_SOURCE, "sum(accepted) / sum(drafted) of the lines"),
            Measure("gen_throughput", sum(generating) / len(generating) if generating else None, LOG_SOURCE,
                    f"mean Avg generation throughput of {len(generating)} generating intervals"),
            Measure("spec_decode_intervals", float(len(spec)), "orch")]


def _num_speculative_tokens(launch_args: str | None) -> int | None:
    """The speculative_config's num_speculative_tokens in the non-default args line (a dict repr)."""
    found = re.search(r"'num_speculative_tokens': (\d+)", launch_args or "")
    return int(found.group(1)) if found else None


def is_ready(log: bytes) -> bool:
    return log.find(READY_LINE.encode()) >= 0


def diagnose_bytes(log: bytes) -> Diagnosis | None:
    """The diagnosis of the lines around each needle in the head and the tail of the log."""
    spans: list[tuple[int, int]] = []
    for start, end in ((0, min(len(log), HEAD_SIZE)), (max(0, len(log) - TAIL_SIZE), len(log))):
        for needle in NEEDLES:
            at = log.find(needle.encode(), start, end)
            while at >= 0:
                spans.append(_around(log, at, TRACEBACK_WINDOW if needle in CRASH_HEADERS else 0))
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


def _around(log: bytes, at: int, after: int = 0) -> tuple[int, int]:
    """The line holding `at` with LINES_AROUND lines on each side, and the lines of the next `after` bytes."""
    start, end = log.rfind(b"\n", 0, at) + 1, log.find(b"\n", at + after)
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
                    for text in (SPEC_HEADER, THROUGHPUT_HEADER, READY_LINE, ARGS_HEADER, literal, *STARTUP_LINES,
                                 *NEEDLES))
