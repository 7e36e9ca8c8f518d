"""A Reporter for tests: keeps every message, warning, transfer event, stage and fact it is given."""

from __future__ import annotations

from typing import Any

from orchestrator.host.push import Progress
from orchestrator.run.attempt import Stage


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []  # (label, text); warnings start with "warning: "
        self.transfers: dict[str, list[tuple[str, int]]] = {}  # label -> its progress events
        self.stages: list[tuple[str, Stage]] = []
        self.facts: list[tuple[str, dict[str, Any]]] = []  # what `known` was told

    def message(self, label: str, text: str) -> None:
        self.lines.append((label, text))

    def warning(self, label: str, text: str) -> None:
        self.lines.append((label, f"warning: {text}"))

    def transfer(self, label: str) -> Progress:
        events = self.transfers.setdefault(label, [])
        return lambda kind, amount: events.append((kind, amount))

    def stage(self, label: str, stage: Stage) -> None:
        self.stages.append((label, stage))

    def known(self, label: str, values: dict[str, Any]) -> None:
        self.facts.append((label, values))

    @property
    def texts(self) -> list[str]:
        return [text for _, text in self.lines]
