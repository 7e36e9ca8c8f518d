"""A preflight finding: how bad, what, why, and how to fix it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    what: str
    why: str
    fix: str
    allowed: bool = False  # an error the experiment acknowledged (`preflight: {allow: [code]}`): it does not stop the run

    def as_json(self) -> dict[str, str | bool]:
        return {"severity": self.severity, "code": self.code, "what": self.what, "why": self.why, "fix": self.fix,
                "allowed": self.allowed}


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]


def blocking(findings: list[Finding], allow: tuple[str, ...] | list[str] | set[str] = ()) -> list[Finding]:
    """The errors that stop a run: every error whose code the experiment does not allow."""
    return [f for f in errors(findings) if f.code not in set(allow)]


def acknowledged(findings: list[Finding], allow: tuple[str, ...] | list[str] | set[str] = ()) -> list[Finding]:
    """The findings with each allowed error marked so (it is still reported and stored)."""
    allowed = set(allow)
    return [dataclasses.replace(f, allowed=True) if f.severity == ERROR and f.code in allowed else f for f in findings]
