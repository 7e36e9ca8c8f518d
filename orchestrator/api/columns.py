"""The columns `orch ls` shows by default: the params swept between the listed runs and the
headline metrics.

A tuning sweep (steps x topk x repeats) lists runs that differ only in a few params: those are the
columns worth the room, as the live table of `orch run` shows them (cli/swept.py). A param every
listed run has at one value says nothing of one run against another, and one that differs only
because of where a run ran (a port, a GPU slot, a path the experiment writes with `{{ host.* }}`)
says nothing of its configuration (core/hostbound.py, as `orch diff` leaves them out): neither is
a column. The metrics are accept length and output throughput, then the experiment's objective's
(core/objective.py) and the one `--sort` ranks by."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.core import hostbound, objective as objectives
from orchestrator.errors import SpecError

HEADLINE = (objectives.ACCEPT, objectives.THROUGHPUT)  # every listing's, where its runs have them
REPEAT = "repeat"  # the repeat index, swept like a param where the listed runs repeat a configuration


def swept(rows: Sequence[Any], spec: dict[str, Any] | None) -> tuple[str, ...]:
    """The params whose value differs between `rows` (listed runs of one experiment), in the order
    the runs name them, host-bound ones aside (`spec`: the experiment as its newest run stored it);
    then `repeat` where the runs are repeats of a configuration."""
    if len({r.experiment for r in rows}) != 1:
        return ()  # runs of several experiments: their params are not one sweep's
    leave = frozenset().union(*(hostbound.bound_params(spec, v) for v in {r.variant for r in rows}))
    names = dict.fromkeys(k for r in rows for k in (r.params or {}) if k not in leave)
    found = tuple(k for k in names if len({repr((r.params or {}).get(k)) for r in rows}) > 1)
    repeats = REPEAT not in names and len({getattr(r, REPEAT, 0) for r in rows}) > 1
    return found + ((REPEAT,) if repeats else ())


def headline(metrics: dict[int, dict[str, Any]], spec: dict[str, Any] | None, sort: str | None) -> tuple[str, ...]:
    """Accept length and output throughput, the objective's metric and `sort`: those some listed
    run has (`sort` always: the listing is ranked by it)."""
    known = {name for values in metrics.values() for name in values}
    wanted = [*HEADLINE, *_objective_metric(spec), *([sort] if sort else [])]
    return tuple(dict.fromkeys(m for m in wanted if m in known or m == sort))


def newest_spec(reader: Any, rows: Sequence[Any]) -> dict[str, Any] | None:
    """The experiment as the newest listed run stored it (one read), where the rows are of one experiment."""
    if not rows or len({r.experiment for r in rows}) != 1:
        return None
    from orchestrator.store.reading import decoded

    found = reader.rows("SELECT spec FROM run WHERE id = ?", (max(r.id for r in rows),))
    spec = decoded("spec", found[0][0]) if found else None
    return spec if isinstance(spec, dict) else None


def _objective_metric(spec: dict[str, Any] | None) -> list[str]:
    """The metric the experiment's `objective:` ranks by; none where it has none, or one orch can
    no longer read (a listing shows the runs whatever their spec says)."""
    stored = (spec or {}).get("objective")
    if not isinstance(stored, dict):
        return []
    try:
        return [objectives.parse(stored, lambda key: "objective").metric]
    except SpecError:
        return []
