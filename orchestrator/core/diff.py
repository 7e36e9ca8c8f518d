"""Two run records -> the differences between them, section by section, with deltas."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

DEBUG_TAG = re.compile(r"\[([A-Za-z0-9_.-]*DEBUG)\]")
SECTIONS = ("params", "effective_params", "env", "metrics", "patches", "debug_lines", "command")


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    a: Any
    b: Any
    delta: float | None = None


def compare(a: dict[str, Any], b: dict[str, Any], *, everything: bool = False) -> list[Row]:
    """Rows where the runs differ (all metrics are always shown; `everything` shows equal params too)."""
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


def command_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Changed lines of the two launch scripts, the run ids blanked out."""
    left = a["command"].replace(a["uid"], "<run>").splitlines()
    right = b["command"].replace(b["uid"], "<run>").splitlines()
    return [
        line for line in difflib.unified_diff(left, right, f"run {a['id']}", f"run {b['id']}", lineterm="", n=0)
        if not line.startswith("@@")
    ]


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
    """Two run records and the rows where they differ: what `orch diff` shows."""

    a: dict[str, Any]
    b: dict[str, Any]
    rows: list[Row]

    def as_json(self) -> dict[str, Any]:
        """What `orch diff --json` prints: params, env, metrics (a, b, delta), patches, debug lines, command."""
        return as_json(self.a, self.b, self.rows)

    def command_diff(self) -> list[str]:
        """The changed lines of the two launch scripts."""
        return command_diff(self.a, self.b)


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
