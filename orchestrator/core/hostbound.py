"""What a run's recorded values owe to where and when it ran, not to its configuration: the params
bound to the host or the run (a port, a GPU slot, a path the experiment writes with `{{ host.* }}`,
`{{ run.* }}` or `{{ checkpoints.* }}`), every text that holds their values (the engine's
`tokenizer_path` echoing `model_path`, the launch script's `--port 31871`), and what the engine
picks itself at each start (its registry entry's `picked_at_start`: a random seed).

Two runs of one configuration on two hosts differ in all of these; `orch diff` leaves them out
unless `--all` asks for everything. A text is host-specific against another when each, with its own
run's host-bound values (and its uid) put back as their names, reads the same."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from orchestrator.engines import registry

from .defaults import HOST_SPECIFIC_PARAMS

# a template reference to the host, the run or a checkpoint's place on the host
BOUND_REFERENCE = re.compile(r"\{\{[^}]*\b(?:host|run|checkpoints)\.")


def written(spec: Mapping[str, Any], variant: str, section: str = "params") -> set[str]:
    """The keys of `section` (`params` or `env`) the experiment writes with a reference to the
    host, the run or a checkpoint (in its own or the variant's), as the run stored its experiment."""
    values = dict(spec.get(section) or {})
    chosen = (spec.get("variants") or {}).get(variant) if isinstance(spec.get("variants"), dict) else None
    values.update((chosen or {}).get(section) or {})
    return {k for k, v in values.items() if isinstance(v, str) and BOUND_REFERENCE.search(v)}


def bound_params(spec: Mapping[str, Any] | None, variant: str) -> frozenset[str]:
    """The params of a run whose value is where or when it ran: the host-specific ones orch knows
    (port, gpus, an isolated run's patched copy) and those the experiment writes bound."""
    return HOST_SPECIFIC_PARAMS | written(spec or {}, variant)


def picked_at_start(spec: Mapping[str, Any] | None, params: Mapping[str, Any]) -> frozenset[str]:
    """What the run's engine chose itself at its start (SGLang's random seed), the command not
    setting it (`params`: the run's): a value of its print that says when it ran, not what."""
    name = (spec or {}).get("engine") or registry.DEFAULT
    entry = registry.KNOWN.get(name) if isinstance(name, str) else None
    return frozenset(k for k in (entry.picked_at_start if entry else ()) if k not in params)


class Values:
    """One run's host-bound values, to read its texts without them."""

    def __init__(self, params: Mapping[str, Any], bound: Collection[str], uid: str = "") -> None:
        found = {str(params[k]): k for k in bound if k in params and params[k] not in (None, "")}
        if uid:
            found[uid] = "run"
        # the longest first: a path that holds another's (a draft inside the run's folder) goes whole
        self._values = sorted(found.items(), key=lambda item: -len(item[0]))

    def without(self, text: Any) -> str:
        """`text` with each host-bound value (a whole word of it: port 8000 is not in 18000) as `<name>`."""
        said = str(text)
        for value, name in self._values:
            said = re.sub(rf"(?<![\w.]){re.escape(value)}(?![\w])", f"<{name}>", said)
        return said


def same_but_where(a: Any, b: Any, left: Values, right: Values) -> bool:
    """Two texts that differ only in their runs' host-bound values."""
    return a != b and left.without(a) == right.without(b)
