"""`orch run`'s progress on a terminal: one row per run, updated in place (rich.live); and what both
of its Reporters share: each warning shown once per sweep, repeats counted.

A run's row starts when the run does (its `known` hook names the run id) or at its first stage;
its phase is the Stage it is in, its status once it has one; its engine's metrics (accept length
first) and tokens/s appear when the run has measured them. Lines for a run (`variant@host #id`)
update its row's note (a message of several lines also prints above the table); lines for
anything else (a host's connect, recovery, a refusal) print above the table.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

import orchestrator
from orchestrator.records import MetricInfo
from . import swept
from .text import fmt, line

if TYPE_CHECKING:
    from orchestrator import RunPlan, Stage

WARNING = "warning: "  # how a warning reaches a message hook (the engines' flag checks write it so)
FINDING = "preflight "  # how a preflight finding reaches it (run/preflight.py's `described`)


class Repeats:
    """What a sweep's reporter says once (both reporters, the live table's and the plain one, share
    it). A warning: the first shown, its repeats (the same text once the run's label is taken out)
    counted. A preflight finding that did not stop its run: the same (every point of a steps x topk
    sweep finds the same patched class; 8 lines each would bury the rest). A dry run's patch diff:
    whole once, then its first line and `the same diff as above`. `finish` gives the counts for the
    end of the sweep and forgets what was seen."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._diffs: set[str] = set()

    def warning(self, label: str, text: str) -> bool:
        """Count the warning; True the first time its text is seen."""
        key = text.replace(label, "").strip()
        self._counts[key] = self._counts.get(key, 0) + 1
        return self._counts[key] == 1

    def message(self, label: str, text: str) -> str | None:
        """What to show of a message that is not a warning; None: a repeated finding, counted."""
        if _is_finding(text):
            return text if self.warning(label, text) else None
        if text.startswith(DIFF) and "\n" in text:
            if text in self._diffs:
                return text.split("\n", 1)[0].rstrip(":") + ": the same diff as above"
            self._diffs.add(text)
        return text

    def finish(self) -> list[str]:
        """`warning (x3): text`, a finding by its first line (its why and fix were said once), for
        each given more than once, in first-seen order; then all is forgotten."""
        said = [f"{text.splitlines()[0]} (x{n}: said once above)" if _is_finding(text) else f"warning (x{n}): {text}"
                for text, n in self._counts.items() if n > 1]
        self._counts.clear()
        self._diffs.clear()
        return said


def _is_finding(text: str) -> bool:
    return text.startswith(FINDING) and not text.startswith(f"{FINDING}ERROR:")


DIFF = "patch '"  # how a dry run's patch diff reaches a message hook (run/dryrun.py)


@dataclass
class Row:
    """One run as the live table shows it."""

    label: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    run_id: int | None = None
    gpus: str = "-"
    phase: str = "starting"
    engine: str | None = None  # whose metrics the row shows
    measures: dict[str, Any] = field(default_factory=dict)  # by metric name, once measured
    note: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # its plan's value of each swept param (`swept.py`)

    @property
    def host(self) -> str:
        return self.label.rpartition("@")[2].partition(" #")[0]  # a run's label: `variant@host #id`

    @property
    def variant(self) -> str:
        return self.label.rpartition("@")[0]


STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow"}
THROUGHPUT = MetricInfo("output_tok_s", "tok/s", 1)  # orch's own measure, whatever the engine
FACTS = ("run", "gpus", "engine", "status", "plan")  # what `known` says besides measures


class Board:
    """The Reporter of `orch run` on a terminal (`run/attempt.py` Reporter): the live table."""

    def __init__(self, console: Console, line: Callable[[str, str], None],
                 transfer: Callable[[str], Callable[[str, int], None]]):
        # `line` prints above the table (ui.progress); `transfer` is the bar of a push that is no run's
        self._console = console
        self._line = line
        self._transfer = transfer
        self.rows: list[Row] = []
        self._current: dict[str, Row] = {}  # label -> the row of the run that label names now
        self._live: Live | None = None
        self.repeats = Repeats()
        self._shown: tuple[str, ...] = ()  # the swept params, as columns
        self._plans: dict[str, RunPlan] = {}  # by plan key
        self._variants = False  # several variants: a variant column
        atexit.register(self.stop)  # an exit that skips the summary still leaves the terminal clean

    def expect(self, plans: list[RunPlan]) -> None:
        """The sweep's plans: the params that tell them apart become columns (`swept.py`)."""
        self._shown = swept.names(plans)
        self._plans = {plan.key: plan for plan in plans}
        self._variants = len({plan.variant for plan in plans}) > 1

    # -- the Reporter hooks --------------------------------------------------------------------

    def message(self, label: str, text: str) -> None:
        if text.startswith(WARNING):
            self.warning(label, text[len(WARNING):])
            return
        shown = self.repeats.message(label, text)
        if shown is None:
            return
        text = shown
        row = self._current.get(label)
        if row is None or "\n" in text:  # several lines (a preflight finding's why and fix) say more than a note
            self._line(label, text)
        if row is not None:
            row.note = (text.splitlines() or [""])[0]
            self._refresh()

    def warning(self, label: str, text: str) -> None:
        if self.repeats.warning(label, text):
            self._line(label, f"{WARNING}{text}")

    def transfer(self, label: str) -> Callable[[str, int], None]:
        """A run's checkpoint push as its row's note (the row is where a run's progress shows)."""
        row = next((r for named, r in self._current.items() if label.startswith(named + " ")), None)
        if row is None:  # not a run's push: a bar of its own
            return self._transfer(label)
        name, moved = label[len(row.label) + 1:], {"total": 0, "advance": 0}

        def on(kind: str, amount: int) -> None:
            if kind in moved:
                moved[kind] += amount
                row.note = f"push {name}: {moved['advance'] / 2**20:.1f} of {moved['total'] / 2**20:.1f} MiB"
                self._refresh()

        return on

    def stage(self, label: str, stage: Stage) -> None:
        row = self._current.get(label) or self._start(label)
        row.phase = stage.value
        self._refresh()

    def known(self, label: str, values: dict[str, Any]) -> None:
        row = self._start(label) if "run" in values else self._current.get(label) or self._start(label)
        if "run" in values:
            row.run_id = values["run"]
        if values.get("plan") in self._plans:
            row.values = swept.values(self._plans[values["plan"]], self._shown)
        if values.get("gpus") is not None:
            row.gpus = str(values["gpus"])
        row.engine = values.get("engine", row.engine)
        row.measures.update((k, v) for k, v in values.items() if k not in FACTS)
        if "status" in values:
            row.phase, row.ended = values["status"], time.monotonic()
        self._refresh()

    # -- the display ---------------------------------------------------------------------------

    def _start(self, label: str) -> Row:
        row = Row(label)
        self.rows.append(row)
        self._current[label] = row
        if self._live is None:
            self._live = Live(get_renderable=self.table, console=self._console, refresh_per_second=4)
            self._live.start()
        return row

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def table(self) -> Group:
        """The runs going on, a row each; the finished ones folded into a count below them. It
        fits the terminal: columns that say the same on every row are left out, and the last
        line's note is cut to the room left."""
        going = [r for r in self.rows if r.phase not in STATUS_STYLE]
        columns = self._columns(self._metrics())
        width = self._console.width
        room = width - _measured(self._console, _table(columns, going, None)) - 1  # the space before the note
        parts: list[RenderableType] = [_table(columns, going, max(room, 8))]
        finished = [r.phase for r in self.rows if r.phase in STATUS_STYLE]
        if finished:
            counts = ", ".join(f"[{STATUS_STYLE[s]}]{finished.count(s)} {s}[/]" for s in STATUS_STYLE if s in finished)
            folded = Text.from_markup(f"{len(finished)} finished: {counts}", overflow="ellipsis")
            folded.no_wrap = True
            parts.append(folded)
        return Group(*parts)

    def _columns(self, metrics: list[MetricInfo]) -> list[Column]:
        """(header, cell of a row) of each column worth its room: a variant and a host column only
        where they differ between runs, one per swept param (`swept.labels`)."""
        now = time.monotonic()
        columns: list[Column] = [("run", lambda r: fmt(r.run_id))]
        if self._variants:
            columns.append(("variant", lambda r: line(r.variant)))
        for name, label in swept.labels(self._shown).items():
            columns.append((label, _value_of(name)))
        if len({r.host for r in self.rows}) > 1:
            columns.append(("host", lambda r: line(r.host)))
        if len({r.gpus for r in self.rows}) > 1:
            columns.append(("GPUs", lambda r: line(r.gpus)))
        columns.append(("phase", lambda r: f"{r.phase} {(r.ended or now) - r.started:.0f} s"))
        columns.extend((m.label, _measure_of(m.name)) for m in metrics)
        return columns

    def _metrics(self) -> list[MetricInfo]:
        """The metrics the rows' engines declare (as the summary shows them), then tokens/s."""
        shown = {m.name: m for r in self.rows if r.engine for m in orchestrator.engine_metrics(r.engine)}
        shown.setdefault(THROUGHPUT.name, THROUGHPUT)
        return list(shown.values())

    def stop(self) -> None:
        """Stop drawing the table (its last state stays on the screen); a later run draws it again."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def finish(self) -> list[str]:
        """The table stopped; the counts of what was said once (`Repeats.finish`)."""
        self.stop()
        return self.repeats.finish()


Column = tuple[str, Callable[[Row], str]]  # a live table column: its header, and a row's cell


def _value_of(name: str) -> Callable[[Row], str]:
    return lambda row: line(fmt(row.values.get(name)))


def _measure_of(name: str) -> Callable[[Row], str]:
    return lambda row: fmt(row.measures.get(name))


def _table(columns: list[Column], rows: list[Row], note_width: int | None) -> Table:
    """The table of `rows`, with the note column `last` cut to `note_width` (None: without it)."""
    # one space between columns (no edge, no padding): the room of 80 columns goes to the cells
    table = Table(title="runs in progress", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    for header, _ in columns:
        table.add_column(header, no_wrap=True, overflow="ellipsis")
    if note_width is not None:
        table.add_column("last", no_wrap=True, overflow="ellipsis", max_width=note_width)
    for r in rows:
        cells = [cell(r) for _, cell in columns]
        table.add_row(*cells, *([line(r.note)] if note_width is not None else []))
    return table


def _measured(console: Console, table: Table) -> int:
    """How wide `table` is drawn on `console` at most."""
    return Measurement.get(console, console.options, table).maximum
