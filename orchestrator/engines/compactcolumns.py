"""A series block's columns in fewer bytes (engines/seriesblock.py `pack`): a log's series is millions
of points, and compressing eight bytes per value and a 19-character time per point was most of an
import's writing. Each way below is taken only where it gives back exactly the same values:

- whole numbers in the narrowest integer type that holds them all (a queue length fits a byte);
- doubles that are all decimals of k places (SGLang prints "%.2f") as the whole numbers m = v * 10**k
  narrowed so, read back as m / 10**k: the double nearest the decimal, bit for bit the value
  stored (checked when packing);
- text (times, ranks) as its runs: each distinct value once, then how many times it repeats (a
  busy server prints a hundred lines a second, all with the same time).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain, compress, repeat
from operator import ne
from typing import Any

import numpy as np

_NARROW = ("b", "h", "i")  # array typecodes tried in turn for whole numbers (8, 16, 32 bits)
_SCALES = range(7)  # decimal places tried for doubles
_EXACT = 2**53  # a whole number up to this is exact in a double


def narrow_ints(values: array) -> tuple[bytes, dict[str, Any]] | None:  # type: ignore[type-arg]
    """A whole-number column's bytes in a narrower type, and how it was stored; None when none is narrower."""
    if not values:
        return None
    numbers = np.frombuffer(values, np.int64)
    return _narrowed(numbers, {})


def _narrowed(numbers: np.ndarray, how: dict[str, Any]) -> tuple[bytes, dict[str, Any]] | None:
    low, high = int(numbers.min()), int(numbers.max())
    for typecode in _NARROW:
        info = np.iinfo(np.dtype(typecode))
        if info.min <= low and high <= info.max:
            return numbers.astype(typecode).tobytes(), {**how, "as": typecode}
    return (numbers.tobytes(), {**how, "as": "q"}) if how else None


def scaled_floats(values: array) -> tuple[bytes, dict[str, Any]] | None:  # type: ignore[type-arg]
    """A double column's values as whole numbers of decimal places, when every value is one read back
    bit for bit (no NaN: a point without a value stays a double); None otherwise."""
    if not values:
        return None
    doubles = np.frombuffer(values, np.float64)
    if not np.isfinite(doubles).all() or (np.abs(doubles) >= _EXACT / 10**_SCALES[-1]).any():
        return None  # NaN, or too big for m to stay whole and exact at every scale tried
    for places in _SCALES:
        scale = float(10**places)
        whole = np.rint(doubles * scale).astype(np.int64)
        back = whole.astype(np.float64) / scale  # as `widened` reads it (-0.0 comes back 0.0: not taken)
        if (np.abs(whole) < _EXACT).all() and np.array_equal(back.view(np.int64), doubles.view(np.int64)):
            return _narrowed(whole, {"scale": places})
    return None


def widened(data: bytes, how: dict[str, Any]) -> array:  # type: ignore[type-arg]
    """The column's values back as `narrow_ints` or `scaled_floats` had them."""
    numbers = np.frombuffer(data, np.dtype(how["as"])).astype(np.int64)
    if "scale" not in how:
        return array("q", numbers.tobytes())
    return array("d", (numbers.astype(np.float64) / float(10 ** how["scale"])).tobytes())


def runs(values: Sequence[str | None]) -> tuple[list[str | None], array] | None:  # type: ignore[type-arg]
    """Each run's value and length, when the runs are at most half the values; else None."""
    if len(values) < 2:
        return None
    starts = [0, *compress(range(1, len(values)), map(ne, values[1:], values[:-1]))]
    if len(starts) > len(values) // 2:
        return None
    lengths = np.diff(np.array([*starts, len(values)], np.int64))
    return [values[i] for i in starts], array("I", lengths.astype(np.uint32).tobytes())


def from_runs(distinct: list[str | None], lengths: bytes) -> list[str | None]:
    """`runs` undone."""
    counts = array("I")
    counts.frombytes(lengths)
    return list(chain.from_iterable(map(repeat, distinct, counts)))
