"""The record of runs made, read: what `orch ls`, `show --requests`, `series` and `logs` print, and
what a shell's completion offers. Plain DB-API reads (store/reading.py): no ORM, no event loop
but for a log followed live."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError

_DEFAULT_DB = "sqlite:///orch.db"
_DEFAULT_INVENTORY = "inventory.yaml"
SERIES_KINDS = ("decode", "prefill", "requests")


@dataclass(frozen=True)
class Listing:
    """The runs `orch ls` lists (rows with the Run's attribute names: id, uid, experiment, variant,
    host, status, params ...), each one's metrics by run id, and the tags of those that have any;
    the params swept between them and the headline metrics, the columns its table shows by
    default (api/columns.py)."""

    rows: list[Any]
    metrics: dict[int, dict[str, Any]]
    tags: dict[int, dict[str, str]] = field(default_factory=dict)
    swept: tuple[str, ...] = ()
    headline: tuple[str, ...] = ()


def list_runs(*, db: str = _DEFAULT_DB, experiment: str | None = None, status: str | None = None,
              host: str | None = None, where: Sequence[str] = (), sort: str | None = None, limit: int = 50,
              mine: bool = False, tags: Sequence[str] = ()) -> Listing:
    """`orch ls`: runs oldest first (the newest `limit`), or the `limit` best first by the metric
    `sort` (durations ascending, the rest descending); only those of `experiment`, with `status`,
    on `host`, made by this user (`mine`), whose params match each `where` (`key=value`,
    `asked.key=value`, `effective.key=value`), and that carry each of `tags` (`key=value`: that
    value; `key`: any value)."""
    reader, filters = _listed(db, status, sort, experiment, host, mine, tags)
    from orchestrator.store import tags as tagging

    from . import columns, listing

    rows, metrics = listing.select(reader, filters, parse_where(where), sort, limit)
    spec = columns.newest_spec(reader, rows)
    return Listing(rows, metrics, tagging.run_tags(reader, [r.id for r in rows]), columns.swept(rows, spec),
                   columns.headline(metrics, spec, sort))


def list_runs_json(*, db: str = _DEFAULT_DB, experiment: str | None = None, status: str | None = None,
                   host: str | None = None, where: Sequence[str] = (), sort: str | None = None, limit: int = 50,
                   mine: bool = False, tags: Sequence[str] = ()) -> str:
    """`orch ls --json`: the runs `list_runs` lists as a JSON array, a run a line, each with its
    params, effective params, metrics and tags."""
    reader, filters = _listed(db, status, sort, experiment, host, mine, tags)
    from orchestrator.store import tags as tagging

    from . import listing

    if not where and not sort:
        return listing.json_listing(reader, filters, limit)
    rows, metrics = listing.select(reader, filters, parse_where(where), sort, limit, as_text=True)
    return listing.json_text(rows, metrics, tagging.run_tags(reader, [r.id for r in rows]))


def list_runs_csv(*, db: str = _DEFAULT_DB, experiment: str | None = None, status: str | None = None,
                  host: str | None = None, where: Sequence[str] = (), sort: str | None = None, limit: int = 50,
                  mine: bool = False, tags: Sequence[str] = ()) -> str:
    """`orch ls --csv`: the runs `list_runs` lists, a line each, a column per param and per metric."""
    from . import listing

    found = list_runs(db=db, experiment=experiment, status=status, host=host, where=where, sort=sort, limit=limit,
                      mine=mine, tags=tags)
    return listing.as_csv(found.rows, found.metrics, found.tags)


def _listed(db: str, status: str | None, sort: str | None, experiment: str | None, host: str | None,
            mine: bool, tags: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """The database, its status, sort and tags checked, and the filters of a listing."""
    from orchestrator.core.tags import parse_filters
    from orchestrator.store import reading

    from . import listing

    tagged = parse_filters(tags)  # before the database: a bad --tag is said whatever it holds
    reader = reading.open_url(db)
    listing.check(reader, status, sort)
    user = reading.current_user() if mine else None
    return reader, {"experiment": experiment, "status": status, "host": host, "user": user, "tags": tagged}


def parse_where(items: Sequence[str], option: str = "--where") -> dict[str, Any]:
    """`key=value` conditions as a dict, each value read as `--set` reads it (a number, true/false, text)."""
    if not items:
        return {}
    from orchestrator.core.spec import literal  # only here: a command without --where reads no experiment file

    where: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"{option} {item!r}: expected key=value, e.g. {option} speculative_num_steps=3")
        where[key.strip()] = literal(value.strip())
    return where


def resolve_run(run: str, *, db: str = _DEFAULT_DB) -> int:
    """The id of a run: its id, a unique prefix of its uid, `last` or `last~N` (a `StoreError` if none)."""
    from orchestrator.store import reading

    found: Any = reading.get(reading.open_url(db), run)
    return int(found.id)


def run_series(run: str, *, db: str = _DEFAULT_DB, kind: str = "decode") -> tuple[int, list[dict[str, Any]]]:
    """`orch series RUN --kind KIND`: the run's id and its rows: one per decode (or prefill) log line
    of its server log; with `kind` `requests`, one per workload request in the order they ended."""
    if kind not in SERIES_KINDS:
        raise SpecError(f"--kind {kind!r}: expected one of {', '.join(SERIES_KINDS)}")
    from orchestrator.store import reading

    reader = reading.open_url(db)
    found: Any = reading.get(reader, run)
    if kind == "requests":
        return found.id, _by_end(reading.requests(reader, found.id))
    return found.id, [row for row in reading.record(reader, found)["series"] if row["kind"] == kind]


def _by_end(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: r["at_s"])
    return rows


def run_log(run: str, *, db: str = _DEFAULT_DB, inventory: str | PathLike[str] = _DEFAULT_INVENTORY,
            follow: bool = False, debug: bool = False, node: int = 0,
            write: Callable[[str], None] | None = None) -> str:
    """`orch logs RUN`: the run's server log as stored at its end. `debug`: its debug lines alone;
    `node`: the log of that node rank of a run over several hosts; `follow`: a running run's log
    read live from its host until its server ends, each piece handed to `write` as it comes
    (default: gathered and returned; a run that ended gives its stored log)."""
    from orchestrator.store import reading

    reader = reading.open_url(db)
    found: Any = reading.get(reader, run)
    if node:
        nodes = reading.node_logs(reader, found.id)
        if node not in nodes:
            ranks = ", ".join(str(n) for n in (0, *nodes)) if nodes else "0 (it ran on one host)"
            raise SpecError(f"run {found.id} has no log of node {node}; its nodes: {ranks}")
        return nodes[node][1].decode(errors="replace")
    if debug:
        return "".join(line["text"] + "\n" for line in reading.record(reader, found)["debug_lines"])
    if follow and found.status == reading.RUNNING:
        pieces: list[str] = []
        import asyncio  # here, not at the top: `orch --help` does without it

        asyncio.run(_follow(found, Path(inventory), write or pieces.append))
        return "".join(pieces)
    data = reading.log(reader, found.id)
    if data is None:
        raise SpecError(f"run {found.id} has no stored log yet; `orch logs {found.id} --follow` reads it live")
    return data.decode(errors="replace")


async def _follow(found: Any, inventory: Path, write: Callable[[str], None]) -> None:
    import asyncio

    from orchestrator.core import inventory as inventories
    from orchestrator.host import server
    from orchestrator.host.session import HostSession

    host = inventories.load(inventory).select([found.host])[0]
    session = await HostSession.open(host)
    srv = server.Server(f"{session.host.workdir}/runs/{found.uid}", 0, 0)
    offset = 0
    try:
        while True:
            status = await server.poll(session.conn, srv, offset)
            offset += len(status.new_bytes)
            write(status.new_bytes.decode(errors="replace"))
            if status.exit_code is not None or not status.alive:
                break
            await asyncio.sleep(0.5)
    finally:
        await session.conn.close()


def recorded_names(what: str, *, db: str = _DEFAULT_DB) -> list[str]:
    """What a shell's completion offers from the database: `runs` (the newest 50 runs' ids, newest
    first) or `experiments` (every experiment's name); best effort: nothing rather than an error."""
    sql = {"runs": "SELECT id FROM run ORDER BY id DESC LIMIT 50",
           "experiments": "SELECT DISTINCT experiment FROM run ORDER BY experiment"}[what]
    try:
        from orchestrator.store import reading

        return [str(row[0]) for row in reading.open_url(db).rows(sql)]
    except Exception:  # noqa: BLE001  # no database here, or not one of orch's: nothing to offer
        return []
