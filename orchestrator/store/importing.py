"""The write path of `orch import` into a database that exists at this orch's schema: plain DB-API
(the standard library's sqlite3, or psycopg), no SQLAlchemy, SQLModel or pydantic (importing them
was 0.8 s of the 3 s an import of a 64 MB log took). A fresh database, or one an older orch made,
is created or upgraded by the store (store/database.py) first, then written here too.

The rows are the ones the store writes: the same tables, columns and defaults (COLUMNS, from the tables'
one declaration, store/tables.py), JSON columns encoded as the store's JSON type encodes them,
one statement per table executed over all its rows. The whole import is one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import metricjson
from . import tables
from .reader import postgresql_conninfo, sqlite_file
from .tables import JSON_COLUMNS, REQUIRED, SCHEMA_TABLE, VERSION

FAST_COMPRESSION_FROM = 16 * 2**20  # logs from this size (bytes) are compressed at zlib's fastest level

# The columns of the tables an import writes, each with its default (a callable: made per row;
# REQUIRED: every row gives it), the generated id left to the database: the tables' one declaration
COLUMNS: dict[str, dict[str, Any]] = {table.name: tables.written(table) for table in tables.TABLES}


def pack(data: bytes) -> tuple[int, bytes]:
    """A log as the store keeps it: its size and its zlib bytes (a big one at the fastest level: a 64 MB
    log in 0.3 s instead of 0.9 s, 30 % larger). zlib lets go of the interpreter: another thread may
    read the log meanwhile."""
    level = 6 if len(data) < FAST_COMPRESSION_FROM else 1
    return len(data), zlib.compress(data, level)


def column_values(columns: dict[str, Any], rows: list[dict[str, Any]], encoded: Callable[[str], bool]) -> list[tuple]:
    """Rows as tuples of every column's value, a missing one its default, JSON columns (`encoded`)
    as json.dumps writes them; built column by column (a comprehension per column is a third of a
    generator per row)."""
    by_column = []
    for name, default in columns.items():
        if default is REQUIRED:
            column = [row[name] for row in rows]
        elif callable(default):
            column = [row[name] if name in row else default() for row in rows]
        else:
            column = [row.get(name, default) for row in rows]
        by_column.append(list(map(json.dumps, column)) if encoded(name) else column)
    return list(zip(*by_column))


def insert_sql(table: str, names: list[str], mark: str, returning: str = "") -> str:
    quoted = ", ".join(f'"{n}"' for n in names)  # quoted: `values` is an SQL keyword
    return f"INSERT INTO {table} ({quoted}) VALUES ({', '.join([mark] * len(names))}){returning}"


@dataclass
class ImportedRun:
    """The run being written: what Store.event and the caller read of it."""

    id: int
    uid: str


class Writer:
    """One transaction on the database, over its driver: committed by `commit`, dropped by `close` without."""

    def __init__(self, url: str, connection: Any, kind: str):
        self.url, self._conn, self.kind = url, connection, kind
        self._mark = "?" if kind == "sqlite" else "%s"

    def add(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Rows of one table, their ids left to the database."""
        if rows:
            columns = COLUMNS[table]
            self._conn.cursor().executemany(insert_sql(table, list(columns), self._mark),
                                            column_values(columns, rows, JSON_COLUMNS.__contains__))

    def add_metrics(self, run: ImportedRun, rows: list[dict[str, Any]]) -> None:
        """The run's metric rows, and its metrics text made from them as the store makes it (read back:
        the text holds the values as the database keeps them)."""
        self.add("metricrow", rows)
        found = self._conn.cursor().execute(f"SELECT run_id, name, value FROM metricrow WHERE run_id = {self._mark} "
                                            "ORDER BY id", (run.id,)).fetchall()
        values = metricjson.first_values(found).get(run.id)
        self.update_run(run, metrics_json=metricjson.object_text(values) if values else None)

    def add_run(self, values: dict[str, Any]) -> ImportedRun:
        columns = COLUMNS["run"]
        row, = column_values(columns, [values], JSON_COLUMNS.__contains__)
        cursor = self._conn.cursor()
        if self.kind == "sqlite":
            cursor.execute(insert_sql("run", list(columns), self._mark), row)
            run_id = cursor.lastrowid
        else:
            cursor.execute(insert_sql("run", list(columns), self._mark, " RETURNING id"), row)
            run_id = cursor.fetchone()[0]
        return ImportedRun(int(run_id), values["uid"])

    def update_run(self, run: ImportedRun, **changes: Any) -> None:
        sets = ", ".join(f'"{name}" = {self._mark}' for name in changes)
        values = [json.dumps(v) if name in JSON_COLUMNS else v for name, v in changes.items()]
        self._conn.cursor().execute(f"UPDATE run SET {sets} WHERE id = {self._mark}", (*values, run.id))

    def pack_log(self, data: bytes) -> tuple[int, bytes]:
        return pack(data)  # an import keeps no secrets to hide

    def save_log(self, run: ImportedRun, packed: tuple[int, bytes]) -> None:
        size, blob = packed
        self.add("logrow", [{"run_id": run.id, "size": size, "data": blob}])

    def save_log_file(self, run: ImportedRun, size: int, copy: IO[bytes]) -> None:
        """The log's compressed copy from a file (`run/logpieces.py`), a megabyte at a time into
        SQLite's blob (never the whole copy in memory); PostgreSQL takes it as one value."""
        if self.kind != "sqlite":
            return self.save_log(run, (size, copy.read()))
        length = copy.seek(0, 2)
        copy.seek(0)
        self._conn.cursor().execute("INSERT INTO logrow (run_id, size, data) VALUES (?, ?, zeroblob(?))",
                                    (run.id, size, length))
        with self._conn.blobopen("logrow", "data", run.id) as blob:  # logrow's run_id is its rowid
            while piece := copy.read(1 << 20):
                blob.write(piece)

    def event(self, run: ImportedRun, kind: str, message: str) -> None:
        self.add("eventrow", [{"run_id": run.id, "kind": kind, "message": message}])

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


def open_current(url: str) -> Writer | None:
    """A Writer of the database at `url` when it is an SQLite file or a PostgreSQL database already
    at this orch's schema; None for any other (fresh, older, newer, another kind of URL): the store
    makes, upgrades or refuses it."""
    path = sqlite_file(url)
    if path is not None:
        return _current(url, _sqlite(path), "sqlite", sqlite3.Error) if path.is_file() else None
    conninfo = postgresql_conninfo(url)
    if conninfo is None:
        return None
    try:
        import psycopg
    except ModuleNotFoundError:
        return None  # the store says the driver is missing
    try:
        connection = psycopg.connect(conninfo)
    except psycopg.Error:
        return None  # the store says what is wrong with it
    return _current(url, connection, "postgresql", psycopg.Error)


def _sqlite(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level="DEFERRED")
    connection.execute("PRAGMA busy_timeout=10000")  # first: another controller may hold the file right now
    connection.execute("PRAGMA foreign_keys=ON")  # as the store's connections
    return connection


def _current(url: str, connection: Any, kind: str, errors: type[Exception]) -> Writer | None:
    try:
        (found,), = connection.cursor().execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchall()
    except errors:  # no version table: not made by this orch, or not a database at all
        connection.close()
        return None
    if found != VERSION:
        connection.close()
        return None
    if kind == "postgresql":
        connection.rollback()  # the check's transaction: the import's own starts afresh
    return Writer(url, connection, kind)


__all__ = ["COLUMNS", "FAST_COMPRESSION_FROM", "REQUIRED", "ImportedRun", "Writer", "column_values",
           "insert_sql", "open_current", "pack"]
