"""The store's tables, declared once, as plain data: each column's name, SQL type, nullability and
default, each table's key, foreign key and indexes. Everything else is derived from here: the read
path's run columns and JSON columns (store/reading.py), the plain write path's columns and defaults
(store/importing.py), the CREATE statements of a fresh file (store/freshfile.py); the SQLModel
models (store/database.py) are checked against it when they are defined, so a model and its table
here cannot drift apart.

It imports nothing heavy (no SQLAlchemy, SQLModel or pydantic): the reading commands and `orch
import` start without them.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import Any

from orchestrator.core.clock import now

RUNNING, SUCCEEDED, FAILED, INTERRUPTED = "running", "succeeded", "failed", "interrupted"
STATUSES = (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)
VERSION = 6  # 1: before the schema carried a version; 2: versioned, columns added in place; 3: run.metrics_json;
# 4: run.effective_params; 5: seriesblock (a series as packed blocks; seriesrow kept for the runs before);
# 6: tagrow and noterow (what people say of a run after it ran: `orch tag`, `orch note`)
SCHEMA_TABLE = "orch_schema"


class Required:
    """The default of a column every row gives (NOT NULL, no default)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()


def current_user() -> str:
    """Who is making runs: the login name, or the uid where the system has no name for it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        import os

        return str(os.getuid())


@dataclass(frozen=True)
class Column:
    """One column: `kind` as SQLite keeps it (INTEGER, VARCHAR, FLOAT, BOOLEAN, BLOB, JSON);
    `default` a value, a callable made per row (dict, list, now) or REQUIRED."""

    name: str
    kind: str
    nullable: bool = False
    default: Any = REQUIRED

    @property
    def json(self) -> bool:
        return self.kind == "JSON"

    def made(self) -> Any:
        """The default's value for one row (REQUIRED: none)."""
        return self.default() if callable(self.default) else self.default


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ("id",)
    indexes: tuple[Index, ...] = ()
    child: bool = True  # its run_id refers to run.id

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _c(name: str, kind: str, default: Any = REQUIRED) -> Column:
    """A column NOT NULL (with `default`, or REQUIRED)."""
    return Column(name, kind, False, default)


def _n(name: str, kind: str, default: Any = None) -> Column:
    """A nullable column."""
    return Column(name, kind, True, default)


_ID = Column("id", "INTEGER", False, None)  # NOT NULL, None until the database gives it


def _child(name: str, *columns: Column) -> Table:
    """A child table of a run: its own id, its run's id (indexed), then `columns`."""
    return Table(name, (_ID, _c("run_id", "INTEGER"), *columns),
                 indexes=(Index(f"ix_{name}_run_id", ("run_id",)),))


RUN = Table("run", (
    _ID, _c("uid", "VARCHAR"), _c("experiment", "VARCHAR"), _c("variant", "VARCHAR"),
    _c("host", "VARCHAR"), _c("status", "VARCHAR", RUNNING), _c("repeat", "INTEGER", 0),
    _c("spec_path", "VARCHAR", ""), _n("spec", "JSON", dict), _n("params", "JSON", dict), _n("env", "JSON", dict),
    _c("command", "VARCHAR", ""), _n("flags", "JSON", list), _n("error", "VARCHAR"), _n("diagnosis", "JSON"),
    _c("controller", "VARCHAR", ""), _n("username", "VARCHAR", current_user), _c("started_at", "VARCHAR", now),
    _n("ended_at", "VARCHAR"), _n("plan_key", "VARCHAR"), _n("fingerprint", "VARCHAR"),
    _n("server_run_id", "INTEGER"), _n("metrics_json", "VARCHAR"), _n("effective_params", "JSON"),
), indexes=(Index("ix_run_uid", ("uid",), unique=True), Index("ix_run_status", ("status",)),
            Index("ix_run_experiment", ("experiment",)), Index("ix_run_username", ("username",)),
            Index("ix_run_host", ("host",)),
            # --resume reads (key, fingerprint, id) of an experiment's succeeded runs from this index alone
            Index("ix_run_resume", ("experiment", "status", "plan_key", "fingerprint"))), child=False)

TABLES: tuple[Table, ...] = (
    RUN,
    _child("patchrow", _c("seq", "INTEGER"), _c("name", "VARCHAR"), _c("target", "VARCHAR"), _c("file", "VARCHAR"),
           _c("sha256_before", "VARCHAR"), _c("sha256_after", "VARCHAR"), _c("state", "VARCHAR"),
           _c("node", "INTEGER", 0)),
    _child("metricrow", _c("name", "VARCHAR"), _n("value", "FLOAT"), _c("source", "VARCHAR", ""),
           _c("note", "VARCHAR", "")),
    _child("debugrow", _c("seq", "INTEGER"), _c("text", "VARCHAR"), _n("fields", "JSON", dict),
           _c("node", "INTEGER", 0)),
    _child("seriesrow", _c("kind", "VARCHAR"), _c("seq", "INTEGER"), _n("time", "VARCHAR"),
           _n("values", "JSON", dict), _c("node", "INTEGER", 0)),
    _child("seriesblockrow", _c("kind", "VARCHAR"), _c("seq", "INTEGER"), _c("points", "INTEGER"),
           Column("data", "BLOB", True), _c("node", "INTEGER", 0)),
    _child("histogramrow", _c("name", "VARCHAR"), _n("counts", "JSON", list), _c("source", "VARCHAR", ""),
           _c("note", "VARCHAR", "")),
    _child("requestrow", _c("seq", "INTEGER"), _c("at_s", "FLOAT"), _n("ttft_ms", "FLOAT"), _c("e2e_ms", "FLOAT"),
           _c("prompt_tokens", "INTEGER"), _c("completion_tokens", "INTEGER"), _n("accept_len", "FLOAT"),
           _n("itl_ms", "JSON", list)),
    _child("eventrow", _c("at", "VARCHAR", now), _c("kind", "VARCHAR"), _c("message", "VARCHAR")),
    Table("logrow", (_c("run_id", "INTEGER"), _c("size", "INTEGER"), Column("data", "BLOB", True)),
          key=("run_id",)),
    Table("nodelogrow", (_c("run_id", "INTEGER"), _c("node", "INTEGER"), _c("host", "VARCHAR"),
                         _c("size", "INTEGER"), Column("data", "BLOB", True)), key=("run_id", "node")),
    _child("checkpointrow", _c("name", "VARCHAR"), _c("dest", "VARCHAR"), _c("source_hash", "VARCHAR"),
           _n("transforms", "JSON", list), _c("result_hash", "VARCHAR"), _c("manifest_hash", "VARCHAR"),
           _c("files", "INTEGER", 0), _c("total_bytes", "INTEGER", 0), _c("sent_files", "INTEGER", 0),
           _c("sent_bytes", "INTEGER", 0), _c("seconds", "FLOAT", 0.0)),
    _child("findingrow", _c("severity", "VARCHAR"), _c("code", "VARCHAR"), _c("what", "VARCHAR"),
           _c("why", "VARCHAR"), _c("fix", "VARCHAR"), _c("allowed", "BOOLEAN", False)),
    # a run's tags, one row per key (`orch tag`): who set it and when; `orch ls --tag` finds runs by name
    Table("tagrow", (_ID, _c("run_id", "INTEGER"), _c("name", "VARCHAR"), _c("value", "VARCHAR"),
                     _n("username", "VARCHAR", current_user), _c("at", "VARCHAR", now)),
          indexes=(Index("ix_tagrow_run_name", ("run_id", "name"), unique=True), Index("ix_tagrow_name", ("name",)))),
    # a run's note (`orch note`), one per run: who wrote it and when
    Table("noterow", (_c("run_id", "INTEGER"), _c("text", "VARCHAR"), _n("username", "VARCHAR", current_user),
                      _c("at", "VARCHAR", now)), key=("run_id",)),
)
BY_NAME = {table.name: table for table in TABLES}
RUN_COLUMNS = RUN.names
JSON_COLUMNS = frozenset(c.name for table in TABLES for c in table.columns if c.json)
_SQL_KEYWORDS = frozenset({"values"})  # quoted in a statement


def written(table: Table) -> dict[str, Any]:
    """{column: default} of the columns a write gives (a generated id left to the database)."""
    return {c.name: c.default for c in table.columns if not (c.name == "id" and table.key == ("id",))}


def _quoted(name: str) -> str:
    return f'"{name}"' if name in _SQL_KEYWORDS else name


def create_table(table: Table) -> str:
    """The table's CREATE statement as SQLAlchemy makes it on SQLite, and SQLite keeps it."""
    parts = [f"{_quoted(c.name)} {c.kind}{'' if c.nullable else ' NOT NULL'}" for c in table.columns]
    parts.append(f"PRIMARY KEY ({', '.join(table.key)})")
    if table.child or table.name in ("logrow", "nodelogrow"):
        parts.append("FOREIGN KEY(run_id) REFERENCES run (id)")
    return f"CREATE TABLE {table.name} (\n\t" + ", \n\t".join(parts) + "\n)"


def create_index(table: Table, index: Index) -> str:
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX {index.name} ON {table.name} ({', '.join(index.columns)})"


def statements() -> tuple[str, ...]:
    """Every statement of a fresh database, tables (and the version table) first, then indexes."""
    made = [create_table(table) for table in TABLES]
    made.append(f"CREATE TABLE {SCHEMA_TABLE} (version INTEGER NOT NULL)")
    made += [create_index(table, index) for table in TABLES for index in table.indexes]
    return tuple(made)


def shape(table: Table) -> tuple[tuple[tuple[str, str, bool, Any], ...], tuple[str, ...], frozenset[Index]]:
    """What a model of the table must agree on: its columns (name, kind, nullable, default), its
    key and its indexes."""
    return tuple((c.name, c.kind, c.nullable, c.default) for c in table.columns), table.key, frozenset(table.indexes)


__all__ = ["BY_NAME", "Column", "Index", "JSON_COLUMNS", "REQUIRED", "RUN", "RUN_COLUMNS", "SCHEMA_TABLE", "STATUSES", "TABLES",
           "Table", "create_index", "create_table", "current_user", "shape", "statements",
           "VERSION", "written"]
