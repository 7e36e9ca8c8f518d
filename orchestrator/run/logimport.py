"""A run made by hand, recorded from its server log (`orch import LOGFILE`): decode series, accept
length from the decode lines, debug lines, diagnosis, and the params and launch command rebuilt
from the `server_args=` line SGLang prints first (`ServerArgs(...)`, or 0.5.23's `{...}` dict)."""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from . import collect
from orchestrator.engines.sglang import logs, serverargs
from orchestrator.errors import SpecError
from orchestrator.core.clock import new_uid, now
from orchestrator.store.database import FAILED, SUCCEEDED, DebugRow, MetricRow, Run, Store

EXPERIMENT = "imported"
# server args copied into the run's params, under the names the experiment files use
PARAMS_FROM_ARGS = {
    "model_path": "model_path", "speculative_draft_model_path": "draft_model_path", "tp_size": "tp_size",
    "mem_fraction_static": "mem_fraction_static", "speculative_algorithm": "speculative_algorithm",
    "speculative_num_steps": "speculative_num_steps", "speculative_eagle_topk": "speculative_eagle_topk",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens", "port": "port",
}


@dataclass(frozen=True)
class Imported:
    run_id: int
    uid: str
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    diagnosis: logs.Diagnosis | None = None
    command: str = ""
    warnings: tuple[str, ...] = ()


def server_args(text: str | None) -> dict[str, Any]:
    """`ServerArgs(model_path='m', tp_size=8, ...)` or `{'model_path': 'm', ...}` -> {field: value}
    (see `serverargs.parse`)."""
    return serverargs.parse(text).values


def args_warnings(text: str | None, where: str) -> tuple[dict[str, Any], list[str]]:
    """The server args of a log's `server_args=` line, and what to tell the user when they could not
    all be read."""
    if text is None:
        return {}, [f"{where}: no `server_args=` line (the log may start after the server did): params and the "
                    "launch command are not rebuilt; give --params key=value for the ones that matter"]
    parsed = serverargs.parse(text)
    if parsed.form is None:
        return {}, [f"{where}: the `server_args=` line is neither `ServerArgs(...)` (SGLang up to 0.5.22) nor a "
                    f"`{{...}}` dict (0.5.23): params and the launch command are not rebuilt; give --params "
                    "key=value for the ones that matter"]
    if parsed.cut:
        return parsed.values, [f"{where}: the `server_args=` line is cut short: params and the launch command "
                               f"hold only its first {len(parsed.values)} fields"]
    return parsed.values, []


def launch_command(args: dict[str, Any]) -> str:
    """The equivalent `python -m sglang.launch_server` command: every field that is set (not None
    and not False), as a flag."""
    words = ["python", "-m", "sglang.launch_server"]
    for name, value in args.items():
        if value is None or value is False or value == [] or value == {}:
            continue
        words.append("--" + name.replace("_", "-"))
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            words += [str(v) for v in value]
        else:
            words.append(json.dumps(value) if isinstance(value, dict) else str(value))
    return shlex.join(words)


def parse_params(items: list[str]) -> dict[str, Any]:
    """`k=v` pairs from the command line; values read as YAML scalars would be (numbers, booleans)."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--params {item!r}: expected key=value")
        params[key.strip()] = _scalar(value)
    return params


def _scalar(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class LogSource:
    data: bytes
    where: str  # the local path, or HOST:PATH
    host: str | None  # the inventory host it was read from
    note: str = ""  # how it was fetched, when it was cut down on the host


def read_local(path: Path) -> LogSource:
    try:
        return LogSource(path.read_bytes(), str(path), None)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the log: {exc.strerror or exc}; give the path of a server log, "
                        f"or HOST:PATH for a log on an inventory host") from None


def split_remote(ref: str, hosts: Any) -> tuple[str, str] | None:
    """("gpu1", "/var/log/sglang.log") for "gpu1:/var/log/sglang.log" when gpu1 is an inventory host."""
    name, sep, where = ref.partition(":")
    return (name, where) if sep and where and name in hosts else None


async def read_remote(host: Any, path: str, debug_pattern: str) -> LogSource:
    """A log on a host, over its transport; a big one cut down there to what the parser reads."""
    from orchestrator.host import server
    from orchestrator.remote import connect
    from orchestrator.host.session import absolute

    conn = await connect(host)
    try:
        data, size = await server.fetch_log(conn, posixpath.join(conn.home, absolute(path, conn.home)), debug_pattern)
    except FileNotFoundError:
        raise SpecError(f"{host.name}:{path}: no such log on the host; check the path "
                        f"(`orch import {host.name}:/full/path/to/server.log`)") from None
    except IsADirectoryError:
        raise SpecError(f"{host.name}:{path}: a folder, not a log; give the log file's path") from None
    finally:
        await conn.close()
    note = "" if len(data) == size else f"cut down on the host from {size} bytes to the lines orch reads and the last part"
    return LogSource(data, f"{host.name}:{path}", host.name, note)


def record(store: Store, source: LogSource, name: str | None, params: dict[str, Any], host: str | None,
           debug_pattern: str = logs.DEFAULT_DEBUG_PATTERN) -> Imported:
    """Store one run from a server log; failed when the log holds a known failure."""
    data = source.data
    report = logs.parse_log_bytes(data, debug_pattern)
    require_server_lines(report, source)
    args, warnings = args_warnings(report.server_args, source.where)
    command = launch_command(args) if args else ""
    run_params = {mine: args[theirs] for theirs, mine in PARAMS_FROM_ARGS.items() if args.get(theirs) is not None}
    run_params.update(params)
    variant = name or PurePosixPath(source.where.rpartition(":")[2] if source.host else source.where).stem
    run = Run(uid=new_uid(variant), experiment=EXPERIMENT, variant=variant, host=host or source.host or "imported",
              spec_path=source.where, params=run_params, command=command, controller="orch import")
    store.add(run)
    metrics = collect.log_metrics(report)
    _store_rows(store, run, report, metrics)
    store.save_log(run, data)
    flags = []
    if run_params.get("speculative_algorithm") and metrics["accept_len"] is not None \
            and metrics["accept_len"] <= collect.REJECTED_AT_OR_BELOW:
        flags.append("draft-rejected")
    diagnosis = report.diagnosis
    status = FAILED if diagnosis else SUCCEEDED
    store.event(run, "imported", f"from {source.where} ({len(data)} bytes)" + (f"; {source.note}" if source.note else ""))
    for warning in warnings:
        store.event(run, "warning", warning)
    store.update_run(run, status=status, flags=flags, ended_at=now(),
                     error=f"server failed: {diagnosis.summary}" if diagnosis else None,
                     diagnosis={"kind": diagnosis.kind, "summary": diagnosis.summary,
                                "evidence": list(diagnosis.evidence)} if diagnosis else None)
    return Imported(run.id, run.uid, status, metrics, tuple(flags), diagnosis, command, tuple(warnings))


def require_server_lines(report: logs.LogReport, source: LogSource) -> None:
    """A file with no line SGLang writes (`server_args=`, a batch line, the ready line, a known
    failure) is no server log: random bytes or the wrong file, refused before anything is stored."""
    if report.server_args or report.decode or report.prefill or report.ready or report.diagnosis:
        return
    what = "is empty" if not source.data.strip() else (
        "holds no SGLang line (no `server_args=`, no Prefill or Decode batch line, no ready line, no known failure)")
    raise SpecError(f"{source.where}: {what}; give the log SGLang's server wrote (nothing was recorded)")


def _store_rows(store: Store, run: Run, report: logs.LogReport, metrics: dict[str, Any]) -> None:
    notes = collect.log_metric_notes(metrics)
    store.add(*(MetricRow(run_id=run.id, name=k, value=v, source="decode_log",
                          note=f"{notes[k]} (imported log)" if k in notes else "") for k, v in metrics.items()))
    store.add(*collect.series_rows(run.id, report))
    store.add(*(DebugRow(run_id=run.id, seq=i, text=d.text, fields=d.fields) for i, d in enumerate(report.debug_lines)))


