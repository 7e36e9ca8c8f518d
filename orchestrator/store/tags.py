"""A run's tags and note in the database (tables tagrow and noterow, store/tables.py): read over
plain DB-API as every reading command reads (store/reader.py), written in one transaction on a
Store's connection, through its driver's own SQL. The rules of what they may hold are core/tags.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.core.clock import now
from orchestrator.errors import SpecError
from .reader import of
from .tables import current_user

SCAN_AT = 20 * 900  # listed runs from which one pass over every tag row beats a query per chunk of them


def run_tags(source: Any, run_ids: Sequence[int]) -> dict[int, dict[str, str]]:
    """run id -> {key: value} of these runs' tags, keys in order; a run without tags is left out."""
    reader = of(source)
    found: dict[int, dict[str, str]] = {}
    if len(run_ids) < SCAN_AT:
        rows: Iterable[tuple[Any, ...]] = reader.chunked(
            "SELECT run_id, name, value FROM tagrow WHERE run_id IN ({ids}) ORDER BY run_id, name", list(run_ids))
    else:
        wanted = set(run_ids)
        rows = (row for row in reader.rows("SELECT run_id, name, value FROM tagrow ORDER BY run_id, name")
                if row[0] in wanted)
    for run_id, name, value in rows:
        found.setdefault(run_id, {})[name] = value
    return found


def run_notes(source: Any, run_ids: Sequence[int]) -> dict[int, str]:
    """run id -> its note's text, of these runs that have one."""
    sql = "SELECT run_id, text FROM noterow WHERE run_id IN ({ids})"
    return {run_id: text for run_id, text in of(source).chunked(sql, list(run_ids))}


def of_run(source: Any, run_id: int) -> dict[str, Any]:
    """What `orch show` says of a run's tags and note: `tags` {key: value}, `tag_authors` {key:
    {user, at}} and `note` ({text, user, at} or None)."""
    reader = of(source)
    rows = reader.rows("SELECT name, value, username, at FROM tagrow WHERE run_id = ? ORDER BY name", (run_id,))
    noted = reader.rows("SELECT text, username, at FROM noterow WHERE run_id = ?", (run_id,))
    return {"tags": {name: value for name, value, _, _ in rows},
            "tag_authors": {name: {"user": user, "at": at} for name, _, user, at in rows},
            "note": {"text": noted[0][0], "user": noted[0][1], "at": noted[0][2]} if noted else None}


def filter_sql(filters: Sequence[tuple[str, str | None]], table: str = "run") -> tuple[list[str], list[Any]]:
    """Conditions on `table`'s runs (plain SQL, `?` marks) that each hold one tag: (key, value) that
    value, (key, None) any value; and their values."""
    clauses, values = [], []
    for key, value in filters:
        same = "" if value is None else " AND tagrow.value = ?"
        clauses.append(f"EXISTS (SELECT 1 FROM tagrow WHERE tagrow.run_id = {table}.id AND tagrow.name = ?{same})")
        values += [key] if value is None else [key, value]
    return clauses, values


def write_tags(store: Any, run_id: int, setting: dict[str, str], removing: Sequence[str]) -> None:
    """Set these tags of the run (a key it has: its value replaced) and remove these keys, in one
    transaction; a key to remove that the run lacks is a SpecError and nothing is written."""
    user, at = current_user(), now()
    with store.engine.begin() as conn:
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        if removing:
            have = {name for (name,) in conn.exec_driver_sql(f"SELECT name FROM tagrow WHERE run_id = {mark}", (run_id,))}
            missing = [key for key in removing if key not in have]
            if missing:
                raise SpecError(f"orch tag --rm {missing[0]}: run {run_id} has no tag {missing[0]!r}; its tags: "
                                f"{', '.join(sorted(have)) or 'none'}")
        if removing:
            conn.exec_driver_sql(f"DELETE FROM tagrow WHERE run_id = {mark} AND name IN "
                                 f"({', '.join([mark] * len(removing))})", (run_id, *removing))
        if setting:  # a key the run has: its row updated in place, also when another orch sets it at this moment
            conn.exec_driver_sql(f"INSERT INTO tagrow (run_id, name, value, username, at) VALUES "
                                 f"({mark}, {mark}, {mark}, {mark}, {mark}) ON CONFLICT (run_id, name) DO UPDATE "
                                 "SET value = excluded.value, username = excluded.username, at = excluded.at",
                                 [(run_id, key, value, user, at) for key, value in setting.items()])


def write_note(store: Any, run_id: int, text: str | None) -> None:
    """The run's note replaced by `text` (None: removed), in one transaction."""
    with store.engine.begin() as conn:
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        if text is None:
            conn.exec_driver_sql(f"DELETE FROM noterow WHERE run_id = {mark}", (run_id,))
        else:
            conn.exec_driver_sql(f"INSERT INTO noterow (run_id, text, username, at) VALUES ({mark}, {mark}, {mark}, {mark}) "
                                 "ON CONFLICT (run_id) DO UPDATE SET text = excluded.text, username = excluded.username, "
                                 "at = excluded.at", (run_id, text, current_user(), now()))
