"""Run folders a host no longer needs (`orch clean`).

Each run leaves `runs/<uid>/` on its host: the launch script, the server log, pid and exit code.
Once the run has ended and its log is in the database the folder only takes disk space, and on a
shared GPU host the logs of long runs reach gigabytes. A folder is removed only when all of these
hold: the run is in this database and was made on this host, it ended at least `older_than` ago,
no process of its server is left, and the database holds its log whole. A log over the fetch
limit was stored cut down to the lines orch reads and its tail: such folders go only with
`big_logs`. Every other folder is kept, with the reason; folders of other databases' runs are
never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, UTC
from typing import TYPE_CHECKING

from . import server
from orchestrator.core import shell
from orchestrator.remote import Connection
from orchestrator.store.reading import RUNNING
from orchestrator.store.rowid import stored_id

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Run, Store


@dataclass(frozen=True)
class Folder:
    uid: str
    kib: int  # disk use
    log_bytes: int | None  # the server log's size; None without one
    alive: bool  # pid recorded, no exit code yet, and its process group answers


@dataclass(frozen=True)
class Verdict:
    folder: Folder
    run: Run | None
    kept_because: str | None  # None: removed (or would be, on a dry run)


def decide(folders: list[Folder], runs: Mapping[str, Run], stored: Mapping[int, int], host: str,
           older_than: timedelta, big_logs: bool, now: datetime) -> list[Verdict]:
    """Which folders go. `runs` maps uid to this database's run; `stored` run id to the size of
    the log the database holds (absent: none)."""
    verdicts = []
    for folder in folders:
        run = runs.get(folder.uid)
        verdicts.append(Verdict(folder, run, _kept_because(folder, run, stored, host, older_than, big_logs, now)))
    return verdicts


def _kept_because(folder: Folder, run: Run | None, stored: Mapping[int, int], host: str,
                  older_than: timedelta, big_logs: bool, now: datetime) -> str | None:
    if run is None or run.host != host:
        return "not a run of this database"
    if run.status == RUNNING or run.ended_at is None:
        return "its run has not ended"
    if folder.alive:
        return "its server is still running"
    if now - datetime.fromisoformat(run.ended_at) < older_than:
        return "ended too recently"
    if folder.log_bytes is not None and stored.get(stored_id(run)) is None:
        return "its log is not in the database"
    if folder.log_bytes is not None and folder.log_bytes > server.FETCH_LIMIT and not big_logs:
        return "its log was too big to store whole (--big-logs removes these)"
    return None


async def survey(conn: Connection, runs_dir: str) -> list[Folder]:
    """Every run folder under `runs_dir`, in one command."""
    done = await conn.run(shell.run_folders(runs_dir, server.LOG_NAME), timeout=120)
    folders = []
    for line in done.out.splitlines():
        kib, log_bytes, alive, uid = line.split(" ", 3)
        folders.append(Folder(uid, int(kib), None if log_bytes == "-" else int(log_bytes), alive == "1"))
    return folders


async def clean(conn: Connection, store: Store, host: str, runs_dir: str, older_than: timedelta, big_logs: bool,
                dry_run: bool) -> list[Verdict]:
    """Remove the folders `decide` lets go (none on a dry run); each removal is an event of its run."""
    folders = await survey(conn, runs_dir)
    runs = store.runs_by_uid([f.uid for f in folders])
    stored = store.log_sizes([stored_id(r) for r in runs.values()])
    verdicts = decide(folders, runs, stored, host, older_than, big_logs, datetime.now(UTC))
    # a folder goes only with a run of this database (`decide` keeps the others)
    going = [(v.folder, v.run) for v in verdicts if v.kept_because is None and v.run is not None]
    if going and not dry_run:
        await conn.run(shell.remove_run_folders(runs_dir, [folder.uid for folder, _ in going]), timeout=600)
        for folder, run in going:
            store.event(run, "cleaned", f"run folder {runs_dir}/{folder.uid} removed from {host} "
                                        f"({folder.kib} KiB); its log stays in the database")
    return verdicts
