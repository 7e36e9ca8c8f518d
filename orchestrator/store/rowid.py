"""A stored run's row id, as the rows written under it need it.

`Run.id` is None only until the run's row is added (the database assigns it), so the rows of
metrics, events, patches and findings, all written after, take the id as an int: a None here
means a run that was never stored, which is a fault of the caller, named rather than written
as a row with no run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import StoreError

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from .database import Run


def stored_id(run: Run) -> int:
    """The row id of `run`, which the store has written."""
    if run.id is None:
        raise StoreError(f"run {run.uid} has no row id: it was never stored")
    return run.id
