"""The engine seam: what orch asks of a serving engine, and the records an engine hands back.

An engine (SGLang, vLLM) is one object of a subclass of `Engine`, found by name (`engines.get`).
Everything that names an engine's package, endpoints, JSON fields or log lines lives in
`engines/<name>/`; the run pipeline only calls the methods below. Optional capabilities (a
preflight, benchmark tools) are declared here with a default, never probed with getattr.

Pure on purpose: the records are frozen dataclasses on the bottom floor (`orchestrator.records`,
named here too) and this module imports nothing else of orch's but type hints; the engines' own
modules do the I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from orchestrator.records import (  # the records engines hand back, named here too
    HEADLINE as HEADLINE, DebugLine as DebugLine, Diagnosis as Diagnosis, Measure as Measure, Histogram as
    Histogram, SeriesPoint as SeriesPoint, LogReport as LogReport, CHAT as CHAT, GENERATE as GENERATE, Call as Call,
    RequestResult as RequestResult, WorkloadResult as WorkloadResult, ToolCommand as ToolCommand, ServerState as
    ServerState, Measures as Measures, MetricInfo as MetricInfo,
)

if TYPE_CHECKING:  # annotations only: the host side hands these in
    from orchestrator.core.spec import PatchDef
    from orchestrator.engines.finding import Finding
    from orchestrator.engines.seriesblock import SeriesBlock
    from orchestrator.host.session import HostSession

Say = Callable[[str, str], None]  # (label, message): how a stage tells the user


class LogStream(Protocol):
    """A server log read piece by piece, each piece ending at a line's end: its series and debug
    lines handed on as they come, so a log of gigabytes is read in bounded memory (`orch import`)."""

    @property
    def points(self) -> int:
        """The series points read so far."""

    def shape(self, piece: bytes) -> bytes | None:
        """A line that every line of the piece is but for other runs of digits and dots in the same
        places (each starting with a digit), when the engine's reading of the piece tells so at once
        (a busy server's stats lines); else None. The import's search for secrets then reads that
        one line (`secrets.mask_log`)."""

    def feed(self, piece: bytes) -> tuple[list[SeriesBlock], list[DebugLine]]:
        """The piece's series blocks (seq counted on from the pieces before) and debug lines."""

    def claimed(self) -> bool:
        """The pieces so far hold the engine's lines (its print of its arguments, a stats line, its
        ready line, its startup lines)."""

    def report(self) -> LogReport:
        """The whole log's report, but its series and debug lines (handed on by `feed`)."""


@dataclass(frozen=True)
class Installed:
    """An engine's package on a host, found without importing it."""

    folder: str
    version: str


class Engine(ABC):
    """One serving engine, as orch drives it."""

    name: str  # as the experiment names it: `engine: sglang`
    package: str  # its Python package on a host
    health_path: str  # answers 200 once the server serves
    metrics: tuple[MetricInfo, ...]  # shown by `orch ls` and the run summary, headline first
    log_tail_size: int = 4 << 20  # the end of the log that holds its failure signatures
    log_lines: str  # the lines its server log holds, for "this is no server log of any engine"
    # the stamp a line of its log opens with: a regex with the groups month, day, clock, frac and,
    # where the engine prints it, year (engines/logspan.py); None: its lines carry no date
    log_stamp: str | None = None

    @abstractmethod
    def is_ready(self, log: bytes) -> bool:
        """The log says the server is ready."""

    @abstractmethod
    def diagnose(self, log: bytes, patched: Sequence[str] = ()) -> Diagnosis | None:
        """The known failure the log shows, if any (`patched`: files the run's patches touched)."""

    @abstractmethod
    def parse_log(self, log: bytes, debug_pattern: str, patched: Sequence[str] = ()) -> LogReport:
        """The whole log read once."""

    def log_stream(self, debug_pattern: str, patched: Sequence[str] = ()) -> LogStream | None:
        """A reader of the log piece by piece; None (the default): the engine reads a log whole
        (`parse_log`), held in memory."""
        return None

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
        return None

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
