"""The database's schema version, and its creation and upgrade, safe under concurrent first use.

Several controllers may open one fresh file at the same moment: table creation is retried until
every table exists (a loser of the race sees "already exists" and looks again). A database made by
an older orch is upgraded in place: missing columns are added (nullable, with the model's default),
after a copy of an SQLite file is kept beside it. A database made by a newer orch is refused.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError, ProgrammingError
from sqlmodel import SQLModel

from . import metricjson
from .reader import shown
from .tables import SCHEMA_TABLE as TABLE, VERSION
from orchestrator.errors import StoreError

METRICS_TEXT_FROM = 3  # the first version whose runs carry their metrics as text: older ones get it made
ATTEMPTS = 8
RACE_ERRORS = (OperationalError, IntegrityError, ProgrammingError)


def prepare(engine: Engine, url: str) -> None:
    """Create or upgrade the schema; raise StoreError for a database this orch cannot use."""
    for attempt in range(ATTEMPTS):
        try:
            _prepare_once(engine, url)
            return
        except RACE_ERRORS as exc:
            if attempt == ATTEMPTS - 1 or not _is_race(exc):
                raise
            time.sleep(0.05 * (attempt + 1))  # another controller is creating the same tables


def _is_race(exc: Exception) -> bool:
    message = str(getattr(exc, "orig", exc)).lower()
    return any(s in message for s in ("already exists", "duplicate column", "locked", "unique constraint",
                                      "duplicate key"))


def _prepare_once(engine: Engine, url: str) -> None:
    found = _stored_version(engine)
    if found is not None and found > VERSION:
        raise StoreError(f"database {shown(url)!r} was written by a newer orch (schema {found}, this orch knows "
                         f"{VERSION}); upgrade orch, or use another --db")
    tables = set(inspect(engine).get_table_names())
    if found is None and tables & set(SQLModel.metadata.tables):
        found = 1  # tables without a version row: made before the schema was versioned
    if found is not None and found < VERSION:
        # once per database, and long for a big one (a copy of the file first): said before it starts
        sys.stderr.write(f"orch: upgrading database {shown(url)!r} from schema {found} to {VERSION} (once; "
                         f"{_kept(engine, found) or 'its server keeps its own backups'})\n")
        _backup(engine, url, found)
    SQLModel.metadata.create_all(engine)
    _add_missing_columns(engine)
    if found is not None and found < METRICS_TEXT_FROM:
        _backfill_metrics_text(engine)
    _store_version(engine)


def _stored_version(engine: Engine) -> int | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table(TABLE):
            return None
        row = conn.execute(text(f"SELECT max(version) FROM {TABLE}")).first()
        return int(row[0]) if row and row[0] is not None else None


def _store_version(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE IF NOT EXISTS {TABLE} (version INTEGER NOT NULL)"))
        if conn.execute(text(f"SELECT count(*) FROM {TABLE} WHERE version = :v"), {"v": VERSION}).scalar() == 0:
            conn.execute(text(f"INSERT INTO {TABLE} (version) VALUES (:v)"), {"v": VERSION})


def _add_missing_columns(engine: Engine) -> None:
    """Columns the models have and the tables lack, added as nullable columns with their default,
    then the indexes the tables lack (an index on an added column, or one added to the models later)."""
    with engine.begin() as conn:
        have = inspect(conn)
        for table in SQLModel.metadata.sorted_tables:
            present = {c["name"] for c in have.get_columns(table.name)}
            for column in table.columns:
                if column.name in present:
                    continue
                kind = column.type.compile(dialect=engine.dialect)
                default = _literal_default(column)
                clause = f" DEFAULT {default}" if default is not None else ""
                conn.execute(text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}{clause}'))
            indexes = {i["name"] for i in have.get_indexes(table.name)}
            for index in table.indexes:
                if index.name not in indexes:
                    index.create(conn)


def _backfill_metrics_text(engine: Engine) -> None:
    """Each run's metrics text made from its metric rows (100,000 runs: 10 s, once); a run
    whose text a controller of this orch wrote meanwhile keeps it."""
    with engine.begin() as conn:
        missing = [run_id for (run_id,) in conn.exec_driver_sql(
            "SELECT DISTINCT run_id FROM metricrow WHERE run_id IN (SELECT id FROM run WHERE metrics_json IS NULL)")]
        metricjson.refresh(conn, missing, only_missing=True)


def _literal_default(column) -> str | None:
    value = getattr(column.default, "arg", None)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


def _kept(engine: Engine, found: int) -> str:
    """Where an upgrade keeps the SQLite file as it was; '' for other databases."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return ""
    return f"a copy is kept at {database}.schema-{found}.bak"


def _backup(engine: Engine, url: str, found: int) -> None:
    """Keep the SQLite file as it was before an upgrade (other databases: their own backups)."""
    if not _kept(engine, found):
        return
    database = str(engine.url.database)
    copy = Path(f"{database}.schema-{found}.bak")
    if copy.exists():
        return
    partial = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
    try:
        with sqlite3.connect(database) as source, sqlite3.connect(partial) as target:
            source.backup(target)
        os.replace(partial, copy)  # whole or absent, even when two controllers upgrade at once
    except (sqlite3.Error, DatabaseError, OSError) as exc:
        raise StoreError(f"cannot keep a copy of {shown(url)!r} before upgrading it ({exc}); free disk space or "
                         "check the folder's permissions") from None
