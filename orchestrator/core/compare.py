"""Runs of an experiment -> one row per configuration, repeats aggregated, best row and noise marked.

A configuration is a run's params, host-specific ones left out, and its patch set. Host-specific
are the params the caller names (a port, a GPU slot) and every param the experiment writes with a
`{{ host.* }}` reference (a path on the host): they differ per host, not per configuration.
The patch set is each applied patch's name and the hash of the file after it, so an edited patch
is another configuration even under the same name.

Per configuration and numeric metric: n, median, min and max over its runs.

Objective (core/objective.py): the metric that ranks and the constraints the best must meet. The
experiment's `objective:` as its newest run stored it, else output throughput; `--by` ranks by
another metric under the same constraints. A configuration meets a constraint when the median of
its repeats does; those that fail one rank after those that meet them all, and none is the best.

Direction: a metric is better lower when its name says it is a duration (`_s`, `_ms`, `_us` at the
end, or latency / ttft / tpot / itl / startup in it) and not a rate (`tok_s`, `req_s`, `_per_s`,
throughput); every other metric (accept length, tokens/s, acceptance rates) is better higher.

Noise: a row is "within noise" of the best when their min–max ranges over repeats overlap: the best
repeat of the worse row reaches the worst repeat of the better one, so one more repeat could swap
them. With one run per side there is no spread to measure and only an equal value overlaps; the
table shows n so a reader sees it.
"""

from __future__ import annotations

import difflib
import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import SpecError
from . import objective as objectives
from .objective import Objective

HEADLINE = (objectives.THROUGHPUT, objectives.ACCEPT)  # shown first, in this order, when present
BEST, NOISE = "best", "within noise"
_RATE = re.compile(r"(tok_s|req_s|_per_s|throughput)")
_DURATION = re.compile(r"(_s|_ms|_us)$|latency|ttft|tpot|itl|startup")


def lower_is_better(metric: str) -> bool:
    return not _RATE.search(metric) and bool(_DURATION.search(metric))


@dataclass(frozen=True)
class Stat:
    n: int
    median: float
    low: float
    high: float

    def overlaps(self, other: Stat) -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "median": self.median, "min": self.low, "max": self.high}


def stat(values: list[float]) -> Stat | None:
    if not values:
        return None
    return Stat(len(values), statistics.median(values), min(values), max(values))


@dataclass
class Group:
    """One configuration: its params (host-specific ones left out), patch set, runs and metrics."""

    params: dict[str, Any]
    patches: tuple[str, ...]
    variants: list[str] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)
    mark: str = ""
    failed: list[str] = field(default_factory=list)  # the objective's constraints its medians do not meet
    asked: list[dict[str, Any]] = field(default_factory=list)  # the distinct params its runs asked (several: the engine merged them)

    def ran_as_one(self) -> str | None:
        """`a=8 and a=4 ran as one (a=4)` when the engine made several asked configurations this one."""
        if len(self.asked) < 2:
            return None
        names = [k for k in self.asked[0] if len({_text(a.get(k)) for a in self.asked}) > 1]
        each = [", ".join(f"{k}={_text(a.get(k))}" for k in names) for a in self.asked]
        ran = ", ".join(f"{k}={_text(self.params.get(k))}" for k in names)
        return f"{' and '.join(each)} ran as one configuration ({ran}): the engine adjusted them"

    def stat(self, metric: str) -> Stat | None:
        return stat(self.values.get(metric, []))


@dataclass
class Comparison:
    experiment: str
    objective: Objective
    groups: list[Group]  # sorted, best first
    constant: dict[str, Any]  # params equal in every configuration
    steady: dict[str, float]  # metrics with one value in every run (e.g. the workload's request count)
    varying: list[str]  # params that tell configurations apart (plus `variant`, `patches` when they do)
    metrics: list[str]
    left_out: dict[str, int]  # status -> runs not counted (every status but succeeded)

    @property
    def by(self) -> str:
        return self.objective.metric


def host_written(spec: dict[str, Any], variant: str) -> set[str]:
    """The params the experiment writes with a `{{ host.* }}` reference (in its params or the variant's)."""
    written = dict(spec.get("params") or {})
    written.update(((spec.get("variants") or {}).get(variant) or {}).get("params") or {})
    return {k for k, v in written.items() if isinstance(v, str) and re.search(r"\{\{[^}]*\bhost\.", v)}


ASKED, EFFECTIVE = "asked.", "effective."  # `--where` prefixes: the command's param, the engine's print


def where_view(variant: str, params: dict[str, Any], effective: dict[str, Any] | None) -> dict[str, Any]:
    """What `--where` matches, by the values that ran (a sweep is tuned by what the engine ran, and
    `orch compare` groups by it): `k` is the param at the engine's value when the engine's print
    names it (`as_ran`), else as asked, or an engine-only name (vLLM's `max_model_len`); `asked.k`
    the param as the command asked it; `effective.k` the engine's print alone, a nested config by
    dotted name (`effective.speculative_config.num_speculative_tokens`)."""
    printed = _flat(effective or {})
    view: dict[str, Any] = {"variant": variant, **{k: v for k, v in printed.items() if k not in params},
                            **as_ran(params, effective)}
    view.update({ASKED + k: v for k, v in params.items()})
    view.update({EFFECTIVE + k: v for k, v in printed.items()})
    return view


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for k, v in values.items():
        found.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return found


def matches(params: dict[str, Any], where: dict[str, Any]) -> bool:
    """Every `--where` condition holds: the param equals the value as `--set` reads it, or as text."""
    return all(k in params and (params[k] == v or _text(params[k]) == _text(v)) for k, v in where.items())


def check_keys(where: dict[str, Any], known: set[str], what: str, option: str = "--where") -> None:
    for key in where:
        if key not in known:
            raise SpecError(f"{option} {key}: no run {what} has a param {key!r}{did_you_mean(key, known)}")


def did_you_mean(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def group(runs: list[dict[str, Any]], host_specific: frozenset[str]) -> list[Group]:
    """Succeeded runs (plain dicts: id, variant, params, spec, patches [(name, sha)], metrics) -> groups."""
    found: dict[str, Group] = {}
    left: dict[tuple[int, str], frozenset[str]] = {}  # per spec and variant: runs share their spec's dict
    for run in runs:
        spec = run.get("spec") or {}
        if (id(spec), run["variant"]) not in left:
            left[id(spec), run["variant"]] = host_specific | host_written(spec, run["variant"])
        leave = left[id(spec), run["variant"]]
        asked = {k: v for k, v in run["params"].items() if k not in leave}
        params = as_ran(asked, run.get("effective"))
        patches = tuple(name for name, _ in run["patches"])
        key = json.dumps([params, sorted(run["patches"])], sort_keys=True, default=str)
        g = found.setdefault(key, Group(params, patches))
        if asked not in g.asked:
            g.asked.append(asked)
        g.run_ids.append(run["id"])
        if run["variant"] not in g.variants:
            g.variants.append(run["variant"])
        for name, value in run["metrics"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                g.values.setdefault(name, []).append(float(value))
    return list(found.values())


def as_ran(params: dict[str, Any], effective: dict[str, Any] | None) -> dict[str, Any]:
    """The params with each one the engine's print of its arguments names by the same name (SGLang's
    `speculative_num_draft_tokens`, ...) at the value the engine ran, when it differs from the asked one."""
    if not effective:
        return params
    return {k: effective[k] if k in effective and not isinstance(effective[k], (dict, list)) and not _same(v, effective[k])
            else v for k, v in params.items()}


def _same(asked: Any, ran: Any) -> bool:
    """8 is "8", 0.85 is "0.85", eagle3 is EAGLE3: an engine's spelling of the value asked."""
    if _text(asked).lower() == _text(ran).lower():
        return True
    try:
        return float(_text(asked)) == float(_text(ran))
    except ValueError:
        return False


def objective_of(runs: list[dict[str, Any]], by: str = "") -> Objective:
    """What ranks the runs: the experiment's `objective:` as its newest run stored it (its spec),
    `--by` ranking by another metric under its constraints, else the first of throughput and
    accept length the runs have (then the first metric by name)."""
    stored = next((r for r in reversed(runs) if isinstance((r.get("spec") or {}).get("objective"), dict)), None)
    told = objectives.parse(stored["spec"]["objective"], lambda key: f"objective: of run {stored['id']}'s experiment"
                            ) if stored else None
    if by:
        lower = told.lower if told and told.metric == by else lower_is_better(by)
        return Objective(by, lower, told.subject_to if told else (), "--by")
    if told:
        return told
    names = {m for r in runs for m, v in r["metrics"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    metric = next((m for m in objectives.DEFAULT_ORDER if m in names), min(names, default=objectives.THROUGHPUT))
    return Objective(metric, lower_is_better(metric))


def compare(experiment: str, runs: list[dict[str, Any]], left_out: dict[str, int], objective: Objective | str,
            host_specific: frozenset[str]) -> Comparison:
    """`objective` a metric's name: rank by it alone, its direction by its name."""
    if isinstance(objective, str):
        objective = Objective(objective, lower_is_better(objective), (), "--by")
    groups = group(runs, host_specific)
    metrics = metric_order({m for g in groups for m in g.values}, objective.metric)
    _check_objective(objective, metrics, experiment)
    groups = rank(groups, objective)
    names = list(dict.fromkeys(k for g in groups for k in g.params))
    varying = [k for k in names if len({_text(g.params.get(k)) for g in groups}) > 1]
    constant = {k: groups[0].params.get(k) for k in names if k not in varying}
    for label in ("variant", "patches"):
        if len({cell(g, label) for g in groups}) > 1:
            varying.append(label)
        else:
            constant[label] = cell(groups[0], label)
    steady = {m: v[0] for m in metrics if m not in objectives.metrics(objective) and len(v := sorted({x for g in groups for x in g.values.get(m, [])})) == 1
              and all(m in g.values for g in groups)}
    return Comparison(experiment, objective, groups, constant, steady, varying, metrics, left_out)


def _check_objective(objective: Objective, metrics: list[str], experiment: str) -> None:
    """Every metric the objective names is one some succeeded run has: else a typo, or a measure
    this experiment's runs do not make (a constraint on it would fail every configuration)."""
    what = "a metric its succeeded runs have"
    if objective.source != "objective" and objective.metric not in metrics:
        raise SpecError(f"--by {objective.metric}: no succeeded run of {experiment!r} has that metric"
                        f"{did_you_mean(objective.metric, metrics)}; known: {', '.join(metrics) or 'none'}")
    hint = "; rank by another with --by" if objective.source == "objective" else ""
    try:
        objectives.check_metrics(objective, metrics, lambda key: f"{experiment!r} objective ({key})", what)
    except SpecError as exc:
        raise SpecError(f"{exc}{hint}") from None


def metric_order(names: set[str], by: str) -> list[str]:
    first = [m for m in (by, *HEADLINE) if m in names]
    return list(dict.fromkeys(first + sorted(names)))


def rank(groups: list[Group], objective: Objective) -> list[Group]:
    """Those meeting every constraint first, each part best first by the median of the objective's
    metric (groups without it last); marks the best that meets them and the others within its noise."""
    by = objective.metric
    for g in groups:
        g.failed = [str(c) for c in objective.subject_to if not c.holds(_median(g, c.metric))]

    def order(g: Group) -> tuple[bool, int, float]:
        s = g.stat(by)
        if s is None:
            return (bool(g.failed), 1, 0.0)
        return (bool(g.failed), 0, s.median if objective.lower else -s.median)

    ranked = sorted(groups, key=order)
    best = ranked[0].stat(by) if ranked and not ranked[0].failed else None
    if best is None:
        return ranked
    ranked[0].mark = BEST
    for g in ranked[1:]:
        s = g.stat(by)
        g.mark = NOISE if s is not None and not g.failed and s.overlaps(best) else ""
    return ranked


def _median(g: Group, metric: str) -> float | None:
    s = g.stat(metric)
    return s.median if s else None


def cell(g: Group, name: str) -> Any:
    """A varying column's value in one group."""
    if name == "variant":
        return ", ".join(g.variants)
    if name == "patches":
        return "+".join(g.patches)
    return g.params.get(name)


def as_json(c: Comparison) -> dict[str, Any]:
    return {
        "experiment": c.experiment, "by": c.by, "lower_is_better": c.objective.lower,
        "objective": c.objective.as_json(), "constraints": [str(x) for x in c.objective.subject_to],
        "failed": [{"params": g.params, "variants": g.variants, "runs": g.run_ids, "failed": g.failed}
                   for g in c.groups if g.failed],
        "constant": c.constant, "steady_metrics": c.steady, "varying": c.varying, "left_out": c.left_out,
        "rows": [{"mark": g.mark or None, "params": g.params, "ran_as_one": g.ran_as_one(), "failed_constraints": g.failed,
                  "variants": g.variants, "patches": list(g.patches),
                  "runs": g.run_ids, "n": len(g.run_ids),
                  "metrics": {m: s.as_json() for m in c.metrics if (s := g.stat(m)) is not None}}
                 for g in c.groups],
    }


def csv_rows(c: Comparison) -> list[list[Any]]:
    """A header and one row per configuration: mark, the varying columns, n, runs, then median/min/max per metric."""
    fails = ["fails"] if c.objective.subject_to else []  # the constraints a row does not meet, `; `-joined
    header = ["mark", *c.varying, "n", "runs", *fails,
              *(f"{m}_{part}" for m in c.metrics for part in ("median", "min", "max"))]
    rows: list[list[Any]] = [header]
    for g in c.groups:
        stats = [g.stat(m) for m in c.metrics]
        rows.append([g.mark, *(cell(g, k) for k in c.varying), len(g.run_ids), " ".join(map(str, g.run_ids)),
                     *(["; ".join(g.failed)] if fails else []),
                     *(x for s in stats for x in ((s.median, s.low, s.high) if s else ("", "", "")))])
    return rows


@dataclass(frozen=True)
class SideBySide:
    """One metric of two configurations: each side's spread, the change of the median, noise or not."""

    metric: str
    a: Stat | None
    b: Stat | None

    @property
    def delta(self) -> float | None:
        return self.b.median - self.a.median if self.a and self.b else None

    @property
    def noise(self) -> bool:
        return bool(self.a and self.b and self.a.overlaps(self.b))


def one_configuration(groups: list[Group], side: str, where: dict[str, Any]) -> Group:
    """The single configuration a side of `orch diff --vs` names, or a line saying what to pin."""
    conditions = " ".join(f"{k}={_text(v)}" for k, v in where.items()) or "no --where"
    if not groups:
        raise SpecError(f"diff side {side} ({conditions}): no succeeded run matches; see `orch compare`")
    if len(groups) > 1:
        names = list(dict.fromkeys(k for g in groups for k in g.params))
        loose = [k for k in names if len({_text(g.params.get(k)) for g in groups}) > 1]
        loose += [k for k in ("variant", "patches") if len({cell(g, k) for g in groups}) > 1]
        raise SpecError(f"diff side {side} ({conditions}) matches {len(groups)} configurations; pin "
                        f"{', '.join(loose)} with --where")
    return groups[0]


def side_by_side(a: Group, b: Group) -> list[SideBySide]:
    names = metric_order(set(a.values) | set(b.values), objectives.ACCEPT)  # a diff is read for the draft: accept length first
    return [SideBySide(m, a.stat(m), b.stat(m)) for m in names]


def side_by_side_json(a: Group, b: Group, rows: list[SideBySide]) -> dict[str, Any]:
    def side(g: Group) -> dict[str, Any]:
        return {"params": g.params, "variants": g.variants, "patches": list(g.patches), "runs": g.run_ids}

    keys = list(dict.fromkeys([*a.params, *b.params]))
    return {"a": side(a), "b": side(b),
            "params": {k: {"a": a.params.get(k), "b": b.params.get(k)} for k in keys
                       if _text(a.params.get(k)) != _text(b.params.get(k))},
            "metrics": {r.metric: {"a": r.a.as_json() if r.a else None, "b": r.b.as_json() if r.b else None,
                                   "delta": r.delta, "noise": r.noise} for r in rows}}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
