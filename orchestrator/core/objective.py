"""What "best" means for an experiment: a metric to maximize or minimize, subject to constraints.

Written in the experiment file as

    objective:
      maximize: output_tok_s                        # or `minimize: itl_ms_p99`
      subject_to: ["accept_len >= 2", "itl_ms_p99 <= 50"]

and stored with every run (in its spec), so `orch compare` and `orch report` rank by it; `--by`
ranks by another metric under the same constraints. Without one, configurations rank by output
throughput: accept length only grows with steps and topk, and the longest draft chain is rarely
the fastest. A constraint holds for a configuration when the median of its repeats meets it.

Pure and light: `orch compare` reads it without loading YAML or the experiment reader.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import SpecError

THROUGHPUT = "output_tok_s"  # orch's own measure of output tokens per second, whatever the engine
ACCEPT = "accept_len"
DEFAULT_ORDER = (THROUGHPUT, ACCEPT)  # the default objective: the first of these the runs have
DIRECTIONS = ("maximize", "minimize")
KEYS = (*DIRECTIONS, "subject_to")
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda v, b: v >= b, "<=": lambda v, b: v <= b, ">": lambda v, b: v > b, "<": lambda v, b: v < b,
}
CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
EXAMPLE = 'objective: {maximize: output_tok_s, subject_to: ["accept_len >= 2"]}'

Where = Callable[[str | None], str]  # a key of the `objective:` mapping (None: the mapping) -> "file:line"


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float

    def holds(self, value: float | None) -> bool:
        """A configuration without the metric does not meet it: nothing shows that it would."""
        return value is not None and OPERATORS[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


@dataclass(frozen=True)
class Objective:
    metric: str
    lower: bool  # minimize
    subject_to: tuple[Constraint, ...] = ()
    source: str = "default"  # "default", "objective" (the experiment's) or "--by"

    @property
    def direction(self) -> str:
        return DIRECTIONS[self.lower]

    def as_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": self.direction, "from": self.source,
                "subject_to": [str(c) for c in self.subject_to]}


def parse(value: Any, where: Where) -> Objective:
    """An `objective:` value (a YAML mapping or its stored copy) -> an Objective; a bad one is one
    SpecError naming where it was written and what it should look like."""
    if not isinstance(value, dict):
        raise SpecError(f"{where(None)}: `objective` must be a mapping, got {value!r}; e.g. {EXAMPLE}")
    for key in value:
        if key not in KEYS:
            raise SpecError(f"{where(key)}: unknown key {key!r} in `objective`{_close(str(key), KEYS)}; "
                            f"keys: {', '.join(KEYS)}")
    given = [d for d in DIRECTIONS if d in value]
    if len(given) != 1:
        said = "both maximize and minimize" if given else "neither maximize nor minimize"
        raise SpecError(f"{where(None)}: `objective` has {said}; give one metric to maximize or minimize, e.g. {EXAMPLE}")
    metric = value[given[0]]
    if not isinstance(metric, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", metric):
        raise SpecError(f"{where(given[0])}: `objective.{given[0]}` must be a metric's name, got {metric!r}; "
                        f"e.g. {given[0]}: {THROUGHPUT}")
    return Objective(metric, given[0] == "minimize", constraints(value.get("subject_to", []), where), "objective")


def constraints(value: Any, where: Where) -> tuple[Constraint, ...]:
    """`subject_to`: a list of `METRIC OP NUMBER` texts (one text alone is a list of one)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise SpecError(f"{where('subject_to')}: `objective.subject_to` must be a list of texts like "
                        f"\"accept_len >= 2\", got {value!r}")
    return tuple(constraint(item, where("subject_to")) for item in items)


def constraint(text: Any, where: str) -> Constraint:
    match = CONSTRAINT.match(text) if isinstance(text, str) else None
    if not match:
        raise SpecError(f"{where}: constraint {text!r} in `objective.subject_to` must look like "
                        f"\"accept_len >= 2\" or \"itl_ms_p99 <= 50\" (ops: {' '.join(OPERATORS)})")
    return Constraint(match.group(1), match.group(2), float(match.group(3)))


def metrics(objective: Objective) -> list[str]:
    """Every metric the objective names: the ranked one first, then each constraint's."""
    return list(dict.fromkeys([objective.metric, *(c.metric for c in objective.subject_to)]))


def check_metrics(objective: Objective, known: Any, where: Where, what: str) -> None:
    """Each metric the objective names is one of `known` (`what` says what they are), else one
    SpecError with a did-you-mean."""
    names = sorted(known)
    for c in (None, *objective.subject_to):
        metric, key = (objective.metric, objective.direction) if c is None else (c.metric, "subject_to")
        if metric not in names:
            listed = ", ".join(names) or "none"
            raise SpecError(f"{where(key)}: objective metric {metric!r} is not {what}{_close(metric, names)}; "
                            f"metrics: {listed}")


def _close(name: str, known: Any) -> str:
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"; did you mean {found[0]!r}?" if found else ""
