"""What the doctor read: the probe run's record (its `[DOCTOR-DEBUG]` lines, metrics, acceptance per
draft position, diagnosis) and the preflight's findings, as one record the cause rules read."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.engines.probe import TAG

_HISTOGRAM = "correct_drafts_histogram"  # SGLang: verify steps by the number of drafts accepted
_POSITION_METRIC = re.compile(r"^accept_rate_pos(\d+)$")  # vLLM: accepted / drafted at each position


@dataclass(frozen=True)
class Evidence:
    """Everything one probe run showed, with the lines that show it."""

    run_id: int | None
    status: str
    accept_len: float | None
    params: dict[str, Any]
    probes: dict[str, dict[str, str]]  # probe name -> its line's fields (the first line of each)
    probe_lines: dict[str, str]  # probe name -> its line as printed
    per_position: tuple[float, ...]  # the share of drafts accepted at each draft position
    findings: tuple[dict[str, Any], ...]  # the preflight's findings (none with --no-preflight)
    diagnosis: dict[str, Any] | None  # the engine's reading of a server that failed
    probes_run: tuple[str, ...] = ()  # the probes whose patches the host's source took
    error: str | None = None  # the run's error, when it failed
    one_layer_launch: str | None = None  # `param=value` when the launch asked for one layer (EAGLE, not EAGLE3)

    def finding(self, *codes: str) -> dict[str, Any] | None:
        """The first error or warning with one of `codes`, in the preflight's order."""
        return next((f for f in self.findings if f["code"] in codes and f["severity"] in ("error", "warning")), None)

    def field(self, probe: str, name: str) -> str | None:
        return self.probes.get(probe, {}).get(name)

    def number(self, probe: str, name: str) -> int | None:
        value = self.field(probe, name)
        return int(value) if value is not None and re.fullmatch(r"-?\d+", value) else None

    def listed(self, probe: str, name: str) -> list[str]:
        """A `[a;b;c]` field as its items."""
        value = (self.field(probe, name) or "").strip("[]")
        return [item for item in value.split(";") if item]

    def acceptance_line(self) -> str:
        """Accept length and acceptance per draft position, as the report shows them."""
        accept = "none measured" if self.accept_len is None else f"{self.accept_len:.2f}"
        where = ", ".join(f"pos{p} {rate:.2f}" for p, rate in enumerate(self.per_position)) or "not reported"
        return f"run {self.run_id}: accept length {accept}; accepted per draft position: {where}"


def read(record: dict[str, Any], findings: list[dict[str, Any]], probes_run: tuple[str, ...],
         algorithm_param: str, one_layer_values: tuple[str, ...]) -> Evidence:
    """The evidence of one recorded probe run (`orch show --json`'s record) and its preflight;
    `algorithm_param` and its `one_layer_values`: the engine's launch param that hands a draft one layer."""
    probes: dict[str, dict[str, str]] = {}
    lines: dict[str, str] = {}
    for line in record.get("debug_lines") or []:
        fields = dict(line.get("fields") or {})
        name = fields.get("probe")
        if TAG in line["text"] and name and name not in probes:
            probes[name], lines[name] = fields, line["text"].strip()
    accept = record["metrics"].get("accept_len")
    return Evidence(
        run_id=record["id"], status=record["status"], accept_len=None if accept is None else float(accept),
        params=dict(record.get("params") or {}), probes=probes, probe_lines=lines,
        per_position=per_position(record), findings=tuple(findings), diagnosis=record.get("diagnosis"),
        probes_run=probes_run, error=record.get("error"), one_layer_launch=_one_layer(record, algorithm_param, one_layer_values))


def _one_layer(record: dict[str, Any], param: str, values: tuple[str, ...]) -> str | None:
    value = (record.get("params") or {}).get(param)
    return f"{param}={value}" if isinstance(value, str) and value in values else None


def per_position(record: dict[str, Any]) -> tuple[float, ...]:
    """The share of drafts accepted at each draft position: vLLM's per-position counters, or SGLang's
    histogram of verify steps by accepted drafts (position p is accepted when more than p were)."""
    rates = sorted((int(m[1]), float(v)) for name, v in record["metrics"].items() if (m := _POSITION_METRIC.match(name)))
    if rates:
        return tuple(rate for _, rate in rates)
    counts = [int(c) for c in (record.get("histograms", {}).get(_HISTOGRAM, {}).get("counts") or [])]
    total = sum(counts)
    if not total:
        return ()
    return tuple(sum(counts[k] for k in range(p + 1, len(counts))) / total for p in range(len(counts) - 1))


def layers(text: str | None) -> list[int] | None:
    """A `layers=[1, 5, 8]` field as numbers (None: `default` or absent)."""
    try:
        value = ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None
    return [int(v) for v in value] if isinstance(value, list) else None
