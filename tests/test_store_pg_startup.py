"""`orch --help` starts light: it loads neither the database layer (SQLAlchemy, SQLModel, pydantic)
nor rich, nor asyncio; the modules the commands name at their top load on first use."""

from __future__ import annotations

from support.cli import loaded_by

HEAVY = ("sqlalchemy", "sqlmodel", "pydantic", "rich", "asyncio", "orchestrator.store.database")


def test_help_lists_the_commands_without_loading_the_heavy_modules():
    output, loaded = loaded_by(["--help"], HEAVY)
    assert "ls " in output and "compare " in output and "show " in output
    assert loaded == []
