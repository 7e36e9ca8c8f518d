"""A preflight finding: how bad, what, why, and how to fix it."""

from __future__ import annotations

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
