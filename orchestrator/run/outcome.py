"""What became of one planned run, as `orch run` and the library face return it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """What became of one planned run: its row in the store (`run_id` None when it never became a
    run), its status and metrics, and the error and exit code when it did not succeed."""

    run_id: int | None
    uid: str
    variant: str
    host: str
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    error: str | None = None
    evidence: tuple[str, ...] = ()
    exit_code: int = 0
