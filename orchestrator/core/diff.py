"""Two run records -> the differences between them, section by section, with deltas.

Each row says whether the view hides it by default (`Row.hidden`): a value that differs only
because of where or when the runs ran (core/hostbound.py), or a metric both runs measured alike.
`--all` shows them, and the equal params and debug fields too."""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

from . import hostbound
from .hostbound import Values, same_but_where

DEBUG_TAG = re.compile(r"\[([A-Za-z0-9_.-]*DEBUG)\]")
SECTIONS = ("params", "effective_params", "env", "metrics", "patches", "debug_lines", "command")
HOST_SPECIFIC, UNCHANGED = "host-specific", "unchanged"  # why a row is hidden unless --all


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    a: Any
    b: Any
    delta: float | None = None
    hidden: str = ""  # HOST_SPECIFIC or UNCHANGED: left out of the view unless --all; "" shown


def compare(a: dict[str, Any], b: dict[str, Any], *, everything: bool = False,
            bound: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset()),
            picked: frozenset[str] = frozenset()) -> list[Row]:
    """Rows where the runs differ, and every metric; `everything`: equal params and debug fields
    too. `bound`: each run's host-bound params (hostbound.bound_params); a row they alone tell
    apart, an engine's own pick at its start (`picked`, hostbound.picked_at_start) and a metric
    equal in both are marked hidden."""
    return _marked(_rows(a, b, everything), *_values(a, b, bound), picked)


def _rows(a: dict[str, Any], b: dict[str, Any], everything: bool) -> list[Row]:
    rows: list[Row] = []
    rows += _mapping("params", a["params"], b["params"], everything)
    rows += _effective(a.get("effective_params") or {}, b.get("effective_params") or {})
    rows += _mapping("env", a["env"], b["env"], everything)
    for name in _keys(a["metrics"], b["metrics"]):
        x, y = a["metrics"].get(name), b["metrics"].get(name)
        delta = y - x if isinstance(x, (int, float)) and isinstance(y, (int, float)) else None
        rows.append(Row("metrics", name, x, y, delta))
    rows += _patches(a["patches"], b["patches"])
    rows += _debug_fields(a["debug_lines"], b["debug_lines"], everything)
    return rows


def _values(a: dict[str, Any], b: dict[str, Any], bound: tuple[frozenset[str], frozenset[str]]
            ) -> tuple[frozenset[str], Values, Values]:
    """Both runs' host-bound param names, and each run's host-bound values (its uid among them)."""
    names = bound[0] | bound[1]
    left = Values(a.get("params") or {}, names, a.get("uid", ""))
    return names, left, Values(b.get("params") or {}, names, b.get("uid", ""))


def _marked(rows: list[Row], names: frozenset[str], left: Values, right: Values, picked: frozenset[str]
            ) -> list[Row]:
    def why(r: Row) -> str:
        if r.section == "metrics":
            return UNCHANGED if r.a == r.b else ""
        if r.section in ("params", "effective_params") and r.key in names and r.a != r.b:
            return HOST_SPECIFIC
        if r.section == "effective_params" and r.key in picked and r.a != r.b:
            return HOST_SPECIFIC
        if r.section in ("params", "effective_params", "env", "debug_lines") and same_but_where(r.a, r.b, left, right):
            return HOST_SPECIFIC
        return ""

    return [dataclasses.replace(r, hidden=why(r)) for r in rows]


def command_diff(a: dict[str, Any], b: dict[str, Any], *, bound: tuple[frozenset[str], frozenset[str]] | None = None
                 ) -> list[str]:
    """Changed lines of the two launch scripts, the run ids blanked out; with `bound` (each run's
    host-bound params), without the lines that differ only in those (`--port 31871`)."""
    left = a["command"].replace(a["uid"], "<run>").splitlines()
    right = b["command"].replace(b["uid"], "<run>").splitlines()
    if bound is not None:
        _, values_a, values_b = _values(a, b, bound)
        left, right = _unbound(left, right, values_a, values_b)
    return [
        line for line in difflib.unified_diff(left, right, f"run {a['id']}", f"run {b['id']}", lineterm="", n=0)
        if not line.startswith("@@")
    ]


def _unbound(left: list[str], right: list[str], values_a: Values, values_b: Values) -> tuple[list[str], list[str]]:
    """The two scripts, each changed line that differs only in host-bound values made its
    counterpart's, so that the diff leaves it out."""
    right = list(right)
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "replace":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                if values_a.without(left[i]) == values_b.without(right[j]):
                    right[j] = left[i]
    return left, right


def command_lines(lines: list[str]) -> int:
    """The changed lines of a `command_diff`, its two header lines aside."""
    return sum(1 for line in lines if line[:1] in "+-" and not line.startswith(("---", "+++")))


def as_json(a: dict[str, Any], b: dict[str, Any], rows: list[Row]) -> dict[str, Any]:
    out: dict[str, Any] = {"a": _identity(a), "b": _identity(b)}
    for section in SECTIONS[:-1]:
        out[section] = {
            r.key: ({"a": r.a, "b": r.b, "delta": r.delta} if section == "metrics" else {"a": r.a, "b": r.b})
            for r in rows if r.section == section
        }
    out["command"] = command_diff(a, b)
    return out


@dataclass(frozen=True)
class RunDiff:
    """Two run records and the rows where they differ: what `orch diff` shows (`shown`: less
    the rows `hidden` marks, unless `everything`). `bound`: each run's host-bound params."""

    a: dict[str, Any]
    b: dict[str, Any]
    rows: list[Row]
    bound: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    everything: bool = False

    def as_json(self) -> dict[str, Any]:
        """What `orch diff --json` prints: params, env, metrics (a, b, delta), patches, debug lines,
        command, as they are whatever the view hides; and `hidden`, the view's counts of what it hides."""
        return {**as_json(self.a, self.b, self.rows), "hidden": self.hidden()}

    def shown(self) -> list[Row]:
        """The rows the view shows: every row with `everything`, else those not hidden."""
        return self.rows if self.everything else [r for r in self.rows if not r.hidden]

    def command_diff(self) -> list[str]:
        """The changed lines of the two launch scripts (unless `everything`, not those that differ
        only in host-bound values)."""
        return command_diff(self.a, self.b, bound=None if self.everything else self.bound)

    def hidden(self) -> dict[str, int]:
        """How many lines the view hides: host-specific (rows and launch-script lines), unchanged metrics."""
        if self.everything:
            return {"host_specific": 0, "unchanged": 0}
        script = command_lines(command_diff(self.a, self.b)) - command_lines(self.command_diff())
        return {"host_specific": sum(r.hidden == HOST_SPECIFIC for r in self.rows) + script,
                "unchanged": sum(r.hidden == UNCHANGED for r in self.rows)}

    def hidden_text(self) -> str:
        """`3 host-specific and 5 unchanged lines hidden; --all shows them`, or "" where none is."""
        counts = self.hidden()
        said = " and ".join(f"{n} {why.replace('_', '-')}" for why, n in counts.items() if n)
        return f"{said} line{'s' if sum(counts.values()) != 1 else ''} hidden; --all shows them" if said else ""


def run_diff(a: dict[str, Any], b: dict[str, Any], specs: tuple[Any, Any], *, everything: bool = False) -> RunDiff:
    """The diff of two run records, each run's experiment as it stored it (`specs`) telling which of
    its params are host-bound (hostbound.bound_params)."""
    bound = (hostbound.bound_params(specs[0], a["variant"]), hostbound.bound_params(specs[1], b["variant"]))
    picked = hostbound.picked_at_start(specs[0], a["params"]) & hostbound.picked_at_start(specs[1], b["params"])
    return RunDiff(a, b, compare(a, b, everything=everything, bound=bound, picked=picked), bound, everything)


def _identity(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("id", "uid", "experiment", "variant", "host", "status", "flags")}


def _keys(x: dict[str, Any], y: dict[str, Any]) -> list[str]:
    return list(x) + [k for k in y if k not in x]


def _mapping(section: str, x: dict[str, Any], y: dict[str, Any], everything: bool) -> list[Row]:
    return [Row(section, k, x.get(k), y.get(k)) for k in _keys(x, y) if everything or x.get(k) != y.get(k)]


def _effective(x: dict[str, Any], y: dict[str, Any]) -> list[Row]:
    """What each engine ran with: the values both print that differ (SGLang prints some 300, vLLM only
    its non-default ones: a name one side lacks says nothing of what it ran)."""
    return [Row("effective_params", k, x[k], y[k]) for k in x if k in y and x[k] != y[k]]


def _patches(x: list[dict[str, Any]], y: list[dict[str, Any]]) -> list[Row]:
    left = {p["name"]: p for p in x}
    right = {p["name"]: p for p in y}
    rows = []
    for name in _keys(left, right):
        a, b = left.get(name), right.get(name)
        if a and b and a["sha256_after"] == b["sha256_after"] and a["state"] == b["state"]:
            continue
        rows.append(Row("patches", name, _patch_text(a), _patch_text(b)))
    return rows


def _patch_text(patch: dict[str, Any] | None) -> str:
    if patch is None:
        return "-"
    return f"{patch['state']} {patch['target']} {patch['sha256_after'][:12]}"


def _debug_fields(x: list[dict[str, Any]], y: list[dict[str, Any]], everything: bool) -> list[Row]:
    """Each debug field's distinct values in each run (e.g. the hidden-state shape)."""
    left, right = _field_values(x), _field_values(y)
    rows = []
    for key in _keys(left, right):
        a, b = left.get(key, []), right.get(key, [])
        if everything or a != b:
            rows.append(Row("debug_lines", key, ", ".join(a) or "-", ", ".join(b) or "-"))
    if not left and not right:
        return rows
    if len(x) != len(y):
        rows.append(Row("debug_lines", "(lines)", len(x), len(y), len(y) - len(x)))
    return rows


def _field_values(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in lines:
        match = DEBUG_TAG.search(line["text"])
        tag = match.group(1) if match else ""
        for key, value in line["fields"].items():
            name = f"{tag} {key}".strip()
            if value not in values.setdefault(name, []):
                values[name].append(value)
    return values
