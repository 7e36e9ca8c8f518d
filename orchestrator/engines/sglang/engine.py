"""SGLang behind the engine seam: its readiness line, log, endpoints, JSON fields and metrics."""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.engines.base import (
    HEADLINE, Call, Diagnosis, Engine, Say, Histogram, LogReport, LogStream, Measure, Measures, MetricInfo,
    RequestResult, SeriesPoint, ServerState, ToolCommand, WorkloadResult,
)
from . import PACKAGE, VERSION_FILES, flags, imported, logs

# The client (and the transports under it), the host-side checks and the tools are imported by
# the methods that use them: reading a log (`orch import`) does without them (0.3 s).
CLIENT_NAMES = ("VERIFY_STEPS", "request_histogram")  # the client's names tests and the live table read here


def __getattr__(name: str) -> object:
    if name in CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

if TYPE_CHECKING:
    from orchestrator.core.spec import PatchDef
    from orchestrator.engines.finding import Finding
    from orchestrator.host.session import HostSession


CORRECT_DRAFTS = "correct_drafts_histogram"
CORRECT_DRAFTS_NOTE = ("verify steps by draft tokens accepted (index 0, 1, ...; bonus token not counted), "
                       "summed over the workload's requests")
LOG_MEANS = ("accept_len", "accept_rate", "gen_throughput")  # decode-line values averaged over the run
STATE_ENDPOINTS = ("/server_info", "/get_server_info")  # 0.5.9+, older


class SglangEngine(Engine):
    name = "sglang"
    package = PACKAGE
    health_path = "/health_generate"
    metrics = (MetricInfo(HEADLINE, "accept len"), MetricInfo("output_tok_s", "tok/s", 1))
    log_tail_size = logs.TAIL_SIZE
    log_lines = "SGLang: no `server_args=`, no Prefill or Decode batch line, no ready line, no known failure"
    log_stamp = logs.STAMP

    def is_ready(self, log: bytes) -> bool:
        return logs.READY_LINE.encode() in log

    def diagnose(self, log: bytes, patched: Sequence[str] = ()) -> Diagnosis | None:
        return logs.diagnose(log.decode(errors="replace"), patched)

    def parse_log(self, log: bytes, debug_pattern: str, patched: Sequence[str] = ()) -> LogReport:
        found = logs.parse_log_bytes(log, debug_pattern, patched)
        diagnosis = found.diagnosis
        if diagnosis is not None and diagnosis.kind == logs.PATCHED_MODULE_IMPORT:
            diagnosis = dataclasses.replace(diagnosis, decisive=True)
        return LogReport(series=tuple(series(found)), debug_lines=found.debug_lines, diagnosis=diagnosis,
                         ready=found.ready, launch_args=found.server_args, measures=tuple(log_measures(found)),
                         started=found.started)

    def log_stream(self, debug_pattern: str, patched: Sequence[str] = ()) -> LogStream:
        from . import logstream  # here: a run reads its log whole

        return logstream.LogStream(debug_pattern, patched)

    def excerpt_pattern(self, debug_pattern: str) -> str | None:
        return logs.host_grep_pattern(debug_pattern)

    async def request(self, base_url: str, call: Call) -> RequestResult:
        from . import client

        return await client.request(base_url, call)

    async def server_state(self, base_url: str) -> ServerState:
        from orchestrator.remote import http

        for endpoint in STATE_ENDPOINTS:
            status, body = await http.get(base_url + endpoint, 10.0)
            if status == 200:
                try:
                    found = json.loads(body)
                except json.JSONDecodeError:
                    return ServerState(None, endpoint)
                return ServerState(found if isinstance(found, dict) else None, endpoint)
        return ServerState(None, None)

    def measures(self, result: WorkloadResult, before: ServerState, after: ServerState,
                 report: LogReport) -> Measures:
        server_value = avg_spec_accept_length(after.body)
        values = (
            Measure(HEADLINE, verify_accept_len(result), "meta_info",
                    "sum(completion_tokens) / sum(spec_verify_ct) over the workload"),
            Measure(HEADLINE, server_value, f"server_info:{after.endpoint}", "" if server_value is not None else
                    "absent: the server updates it every decode-log interval (40 rounds by default)"),
            *report.measures,
        )
        counts = summed_histogram(result)
        histograms = (Histogram(CORRECT_DRAFTS, tuple(counts), "meta_info", CORRECT_DRAFTS_NOTE),) if counts else ()
        return Measures(values, histograms)

    def imported_launch(self, launch_args: str | None, where: str) -> tuple[dict[str, object], str, list[str]]:
        params, command, warnings = imported.launch_of(launch_args, where)
        return dict(params), command, warnings

    def version_files(self) -> tuple[str, ...]:
        return VERSION_FILES

    async def check_launch(self, session: HostSession, script: str, template: Path, say: Say, label: str) -> None:
        from . import hostflags

        await hostflags.check_launch(session.conn, session.host, session.packages, script, template, say, label)

    async def launch_findings(self, session: HostSession, script: str, template: Path) -> list[dict[str, str]]:
        from . import hostflags

        found = await hostflags.flag_set(session.conn, session.host, session.packages)
        return hostflags.findings(flags.check(script, found) if found else [], template, script)

    async def preflight(self, session: HostSession, script: str, env: Mapping[str, str],
                        patches: tuple[PatchDef, ...], overlay: Mapping[str, Path] | None,
                        allow: tuple[str, ...]) -> list[Finding]:
        from . import hostflags, preflight_run  # here: its checkpoint readers load numpy, which reading a log does without

        table = await hostflags.flag_set(session.conn, session.host, session.packages)
        asked = flags.command_of(script, table, dict(env)).values()
        return await preflight_run.findings_for(session.conn, session.host, asked, dict(env), patches,
                                                dict(overlay) if overlay else None, session.packages, allow=allow)

    async def launch_args(self, session: HostSession, script: str, env: Mapping[str, str]) -> dict[str, object]:
        from . import hostflags

        table = await hostflags.flag_set(session.conn, session.host, session.packages)
        return flags.command_of(script, table, dict(env)).values()

    def effective_args(self, launch_args: str | None, engine_config: str | None = None) -> dict[str, object] | None:
        return imported.server_args(launch_args) or None  # `server_args=ServerArgs(...)` or 0.5.23's dict

    async def tool_command(self, session: HostSession, tool: str, args: Mapping[str, object], port: int,
                           result: str) -> ToolCommand:
        from . import hostflags

        return await hostflags.tool_command(session.conn, session.host, session.packages, tool, dict(args), port, result)

    def tool_measures(self, tool: str, result: bytes) -> tuple[Measure, ...]:
        from . import tools

        found = tools.find(tool)
        return tools.measures(found, f"sglang.{found.name}", result)


def verify_accept_len(result: WorkloadResult) -> float | None:
    """Token-weighted: sum(completion_tokens) / sum(spec_verify_ct). Works on 0.4.x, where
    meta_info carries only spec_verify_ct."""
    from .client import VERIFY_STEPS

    verified = [r for r in result.requests if r.counts.get(VERIFY_STEPS)]
    if not verified:
        return None
    return sum(r.completion_tokens for r in verified) / sum(r.counts[VERIFY_STEPS] for r in verified)


def summed_histogram(result: WorkloadResult) -> list[int] | None:
    """The requests' histograms added bin by bin (they differ in length: each grows to the most
    drafts one of its steps accepted); None when no request carried one."""
    histograms = [r.histogram for r in result.requests if r.histogram]
    if not histograms:
        return None
    total = [0] * max(map(len, histograms))
    for histogram in histograms:
        for drafts, steps in enumerate(histogram):
            total[drafts] += steps
    return total


def avg_spec_accept_length(info: Mapping[str, object] | None) -> float | None:
    """internal_states[0].avg_spec_accept_length; absent until the first decode-log interval."""
    if not info:
        return None
    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], dict):
        info = decode[0]
    states = info.get("internal_states") or [{}]
    first = states[0] if isinstance(states, list) and states else {}
    value = first.get("avg_spec_accept_length") if isinstance(first, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def log_measures(report: logs.LogReport) -> list[Measure]:
    """What the decode lines say of the whole run: the mean of each of LOG_MEANS over the lines that
    print it (accept rate as accept length: one number per log interval, each interval alike), and
    how many log intervals there were."""
    found = []
    for name in LOG_MEANS:
        values = [v for v in (getattr(d, name) for d in report.decode) if v is not None]
        found.append(Measure(name, sum(values) / len(values) if values else None, "decode_log",
                             f"mean of {len(values)} decode-line intervals"))
    found.append(Measure("decode_intervals", len(report.decode), "orch"))
    return found


@functools.lru_cache(maxsize=256)
def _ranks_text(ranks: tuple[tuple[str, int], ...]) -> str:
    """("DP", 1), ("TP", 0) -> "DP1 TP0" (a server prints one or a few prefixes, on every line)."""
    return " ".join(f"{name}{number}" for name, number in ranks)


def series(report: logs.LogReport) -> list[SeriesPoint]:
    """One point per decode and per prefill log line: its named values, the ranks that printed it
    ("DP1 TP0") and any other number the line carried, under its printed name."""
    points = []
    for kind, records in (("decode", report.decode), ("prefill", report.prefill)):
        if not records:
            continue
        names = [name for name in records[0]._fields if name not in ("time", "ranks", "extra", "graph")]
        picked = operator.attrgetter(*names)  # the named values of a line in one call (a 64 MB log: 29,000 lines)
        for seq, line in enumerate(records):
            values: dict[str, object] = dict(zip(names, picked(line)))
            if line.ranks:
                values["ranks"] = _ranks_text(tuple(line.ranks.items()))
            if line.extra:
                values.update(line.extra)
            points.append(SeriesPoint(kind, seq, line.time, values))
    return points
