"""An SGLang server log read piece by piece (`orch import` of a log of gigabytes in bounded memory):
each piece's stats lines become series blocks at once (`statcolumns.py`) and its debug lines are
handed on, so nothing grows with the log but counters. What `logs.parse_log_bytes` reads of a whole
log comes out the same: the first `server_args=`, the ready line anywhere, the startup lines and
the argparse failures in the first HEAD_SIZE bytes, the crash in the last TAIL_SIZE bytes, and the
means of the decode lines' values in line order.

Pieces must end at a line's end (the last may lack its newline)."""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from collections.abc import Iterable
from itertools import compress, repeat
from operator import contains

from orchestrator.engines.base import DebugLine, Diagnosis, LogReport, Measure
from orchestrator.engines.fields import required_literal
from orchestrator.engines.seriesblock import SeriesBlock
from . import logs, statcolumns
from .diagnosis import HEAD_SIZE
from .stats import DECODE, PREFILL

MEANS = ("accept_len", "accept_rate", "gen_throughput")  # engine.LOG_MEANS: the decode values averaged


class LogStream:
    def __init__(self, debug_pattern: str = logs.DEFAULT_DEBUG_PATTERN, patched: Iterable[str] = ()):
        self._tag = re.compile(debug_pattern)
        literal = required_literal(debug_pattern)
        # as logs._report: searched without leading punctuation, the tag regex still decides
        self._literal = (literal.lstrip("-[]():. ") or literal).encode() if literal else None
        self._patched = tuple(patched)
        self.counts = {DECODE: 0, PREFILL: 0}
        self._sums = {name: [0.0, 0] for name in MEANS}
        self.server_args: str | None = None
        self.ready = False
        self._head = b""  # the log's first HEAD_SIZE bytes, cut at a line's end
        self._head_done = False
        self._tail: deque[bytes] = deque()  # the last pieces, at least TAIL_SIZE bytes of them
        self._plain: tuple[bytes, list[SeriesBlock] | None] | None = None  # `shape`'s piece and its blocks
        self._size = 0

    @property
    def points(self) -> int:
        return sum(self.counts.values())

    def claimed(self) -> bool:
        """The log holds SGLang's lines (as logimport.read asks of a whole log's report)."""
        return bool(self.server_args is not None or self.points or self.ready or self._started())

    def shape(self, piece: bytes) -> bytes | None:
        """The piece's first line when the piece is decode lines alone in one plain layout (kept
        for `feed` of the same piece: read once)."""
        self._plain = piece, self._read_plain(piece)
        return piece[:piece.find(b"\n")] if self._plain[1] is not None else None

    def feed(self, piece: bytes) -> tuple[list[SeriesBlock], list[DebugLine]]:
        """The piece's series blocks and debug lines."""
        self._keep_ends(piece)
        if self.server_args is None and (found := logs._lines_with(piece, logs.SERVER_ARGS.encode(), b"\n", first_only=True)):
            self.server_args = found[0].decode("utf-8", "replace").split(logs.SERVER_ARGS, 1)[1].rstrip("\r")
        self.ready = self.ready or piece.find(logs.READY_LINE.encode()) >= 0
        blocks, plain = self._blocks(piece)
        return blocks, self._debug_lines(piece, plain)

    def _keep_ends(self, piece: bytes) -> None:
        if not self._head_done:
            room = piece[:HEAD_SIZE - len(self._head)]
            self._head_done = len(room) < len(piece)
            self._head += room[:room.rfind(b"\n") + 1] if self._head_done else room
        self._size += len(piece)
        self._tail.append(piece)
        while len(self._tail) > 1 and sum(map(len, self._tail)) - len(self._tail[0]) >= logs.TAIL_SIZE:
            self._tail.popleft()

    def _blocks(self, piece: bytes) -> tuple[list[SeriesBlock], bool]:
        """The piece's series blocks, and whether the piece is one plain line over and over."""
        kept, self._plain = self._plain, None
        whole = kept[1] if kept is not None and kept[0] is piece else self._read_plain(piece)
        if whole is not None:
            for block in whole:
                self.counts[DECODE] += len(block)
                self._add_to_means(block)
            return whole, True
        stats = _stats_lines(piece)
        joined = b"\n".join(stats)  # every header is in a stats line: counted here, not in the piece
        made: list[SeriesBlock] = []
        for header in (DECODE, PREFILL):
            lines = _holding(stats, header.encode(), joined)
            if not lines:
                continue
            for block in statcolumns.blocks(lines, header, self.counts[header]):
                self.counts[header] += len(block)
                if header == DECODE:
                    self._add_to_means(block)
                made.append(block)
        return made, False

    def _read_plain(self, piece: bytes) -> list[SeriesBlock] | None:
        """A piece of decode lines alone, all in one plain layout, read without cutting it into lines
        (`statcolumns.plain_piece`): what the split below makes of it. None for any other piece."""
        return statcolumns.plain_piece(piece, DECODE, self.counts[DECODE]) if piece.endswith(b"\n") else None

    def _add_to_means(self, block: SeriesBlock) -> None:
        """Sums in line order, each continuing the last (sum's start): the mean of a whole log's values."""
        for column in block.columns:
            if column.name in self._sums:
                total = self._sums[column.name]
                values = column.values
                added = sum(values, total[0])  # type: ignore[arg-type]
                if added != added:  # a line without the value (NaN): only the others count
                    values = [v for v in values if v == v]
                    added = sum(values, total[0])  # type: ignore[arg-type]
                total[0], total[1] = added, total[1] + len(values)

    def _debug_lines(self, piece: bytes, plain: bool = False) -> list[DebugLine]:
        """`plain`: every line is the first with other runs of digits and dots (`statarrays.Rows`):
        a literal without digits or dots is in all of them or in none."""
        if plain and self._literal is not None and not any(c in self._literal for c in b"0123456789.") \
                and self._literal not in piece[:piece.find(b"\n")]:
            return []
        if self._literal is not None:
            candidates = logs._lines_with(piece, self._literal, b"\n")
            texts = b"\n".join(candidates).decode("utf-8", "replace").split("\n") if candidates else []
        else:  # no literal to search for: the pattern runs over the decoded text
            texts = [line for line in piece.decode("utf-8", "replace").split("\n") if self._tag.search(line)]
        return [line for line in map(logs._debug_line, texts, repeat(self._tag)) if line is not None]

    def _started(self) -> bool:
        return self.server_args is not None or any(self._head.find(line.encode()) >= 0 for line in logs.STARTUP_LINES)

    def _diagnosis(self) -> Diagnosis | None:
        """The head's and the tail's failures; read as a whole log's are where the two meet (a log
        under HEAD_SIZE + TAIL_SIZE is kept whole in them)."""
        kept = b"".join(self._tail)
        rest = self._size - len(self._head)
        if rest <= len(kept):
            whole = self._head + kept[len(kept) - rest:] if rest else self._head
            return logs._diagnose_ends(whole, str.encode, b"\n", _text, self._patched)
        tail = kept[-logs.TAIL_SIZE:]
        return logs.diagnose_parts(self._head, tail[tail.find(b"\n") + 1:], self._patched)  # from a line's start

    def report(self) -> LogReport:
        """The log's report but its series and debug lines (handed on piece by piece)."""
        diagnosis = self._diagnosis()
        if diagnosis is not None and diagnosis.kind == logs.PATCHED_MODULE_IMPORT:
            diagnosis = dataclasses.replace(diagnosis, decisive=True)
        measures = [Measure(name, total / n if n else None, "decode_log", f"mean of {n} decode-line intervals")
                    for name, (total, n) in self._sums.items()]
        measures.append(Measure("decode_intervals", self.counts[DECODE], "orch"))
        return LogReport(series=(), debug_lines=(), diagnosis=diagnosis, ready=self.ready, launch_args=self.server_args,
                         measures=tuple(measures), started=self._started())


_SPARSE = 1024  # bytes of the piece per stats line from which stats lines are searched for, not split


def _stats_lines(piece: bytes) -> list[bytes]:
    """The piece's lines holding "batch" (both kinds of stats line). Where most lines are stats lines
    they are split and filtered at C speed (a search costs a Python step per line found); where they
    are few (a log of mostly access lines) they are searched for, so the others are never cut out."""
    found = piece.count(b"batch")
    if not found:
        return []
    if found * _SPARSE < len(piece):
        return logs._lines_with(piece, b"batch", b"\n")
    lines = piece.split(b"\n")
    return list(compress(lines, map(contains, lines, repeat(b"batch"))))


def _holding(lines: list[bytes], header: bytes, joined: bytes) -> list[bytes]:
    """The lines holding `header`: counted in them (joined) first (a C search), so a piece of one kind
    of stats line is taken whole and a kind it lacks costs no pass over its lines."""
    count = joined.count(header)
    if count == 0:
        return []
    if count == len(lines) and all(map(contains, lines, repeat(header))):
        return lines
    return list(compress(lines, map(contains, lines, repeat(header))))


def _text(part: bytes) -> str:
    return part.decode("utf-8", "replace")
