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

import sqlite3
from pathlib import Path

from orchestrator.errors import StoreError
# what the read path's users name, from the modules below: the tables' declaration, the Reader, one run
from .reader import CHUNK as CHUNK, Reader as Reader, columns as columns, decoded as decoded, of as of
from .reader import postgresql_conninfo, said as said, shown as shown, sqlite_file as sqlite_file, what_to_check
from .runrecord import RunRow as RunRow, children as children, get as get, log as log, node_logs as node_logs
from .runrecord import REQUEST_COLUMNS as REQUEST_COLUMNS, record as record, requests as requests
from .tables import FAILED as FAILED, INTERRUPTED as INTERRUPTED, JSON_COLUMNS as JSON_COLUMNS
from .tables import RUN_COLUMNS as RUN_COLUMNS, RUNNING as RUNNING, SCHEMA_TABLE as SCHEMA_TABLE
from .tables import STATUSES as STATUSES, SUCCEEDED as SUCCEEDED, VERSION as VERSION, current_user as current_user


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
    return Reader(url, "sqlite", connection, upgrade=_upgrade).check_schema()


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
    return Reader(url, "postgresql", connection, errors=(psycopg.Error,), mark="%s",
                  upgrade=_upgrade).check_schema()


def _upgrade(url: str) -> None:
    """An older schema brought to this one by the store: the write path, loaded only for it."""
    from .database import Store

    Store(url)
