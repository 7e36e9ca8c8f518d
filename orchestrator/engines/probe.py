"""What an engine offers `orch doctor` (run/doctor/): the probe patches written for its releases, the
launch param whose value turns aux capture off for an EAGLE-3 draft, and the patch that adds a
target class's missing aux-capture method. Each engine's `probes` module builds one `Probes`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.spec import PatchDef

TAG = "[DOCTOR-DEBUG]"  # the probe lines' tag: a debug line under the default pattern too
PATTERN = r"\[DOCTOR-DEBUG\]"


@dataclass(frozen=True)
class Probe:
    """One thing the doctor measures, and the patches that print it (one release family's anchors)."""

    name: str  # the probe's name, also the `probe=` field of its line
    reads: str  # what it measures, as the report lists it
    patches: tuple[PatchDef, ...]


@dataclass(frozen=True)
class Probes:
    """One engine's probes and its fixes in orch's terms."""

    probes: tuple[Probe, ...]
    algorithm_param: str  # the launch param naming the speculative algorithm or method
    one_layer_values: tuple[str, ...]  # its values that hand an EAGLE-3 draft one layer
    eagle3_value: str  # the value that turns aux capture on
    capture_patch: Callable[[dict[str, Any]], PatchDef | None]  # from the preflight's aux-capture-missing finding


def patch(name: str, file: str, find: str, action: str, text: str) -> PatchDef:
    """A probe's patch, as an experiment's `patches:` entry would write it."""
    return PatchDef(name=name, file=file, where=f"orch doctor probe {name}", find=find, action=action, text=text)


def no_capture_patch(finding: dict[str, Any]) -> PatchDef | None:
    """For an engine whose target classes are not patched for capture: none."""
    return None
