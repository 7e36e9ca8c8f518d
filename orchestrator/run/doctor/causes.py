"""The cause of a low accept length, decided by a small ordered table of rules over the evidence.

Each rule reads the evidence (probe lines first, then the preflight's findings, then the engine's
diagnosis of a failed server) and names one code of `CODES` with the lines that show it. The first
rule that fires decides; docs/doctor.md lists every code, its evidence and its fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .evidence import Evidence

FITS = 1.5  # an accept length at or above this: the draft is accepted (a broken draft sits at ~1.0)

CODES = {  # code -> what it means (the preflight's own codes keep their meaning)
    "algorithm-not-eagle3": "the launch names EAGLE, not EAGLE3, for an EAGLE-3 draft: aux capture stays off",
    "aux-capture-missing": "the target class cannot set the layers to capture: EAGLE3 fails at start-up",
    "aux-capture-off": "EAGLE3 is asked but the target hands over one layer (the draft config turns capture off)",
    "aux-layers-mismatch": "the target captures fewer layers than the draft's fc takes (a target with too few layers)",
    "fc-width": "the draft's fc takes another width than the target's captured layers give",
    "draft-keys-dropped": "the engine's loader left draft layer weights at their initial values (key names it skips)",
    "vocab-mismatch": "the draft was trained on another vocabulary than the target's (another tokenizer)",
    "d2t-absolute": "the draft's d2t holds target ids, not offsets: every proposal maps to a wrong token",
    "d2t-mapping-wrong": "the draft's ids map to target tokens its own t2d does not mark",
    "draft-rejected": "the draft's proposals are rejected and no probe shows why",
    "server-failed": "the server did not serve: the engine's diagnosis names why",
    "none": "nothing is wrong: the accept length fits",
}
_LAYER_PARAMS = ("midlayer.", "layers.", "fc.")  # draft parameters a checkpoint must fill (embed/head may come from the target)
# cause -> the preflight codes that name it, in the order the preflight rule tries them
_PREFLIGHT_CODES = {
    "algorithm-not-eagle3": ("algorithm-not-eagle3", "method-eagle-with-eagle3-draft"),
    "aux-capture-off": ("aux-capture-disabled",),
    "aux-capture-missing": ("aux-capture-missing",),
    "aux-layers-mismatch": ("aux-layers-missing",),
    "fc-width": ("fc-width",),
    "draft-keys-dropped": ("draft-keys-dropped", "draft-keys-unknown"),
    "d2t-absolute": ("d2t-absolute",),
    "vocab-mismatch": ("tokenizer-mismatch",),
}
# a matrix left at its random init is a dropped key; a norm of ones may equal its init by chance
_MATRICES = ("proj", "fc.")
_DIAGNOSIS_CAUSES = {"eagle3-aux-width": "aux-layers-mismatch", "draft-vocab-map": "d2t-absolute",
                     "missing-aux-capture": "aux-capture-missing"}


@dataclass(frozen=True)
class Decision:
    cause: str
    evidence: tuple[str, ...]  # the lines that show it, most telling first
    rule: str  # which reading decided: a probe, the preflight, the diagnosis


Rule = Callable[[Evidence], Decision | None]


def decide(evidence: Evidence) -> Decision:
    """The first rule that fires, else `none` (it fits) or `draft-rejected` (no probe explains it)."""
    for rule in RULES:
        found = rule(evidence)
        if found is not None:
            return _seconded(found, evidence)
    if evidence.accept_len is not None and evidence.accept_len >= FITS:
        return Decision("none", (evidence.acceptance_line(),), "acceptance")
    if evidence.accept_len is None and evidence.status != "succeeded":  # nothing measured: the run's own error
        return Decision("server-failed", (f"run {evidence.run_id} {evidence.status}: {evidence.error}",), "run")
    return Decision("draft-rejected", (evidence.acceptance_line(), *evidence.probe_lines.values()), "acceptance")


def _seconded(decision: Decision, evidence: Evidence) -> Decision:
    """A probe's decision with the preflight's finding of the same cause, where it made one."""
    agreeing = evidence.finding(*_PREFLIGHT_CODES.get(decision.cause, (decision.cause,)))
    if agreeing is None or decision.rule == "preflight":
        return decision
    line = f"the preflight agrees: {agreeing['severity'].upper()} {agreeing['code']}: {agreeing['what']}"
    return Decision(decision.cause, decision.evidence + (line,), decision.rule)


def hidden_width(evidence: Evidence) -> Decision | None:
    """The width reaching the draft against what its fc takes: one layer where fc takes several is
    the launch's algorithm (or capture off); some layers but not all is a target with too few."""
    width, fc_in = evidence.number("hidden-width", "width"), evidence.number("hidden-width", "fc_in")
    hidden = evidence.number("hidden-width", "hidden") or evidence.number("hidden-width", "hidden_size")
    if width is None or fc_in is None or width == fc_in:
        return None
    line = evidence.probe_lines["hidden-width"]
    if hidden and width == hidden:
        asked = evidence.one_layer_launch
        capture = evidence.probe_lines.get("capture", "no capture line: the engine never asked the target to capture")
        if asked:
            return Decision("algorithm-not-eagle3", (line, f"the launch asked {asked}", capture), "probe hidden-width")
        return Decision("aux-capture-off", (line, capture), "probe hidden-width")
    asked_layers = evidence.probe_lines.get("capture")
    return Decision("aux-layers-mismatch", (line, f"{width} wide reaches an fc that takes {fc_in}",
                                            *([asked_layers] if asked_layers else [])), "probe hidden-width")


def fc_width(evidence: Evidence) -> Decision | None:
    """The checkpoint's fc takes another width than the model the engine built from the draft config."""
    shape, fc_in = evidence.field("fc-width", "checkpoint_fc"), evidence.number("fc-width", "fc_in")
    widths = re.findall(r"\d+", shape or "")
    if fc_in is None or len(widths) != 2 or int(widths[1]) == fc_in:
        return None
    return Decision("fc-width", (evidence.probe_lines["fc-width"],
                                 f"the checkpoint's fc takes {widths[1]} inputs, the engine's fc {fc_in}"), "probe fc-width")


def draft_keys(evidence: Evidence) -> Decision | None:
    """Draft layer parameters the loader never filled: their checkpoint keys are named as the
    engine does not place them."""
    untouched = [n for n in evidence.listed("draft-keys", "untouched")
                 if any(p in n for p in _LAYER_PARAMS) and any(m in n for m in _MATRICES)]
    if not untouched:
        return None
    return Decision("draft-keys-dropped", (evidence.probe_lines["draft-keys"],
                                           f"{len(untouched)} draft layer parameter(s) left at their initial values, "
                                           f"e.g. {untouched[0]}"), "probe draft-keys")


def vocab(evidence: Evidence) -> Decision | None:
    """The target's vocabulary (its lm_head, as the engine built it) against the draft config's, and
    against the t2d the draft was trained with: one tokenizer or none."""
    target = evidence.number("vocab", "target_vocab")
    sizes = {"the draft config's vocab_size": evidence.number("vocab", "draft_config_vocab"),
             "the draft's t2d": evidence.number("d2t", "target_vocab")}
    differ = [f"{name} {size}" for name, size in sizes.items() if target and size and size != target]
    fits = evidence.accept_len is not None and evidence.accept_len >= FITS
    if not differ or fits:  # a config that names another size, under a draft that is accepted, costs nothing
        return None
    return Decision("vocab-mismatch", (evidence.probe_lines["vocab"], f"the target has {target} tokens; "
                                       + ", ".join(differ)), "probe vocab")


def d2t(evidence: Evidence) -> Decision | None:
    """Each draft id mapped the engine's way (id + d2t) must land on a token t2d marks."""
    hits, size = evidence.number("d2t", "mapped_in_t2d"), evidence.number("d2t", "draft_vocab")
    if hits is None or not size or hits >= size:
        return None
    absolute = evidence.number("d2t", "absolute_in_t2d")
    line = evidence.probe_lines["d2t"]
    if absolute == size:
        return Decision("d2t-absolute", (line, f"read as target ids, all {size} d2t entries are tokens t2d marks"),
                        "probe d2t")
    return Decision("d2t-mapping-wrong", (line,), "probe d2t")


def preflight(evidence: Evidence) -> Decision | None:
    """A preflight error (or warning) whose code is a cause: the checks read the checkpoint itself."""
    for cause, codes in _PREFLIGHT_CODES.items():
        found = evidence.finding(*codes)
        if found is not None:
            code = found["code"]
            return Decision(cause, (f"preflight {found['severity'].upper()} {code}: {found['what']}", found["why"]),
                            "preflight")
    return None


def diagnosis(evidence: Evidence) -> Decision | None:
    """A server that failed: the engine's diagnosis, mapped to a cause where it names one."""
    found = evidence.diagnosis
    if evidence.status == "succeeded" or not found:
        return None
    kind = str(found.get("kind"))
    lines = (f"diagnosis {kind}: {found.get('summary')}", *[str(e) for e in found.get("evidence") or []][:2])
    if kind == "draft-weights" and "fc" in " ".join(lines):
        return Decision("fc-width", lines, "diagnosis")
    return Decision(_DIAGNOSIS_CAUSES.get(kind, "server-failed"), lines, "diagnosis")


# Probes first (they show what the engine did), then the preflight (what the files say), then a crash.
RULES: tuple[Rule, ...] = (fc_width, hidden_width, draft_keys, vocab, d2t, preflight, diagnosis)
