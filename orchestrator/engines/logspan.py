"""When a server log says it began and ended: its first and last timestamps (`orch import`).

Each engine declares the stamp its lines open with (`Engine.log_stamp`: a regex with the groups
`month`, `day`, `clock`, an optional `frac` and, where the engine prints it, `year`). Only the
log's head and tail are read: the first stamped line is near the start and the last near the end.

A stamp without a year (vLLM's `INFO 01-01 12:00:00`) takes it from when the file was last written
(`written`): the last stamp is in that year unless that would put it more than a day after the
write (a log written across New Year's Eve), and the first stamp is in the last one's year unless it
would then come after it. A log's stamps carry no zone: they are read as UTC, as orch's own times
are written (core/clock.py).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

HEAD = 1 << 20  # bytes of the log's start and of its end that are searched for a stamp
SLACK = timedelta(days=1)  # how far a stamp may lie past the file's write (the host's zone, its clock)


def span(head: bytes, tail: bytes, stamps: Sequence[str], written: datetime) -> tuple[str, str] | None:
    """The first stamp of `head` and the last of `tail` in any of the `stamps` styles, as UTC ISO
    times (core/clock.py's form); None when neither holds a whole one, or they are out of order."""
    patterns = [re.compile(s.encode(), re.MULTILINE) for s in stamps]
    first = min(_matches(patterns, head, last=False), key=lambda m: m.start(), default=None)
    last = max(_matches(patterns, tail, last=True), key=lambda m: m.start(), default=None)
    if first is None or last is None:
        return None
    try:
        ended = _stamp(last, written.astimezone(UTC) + SLACK)
        started = _stamp(first, ended)
    except ValueError:  # 02-30, or 02-29 in a year that has none
        return None
    if started > ended:
        return None
    return _text(started), _text(ended)


def _matches(patterns: Iterable[re.Pattern[bytes]], data: bytes, last: bool) -> Iterable[re.Match[bytes]]:
    """Each pattern's first match in `data` (its last one: `last`), where it has one."""
    for pattern in patterns:
        found = next(iter(collections.deque(pattern.finditer(data), maxlen=1)), None) if last else pattern.search(data)
        if found is not None:
            yield found


def _stamp(found: re.Match[bytes], latest: datetime) -> datetime:
    """The stamp's time; without a year, the latest year that puts it no later than `latest`."""
    groups = found.groupdict()
    hour, minute, second = (int(part) for part in groups["clock"].split(b":"))
    micro = int((groups.get("frac") or b"0")[:6].ljust(6, b"0"))
    month, day = int(groups["month"]), int(groups["day"])
    if groups.get("year"):
        return datetime(int(groups["year"]), month, day, hour, minute, second, micro, tzinfo=UTC)
    year = latest.year
    if (month, day, hour, minute, second, micro) > (latest.month, latest.day, latest.hour, latest.minute,
                                                    latest.second, latest.microsecond):
        year -= 1
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def _text(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")
