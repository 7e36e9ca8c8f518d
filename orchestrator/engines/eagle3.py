"""What an EAGLE-3 draft checkpoint holds whatever engine serves it: the draft-to-target vocabulary
map `d2t`, which both engines read as offsets (target id = d2t[i] + i)."""

from __future__ import annotations

import numpy as np


def d2t_form(d2t: np.ndarray, target_vocab: int, t2d: np.ndarray | None) -> str:
    """'offsets' (d2t[i] + i = target id), 'absolute' (d2t[i] = target id), or 'invalid'."""
    d2t = np.asarray(d2t, dtype=np.int64)
    index = np.arange(len(d2t))
    as_offsets, as_absolute = d2t + index, d2t

    def valid(ids: np.ndarray) -> bool:
        return bool(len(ids)) and bool(np.all(np.diff(ids) > 0)) and ids[0] >= 0 and ids[-1] < target_vocab

    if t2d is not None and len(t2d) == target_vocab:
        hot = np.flatnonzero(np.asarray(t2d))
        if len(hot) == len(d2t):
            if np.array_equal(hot, as_offsets):
                return "offsets"
            if np.array_equal(hot, as_absolute):
                return "absolute"
    if valid(as_offsets) and not (valid(as_absolute) and np.all(np.diff(d2t) > 0) and len(d2t) > 16):
        return "offsets"  # offsets repeat a value wherever two kept ids are adjacent, absolute ids never do
    return "absolute" if valid(as_absolute) else "invalid"
