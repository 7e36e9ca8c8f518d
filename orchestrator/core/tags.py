"""What a run's tags and note may hold (`orch tag`, `orch note`, `orch ls --tag`): the rules,
checked before anything is written, each broken one said in one line.

A tag is `key=value`. The key names it in commands and in `--where tag.KEY=...`, so it is a plain
name: letters, digits and `_ . - / :`, starting with a letter, digit or `_`, at most 64
characters. The value and the note are data, stored as given (printing escapes them); they may
not hold NUL, which no PostgreSQL text holds, and have a length bound so a listing stays a listing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.errors import SpecError

KEY_LENGTH, VALUE_LENGTH, NOTE_LENGTH = 64, 1000, 20000
_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*")
WHERE_PREFIX = "tag."  # `--where tag.KEY=VALUE`: a tag among the params `--where` matches


def _quoted(text: str) -> str:
    """Text as an error message shows it: escaped (repr) and cut, whatever it holds."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


def check_key(key: str, where: str) -> str:
    """`key` when it is a valid tag key; else a SpecError naming `where` it was given."""
    if not key:
        raise SpecError(f"{where}: the tag key is empty; give key=value, e.g. baseline=yes")
    if len(key) > KEY_LENGTH:
        raise SpecError(f"{where}: the tag key {_quoted(key)} is {len(key)} characters long; at most {KEY_LENGTH}")
    if not _KEY.fullmatch(key):
        raise SpecError(f"{where}: the tag key {_quoted(key)} may hold only letters, digits and _ . - / : "
                        "(starting with a letter, digit or _)")
    return key


def _check_text(text: str, what: str, limit: int, where: str) -> str:
    if "\x00" in text:
        raise SpecError(f"{where}: the {what} holds a NUL character, which the database cannot keep; remove it")
    if len(text) > limit:
        raise SpecError(f"{where}: the {what} is {len(text)} characters long; at most {limit}")
    return text


def parse_tag(item: str, where: str = "orch tag") -> tuple[str, str]:
    """`key=value` as (key, value): the key checked, the value as given after the first `=`."""
    key, sep, value = item.partition("=")
    if not sep:
        raise SpecError(f"{where}: {_quoted(item)} is not key=value; give e.g. baseline=yes "
                        "(--rm KEY removes a tag)")
    check_key(key, f"{where} {_quoted(item)}")
    return key, _check_text(value, f"value of tag {key!r}", VALUE_LENGTH, where)


def parse_tags(items: Sequence[str], removed: Sequence[str], where: str = "orch tag") -> tuple[dict[str, str], list[str]]:
    """The tags to set {key: value} (a key given twice: its last value) and the keys to remove,
    every one checked; a key both set and removed is an error."""
    setting = dict(parse_tag(item, where) for item in items)
    removing = [check_key(key, f"{where} --rm") for key in dict.fromkeys(removed)]
    both = sorted(set(setting) & set(removing))
    if both:
        raise SpecError(f"{where}: tag {both[0]!r} is both set and removed (--rm); give one of them")
    if not setting and not removing:
        raise SpecError(f"{where}: nothing to do; give tags as key=value, or --rm KEY to remove one")
    return setting, removing


def parse_filters(items: Sequence[str], option: str = "--tag") -> list[tuple[str, str | None]]:
    """`--tag key=value` (that value) and `--tag key` (any value) as (key, value or None)."""
    found: list[tuple[str, str | None]] = []
    for item in items:
        key, sep, value = item.partition("=")
        check_key(key, f"{option} {_quoted(item)}")
        found.append((key, _check_text(value, "tag value", VALUE_LENGTH, option) if sep else None))
    return found


def check_note(text: str, where: str = "orch note") -> str:
    return _check_text(text, "note", NOTE_LENGTH, where)
