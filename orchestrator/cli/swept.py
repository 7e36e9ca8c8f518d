"""The params a sweep varies: what tells its plans apart, as the live table, the summary and the
list of plans an interrupt left unrun show them.

A sweep of steps x topk x repeats has one variant (`default`) for all its plans: its rows differ
only in the matrix's values and the repeat index, so those are the columns worth the room."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orchestrator

if TYPE_CHECKING:  # reading commands import this module and must not load the experiment reader
    from orchestrator import RunPlan

REPEAT = "repeat"  # the repeat index, shown like a param where the plans repeat


def param_names(plans: list[RunPlan]) -> tuple[str, ...]:
    """The matrix's keys, then every other param whose value differs between plans (variants),
    host-specific ones (a port) aside."""
    names = dict.fromkeys(k for plan in plans for k in plan.point)
    for key in dict.fromkeys(k for plan in plans for k in plan.params):
        if key not in orchestrator.HOST_SPECIFIC_PARAMS and len({repr(plan.params.get(key)) for plan in plans}) > 1:
            names.setdefault(key)
    return tuple(names)


def names(plans: list[RunPlan]) -> tuple[str, ...]:
    """`param_names`, and `repeat` when some plan is a repeat."""
    return param_names(plans) + ((REPEAT,) if any(plan.repeat for plan in plans) else ())


def values(plan: RunPlan, shown: tuple[str, ...]) -> dict[str, Any]:
    """The plan's value of each of `shown` (its matrix point first: that is what it was swept over)."""
    return {name: plan.repeat if name == REPEAT else plan.point.get(name, plan.params.get(name)) for name in shown}


def labels(shown: tuple[str, ...]) -> dict[str, str]:
    """A short column label per name: its last word (`speculative_num_steps` -> `steps`), or as
    many last words as tell it apart from the others."""
    found: dict[str, str] = {}
    for name in shown:
        words = name.split("_")
        for n in range(1, len(words) + 1):
            label = "_".join(words[-n:])
            if not any(other != name and "_".join(other.split("_")[-n:]) == label for other in shown):
                break
        found[name] = label
    return found


def described(plan: RunPlan, shown: tuple[str, ...]) -> str:
    """`speculative_num_steps=3 repeat=1`: the plan among the others, its variant first where the
    sweep has several."""
    said = " ".join(f"{name}={value}" for name, value in values(plan, shown).items())
    return f"{plan.variant} {said}".strip() if plan.variant != "default" or not said else said


def unstarted_lines(plans: list[RunPlan], shown: tuple[str, ...], why: str) -> list[str]:
    """The plans a sweep never started, one configuration a line by its swept params."""
    if not plans:
        return []
    return [f"{len(plans)} configuration(s) not run ({why}):", *(f"  {described(plan, shown)}" for plan in plans)]
