"""A run made by hand, recorded from its server log (`orch import LOGFILE`): the engine that wrote
it (the first whose lines the log holds), its series, accept length from its stats lines, debug
lines, diagnosis, and the params and launch command rebuilt from the engine's print of its
arguments."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Container, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any, Protocol

from . import logpieces, logrows
from orchestrator import engines
from orchestrator.core.defaults import DEFAULT_DEBUG_PATTERN
from orchestrator.engines.base import HEADLINE, DebugLine, Diagnosis, Engine, LogReport, LogStream, MetricInfo
from orchestrator.engines.seriesblock import SeriesBlock
from orchestrator.errors import SpecError
from orchestrator.core import secrets
from orchestrator.core.clock import new_uid, now
from orchestrator.core.inventory import Host
from orchestrator.store import freshfile, importing, series
from orchestrator.store.importing import ImportedRun
from orchestrator.store.reading import FAILED, INTERRUPTED, SUCCEEDED, sqlite_file
from orchestrator.store.rowid import stored_id

if TYPE_CHECKING:  # the ORM is imported only where an import writes through the store
    from orchestrator.store.database import Run, Store

EXPERIMENT = "imported"
Scalar = bool | int | float | str  # a `--params` value, read as YAML would read it


@dataclass(frozen=True)
class Imported:
    run_id: int
    uid: str
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    diagnosis: Diagnosis | None = None
    command: str = ""
    warnings: tuple[str, ...] = ()
    engine: str = ""  # the engine whose lines the log holds
    shown: tuple[MetricInfo, ...] = ()  # the metrics that engine declares


def parse_params(items: list[str]) -> dict[str, Scalar]:
    """`k=v` pairs from the command line; values read as YAML scalars would be (numbers, booleans)."""
    params: dict[str, Scalar] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--params {item!r}: expected key=value")
        params[key.strip()] = _scalar(value)
    return params


def _scalar(text: str) -> Scalar:
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
    path: Path | None = None  # a local log bigger than a piece: read piece by piece from here (data is empty)
    experiment: str = EXPERIMENT  # the experiment its run is filed under (`orch import --experiment`)
    span: tuple[str, str] | None = None  # the log's first and last timestamps (engines/logspan.py), if it has any


def read_local(path: Path) -> LogSource:
    try:
        if path.stat().st_size <= logpieces.PIECE or not path.is_file():
            return LogSource(path.read_bytes(), str(path), None)
        with open(path, "rb"):  # readable: said now, before anything is stored
            return LogSource(b"", str(path), None, path=path)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the log: {exc.strerror or exc}; give the path of a server log, "
                        f"or HOST:PATH for a log on an inventory host") from None


def split_remote(ref: str, hosts: Container[str]) -> tuple[str, str] | None:
    """("gpu1", "/var/log/sglang.log") for "gpu1:/var/log/sglang.log" when gpu1 is an inventory host."""
    name, sep, where = ref.partition(":")
    return (name, where) if sep and where and name in hosts else None


async def read_remote(host: Host, path: str, debug_pattern: str) -> LogSource:
    """A log on a host, over its transport; a big one cut down there to what the parser reads."""
    from orchestrator.host import server
    from orchestrator.remote import connect
    from orchestrator.host.session import absolute

    conn = await connect(host)
    try:
        every = [engines.get(name) for name in engines.KNOWN]  # which engine wrote it is not known yet
        patterns = [engine.excerpt_pattern(debug_pattern) for engine in every]
        pattern = None if None in patterns else "|".join(p for p in patterns if p)
        data, size = await server.fetch_log(conn, posixpath.join(conn.home, absolute(path, conn.home)), pattern,
                                            max(engine.log_tail_size for engine in every))
    except FileNotFoundError:
        raise SpecError(f"{host.name}:{path}: no such log on the host; check the path "
                        f"(`orch import {host.name}:/full/path/to/server.log`)") from None
    except IsADirectoryError:
        raise SpecError(f"{host.name}:{path}: a folder, not a log; give the log file's path") from None
    finally:
        await conn.close()
    note = "" if len(data) == size else f"cut down on the host from {size} bytes to the lines orch reads and the last part"
    return LogSource(data, f"{host.name}:{path}", host.name, note)


class Sink(Protocol):
    """What an import writes through: importing.Writer (plain DB-API), or the store (`_Through`)."""

    def pack_log(self, data: bytes) -> tuple[int, bytes]: ...
    def add_run(self, values: dict[str, Any]) -> ImportedRun: ...
    def add_metrics(self, run: ImportedRun, rows: list[dict[str, Any]]) -> None: ...
    def save_log(self, run: ImportedRun, packed: tuple[int, bytes]) -> None: ...
    def save_log_file(self, run: ImportedRun, size: int, copy: IO[bytes]) -> None: ...
    def add(self, table: str, rows: list[dict[str, Any]]) -> None: ...
    def event(self, run: ImportedRun, kind: str, message: str) -> None: ...
    def update_run(self, run: ImportedRun, **changes: Any) -> None: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


def writer(url: str) -> Sink:
    """What an import writes through: plain DB-API into an SQLite file or a PostgreSQL database at
    this orch's schema (no SQLAlchemy imported when it is so already: 0.8 s of a 64 MB log's 3 s);
    the store makes a fresh one or upgrades an older one first (or refuses it with one line). Any
    other database: through the store."""
    found = importing.open_current(url)
    fresh = sqlite_file(url)
    if found is None and fresh is not None and not fresh.exists() and freshfile.make(fresh):
        found = importing.open_current(url)  # made without SQLAlchemy (0.85 s of its import)
    if found is not None:
        return found
    from orchestrator.store.database import Store

    store = Store(url)
    found = importing.open_current(url)
    if found is None:
        return _Through(store)
    store.engine.dispose()
    return found


class _Through:
    """The store's own writes, under the names of importing.Writer's; the runs it made are known
    to the caller by their id and uid (an ImportedRun), as the Writer's are."""

    def __init__(self, store: Store):
        from orchestrator.store import database

        self.store = store
        self.tables: dict[str, type[database.SeriesBlockRow] | type[database.DebugRow]] = {
            "seriesblockrow": database.SeriesBlockRow, "debugrow": database.DebugRow}
        self._runs: dict[int, Run] = {}  # the store's rows of the runs made here, by id

    def pack_log(self, data: bytes) -> tuple[int, bytes]:
        return self.store.pack_log(data)

    def add_run(self, values: dict[str, Any]) -> ImportedRun:
        from orchestrator.store.database import Run

        run = Run(**values)
        self.store.add(run)
        self._runs[stored_id(run)] = run
        return ImportedRun(stored_id(run), run.uid)

    def add_metrics(self, run: ImportedRun, rows: list[dict[str, Any]]) -> None:
        from orchestrator.store.database import MetricRow

        self.store.add(*(MetricRow(**row) for row in rows))

    def save_log(self, run: ImportedRun, packed: tuple[int, bytes]) -> None:
        self.store.save_log(self._runs[run.id], b"", packed=packed)

    def save_log_file(self, run: ImportedRun, size: int, copy: IO[bytes]) -> None:
        # its secrets hidden already (no keep_secret)
        self.store.save_log(self._runs[run.id], b"", packed=(size, copy.read()))

    def add(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.store.add_children(self.tables[table], rows)

    def event(self, run: ImportedRun, kind: str, message: str) -> None:
        self.store.event(self._runs[run.id], kind, message)

    def update_run(self, run: ImportedRun, **changes: Any) -> None:
        self.store.update_run(self._runs[run.id], **changes)

    def commit(self) -> None:
        """Each write above committed already."""

    def close(self) -> None:
        self.store.engine.dispose()


def record(sink: Sink, source: LogSource, name: str | None, params: Mapping[str, object], host: str | None,
           debug_pattern: str = DEFAULT_DEBUG_PATTERN, secret_names: tuple[str, ...] = ()) -> Imported:
    """Store one run from a server log through `sink` (`writer(url)`); failed when the log holds a
    known failure. Nothing is stored for a log no engine wrote. Secrets are hidden first (the names
    declared, the shell's secret values, token shapes): everything stored and printed is read from the
    masked log. A log bigger than a piece is read, masked, parsed, compressed and stored piece by
    piece when its engine reads logs so (`Engine.log_stream`): memory does not grow with it."""
    params = {k: _masked_param(k, v, secret_names) for k, v in params.items()}
    try:
        big = source.path is not None or len(source.data) > logpieces.PIECE
        done = _record_in_pieces(sink, source, name, params, host, debug_pattern, secret_names) if big else None
        if done is None:
            data = source.data if source.path is None else source.path.read_bytes()
            source = replace(source, data=secrets.mask_log(data, secret_names, os.environ), path=None)
            done = _record(sink, source, name, params, host, debug_pattern)
        sink.commit()
        return done
    finally:
        sink.close()


def _record(sink: Sink, source: LogSource, name: str | None, params: Mapping[str, object], host: str | None,
            debug_pattern: str) -> Imported:
    data = source.data
    with ThreadPoolExecutor(1) as pool:  # the log compressed while it is read (a 64 MB log: 0.3 s of 3)
        packing = pool.submit(sink.pack_log, data)
        engine, report = read(source, debug_pattern)
        packed = packing.result()
    run_params, command, warnings = engine.imported_launch(report.launch_args, source.where)
    run_params.update(params)
    run = sink.add_run(_run_values(source, name, host, run_params, command))
    sink.save_log(run, packed)
    sink.add("seriesblockrow", logrows.series_blocks(run.id, report))
    sink.add("debugrow", logrows.debug_values(run.id, report))
    return _finish(sink, run, source, engine, report, command, warnings, len(data), len(report.series))


def _record_in_pieces(sink: Sink, source: LogSource, name: str | None, params: Mapping[str, object],
                      host: str | None, debug_pattern: str, secret_names: tuple[str, ...]) -> Imported | None:
    """The log read piece by piece: each masked, compressed into a temporary file (in a thread)
    and parsed, its series blocks and debug lines written at once. None when the first piece holds
    no line of an engine that reads logs so: the log is then read whole."""
    hidden = secrets.secret_values(os.environ, secret_names)

    def masked(piece: bytes, stream: LogStream | None = None) -> bytes:
        if stream is None:
            return secrets.mask_log(piece, secret_names, os.environ)
        piece = secrets.hide_bytes(piece, hidden)  # the shell's secret values first, as mask_log does
        return secrets.mask_log(piece, secret_names, shape=stream.shape(piece))

    pieces = logpieces.of_file(source.path) if source.path is not None else logpieces.of_bytes(source.data)
    first = masked(next(pieces, b""))
    found = _streaming_engine(first, debug_pattern)
    if found is None:
        return None
    engine, stream, (blocks, debug) = found
    packed = logpieces.Packed()
    try:
        packed.add(first)
        run = sink.add_run(_run_values(source, name, host, {}, ""))  # its params once the whole log is read
        written = _write_piece(sink, run, blocks, debug, 0)
        for piece in pieces:
            piece = masked(piece, stream)
            packed.add(piece)
            written = _write_piece(sink, run, *stream.feed(piece), written)
        size, copy = packed.finish()
        sink.save_log_file(run, size, copy)
    finally:
        packed.close()
    report = stream.report()
    run_params, command, warnings = engine.imported_launch(report.launch_args, source.where)
    run_params.update(params)
    sink.update_run(run, params=run_params, command=command)
    return _finish(sink, run, source, engine, report, command, warnings, size, stream.points)


def _streaming_engine(first: bytes, debug_pattern: str) -> tuple[Engine, LogStream, tuple[list[SeriesBlock], list[DebugLine]]] | None:
    """The engine whose lines the first piece holds, its stream fed that piece, and what it read of
    it; None where an engine asked before reads logs only whole (its reading of the whole log decides)."""
    for name in engines.KNOWN:
        engine = engines.get(name)
        stream = engine.log_stream(debug_pattern)
        if stream is None:
            return None
        fed = stream.feed(first)
        if stream.claimed():
            return engine, stream, fed
    return None


def _write_piece(sink: Sink, run: ImportedRun, blocks: list[SeriesBlock], debug: list[DebugLine], written: int) -> int:
    """A piece's series blocks and debug lines (numbered on from `written`); the debug lines written so far."""
    sink.add("seriesblockrow", series.block_values(run.id, blocks))
    sink.add("debugrow", logrows.debug_rows(run.id, debug, written))
    return written + len(debug)


def _run_values(source: LogSource, name: str | None, host: str | None, params: dict[str, object],
                command: str) -> dict[str, Any]:
    variant = name or PurePosixPath(source.where.rpartition(":")[2] if source.host else source.where).stem
    return {"uid": new_uid(variant), "experiment": source.experiment, "variant": variant,
            "host": host or source.host or "imported", "spec_path": source.where, "params": params,
            "command": command, "controller": "orch import", **({"started_at": source.span[0]} if source.span else {})}


def _finish(sink: Sink, run: ImportedRun, source: LogSource, engine: Engine, report: LogReport, command: str,
            warnings: list[str], size: int, points: int) -> Imported:
    """The run's metrics, flags, events and status, from the log's report."""
    sink.add_metrics(run, [{"run_id": run.id, "name": m.name, "value": m.value, "source": m.source,
                            "note": f"{m.note} (imported log)" if m.note else ""} for m in report.measures])
    metrics: dict[str, Any] = {}
    for measure in report.measures:
        metrics.setdefault(measure.name, measure.value)
    flags, _ = logrows.judge(sink, run, [m for m in report.measures if m.name == HEADLINE])
    diagnosis = report.diagnosis
    status = _status(report, points)
    sink.event(run, "imported", f"from {source.where} ({size} bytes, {engine.name})"
               + (f"; {source.note}" if source.note else ""))
    for warning in warnings:
        sink.event(run, "warning", warning)
    sink.update_run(run, status=status, flags=flags, ended_at=source.span[1] if source.span else now(),
                    error=f"server failed: {diagnosis.summary}" if diagnosis else
                    NEVER_FINISHED if status == INTERRUPTED else None,
                    diagnosis=diagnosis.as_record() if diagnosis else None)
    return Imported(run.id, run.uid, status, metrics, tuple(flags), diagnosis, command, tuple(warnings), engine.name,
                    engine.metrics)


def _masked_param(key: str, value: object, secret_names: tuple[str, ...]) -> object:
    """A `--params` value as it is stored: hidden under a secret name, token shapes hidden in text."""
    if not isinstance(value, str):
        return value
    if secrets.is_secret_name(key, secret_names) and len(value) >= secrets.MIN_LENGTH:
        return f"<secret:{key}>"
    return secrets.mask_text(value, secret_names)


NEVER_FINISHED = ("the log ends while the server was starting: no ready line, no stats line and no failure "
                  "(a log copied before the server was up, or a server killed while it started)")


def _status(report: LogReport, points: int) -> str:
    """failed: a known failure; interrupted: a server that never got past its startup (no ready
    line, no series point); else succeeded."""
    if report.diagnosis:
        return FAILED
    return SUCCEEDED if report.ready or points else INTERRUPTED


def read(source: LogSource, debug_pattern: str) -> tuple[Engine, LogReport]:
    """The engine whose lines the log holds (its print of its arguments, a stats line, its ready
    line, its startup lines), and its reading of the log; else the first whose known failures it
    holds (a crash excerpt: one engine's failure signatures may match another's traceback). None
    holding any: no server log, refused before anything is stored."""
    failed: tuple[Engine, LogReport] | None = None
    for name in engines.KNOWN:
        engine = engines.get(name)
        report = engine.parse_log(source.data, debug_pattern)
        if report.launch_args or report.series or report.ready or report.started:
            return engine, report
        if report.diagnosis and failed is None:
            failed = engine, report
    if failed is not None:
        return failed
    what = "is empty" if not source.data.strip() else \
        f"holds no line a server writes ({'; '.join(engines.get(n).log_lines for n in engines.KNOWN)})"
    raise SpecError(f"{source.where}: {what}; give the log the engine's server wrote (nothing was recorded)")
