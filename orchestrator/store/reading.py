"""The read path: what orch's reading commands (ls, show, diff, series, logs, compare, report) read,
over plain DB-API (the standard library's sqlite3, or psycopg for PostgreSQL), without SQLAlchemy,
SQLModel or pydantic: importing those cost each reading command 1.3 s of its start.

The same SQL on both databases (`?` placeholders, rewritten to `%s` for psycopg); JSON columns come
back as text from SQLite and decoded from PostgreSQL, and are decoded here either way. A reading
command never writes: a missing SQLite file or a database without orch's tables reads as an empty
one (nothing is created); a database of a newer schema is refused as the store refuses it; an
older one is upgraded through the store (store/schema.py), as any command would.
"""

from __future__ import annotations

import json
import re
import sqlite3
import zlib
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import StoreError
# the tables' one declaration (store/tables.py), named here too for the read path's users
from .tables import FAILED as FAILED, INTERRUPTED as INTERRUPTED, JSON_COLUMNS, RUN_COLUMNS, RUNNING as RUNNING
from .tables import SCHEMA_TABLE as SCHEMA_TABLE, SUCCEEDED as SUCCEEDED, current_user as current_user

VERSION = 5  # 1: before the schema carried a version; 2: versioned, columns added in place; 3: run.metrics_json;
# 4: run.effective_params; 5: seriesblock (a series as packed blocks; seriesrow kept for the runs before)
STATUSES = (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)
CHUNK = 900  # run ids per IN (...) list: under every database's limit on bound values

RunRow = namedtuple("RunRow", RUN_COLUMNS)  # type: ignore[misc]  # a run as Store.get returns it, as plain data
_TABLES = {"sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
           "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"}
_MISSING = ("no such column", "no such table", "does not exist")  # a database an older orch made


def shown(url: str) -> str:
    """A database URL as a message may show it: a password in it (`user:PASSWORD@`, `password=`)
    replaced by ***. A team database's password belongs in ~/.pgpass or PGPASSWORD, not in --db. Also for a
    driver's message, which may quote the URL."""
    url = re.sub(r"(://[^/@:\s]*:)[^/\s]*@", r"\1***@", url)
    return re.sub(r"(?i)(password=)[^&;\s]*", r"\1***", url)


def what_to_check(url: str) -> str:
    """The advice of a database that cannot be opened."""
    if url.startswith(("postgresql", "postgres:")):
        return "check its host, port, user and name, that the server runs, and its password in ~/.pgpass or PGPASSWORD"
    return "check the path, its folder and that it is an orch database"


def said(exc: BaseException) -> str:
    """A driver's message on one line, a password in it hidden (`shown`)."""
    return shown(" ".join(str(exc).split()))


def decoded(name: str, value: Any) -> Any:
    """A column's value as the store's models read it: JSON columns decoded (SQLite keeps them as text)."""
    return json.loads(value) if name in JSON_COLUMNS and isinstance(value, str) else value


def columns(names: Iterable[str], table: str = "") -> str:
    """Quoted column names (`values` is an SQL keyword), optionally of `table`."""
    prefix = f'"{table}".' if table else ""
    return ", ".join(f'{prefix}"{n}"' for n in names)


class Reader:
    """Rows from the database at `url`: from its own DB-API connection, from connections borrowed
    from a Store's pool (`of(store)`), or none at all (no database yet: every query reads nothing)."""

    def __init__(self, url: str, kind: str, connection: Any = None, borrow: Callable[[], Any] | None = None,
                 errors: tuple[type[Exception], ...] = (sqlite3.Error,), mark: str = "?"):
        self.url, self.kind = url, kind
        self._connection, self._borrow, self._errors, self._mark = connection, borrow, errors, mark
        self._upgraded = borrow is not None  # a Store prepared its schema already

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        if self._connection is None and self._borrow is None:
            return []
        if self._mark != "?":  # psycopg's placeholders: a literal % is written %%
            sql = sql.replace("%", "%%").replace("?", self._mark)
        conn = self._connection if self._connection is not None else self._borrow()  # type: ignore[misc]
        try:
            cursor = conn.cursor()
            cursor.execute(sql, tuple(params))
            return cursor.fetchall()
        except self._errors as exc:
            if self._upgraded or not any(s in str(exc).lower() for s in _MISSING):
                raise StoreError(f"cannot open database {shown(self.url)!r}: {said(exc)}; {what_to_check(self.url)}") from None
            self._upgrade()
            return self.rows(sql, params)
        finally:
            if self._borrow is not None:
                conn.close()  # back to the Store's pool

    def each(self, sql: str, params: Iterable[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of `sql` as the database hands them over: a million rows without a list of them all."""
        if self._connection is None or self._mark != "?":  # no database, or a borrowed / PostgreSQL one
            yield from self.rows(sql, params)
            return
        cursor = self._connection.cursor()
        try:
            cursor.execute(sql, tuple(params))
        except self._errors:
            yield from self.rows(sql, params)  # its one way of reporting (or upgrading an older schema)
            return
        yield from cursor

    def chunked(self, sql: str, run_ids: list[int], params: Iterable[Any] = ()) -> Iterable[tuple[Any, ...]]:
        """Rows of `sql` (which holds `{ids}` where its `run_id IN (...)` list goes) for every run id."""
        for start in range(0, len(run_ids), CHUNK):
            part = run_ids[start:start + CHUNK]
            yield from self.rows(sql.format(ids=", ".join("?" * len(part))), (*params, *part))

    def check_schema(self) -> Reader:
        """Refuse a newer schema as the store does; read a database without orch's tables as empty;
        upgrade an older one through the store."""
        tables = {name for (name,) in self.rows(_TABLES[self.kind])}
        if not tables & {SCHEMA_TABLE, "run"}:
            self._connection = None
            return self
        found = 1  # orch's tables without a version row: made before the schema was versioned
        if SCHEMA_TABLE in tables:
            (stored,), = self.rows(f"SELECT max(version) FROM {SCHEMA_TABLE}")
            found = int(stored) if stored is not None else 1
        if found > VERSION:
            raise StoreError(f"database {shown(self.url)!r} was written by a newer orch (schema {found}, this orch knows "
                             f"{VERSION}); upgrade orch, or use another --db")
        if found < VERSION:
            self._upgrade()
        return self

    def _upgrade(self) -> None:
        from .database import Store  # the write path: only for a database an older orch made

        Store(self.url)
        self._upgraded = True


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL (no options, not in memory); None for any other URL."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix) and url[len(prefix):] not in ("", ":memory:") and "?" not in url:
            return Path(url[len(prefix):])
    return None


def postgresql_conninfo(url: str) -> str | None:
    """A PostgreSQL URL as psycopg takes it; None for any other URL."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    return None


def open_url(url: str) -> Reader:
    """A Reader of the database at `url` (SQLite file or PostgreSQL); other URLs through the store."""
    path, conninfo = sqlite_file(url), postgresql_conninfo(url)
    if path is not None:
        return _sqlite(url, path)
    if conninfo is not None:
        return _postgresql(url, conninfo)
    from .database import Store

    return of(Store(url))


def _sqlite(url: str, path: Path) -> Reader:
    if not path.exists():
        if not path.parent.is_dir():
            raise StoreError(f"cannot open database {shown(url)!r}: unable to open database file; check the path, its "
                             "folder and that it is an orch database")
        return Reader(url, "sqlite")  # a reading command creates no database
    try:
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA busy_timeout=10000")  # another controller may be writing right now
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {shown(url)!r}: {said(exc)}; check the path, its folder and that it is an orch "
                         "database") from None
    return Reader(url, "sqlite", connection).check_schema()


def _postgresql(url: str, conninfo: str) -> Reader:
    try:
        import psycopg
    except ModuleNotFoundError as exc:
        raise StoreError(f"cannot open database {shown(url)!r}: its driver {exc.name!r} is not installed; "
                         "pip install 'orch[postgres]' for PostgreSQL") from None
    try:
        connection = psycopg.connect(conninfo, autocommit=True)  # no transaction left open between reads
    except psycopg.Error as exc:
        raise StoreError(f"cannot open database {shown(url)!r}: {said(exc)}; {what_to_check(url)}") from None
    return Reader(url, "postgresql", connection, errors=(psycopg.Error,), mark="%s").check_schema()


def of(source: Any) -> Reader:
    """A Reader of a Reader (itself) or of a Store (connections borrowed from its pool per query)."""
    if isinstance(source, Reader):
        return source
    dialect = source.engine.dialect
    return Reader(source.url, dialect.name, borrow=source.engine.raw_connection, errors=(dialect.loaded_dbapi.Error,),
                  mark="?" if dialect.paramstyle == "qmark" else "%s")


# --- one run -------------------------------------------------------------------------------------

def get(source: Any, ref: str) -> RunRow:
    """A run by id (`12`), uid or unique uid prefix, `last`, or `last~N` (N runs before it): Store.get."""

    reader = of(source)
    select = f"SELECT {columns(RUN_COLUMNS)} FROM run"
    match = re.fullmatch(r"last(?:~(\d+))?", ref)
    if match:
        found = reader.rows(f"{select} ORDER BY id DESC LIMIT 1 OFFSET ?", (int(match.group(1) or 0),))
        if not found:
            raise StoreError(f"no run {ref!r} in {shown(reader.url)}: it holds fewer runs; see `orch ls`")
        return _run(found[0])
    if ref.isdigit() and int(ref) < 2**63:
        found = reader.rows(f"{select} WHERE id = ?", (int(ref),))
        if found:
            return _run(found[0])
    found = reader.rows(f"{select} WHERE uid LIKE ? || '%'", (ref,))  # as SQLAlchemy's startswith: _ and % match any
    if len(found) == 1:
        return _run(found[0])
    if len(found) > 1:
        raise StoreError(f"run {ref!r} is ambiguous ({len(found)} runs match); give more of the id")
    raise StoreError(f"no run {ref!r} in {shown(reader.url)}; see `orch ls` for run ids")


def _run(row: tuple[Any, ...]) -> RunRow:
    return RunRow(*(decoded(name, value) for name, value in zip(RUN_COLUMNS, row)))


def children(source: Any, run_id: int, table: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """One run's rows of a child table, in the order written, as {column: value}."""
    found = of(source).rows(f"SELECT {columns(names)} FROM {table} WHERE run_id = ? ORDER BY id", (run_id,))
    return [{n: decoded(n, v) for n, v in zip(names, row)} for row in found]


REQUEST_COLUMNS = ("seq", "at_s", "ttft_ms", "e2e_ms", "prompt_tokens", "completion_tokens", "accept_len", "itl_ms")


def requests(source: Any, run_id: int) -> list[dict[str, Any]]:
    """The run's workload requests in the order sent (`orch show --requests`)."""
    return children(source, run_id, "requestrow", REQUEST_COLUMNS)


def log(source: Any, run_id: int) -> bytes | None:
    found = of(source).rows("SELECT data FROM logrow WHERE run_id = ?", (run_id,))
    return zlib.decompress(found[0][0]) if found else None


def node_logs(source: Any, run_id: int) -> dict[int, tuple[str, bytes]]:
    """node rank -> (host, log) of each node of rank > 0 of a run over several hosts."""
    found = of(source).rows("SELECT node, host, data FROM nodelogrow WHERE run_id = ? ORDER BY node", (run_id,))
    return {int(node): (host, zlib.decompress(data)) for node, host, data in found}


def record(source: Any, run: RunRow) -> dict[str, Any]:
    """The whole run as plain data, exactly as Store.record gives it: what `show --json` prints and
    `diff` compares."""
    from . import series  # it reads the blocks through this module's Reader

    reader = of(source)

    def rows(table: str, *names: str) -> list[dict[str, Any]]:
        return children(reader, run.id, table, names)

    metrics: dict[str, Any] = {}
    sources: dict[str, list[dict[str, Any]]] = {}
    for m in rows("metricrow", "name", "value", "source", "note"):
        metrics.setdefault(m["name"], m["value"])
        sources.setdefault(m["name"], []).append({"value": m["value"], "source": m["source"], "note": m["note"]})
    checkpoint = ("name", "dest", "source_hash", "transforms", "result_hash", "manifest_hash", "files", "total_bytes",
                  "sent_files", "sent_bytes", "seconds")
    return {
        "id": run.id, "uid": run.uid, "experiment": run.experiment, "variant": run.variant, "host": run.host,
        "status": run.status, "user": run.username, "controller": run.controller,
        "server_run_id": run.server_run_id,  # the run that launched the server it used (server reuse)
        "flags": list(run.flags or []), "repeat": run.repeat, "params": run.params, "env": run.env,
        "effective_params": run.effective_params,  # the engine's own print of what it ran with
        "command": run.command,
        "patches": rows("patchrow", "name", "target", "file", "sha256_before", "sha256_after", "state"),
        "metrics": metrics,
        "metric_sources": sources,
        "histograms": {h.pop("name"): h for h in rows("histogramrow", "name", "counts", "source", "note")},
        "series": series.run_series(reader, run.id),
        "debug_lines": rows("debugrow", "text", "fields"),
        "events": rows("eventrow", "at", "kind", "message"),
        "checkpoints": rows("checkpointrow", *checkpoint),
        "preflight": [{**f, "allowed": bool(f["allowed"])}
                      for f in rows("findingrow", "severity", "code", "what", "why", "fix", "allowed")],
        "error": run.error, "diagnosis": run.diagnosis, "spec_path": run.spec_path, "started_at": run.started_at,
        "ended_at": run.ended_at,
    }
