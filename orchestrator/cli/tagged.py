"""A run's tags and note as the terminal shows them (`orch show`, `orch ls`, `orch tag`): values
are data anyone may have written, so each goes through cli/text.py (control characters shown as
escapes, rich markup escaped); a note keeps its newlines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .text import block, line

if TYPE_CHECKING:  # at run time rich loads with the table that prints: `--json` loads none
    from rich.console import Console


def pairs(tags: dict[str, str]) -> str:
    """`key=value  key=value` for rich: every key and value escaped."""
    return "  ".join(f"{line(k)}={line(v)}" for k, v in tags.items())


def cell(tags: dict[str, str] | None) -> str:
    """The tags of a run as one table cell of `orch ls`."""
    return ", ".join(f"{line(k)}={line(v)}" for k, v in (tags or {}).items())


def shown(console: Console, record: dict[str, Any]) -> None:
    """The tags (who set each, when) and the note of `orch show`; nothing for a run without."""
    tags, authors = record.get("tags") or {}, record.get("tag_authors") or {}
    if tags:
        console.print(f"[bold]tags:[/] {pairs(tags)}", soft_wrap=True)
        setters = {(a["user"], a["at"][:19].replace("T", " ")) for a in authors.values()}
        if len(setters) == 1:
            (user, at), = setters
            console.print(f"  [dim]set by {line(user or '?')} at {line(at)}[/]", soft_wrap=True)
        else:
            for key, a in authors.items():
                console.print(f"  [dim]{line(key)}: set by {line(a['user'] or '?')} at "
                              f"{line(a['at'][:19].replace('T', ' '))}[/]", soft_wrap=True)
    note = record.get("note")
    if note:
        console.print(f"[bold]note[/] [dim](by {line(note['user'] or '?')} at "
                      f"{line(note['at'][:19].replace('T', ' '))})[/]:", soft_wrap=True)
        for text in note["text"].split("\n"):
            console.print(f"  {block(text)}", soft_wrap=True)
