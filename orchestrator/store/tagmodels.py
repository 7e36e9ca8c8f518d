"""The SQLModel models of what people say of a run after it ran: its tags (`orch tag`) and its
note (`orch note`), each with who said it and when. Declared in store/tables.py as every table;
held to it with the other models (store/database.py). Their reads and writes: store/tags.py.
"""

from __future__ import annotations

from sqlalchemy import Index
from sqlmodel import Field, SQLModel

from orchestrator.core.clock import now
from .tables import current_user


class TagRow(SQLModel, table=True):
    """One tag of a run: `name` (a key core/tags.py checks) and its value, as given."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    name: str = Field(index=True)  # `orch ls --tag NAME` finds the runs by it
    value: str
    username: str | None = Field(default_factory=current_user)
    at: str = Field(default_factory=now)

    # one value per name and run; a run's tags read by its id through it
    __table_args__ = (Index("ix_tagrow_run_name", "run_id", "name", unique=True),)


class NoteRow(SQLModel, table=True):
    """The note of a run: free text, as given."""

    run_id: int = Field(primary_key=True, foreign_key="run.id")
    text: str
    username: str | None = Field(default_factory=current_user)
    at: str = Field(default_factory=now)
