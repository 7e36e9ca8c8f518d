"""`orch check`'s findings, each once: a sweep of steps x topk x repeats checks every run it would
make, and most findings (a draft's dropped keys, a flag the engine rejects) come from every one of
them alike. A finding is the same where its severity, code, message and whether the experiment
allows it are; it is kept once with the points it came from: each (variant, matrix point) and the
hosts it was seen on, repeats of a point counted once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ORDER = {"error": 0, "warning": 1, "info": 2}  # errors first


@dataclass(frozen=True)
class Point:
    """A configuration `orch check` looked at: its variant and its matrix values ({} without a matrix)."""

    variant: str
    values: dict[str, Any]

    @property
    def key(self) -> str:
        return json.dumps([self.variant, self.values], sort_keys=True, default=str)


@dataclass
class Finding:
    """One finding and every point (and host) it came from, in the order they were checked."""

    severity: str
    code: str
    what: str
    why: str
    fix: str
    allowed: bool | None
    points: list[Point] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "what": self.what, "why": self.why, "fix": self.fix,
                "allowed": self.allowed, "hosts": self.hosts,
                "points": [{"variant": p.variant, **p.values} for p in self.points]}


def points(groups: list[dict[str, Any]]) -> list[Point]:
    """Every point the groups of `check_experiment` checked, each once, in the order checked."""
    found: dict[str, Point] = {}
    for group in groups:
        point = _point(group)
        found.setdefault(point.key, point)
    return list(found.values())


def grouped(groups: list[dict[str, Any]]) -> list[Finding]:
    """The findings of `check_experiment`'s groups (one per run it would make), each once with the
    points and hosts it came from; errors first, then warnings, then the rest, each in the order seen."""
    found: dict[tuple[Any, ...], Finding] = {}
    for group in groups:
        point = _point(group)
        for f in group["findings"]:
            key = (f.get("severity"), f.get("code"), f.get("what"), f.get("allowed"))
            one = found.setdefault(key, Finding(f.get("severity", ""), f.get("code", ""), f.get("what", ""),
                                                f.get("why", ""), f.get("fix", ""), f.get("allowed")))
            if point.key not in {p.key for p in one.points}:
                one.points.append(point)
            if group["host"] not in one.hosts:
                one.hosts.append(group["host"])
    return sorted(found.values(), key=lambda f: ORDER.get(f.severity, len(ORDER)))


def _point(group: dict[str, Any]) -> Point:
    return Point(group["variant"], dict(group.get("point") or {}))
