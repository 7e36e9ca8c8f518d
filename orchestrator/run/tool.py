"""The engine's own benchmark tool as a run's workload (`workload: {tool: ..., args: {...}}`): run
with the host's Python on the host, against the run's server, into the run folder; its result file
read into the run's measures, its output kept with the run as a `tool-output` event.

The tool's arguments are checked against its parser, read from the host's files, before anything
on the host changes (with the launch flags; `orch check` and `--dry-run` too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orchestrator.core import shell
from orchestrator.core.spec import Spec, Workload
from orchestrator.engines.base import Engine, LogReport, Measures, ToolCommand
from orchestrator.errors import SpecError, WorkloadError
from orchestrator.host.session import HostSession
from .attempt import Attempt

RESULT = "bench.jsonl"  # in the run folder: the tool's result file
OUTPUT = "tool.log"  # in the run folder: its stdout and stderr
KEPT_OUTPUT = 64 << 10  # the end of its output that the run's event keeps

Measuring = Callable[[LogReport], Measures]  # the run's measures, once its log is read


async def command(engine: Engine, session: HostSession, spec: Spec, load: Workload, run_dir: str,
                  port: int) -> ToolCommand:
    """The tool's command on this host; a tool the host's release lacks or a bad argument is a
    SpecError naming the experiment and the host."""
    assert load.tool is not None
    try:
        found = await engine.tool_command(session, load.tool, load.args, port, f"{run_dir}/{RESULT}")
    except SpecError as exc:
        raise SpecError(f"{spec.path}: {session.host.name}: {exc}") from None
    if found is None:
        raise SpecError(f"{spec.path}: workload.tool {load.tool}: engine {engine.name} has no benchmark tools; "
                        f"remove `tool:` to send the built-in workload")
    return found


async def check(attempt: Attempt, load: Workload, port: int) -> None:
    """The tool and its arguments checked (read-only on the host); warnings told."""
    found = await command(attempt.engine, attempt.session, attempt.spec, load, attempt.launch.run_dir, port)
    for warning in found.warnings:
        attempt.warn(warning)


async def findings(engine: Engine, session: HostSession, spec: Spec, load: Workload, port: int) -> list[dict[str, str]]:
    """What `check` would stop at, as an `orch check` finding."""
    if load.tool is None:
        return []
    try:
        found = await command(engine, session, spec, load, "check", port)
    except SpecError as exc:
        return [{"severity": "error", "code": "tool-arg", "what": f"workload.tool {load.tool}", "why": str(exc),
                 "fix": "as the message says"}]
    return [{"severity": "warning", "code": "tool-arg", "what": f"workload.tool {load.tool}", "why": w,
             "fix": "pass the full argument name"} for w in found.warnings]


async def run(attempt: Attempt, load: Workload, port: int, metrics: dict[str, Any]) -> Measuring:
    """Run the tool to its end; `metrics` gains `workload_s`. A tool that fails or writes no
    numbers fails the run (WorkloadError, its output's last line in the message)."""
    session, host, engine = attempt.session, attempt.session.host, attempt.engine
    run_dir = attempt.launch.run_dir
    found = await command(engine, session, attempt.spec, load, run_dir, port)
    env = {k: v for k, v in attempt.launch.env.items() if k not in attempt.secrets}
    site = attempt.launch.site  # an isolated run's patched copy comes first
    rest = [p for p in env.pop("PYTHONPATH", "").split(":") if p and p != site]
    pythonpath = ":".join(p for p in (site, host.rehearsal_dir, *rest) if p) or None
    attempt.say(f"python -m {found.module} {shell.join(found.argv)}")
    started = time.monotonic()
    done = await session.conn.run(shell.run_tool(run_dir, host.python, found.module, found.argv, env, pythonpath,
                                                 OUTPUT))
    metrics["workload_s"] = time.monotonic() - started
    output = await _output(attempt, run_dir)
    attempt.store.event(attempt.run, "tool-output", f"python -m {found.module} {shell.join(found.argv)}\n{output}")
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
    if not done.ok:
        raise WorkloadError(f"{found.module} exited with status {done.exit_status}: {last}; its output is the run's "
                            f"tool-output event and {run_dir}/{OUTPUT}")
    try:
        result = await session.conn.read_file(f"{run_dir}/{RESULT}")
    except FileNotFoundError:
        raise WorkloadError(f"{found.module} wrote no result file {run_dir}/{RESULT}: {last}") from None
    try:
        measured = engine.tool_measures(load.tool or "", result)
    except SpecError as exc:
        raise WorkloadError(f"{run_dir}/{RESULT}: {exc}") from None
    if not measured:
        raise WorkloadError(f"{found.module}'s result {run_dir}/{RESULT} holds no numbers: {last}")
    return lambda report: Measures((*measured, *report.measures))


async def _output(attempt: Attempt, run_dir: str) -> str:
    """The end of the tool's output, its progress bars' carriage-return redraws reduced to the last."""
    try:
        data = await attempt.session.conn.read_file(f"{run_dir}/{OUTPUT}")
    except FileNotFoundError:
        return ""
    text = data[-KEPT_OUTPUT:].decode(errors="replace")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines())
