"""A fresh SQLite file made at this orch's schema without SQLAlchemy: `orch import` into a database
that does not exist yet (importing SQLAlchemy, SQLModel and pydantic to make the tables was 0.85 s of
the 2.8 s an import of a 64 MB log took). The statements are made from the tables' one declaration
(store/tables.py), written as the store's models make them on SQLite and SQLite keeps them; the
models are held to that declaration when they are defined (store/modelcheck.py).

The file is made whole beside its place and linked there (a link fails where the name exists), so no
controller ever opens a file half made, and two making it at once leave one.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from . import tables
from .tables import SCHEMA_TABLE, VERSION

# The schema's statements, made from the tables' one declaration
STATEMENTS = tables.statements()


def make(path: Path) -> bool:
    """The SQLite file at `path` made with the schema and its version; False when another
    controller made it first (or its folder is missing: the store says so)."""
    if not path.parent.is_dir():
        return False
    partial = path.with_name(f".{path.name}.{os.getpid()}.new")
    partial.unlink(missing_ok=True)
    try:
        connection = sqlite3.connect(partial)
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # as the store's files (kept in the file)
            with connection:
                for statement in STATEMENTS:
                    connection.execute(statement)
                connection.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (?)", (VERSION,))
        finally:
            connection.close()
        os.link(partial, path)
        return True
    except FileExistsError:
        return False
    finally:
        partial.unlink(missing_ok=True)


def statements_of(path: Path) -> list[str]:
    """The schema statements an SQLite file keeps (tables first, in the order made)."""
    with sqlite3.connect(path) as connection:
        return [sql for (sql,) in connection.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type DESC, rowid")]

