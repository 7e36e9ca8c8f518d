"""An experiment's configurations compared: what `orch compare` ranks and what `orch diff
EXPERIMENT --where ... --vs ...` sets side by side (the ranking and its noise: core/compare.py).
The types and helpers a caller reads the result with are here too."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.compare import (
    NOISE as NOISE, Comparison as Comparison, Group as Group, SideBySide as SideBySide, Stat as Stat,
    as_json as as_json, cell as cell, did_you_mean as did_you_mean,
)
from orchestrator.core import compare as comparing
from orchestrator.core.objective import metrics as objective_metrics
from orchestrator.core.tags import WHERE_PREFIX
from orchestrator.errors import SpecError

from .records import parse_where

_DEFAULT_DB = "sqlite:///orch.db"
__all__ = ["NOISE", "Comparison", "Group", "SideBySide", "Stat", "as_json", "cell", "did_you_mean",
           "objective_metrics", "Compared", "ConfigurationDiff", "compare_configurations", "compare_csv",
           "diff_configurations", "load", "view", "left_out_text"]


@dataclass(frozen=True)
class Compared:
    """`orch compare`'s result: the comparison and how many succeeded runs it counts."""

    comparison: Comparison
    counted: int


@dataclass(frozen=True)
class ConfigurationDiff:
    """Two configurations' repeats side by side: each side's group, the metric rows, and the JSON
    `orch diff --vs --json` prints."""

    a: Group
    b: Group
    rows: list[SideBySide]

    def as_json(self) -> dict[str, Any]:
        return comparing.side_by_side_json(self.a, self.b, self.rows)


def load(store: Any, experiment: str, where: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The experiment's succeeded runs matching `where`, and the count of runs left out per other status."""
    from orchestrator.store import queries
    from orchestrator.store.reading import SUCCEEDED, shown

    counts = queries.status_counts(store, experiment)
    if not counts:
        known = queries.experiments(store)
        raise SpecError(f"no experiment {experiment!r} in {shown(store.url)}{comparing.did_you_mean(experiment, known)}"
                        f"; see `orch ls` (experiments: {', '.join(known) or 'none'})")
    runs = queries.comparable_runs(store, experiment)
    _with_tags(store, runs)
    comparing.check_keys(where, {k for r in runs for k in view(r)}, f"of {experiment!r}")
    chosen = [r for r in runs if comparing.matches(view(r), where)]
    left_out = {s: n for s, n in counts.items() if s != SUCCEEDED and n}
    if where:
        left_out["not matching --where"] = len(runs) - len(chosen)
    return chosen, left_out


def view(run: dict[str, Any]) -> dict[str, Any]:
    """What `--where` matches: the run's params as they ran, its variant, `asked.k`, `effective.k`,
    and its tags as `tag.k` (`orch tag`)."""
    found = comparing.where_view(run["variant"], run["params"], run.get("effective"))
    found.update({WHERE_PREFIX + k: v for k, v in run.get("tags", {}).items()})
    return found


def _with_tags(store: Any, runs: list[dict[str, Any]]) -> None:
    """Each run's tags beside its params (`tags`: {key: value}), for `--where tag.KEY=VALUE`."""
    from orchestrator.store import tags

    tagged = tags.run_tags(store, [r["id"] for r in runs])
    for r in runs:
        r["tags"] = tagged.get(r["id"], {})


def left_out_text(left_out: dict[str, int]) -> str:
    """`3 failed, 1 not matching --where`: the runs a comparison leaves out, or `none`."""
    return ", ".join(f"{n} {status}" for status, n in left_out.items()) or "none"


def compare_configurations(experiment: str, *, db: str = _DEFAULT_DB, where: Sequence[str] = (),
                           by: str = "") -> Compared:
    """`orch compare EXPERIMENT`: one group per configuration of the experiment's succeeded runs
    (matching each `where`, `key=value`), repeats aggregated (n, median, min-max), ranked by the
    experiment's objective or by the metric `by` under its constraints, the best and those within
    noise of it marked."""
    from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS
    from orchestrator.store import reading

    runs, left_out = load(reading.open_url(db), experiment, parse_where(where))
    if not runs:
        raise SpecError(f"experiment {experiment!r} has no succeeded run{' matching --where' if where else ''} "
                        f"to compare ({left_out_text(left_out)}); see `orch ls -e {experiment}`")
    objective = comparing.objective_of(runs, by.strip())
    return Compared(comparing.compare(experiment, runs, left_out, objective, HOST_SPECIFIC_PARAMS), len(runs))


def compare_csv(experiment: str, *, db: str = _DEFAULT_DB, where: Sequence[str] = (), by: str = "") -> str:
    """`orch compare --csv`: a row per configuration, METRIC_median/_min/_max columns."""
    out = io.StringIO()
    found = compare_configurations(experiment, db=db, where=where, by=by).comparison
    csv.writer(out, lineterminator="\n").writerows(comparing.csv_rows(found))
    return out.getvalue()


def diff_configurations(experiment: str, *, db: str = _DEFAULT_DB, where: Sequence[str] = (),
                        vs: Sequence[str] = ()) -> ConfigurationDiff:
    """`orch diff EXPERIMENT --where ... --vs ...`: side A the configuration whose runs match
    `where`, side B the same with `vs` changing (or adding) conditions (`key=value` each); each side
    must be one configuration."""
    from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS
    from orchestrator.store import reading

    chosen_a, changed = parse_where(where), parse_where(vs, "--vs")
    every, _ = load(reading.open_url(db), experiment, {})
    known = {k for r in every for k in view(r)}
    for option, conditions in (("--where", chosen_a), ("--vs", changed)):
        comparing.check_keys(conditions, known, f"of {experiment!r}", option)
    sides = []
    for side, conditions in (("A", chosen_a), ("B", {**chosen_a, **changed})):
        matching = [r for r in every if comparing.matches(view(r), conditions)]
        sides.append(comparing.one_configuration(comparing.group(matching, HOST_SPECIFIC_PARAMS), side, conditions))
    a, b = sides
    return ConfigurationDiff(a, b, comparing.side_by_side(a, b))
