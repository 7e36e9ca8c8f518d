"""What the report reads: every run of the experiment as a plain record (Store.record's keys, read
for all runs at once), and the comparison of its succeeded runs by configuration as `orch compare`
makes it (core/compare.py)."""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from orchestrator.core import compare as comparing
from orchestrator.engines.base import HEADLINE
from orchestrator.errors import StoreError
from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS
from orchestrator.store import queries, records
from orchestrator.store.reading import SUCCEEDED, Reader, shown


TICK = 24  # characters of a value in a tick label: the labels beside a plot leave it most of a 1400-pixel page


@dataclass(frozen=True)
class RunData:
    record: dict[str, Any]  # store.records.experiment_records: Store.record's keys for params, metrics, patches ...

    @property
    def id(self) -> int:
        return int(self.record["id"])

    @functools.cached_property  # read for every figure: made once
    def metrics(self) -> dict[str, float]:
        """The numeric metrics (one recorded as absent, as text or as NaN is not a number to plot)."""
        return {k: float(v) for k, v in self.record["metrics"].items() if _number(v)}

    def headline_series(self) -> list[tuple[int, str | None, float]]:
        """(index, time, value) of every series point that carries the headline metric (accept length):
        the only series values the report reads (experiment_records reads no others)."""
        points = [p for p in self.record["series"] if _number(p.get(HEADLINE))]
        return [(i, p.get("time"), float(p[HEADLINE])) for i, p in enumerate(points)]


@dataclass(frozen=True)
class Experiment:
    name: str
    runs: list[RunData]  # every run, whatever its status, oldest first
    comparison: comparing.Comparison | None  # None when no run succeeded with a numeric metric

    @functools.cached_property
    def by_id(self) -> dict[int, RunData]:
        return {r.id: r for r in self.runs}

    @functools.cached_property
    def ranks(self) -> dict[int, int]:
        """id() of each group of the comparison -> its rank, from 1 (the table's `#`)."""
        return {id(g): rank for rank, g in enumerate(self.comparison.groups, 1)} if self.comparison else {}

    def group_runs(self, group: comparing.Group) -> list[RunData]:
        return [self.by_id[i] for i in group.run_ids if i in self.by_id]

    @property
    def swept(self) -> list[str]:
        """What tells configurations apart: the swept params, then `variant` and `patches` when they do."""
        return self.comparison.varying if self.comparison else []

    def label(self, group: comparing.Group, between: str = " ", only: list[str] | None = None) -> str:
        """`steps=3 topk=4`: the configuration by its swept values (`only` some of them), as a
        reader tuned them; a rank or a run number would send the reader to the table to decode."""
        names = self.swept if only is None else only
        return between.join(f"{k}={_shown(comparing.cell(group, k))}" for k in names) or "the only configuration"

    @functools.cached_property
    def prefix(self) -> str:
        """The start every swept param's name shares up to an `_` (`speculative_`), when two or more
        params are swept: left off where a label must be narrow (an axis's ticks), said in its title."""
        names = [k for k in self.swept if k not in ("variant", "patches")]
        if len(names) < 2:
            return ""
        shared = os.path.commonprefix(names)
        return shared[:shared.rfind("_") + 1]

    def tick(self, group: comparing.Group) -> str:
        """The configuration's swept values on one line, each name without the shared prefix and
        each value at most TICK characters (a long path would squeeze the plot; the hover text and
        legends have it whole)."""
        cut = len(self.prefix)
        parts = [(k[cut:] if k.startswith(self.prefix) else k, _shown(comparing.cell(group, k))) for k in self.swept]
        return " ".join(f"{k}={v if len(v) <= TICK else v[:TICK - 1] + '…'}" for k, v in parts) or "the only configuration"

    def run_label(self, run: RunData) -> str:
        """A run's swept values (a failed run's too: it is in no configuration)."""
        values = {**run.record["params"], "variant": run.record["variant"],
                  "patches": "+".join(p["name"] for p in run.record["patches"])}
        return " ".join(f"{k}={_shown(values.get(k))}" for k in self.swept)

    @functools.cached_property
    def group_of(self) -> dict[int, comparing.Group]:
        """Run id -> its configuration."""
        return {i: g for g in (self.comparison.groups if self.comparison else []) for i in g.run_ids}


def _shown(value: object) -> str:
    """A value as the experiment file writes it; an empty one (no patches) as `none`."""
    if value == "":
        return "none"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _number(value: object) -> bool:
    """A finite int or float (not a bool): what a figure can place."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load(store: Reader, experiment: str, by: str = "") -> Experiment:
    found = records.experiment_records(store, experiment, series_value=HEADLINE)
    if not found:
        known = queries.experiments(store)
        raise StoreError(f"no runs of experiment {experiment!r} in {shown(store.url)}{comparing.did_you_mean(experiment, known)}"
                         f"; see `orch ls` (experiments: {', '.join(known) or 'none'})")
    comparable = queries.comparable_runs(store, experiment)
    counts = queries.status_counts(store, experiment)
    metrics = {m for r in comparable for m, v in r["metrics"].items() if _number(v)}
    comparison = None
    if metrics:  # ranked as `orch compare` ranks: the experiment's objective, else throughput (`by` over it)
        left_out = {s: n for s, n in counts.items() if s != SUCCEEDED and n}
        objective = comparing.objective_of(comparable, by)
        comparison = comparing.compare(experiment, comparable, left_out, objective, HOST_SPECIFIC_PARAMS)
    return Experiment(experiment, [RunData(r) for r in found], comparison)
