"""SGLang stats lines all printed in one plain layout, read with numpy: no Python step per line.

A busy server's log is millions of lines such as

    [2026-10-30 12:00:00 TP0] Decode batch, #running-req: 13, #token: 185588, ..., #queue-req: 15

one layout over and over, every value a plain decimal number. When every line of a block is the
first line's layout with other digits (SGLang's own `[time ranks] ` prefix, no iteration, no
trailing text, each value digits with at most one `.`, the graph field True or False), the
separators are found in one pass over the block's bytes and each value column is read from its
digits as whole arrays. What comes out is what the layout regex of `stats.py` reads of the same
lines (the rows `statcolumns._from_rows` converts): a whole number is its digits' value, and a
decimal `m / 10**k` of at most 15 digits is exactly `float(text)` (both are the double nearest the
decimal: m and 10**k are exact doubles, and IEEE division rounds correctly). Any line that differs
anywhere gives None, and the block is read as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import stats

_MAX_INT_DIGITS = 18  # below 2**63
_MAX_FLOAT_DIGITS = 15  # below 2**53: exact in a double
_POW10 = np.array([float(10**k) for k in range(_MAX_FLOAT_DIGITS + 1)])
_BOOL_TEXT = {True: b"True", False: b"False"}
_NUMBER_BYTES = b"0123456789."
_EARLY = 16  # lines of a block compared first
_POWERS = {width: np.array([10**(width - 1 - t) for t in range(width)], np.int64) for width in range(1, _MAX_INT_DIGITS + 1)}


@dataclass(frozen=True)
class Rows:
    """The block's lines as columns: times, the ranks text every line printed, and per layout
    column its values (None for the graph field, which is no series value). Every line is the first
    but for other runs of digits and dots in the same places, each starting with a digit."""

    times: list[str]
    ranks: bytes
    values: list[np.ndarray | None]


def read(lines: list[bytes], kind: stats._Kind, layout: stats._Layout) -> Rows | None:
    """The lines (each without its newline) as columns, or None when any is not the first line's
    plain layout. `layout`: `stats._layout` of the first line with SGLang's own prefix."""
    template = _template(lines[0], kind, layout)
    if template is None:
        return None
    pad = _pad(template)
    block = b"\n".join([*lines, pad])
    lengths = np.fromiter(map(len, lines), np.int64, len(lines))
    return _read(block, len(lines), np.cumsum(lengths + 1) - 1, template, pad, layout)


def read_piece(piece: bytes, kind: stats._Kind, layout: stats._Layout) -> Rows | None:
    """`read` of a piece of a log that is such lines, each ending with a newline: no line cut out."""
    end = piece.find(b"\n")
    template = _template(piece[:end], kind, layout) if end >= 0 and piece.endswith(b"\n") else None
    if template is None:
        return None
    pad = _pad(template)
    block = piece + pad
    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
    return _read(block, len(ends), ends, template, pad, layout)


def _pad(template: tuple[bytes, int, bytes, list[bytes]]) -> bytes:
    """What the block is padded with past its last line: every gather reads whole windows."""
    head, _, _, prefixes = template
    return bytes(max(len(head), *map(len, prefixes), _MAX_INT_DIGITS) + 1)


def _read(block: bytes, n: int, ends: np.ndarray, template: tuple[bytes, int, bytes, list[bytes]], pad: bytes,
          layout: stats._Layout) -> Rows | None:
    """The n lines of the block (each ending at `ends`, then `pad`) as columns."""
    head, time_length, ranks, prefixes = template
    fields = len(prefixes)
    # Without its digits and dots every line is the first one's: the same text in the same order,
    # only numbers between. Where they are is checked below: the head's and each value's span.
    line = block[:ends[0]].translate(None, _NUMBER_BYTES) + b"\n"
    first = min(n, _EARLY)  # a block of other lines is mostly told by its first ones, before the whole pass
    if block[:ends[first - 1] + 1].translate(None, _NUMBER_BYTES) != line * first:
        return None
    skeleton = block.translate(None, _NUMBER_BYTES)
    # n lines' worth of the first line's text, none overlapping, in exactly that many bytes: each one
    if len(skeleton) != n * len(line) + len(pad) or skeleton.count(line, 0, n * len(line)) != n:
        return None
    data = np.frombuffer(block, np.uint8)
    starts = np.concatenate(([0], ends[:-1] + 1))
    commas = np.flatnonzero(data == ord(","))
    commas = commas.reshape(n, fields)  # each line's own: every line has the first one's commas
    if not np.array_equal(commas[:, 0] - starts, np.full(n, len(head))):
        return None
    times = _times(data, starts, head, time_length)
    if times is None:
        return None
    values: list[np.ndarray | None] = []
    for j, ((_, _, convert), prefix) in enumerate(zip(layout.columns, prefixes)):
        at = commas[:, j]
        if prefix.translate(None, _NUMBER_BYTES) != prefix and \
                not (_gather(data, at, len(prefix)) == np.frombuffer(prefix, np.uint8)).all():
            return None  # a name with digits: the skeleton does not tell them
        value_end = commas[:, j + 1] if j + 1 < fields else ends
        column = _column(data, at + len(prefix), value_end, convert)
        if column is False:
            return None
        values.append(column)  # type: ignore[arg-type]
    return Rows(times, ranks, values)


def _template(line: bytes, kind: stats._Kind, layout: stats._Layout) -> tuple[bytes, int, bytes, list[bytes]] | None:
    """The first line's head (`[time ranks] header`), its time's length, its ranks and each field's
    `, name: ` before its value, when the line is exactly those and plain values; else None."""
    match = layout.regex.match(line)
    if match is None:
        return None
    outer, time, ranks, iteration, *values = match.groups(b"")
    if outer or iteration or not line.startswith(b"["):
        return None
    header = kind.header.encode()
    text = line.decode("utf-8", "replace")
    items, _ = stats._items(text[text.find(kind.header) + len(kind.header):].lstrip(" [0123456789]"))
    if len(items) != len(values) or any(value.rstrip().endswith("%") for _, value in items):
        return None
    head = b"[" + time + ranks + b"] " + header
    prefixes = [b", " + name.encode() + b": " for name, _ in items]
    if head + b"".join(p + v for p, v in zip(prefixes, values)) != line or line.count(b",") != len(items) \
            or line.count(b"batch") != 1 or b"\n" in line:
        return None
    if any(v not in _BOOL_TEXT.values() for (_, _, convert), v in zip(layout.columns, values)
           if convert is not int and convert is not float):
        return None  # a graph field neither True nor False
    return head, len(time), ranks, prefixes


def _gather(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes from each offset (n x width): rows of a view of every window."""
    return sliding_window_view(data, width)[at]


def _times(data: np.ndarray, starts: np.ndarray, head: bytes, time_length: int) -> list[str] | None:
    """Each line's time, when its head is the first line's with other digits where the time has
    digits (the time regex is digits and fixed separators: each line's time matches it too)."""
    got = _gather(data, starts, len(head))
    want = np.frombuffer(head, np.uint8)
    time_end = 1 + time_length
    digit = (want >= ord("0")) & (want <= ord("9"))
    digit[time_end:] = False  # the ranks' digits are the first line's own
    if not ((got[:, ~digit] == want[~digit]).all() and (got[:, digit] - ord("0") < 10).all()):
        return None
    out = np.empty((len(starts), time_end), np.uint8)
    out[:, :time_end - 1] = got[:, 1:time_end]
    out[:, -1] = ord("\n")
    return out.tobytes()[:-1].decode().split("\n")


def _column(data: np.ndarray, start: np.ndarray, end: np.ndarray, convert: object) -> np.ndarray | None | bool:
    """The numbers (int64 or float64) of the values from `start` to `end`, None for the graph field;
    False when any value is not a plain number (or True or False for the graph)."""
    length = end - start
    if (length < 1).any():
        return False  # a name's digits moved: the value's span holds the name's end
    if convert is not int and convert is not float:  # the graph field, never stored: the first line's
        # True or False (`_template`); a line of the same text has it too, unless digits came in
        return None if (length == length[0]).all() else False
    width = int(length.max())
    if width > (_MAX_INT_DIGITS if convert is int else _MAX_FLOAT_DIGITS + 1):
        return False
    chars = _gather(data, end - width, width)  # right-aligned: position t's digit weighs 10**(width-1-t)
    inside = np.arange(width) >= (width - length)[:, None]
    digits = chars - np.uint8(ord("0"))  # wraps below "0": not a digit
    is_digit = digits < 10
    if convert is int:
        if not (is_digit | ~inside).all():
            return False
        return np.where(inside, digits, 0).astype(np.int64) @ _POWERS[width]
    return _decimals(chars, digits, is_digit, inside, length)


def _decimals(chars: np.ndarray, digits: np.ndarray, is_digit: np.ndarray, inside: np.ndarray,
              length: np.ndarray) -> np.ndarray | bool:
    """Right-aligned values of digits and at most one dot as doubles: m / 10**k, m their digits."""
    dot = (chars == ord(".")) & inside
    if not (is_digit | dot | ~inside).all():
        return False
    width = chars.shape[1]
    if not is_digit[np.arange(len(length)), width - length].all():
        return False  # ".5": a run of digits and dots starting with a dot (see `Rows`)
    dots = dot.sum(1)
    if (dots > 1).any() or (length - dots < 1).any() or (length - dots > _MAX_FLOAT_DIGITS).any():
        return False
    after_dot = np.where(dots == 1, width - 1 - dot.argmax(1), 0)
    used = inside & is_digit
    if (after_dot == after_dot[0]).all() and (dots == dots[0]).all():  # one style throughout ("%.2f")
        k = int(after_dot[0])
        weights = _POWERS[width].copy()
        weights[:width - 1 - k] //= 10 if dots[0] else 1  # left of the dot: one place less
        whole = np.where(used, digits, 0).astype(np.int64) @ weights
    else:
        whole = np.zeros(len(length), np.int64)
        for t in range(width):
            whole = np.where(used[:, t], whole * 10 + digits[:, t], whole)
    return whole.astype(np.float64) / _POW10[after_dot]
