"""The engine seam: what orch asks of a serving engine, and the records an engine hands back.

An engine (SGLang, vLLM) is one object of a subclass of `Engine`, found by name (`engines.get`).
Everything that names an engine's package, endpoints, JSON fields or log lines lives in
`engines/<name>/`; the run pipeline only calls the methods below. Optional capabilities (a
preflight, a rehearsal stand-in) are declared here with a default, never probed with getattr.

Pure on purpose: the records are frozen dataclasses and this module imports nothing of orch's;
the engines' own modules do the I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # annotations only: the host side hands these in
    from orchestrator.core.spec import PatchDef
    from orchestrator.engines.finding import Finding
    from orchestrator.host.session import HostSession

Say = Callable[[str, str], None]  # (label, message): how a stage tells the user

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
        from orchestrator.core.bounds import cut_line

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


@dataclass(frozen=True)
class Installed:
    """An engine's package on a host, found without importing it."""

    folder: str
    version: str


@dataclass(frozen=True)
class Rehearsal:
    """An engine's CPU stand-in: a package tree orch copies to a rehearsal host."""

    releases: tuple[str, ...]  # oldest first
    default_release: str
    files: Callable[[str], dict[str, Path]]  # release -> {path under the tree: source file}
    assemble: Callable[[str, Path], Path]  # (release, staging folder) -> the assembled tree
    checkpoint_maker: Path  # a script run on the host: makes the demo checkpoints


class Engine(ABC):
    """One serving engine, as orch drives it."""

    name: str  # as the experiment names it: `engine: sglang`
    package: str  # its Python package on a host
    health_path: str  # answers 200 once the server serves
    metrics: tuple[MetricInfo, ...]  # shown by `orch ls` and the run summary, headline first
    log_tail_size: int = 4 << 20  # the end of the log that holds its failure signatures
    log_lines: str  # the lines its server log holds, for "this is no server log of any engine"

    @abstractmethod
    def is_ready(self, log: bytes) -> bool:
        """The log says the server is ready."""

    @abstractmethod
    def diagnose(self, log: bytes, patched: Sequence[str] = ()) -> Diagnosis | None:
        """The known failure the log shows, if any (`patched`: files the run's patches touched)."""

    @abstractmethod
    def parse_log(self, log: bytes, debug_pattern: str, patched: Sequence[str] = ()) -> LogReport:
        """The whole log read once."""

    @abstractmethod
    def excerpt_pattern(self, debug_pattern: str) -> str | None:
        """An extended regex matching every line `parse_log` reads outside the log's tail (a huge
        log is cut down to those on the host); None when the log cannot be cut down."""

    @abstractmethod
    async def request(self, base_url: str, call: Call) -> RequestResult:
        """One streamed generation request, timed chunk by chunk; raises WorkloadError on failure."""

    @abstractmethod
    async def server_state(self, base_url: str) -> ServerState:
        """The server's own stats, read before and after the workload."""

    @abstractmethod
    def measures(self, result: WorkloadResult, before: ServerState, after: ServerState,
                 report: LogReport) -> Measures:
        """Every metric from every source the engine has; the first `accept_len` is the headline."""

    @abstractmethod
    def imported_launch(self, launch_args: str | None, where: str) -> tuple[dict[str, object], str, list[str]]:
        """From the log's print of the server's arguments (`LogReport.launch_args`): the run's params
        under the names experiment files use, the equivalent launch command, and warnings."""

    @abstractmethod
    def version_files(self) -> tuple[str, ...]:
        """Files of the package folder that hold its `__version__`, in the order to try."""

    async def check_launch(self, session: HostSession, script: str, template: Path, say: Say, label: str) -> None:
        """Raise SpecError naming a flag of the launch script the host's engine would reject (and
        where the template writes it); warnings through `say`. Default: no check."""

    async def launch_findings(self, session: HostSession, script: str, template: Path) -> list[dict[str, str]]:
        """What `check_launch` would say, as findings (`orch check`). Default: none."""
        return []

    async def preflight(self, session: HostSession, script: str, env: Mapping[str, str],
                        patches: tuple[PatchDef, ...], overlay: Mapping[str, Path] | None,
                        allow: tuple[str, ...]) -> list[Finding]:
        """The checks of the run's checkpoints against the host's engine, before anything changes,
        read from the rendered launch `script` as the engine's parser reads it (never from param
        names); `overlay` maps host paths to local folders not pushed yet. Default: none."""
        return []

    async def launch_args(self, session: HostSession, script: str, env: Mapping[str, str]) -> dict[str, object]:
        """The launch script's server options by the engine's own names, as its parser reads them
        (what the command asks). Default: none."""
        return {}

    def effective_args(self, launch_args: str | None, engine_config: str | None = None) -> dict[str, object] | None:
        """The engine's own print of the arguments it runs with (`LogReport.launch_args`, and the
        config it built, `LogReport.engine_config`) by its own names, after it adjusted them; None
        when the log holds none. Default: None."""
        return None

    async def tool_command(self, session: HostSession, tool: str, args: Mapping[str, object], port: int,
                           result: str) -> ToolCommand | None:
        """The engine's benchmark tool `tool` run with `args` against the server on `port`, writing
        `result`: the host's release's module, the arguments checked against its parser (SpecError
        naming a tool the release lacks or an argument it would reject). Default: None, no tools."""
        return None

    def tool_measures(self, tool: str, result: bytes) -> tuple[Measure, ...]:
        """Every number of the tool's result file as a measure (an accept length first). Default: none."""
        return ()

    def rehearsal(self) -> Rehearsal | None:
        """The engine's rehearsal stand-in, if it has one."""
        return None
