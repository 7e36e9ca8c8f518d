"""The Reader: rows of an orch database over plain DB-API (the standard library's sqlite3, or
psycopg for PostgreSQL), without SQLAlchemy, SQLModel or pydantic, and the helpers every plain path
shares (URLs, messages, JSON columns). The bottom of the store: it imports only the tables'
declaration and orch's errors; an older schema is upgraded through a hook the opener hands it
(store/reading.py), never by importing the store.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.errors import StoreError
from .tables import JSON_COLUMNS, SCHEMA_TABLE, VERSION

CHUNK = 900  # run ids per IN (...) list: under every database's limit on bound values
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
                 errors: tuple[type[Exception], ...] = (sqlite3.Error,), mark: str = "?",
                 upgrade: Callable[[str], None] | None = None):
        self.url, self.kind = url, kind
        self._upgrade_to_current = upgrade  # the store's, handed down by whoever opens the database
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
        """A database an older orch made brought to this schema by the store (only the opener
        above this module knows it: store/reading.py)."""
        if self._upgrade_to_current is None:
            raise StoreError(f"database {shown(self.url)!r} is at an older schema; open it with `orch` to upgrade it")
        self._upgrade_to_current(self.url)
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


def of(source: Any) -> Reader:
    """A Reader of a Reader (itself) or of a Store (connections borrowed from its pool per query)."""
    if isinstance(source, Reader):
        return source
    dialect = source.engine.dialect
    return Reader(source.url, dialect.name, borrow=source.engine.raw_connection, errors=(dialect.loaded_dbapi.Error,),
                  mark="?" if dialect.paramstyle == "qmark" else "%s")
