"""Values the experiment reader (core/spec.py) shares with the reading commands, in a module that
imports nothing: `orch ls`, `compare` and `report` name them without loading the experiment reader
and YAML (a sixth of a reading command's start)."""

from __future__ import annotations

DEFAULT_DEBUG_PATTERN = r"\[[A-Za-z0-9_.-]*-DEBUG\]"  # a bracketed tag ending in -DEBUG]
PATCHED_SITE = "patched_site"  # the param naming an isolated run's patched copy of the packages (host/overlay.py)
# a free port, a GPU slot and an isolated run's own patched copy differ per host and per invocation:
# what a plan's fingerprint and server key, `orch compare` and the summary leave out
HOST_SPECIFIC_PARAMS = frozenset({"port", "gpus", PATCHED_SITE})
