"""A run's tags and note, set after it ran (`orch tag`, `orch note`): every input checked first
(core/tags.py), the run found by the read path (a missing database is not made), then one
transaction on the store (store/tags.py). `orch show` and `orch ls` read them back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.errors import SpecError

_DEFAULT_DB = "sqlite:///orch.db"


def tag_run(run: str, tags: Sequence[str] = (), *, db: str = _DEFAULT_DB,
            remove: Sequence[str] = ()) -> dict[str, str]:
    """`orch tag RUN key=value ... [--rm KEY ...]`: set these tags on the run (id, uid prefix, `last`
    or `last~N`), a key it has taking the new value, and remove the keys in `remove` (each must be
    there). Values are stored as given. Who set each and when is recorded. Returns the run's tags
    after, {key: value}. Bad input raises a `SpecError` and writes nothing."""
    from orchestrator.core.tags import parse_tags
    from orchestrator.store import tags as tagging

    setting, removing = parse_tags(tags, remove)
    run_id = _run_id(run, db)
    store = _store(db)
    tagging.write_tags(store, run_id, setting, removing)
    return tagging.run_tags(store, [run_id]).get(run_id, {})


def note_run(run: str, text: str | None = None, *, db: str = _DEFAULT_DB, clear: bool = False) -> dict[str, Any] | None:
    """`orch note RUN TEXT`: the run's note set to `text`, stored as given (empty text, or `clear`:
    the note removed). Returns the note after ({text, user, at}, or None)."""
    from orchestrator.core.tags import check_note
    from orchestrator.store import tags as tagging

    if clear and text:
        raise SpecError("orch note: give the note's TEXT or --rm to remove it, not both")
    if text is None and not clear:
        raise SpecError("orch note RUN: give the note's TEXT (`-`: read from standard input), or --rm to remove it")
    written = check_note(text) if text else None
    run_id = _run_id(run, db)
    store = _store(db)
    tagging.write_note(store, run_id, written)
    note: dict[str, Any] | None = tagging.of_run(store, run_id)["note"]
    return note


def _run_id(run: str, db: str) -> int:
    """The run's id by the read path: an unknown run (or no database) is a StoreError, nothing made."""
    from orchestrator.store import reading

    found: Any = reading.get(reading.open_url(db), run)
    return int(found.id)


def _store(db: str) -> Any:
    from orchestrator.store.database import Store

    return Store(db)
