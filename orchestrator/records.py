"""The records every layer shares: what a server's log, a workload and an engine's measures come
to, and a server's diagnosis. The bottom floor: this module imports nothing of orch's but the
bound of a stored line, so an error (a `ServerError` carries a `Diagnosis`) or an engine names
them without closing an import circle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from orchestrator.bounds import cut_line

HEADLINE = "accept_len"  # the metric every speculative-decoding engine reports first


class DebugLine(NamedTuple):  # a tuple: cheap to make by the hundred thousand
    text: str  # the line as printed, without the trailing newline
    fields: dict[str, str]  # key=value pairs after the debug tag


@dataclass(frozen=True)
class Diagnosis:
    kind: str  # "cuda-oom", "port-in-use", ... (each engine's signatures)
    summary: str  # one line: what happened and what to do
    evidence: tuple[str, ...]  # the log lines that show it, most specific first
    decisive: bool = False  # names the cause itself (a patched file that broke): wins over an earlier diagnosis

    def as_record(self) -> dict[str, object]:
        """The form a run row stores: its log lines cut to the stored bound (a crash may quote a huge line)."""
        return {"kind": self.kind, "summary": cut_line(self.summary), "evidence": [cut_line(e) for e in self.evidence]}


@dataclass(frozen=True)
class Measure:
    """One value of a metric from one source ("meta_info", "prometheus", "decode_log", ...)."""

    name: str
    value: float | None
    source: str
    note: str = ""


@dataclass(frozen=True)
class Histogram:
    name: str
    counts: tuple[int, ...]
    source: str
    note: str = ""


@dataclass(frozen=True)
class SeriesPoint:
    """One periodic stats line of the log: its kind ("decode", "prefill", "spec_decode", ...),
    its position among the lines of that kind, its time when printed, and its named values."""

    kind: str
    seq: int
    time: str | None
    values: Mapping[str, object]


@dataclass(frozen=True)
class LogReport:
    """A server log read once on the controller: everything orch keeps of it."""

    series: tuple[SeriesPoint, ...]
    debug_lines: tuple[DebugLine, ...]
    diagnosis: Diagnosis | None
    ready: bool  # the readiness line was seen
    launch_args: str | None  # the engine's own print of its arguments, when it logs one
    measures: tuple[Measure, ...] = ()  # what the log's stats lines say of the whole run
    started: bool = False  # the engine's startup lines (weights loaded, KV cache allocated, ...) were seen
    engine_config: str | None = None  # the engine's print of the config it built (vLLM's engine-config line)


CHAT, GENERATE = "chat", "generate"  # the workload's endpoints: OpenAI chat completions, the engine's native text one


@dataclass(frozen=True)
class Call:
    """One streamed generation request, as the workload sends it."""

    messages: tuple[tuple[str, str], ...]  # (role, content): one user turn, or a conversation so far
    max_new_tokens: int
    sampling: Mapping[str, float | int]  # temperature, top_p, ...: the names both APIs share
    endpoint: str = GENERATE  # GENERATE: the plain text of the messages, no chat template; CHAT: the server's template


@dataclass(frozen=True)
class RequestResult:
    prompt_tokens: int
    completion_tokens: int
    latency: float  # end to end, seconds
    counts: Mapping[str, int] = field(default_factory=dict)  # engine-specific per-request counts
    histogram: tuple[int, ...] = ()  # per-request histogram the engine reports, if any
    ttft: float | None = None  # seconds to the first chunk with text
    itl: tuple[float, ...] = ()  # seconds between tokens: each later chunk's gap spread over its new tokens
    accept_len: float | None = None  # the request's own accept length, where its answer says it
    text: str = ""  # the answer: a later turn of its conversation is sent with it
    at: float = 0.0  # when it ended, seconds from the workload's start


@dataclass(frozen=True)
class WorkloadResult:
    requests: tuple[RequestResult, ...]
    wall_seconds: float

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)


@dataclass(frozen=True)
class ToolCommand:
    """An engine's own benchmark tool as a run's workload runs it on the host, against the run's server."""

    module: str  # `python -m MODULE`, as the host's release names it
    argv: tuple[str, ...]  # its arguments, orch's own (the server's address, the result file) included
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerState:
    """What the server said about itself at one moment (its stats endpoint), and where from."""

    body: Mapping[str, object] | None
    endpoint: str | None


@dataclass(frozen=True)
class Measures:
    values: tuple[Measure, ...]
    histograms: tuple[Histogram, ...] = ()


@dataclass(frozen=True)
class MetricInfo:
    """A metric an engine reports, as tables show it."""

    name: str
    label: str
    digits: int = 2
