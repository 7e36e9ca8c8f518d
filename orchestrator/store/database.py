"""The experiment database: SQLModel tables and the queries orch needs. The tables are declared
once, in store/tables.py; the models here are their typed face, held to it when defined (below).

SQLite file by default (`sqlite:///orch.db`); a team's PostgreSQL by `postgresql://user@host/db`
(the driver comes with `pip install 'orch[postgres]'`); any SQLAlchemy URL through `--db` / `ORCH_DB`.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from sqlalchemy import JSON, Column, Index, LargeBinary, event
from sqlalchemy.exc import DatabaseError
from sqlmodel import Field, Session, SQLModel, create_engine, select

from . import importing, metricjson, modelcheck, runrecord, schema
from .reader import said, shown, what_to_check
from .tagmodels import NoteRow, TagRow
# the run statuses are the tables', named here too for the modules that write runs
from .tables import FAILED as FAILED, INTERRUPTED as INTERRUPTED, RUNNING as RUNNING, STATUSES as STATUSES
from .tables import SUCCEEDED as SUCCEEDED, current_user as current_user
from orchestrator.core.clock import now
from orchestrator.core.secrets import scrub
from orchestrator.errors import StoreError


class Run(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(index=True, unique=True)
    experiment: str = Field(index=True)
    variant: str
    host: str = Field(index=True)
    status: str = Field(default=RUNNING, index=True)
    repeat: int = 0
    spec_path: str = ""
    spec: dict = Field(default_factory=dict, sa_column=Column(JSON))
    params: dict = Field(default_factory=dict, sa_column=Column(JSON))
    env: dict = Field(default_factory=dict, sa_column=Column(JSON))
    command: str = ""
    flags: list = Field(default_factory=list, sa_column=Column(JSON))
    error: str | None = None
    diagnosis: dict | None = Field(default=None, sa_column=Column(JSON))
    controller: str = ""  # the controller process, `hostname:pid`: its host is the part before the last colon
    # who made the run (`orch ls --mine`); nullable: an older orch writing to an upgraded team database leaves it out
    username: str | None = Field(default_factory=current_user, index=True)
    started_at: str = Field(default_factory=now)
    ended_at: str | None = None
    plan_key: str | None = None  # RunPlan.key; None on runs recorded before runs carried one
    fingerprint: str | None = None  # plankey.fingerprint of the plan
    server_run_id: int | None = None  # the run that launched the server this run used (itself when it launched it)
    # its metrics as `orch ls --json` writes them, made from its metric rows by each write of them (store/metricjson.py)
    metrics_json: str | None = None
    # the engine's own print of the arguments it ran with (SGLang's `server_args=`, vLLM's `non-default
    # args:`), by the engine's names: what ran, where the engine changed what the command asked (schema 4)
    effective_params: dict | None = Field(default=None, sa_column=Column(JSON))

    # --resume reads (key, fingerprint, id) of an experiment's succeeded runs from this index alone
    __table_args__ = (Index("ix_run_resume", "experiment", "status", "plan_key", "fingerprint"),)


class PatchRow(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    seq: int
    name: str
    target: str
    file: str
    sha256_before: str
    sha256_after: str
    state: str
    node: int = 0  # the node rank of a run over several hosts (run/multinode.py) whose files it patched


class MetricRow(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    name: str
    value: float | None = None
    source: str = ""
    note: str = ""


class DebugRow(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    seq: int
    text: str
    fields: dict = Field(default_factory=dict, sa_column=Column(JSON))
    node: int = 0  # the node rank whose server log held it


class SeriesRow(SQLModel, table=True):
    """One point of a per-interval time series read from the server log (e.g. a decode line)."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    kind: str
    seq: int
    time: str | None = None
    values: dict = Field(default_factory=dict, sa_column=Column(JSON))
    node: int = 0  # the node rank whose server log held it


class SeriesBlockRow(SQLModel, table=True):
    """Up to 65,536 consecutive points of one kind of a run's series, as packed columns
    (engines/seriesblock.py): a long run's million decode lines in a few rows (schema 5)."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    kind: str
    seq: int  # its first point's
    points: int
    data: bytes = Field(sa_column=Column(LargeBinary))
    node: int = 0  # the node rank whose server log held it


class HistogramRow(SQLModel, table=True):
    """A histogram of a run (counts by bin index), e.g. verify steps by draft tokens accepted."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    name: str
    counts: list = Field(default_factory=list, sa_column=Column(JSON))
    source: str = ""
    note: str = ""


class RequestRow(SQLModel, table=True):
    """One request of a run's workload, as it streamed: `seq` in the order sent, `at_s` when it
    ended (seconds from the workload's start), latencies in ms, inter-token gaps as a JSON list."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    seq: int
    at_s: float
    ttft_ms: float | None = None
    e2e_ms: float
    prompt_tokens: int
    completion_tokens: int
    accept_len: float | None = None
    itl_ms: list = Field(default_factory=list, sa_column=Column(JSON))


class EventRow(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    at: str = Field(default_factory=now)
    kind: str
    message: str


class LogRow(SQLModel, table=True):
    """The server log as fetched at the end of the run, zlib-compressed."""

    run_id: int = Field(primary_key=True, foreign_key="run.id")
    size: int
    data: bytes = Field(sa_column=Column(LargeBinary))


class NodeLogRow(SQLModel, table=True):
    """The server log of a node of rank > 0 of a run over several hosts (rank 0's is the LogRow),
    zlib-compressed."""

    run_id: int = Field(primary_key=True, foreign_key="run.id")
    node: int = Field(primary_key=True)
    host: str
    size: int
    data: bytes = Field(sa_column=Column(LargeBinary))


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")  # first: another controller may hold the file right now
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Store:
    """The experiment database at `url` (SQLite by default, PostgreSQL by URL): every run with its
    params, patches, metrics, debug lines, events and log."""

    def __init__(self, url: str):
        self.url = url
        self.secrets: dict[str, str] = {}  # values hidden from every write (see keep_secret)
        try:
            self.engine = create_engine(_driver_url(url))
        except ModuleNotFoundError as exc:
            raise StoreError(f"cannot open database {shown(url)!r}: its driver {exc.name!r} is not installed; "
                             "pip install 'orch[postgres]' for PostgreSQL") from None
        except Exception as exc:  # bad URL forms raise several SQLAlchemy types
            raise StoreError(f"cannot open database {shown(url)!r}: {said(exc)}; set --db or ORCH_DB to a valid URL") from None
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            schema.prepare(self.engine, url)
        except DatabaseError as exc:  # OperationalError (path, permissions) and "file is not a database"
            raise StoreError(f"cannot open database {shown(url)!r}: {said(exc.orig)}; {what_to_check(url)}") from None

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def keep_secret(self, secrets: dict[str, str]) -> None:
        """Hide these values (name -> value) in everything this store writes from now on."""
        self.secrets.update(secrets)

    def _scrubbed(self, row: SQLModel) -> SQLModel:
        if self.secrets:
            for name in type(row).model_fields:
                value = getattr(row, name)
                if isinstance(value, (str, dict, list)):
                    setattr(row, name, scrub(value, self.secrets))
        return row

    # --- writes -----------------------------------------------------------------------------

    def add(self, *rows: SQLModel) -> None:
        """Write rows in one transaction; each gets its id. Nothing is read back: no column has a
        default the database fills, so the rows already hold what was written. Metric rows: their
        runs' metrics text made again from the rows, in the same transaction."""
        with self.session() as s:
            for row in rows:
                s.add(self._scrubbed(row))
            measured = {row.run_id for row in rows if isinstance(row, MetricRow)}
            if measured:
                s.flush()
                metricjson.refresh(s.connection(), measured)
            s.commit()

    def add_children(self, table: type[SQLModel], rows: list[dict[str, Any]]) -> None:
        """Write many rows of one child table of a run (series points, debug lines) as column
        values in one transaction: the driver's own executemany of one statement, JSON columns
        encoded here as the JSON type encodes them, a missing column its default. No row objects
        and no statement built per row (a 64 MB log's 29,000 rows: 0.15 s instead of 0.9 s)."""
        if not rows:
            return
        if self.secrets:
            rows = [{k: scrub(v, self.secrets) if isinstance(v, (str, dict, list)) else v for k, v in row.items()}
                    for row in rows]
        columns = [c for c in table.__table__.columns if not c.primary_key]  # type: ignore[attr-defined]
        defaults = {c.name: c.default.arg if c.default is not None and c.default.is_scalar else None for c in columns}
        encoded = {c.name for c in columns if isinstance(c.type, JSON)}
        mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        with self.engine.begin() as conn:
            conn.exec_driver_sql(importing.insert_sql(table.__tablename__, list(defaults), mark),
                                 importing.column_values(defaults, rows, encoded.__contains__))
            if table is MetricRow:  # their runs' metrics text, in the same transaction (as `add`)
                metricjson.refresh(conn, {row["run_id"] for row in rows})

    def update_run(self, run: Run, **changes: Any) -> Run:
        with self.session() as s:
            row = s.get(Run, run.id)
            assert row is not None
            for key, value in changes.items():
                setattr(row, key, scrub(value, self.secrets))
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def event(self, run: Run, kind: str, message: str) -> None:
        self.add(EventRow(run_id=run.id, kind=kind, message=message))

    def save_log(self, run: Run, data: bytes, node: int = 0, host: str = "",
                 packed: tuple[int, bytes] | None = None) -> None:
        """The run's log (of node `node`), its secrets hidden; `packed`: `pack_log(data)` made
        already (while the log was being read)."""
        if node:
            return self._save_node_log(run, data, node, host)
        size, blob = packed or self.pack_log(data)
        with self.session() as s:
            existing = s.get(LogRow, run.id)
            if existing:
                s.delete(existing)
                s.flush()
            s.add(LogRow(run_id=run.id, size=size, data=blob))
            s.commit()

    def pack_log(self, data: bytes) -> tuple[int, bytes]:
        """A log as save_log stores it: its size and its compressed bytes (importing.pack, as `orch
        import` stores it), the run's secrets hidden."""
        return importing.pack(scrub(data, self.secrets))

    def _save_node_log(self, run: Run, data: bytes, node: int, host: str) -> None:
        size, blob = self.pack_log(data)
        with self.session() as s:
            s.merge(NodeLogRow(run_id=run.id, node=node, host=host, size=size, data=blob))
            s.commit()

    def node_of(self, run: Run, host: str) -> int:
        """The node rank `host` had in `run` (0: its only host, or rank 0's of a run over several)."""
        with self.session() as s:
            found = s.exec(select(NodeLogRow.node).where(NodeLogRow.run_id == run.id, NodeLogRow.host == host)).first()
            return int(found) if found is not None and run.host != host else 0

    def set_patch_states(self, run: Run, states: dict[int, str], node: int = 0) -> None:
        with self.session() as s:
            for row in s.exec(select(PatchRow).where(PatchRow.run_id == run.id, PatchRow.node == node)):
                if row.seq in states:
                    row.state = states[row.seq]
                    s.add(row)
            s.commit()

    # --- reads ------------------------------------------------------------------------------

    def runs(self, experiment: str | None = None, status: str | None = None, limit: int | None = None,
             user: str | None = None) -> list[Run]:
        with self.session() as s:
            query = select(Run).order_by(Run.id.desc())  # type: ignore[union-attr]
            if experiment:
                query = query.where(Run.experiment == experiment)
            if status:
                query = query.where(Run.status == status)
            if user:
                query = query.where(Run.username == user)
            if limit:
                query = query.limit(limit)
            return list(reversed(s.exec(query).all()))

    def succeeded_keys(self, experiment: str) -> dict[str, dict[str, int]]:
        """key -> {fingerprint: latest run id} of the experiment's succeeded runs that carry a key:
        three columns through the resume index, never whole runs."""
        query = (select(Run.plan_key, Run.fingerprint, Run.id)
                 .where(Run.experiment == experiment, Run.status == SUCCEEDED,
                        Run.plan_key.is_not(None)))  # type: ignore[union-attr]
        found: dict[str, dict[str, int]] = {}
        with self.engine.connect() as conn:
            for key, fingerprint, run_id in conn.execute(query):
                seen = found.setdefault(key, {})
                seen[fingerprint] = max(run_id, seen.get(fingerprint, 0))
        return found

    def get(self, ref: str) -> Run:
        """A run by id (`12`), uid or unique uid prefix, `last`, or `last~N` (N runs before it)."""
        with self.session() as s:
            match = re.fullmatch(r"last(?:~(\d+))?", ref)
            if match:
                back = int(match.group(1) or 0)
                rows = s.exec(select(Run).order_by(Run.id.desc()).offset(back).limit(1)).all()  # type: ignore[union-attr]
                if not rows:
                    raise StoreError(f"no run {ref!r} in {shown(self.url)}: it holds fewer runs; see `orch ls`")
                return rows[0]
            if ref.isdigit():
                row = s.get(Run, int(ref))
                if row:
                    return row
            rows = s.exec(select(Run).where(Run.uid.startswith(ref))).all()  # type: ignore[attr-defined]
            if len(rows) == 1:
                return rows[0]
            if len(rows) > 1:
                raise StoreError(f"run {ref!r} is ambiguous ({len(rows)} runs match); give more of the id")
            raise StoreError(f"no run {ref!r} in {shown(self.url)}; see `orch ls` for run ids")

    def log(self, run: Run) -> bytes | None:
        with self.session() as s:
            row = s.get(LogRow, run.id)
            return zlib.decompress(row.data) if row else None

    def runs_by_uid(self, uids: list[str]) -> dict[str, Run]:
        with self.session() as s:
            return {r.uid: r for r in s.exec(select(Run).where(Run.uid.in_(uids)))}  # type: ignore[attr-defined]

    def log_sizes(self, run_ids: list[int]) -> dict[int, int]:
        """The size of each stored log, without reading the logs."""
        with self.session() as s:
            query = select(LogRow.run_id, LogRow.size).where(LogRow.run_id.in_(run_ids))  # type: ignore[attr-defined]
            return dict(s.exec(query).all())

    def children(self, run: Run, table: type[SQLModel]) -> list[Any]:
        with self.session() as s:
            query = select(table).where(table.run_id == run.id).order_by(table.id)  # type: ignore[attr-defined]
            return list(s.exec(query).all())

    def record(self, run: Run) -> dict[str, Any]:
        """The whole run as plain data: what `show --json` prints and `diff` compares (the read
        path's record, over this store's connections)."""
        return runrecord.record(self, run)


def _driver_url(url: str) -> str:
    """`postgresql://` (and `postgres://`) mean the psycopg 3 driver that orch[postgres] installs,
    not SQLAlchemy's default psycopg2."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    return url


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)


def running_runs(store: Store, host: str, controller: str, since: str = "") -> list[Run]:
    """Runs still marked running on `host` by one controller process (`hostname:pid`), oldest
    first; `since` (an ISO time) skips older runs of an earlier process that had the same pid."""
    with store.session() as s:
        query = select(Run).where(Run.host == host, Run.controller == controller, Run.status == RUNNING,
                                  Run.started_at >= since).order_by(Run.id)  # type: ignore[arg-type]
        return list(s.exec(query).all())


def controller_runs(store: Store, controller: str, since: str, host: str | None = None) -> list[Run]:
    """Every run one controller process (`hostname:pid`) started since `since` (an ISO time),
    whatever their status, oldest first; only `host`'s when given."""
    with store.session() as s:
        query = select(Run).where(Run.controller == controller, Run.started_at >= since)
        if host is not None:
            query = query.where(Run.host == host)
        return list(s.exec(query.order_by(Run.id)).all())  # type: ignore[arg-type]


class CheckpointRow(SQLModel, table=True):
    """One checkpoint pushed for a run: what it came from, how it was transformed, what arrived."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    name: str
    dest: str
    source_hash: str
    transforms: list = Field(default_factory=list, sa_column=Column(JSON))
    result_hash: str
    manifest_hash: str
    files: int = 0
    total_bytes: int = 0
    sent_files: int = 0
    sent_bytes: int = 0
    seconds: float = 0.0


class FindingRow(SQLModel, table=True):
    """One preflight finding of a run (severity error | warning | info)."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(index=True, foreign_key="run.id")
    severity: str
    code: str
    what: str
    why: str
    fix: str
    allowed: bool = False  # an error the experiment allows (`preflight: {allow: [code]}`): reported, not stopping the run


modelcheck.check(SQLModel.metadata, [Run, PatchRow, MetricRow, DebugRow, SeriesRow, SeriesBlockRow, HistogramRow,
                                     RequestRow, EventRow, LogRow, NodeLogRow, CheckpointRow, FindingRow, TagRow, NoteRow])
