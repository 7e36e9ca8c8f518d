"""Checks against what the host's own SGLang source says (see source.py): which algorithm turns aux
hidden-state capture on, whether the target class can set the layers to capture and hand the draft
its embedding and lm_head, what THIS host prints when it cannot, and whether the draft's
architecture is registered at all."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from .facts import aux_count, config_value, uses_aux
from orchestrator.engines.finding import ERROR, INFO, WARNING, Finding
from .source import EMBED_HEAD, METHOD

if TYPE_CHECKING:
    from .facts import Capture, Facts


def unregistered(facts: Facts) -> list[Finding]:
    """The draft names no architecture the host registers: nothing else about it matters."""
    src, cfg = facts.source, facts.draft_config
    names = [str(a) for a in cfg.get("architectures") or []]
    if src is None or not src.registry or any(n in src.registry for n in names):
        return []
    arch = names[0] if names else "(none)"
    host = f"SGLang {facts.sglang_version or '?'}"
    if arch in src.quoted:
        return [Finding(INFO, "draft-arch-converted",
                        f"draft architecture {arch} is not registered by {host}'s srt/models, but {src.quoted[arch]} names it",
                        "that code may turn the config into a registered class; the checkpoint checks are skipped",
                        "nothing to do if the server starts")]
    if "eagle3" in arch.lower() or "speculator" in arch.lower():  # an EAGLE-3 draft: only a draft class can stand in
        close = sorted(src.eagle3_drafts(), key=lambda n: -difflib.SequenceMatcher(None, arch, n).ratio())
        fix = (f"set `architectures` in its config.json to the EAGLE-3 draft class it was trained as (this release "
               f"registers {', '.join(close) or 'none'}), or use an SGLang release that registers {arch}")
    else:
        close = difflib.get_close_matches(arch, sorted(src.registry), n=3, cutoff=0.6)
        fix = f"set `architectures` in its config.json to the class it was trained as ({', '.join(close) or 'see srt/models'})"
    if "speculators_config" in cfg or "speculators_model_type" in cfg:
        fix = ("this config is in the speculators format (vLLM's); write SGLang's own form: `architectures: "
               "[LlamaForCausalLMEagle3]` (its one decoder layer is Llama-shaped) with the `transformer_layer_config` "
               "fields at the top level and `eagle_config.eagle_aux_hidden_state_layer_ids`")
    return [Finding(ERROR, "draft-arch-unknown",
                    f"draft architecture {arch} ({facts.draft_path}/config.json) is not registered by {host}: "
                    f"no EntryClass in its srt/models names it" + (f" (close: {', '.join(close)})" if close else ""),
                    "SGLang finds the draft's class by that name; an unregistered one ends in a startup error "
                    "(its Transformers fallback has no such class) before anything is served",
                    fix)]


def check(facts: Facts) -> list[Finding]:
    return [*_algorithm(facts), *_disabled(facts), *_target(facts), *embed_head(facts)]


def _host(facts: Facts) -> str:
    return f"SGLang {facts.sglang_version or '?'}"


def _algorithm(facts: Facts) -> list[Finding]:
    gate = facts.source.gate if facts.source else None
    if gate is None or facts.algorithm != "EAGLE" or "Eagle3" not in facts.draft_arch:
        return []
    given = str(facts.params.get("speculative_algorithm")).upper()
    hidden = config_value(facts.target_config, "hidden_size")
    draft_hidden = facts.draft_config.get("hidden_size")
    width = f"{hidden} wide, not {aux_count(facts)} x {hidden}" if hidden else "one layer wide"
    then = ("the draft's `hidden_states.shape[-1] != embeds.shape[-1]` gate then skips fc, so almost every draft token "
            "is rejected (accept length ~1.0) and nothing reports an error"
            if not hidden or not draft_hidden or int(hidden) == int(draft_hidden) else
            f"fc then gets {hidden} inputs where it takes {aux_count(facts)} x {hidden}: the first draft step fails")
    return [Finding(ERROR, "algorithm-not-eagle3",
                    f"--speculative-algorithm {given} with the EAGLE-3 draft {facts.draft_arch}: {_host(facts)} turns "
                    f"aux hidden-state capture on only for EAGLE3 ({gate.where})"
                    + (" and runs NEXTN as EAGLE" if given == "NEXTN" else ""),
                    f"the target hands the draft its last layer's hidden state alone ({width}); {then}",
                    "use --speculative-algorithm EAGLE3 (params: `speculative_algorithm: EAGLE3`)")]


def _disabled(facts: Facts) -> list[Finding]:
    gate = facts.source.gate if facts.source else None
    if gate is None or not gate.honours_use_aux or facts.algorithm != "EAGLE3" or uses_aux(facts):
        return []
    hidden = config_value(facts.target_config, "hidden_size")
    fc = facts.draft_tensors.get("fc.weight") or facts.draft_tensors.get("model.fc.weight")
    width = fc.shape[1] if fc is not None and len(fc.shape) == 2 else (int(hidden) * aux_count(facts) if hidden else 0)
    if not hidden or width <= int(hidden):
        return []
    return [Finding(ERROR, "aux-capture-disabled",
                    f"{facts.draft_path}/config.json sets eagle_config.use_aux_hidden_state: false, but its fc takes "
                    f"{width} inputs ({width // int(hidden)} layers of {hidden})",
                    f"{_host(facts)} then leaves aux capture off ({gate.where}): the target hands over one layer, the "
                    "draft's shape gate skips fc, accept length ~1.0, and nothing reports an error",
                    "remove `use_aux_hidden_state` from the draft's eagle_config (or set it true)")]


def _target(facts: Facts) -> list[Finding]:
    capture, src = facts.capture, facts.source
    gate = src.gate if src else None
    capturing = facts.algorithm == "EAGLE3" and (uses_aux(facts) or gate is None or not gate.honours_use_aux)
    if capture is None or not capturing or capture.implemented:
        return []
    if capture.implemented is None:
        return [Finding(WARNING, "target-class-not-found",
                        f"target architecture {capture.architecture} is not registered by {_host(facts)}'s srt/models",
                        "whether it can set the layers to capture for EAGLE-3 cannot be checked",
                        "check the target's config.json `architectures`")]
    how = "; ".join(capture.chain)
    if capture.patched_by:
        return [_patched("aux-capture-patched", capture, METHOD)]
    error = capture.refusal or (src.ask.error(capture.architecture) if src and src.ask else
                                f"AttributeError: '{capture.architecture}' object has no attribute '{METHOD}'")
    asked = f" ({src.ask.where})" if src and src.ask else ""
    return [Finding(ERROR, "aux-capture-missing",
                    f"target class {capture.architecture} ({capture.file}) cannot set the layers to capture on "
                    f"{_host(facts)}: the server will fail at startup with `{error}`",
                    f"--speculative-algorithm EAGLE3 makes the model runner ask the target for {METHOD}{asked}; {how}",
                    f"add {METHOD} to {capture.architecture} with a patch of the run (a method that forwards to the "
                    f"inner model where it has one), or use an SGLang release whose {capture.file} has it")]


def _patched(code: str, found: Capture, method: str) -> Finding:
    """A target class that lacks `method` as installed, which a patch of the run adds."""
    return Finding(INFO, code, f"target class {found.architecture} ({found.file}) lacks {method} as installed",
                   f"patch {', '.join(found.patched_by)} of this run adds it before the launch ({'; '.join(found.chain)})",
                   "nothing to do")


def embed_head(facts: Facts) -> list[Finding]:
    """Every EAGLE algorithm shares the target's embedding and lm_head with the draft, asking the target
    class for them once the draft has loaded: a class without the method stops the server there."""
    found, src = facts.embed_head, facts.source
    if found is None or found.implemented is not False or src is None or not src.embed_head_call \
            or facts.algorithm not in ("EAGLE", "EAGLE3"):
        return []  # has it, not found (target-class-not-found says so for EAGLE3), or the host never asks
    how = "; ".join(found.chain)
    if found.patched_by:
        return [_patched("target-embed-head-patched", found, EMBED_HEAD)]
    error = found.refusal or f"AttributeError: '{found.architecture}' object has no attribute '{EMBED_HEAD}'"
    return [Finding(ERROR, "target-embed-head-missing",
                    f"target class {found.architecture} ({found.file}) has no {EMBED_HEAD} on {_host(facts)}: "
                    f"the server will fail at startup with `{error}`",
                    f"the speculative worker asks the target for its embedding and lm_head to share with the draft, "
                    f"for every EAGLE algorithm, once the draft has loaded ({src.embed_head_call}); {how}",
                    f"add {EMBED_HEAD} to {found.architecture} with a patch of the run (a method that forwards to "
                    f"the inner model where it wraps one, e.g. `return self.language_model.{EMBED_HEAD}()`), or use "
                    f"an SGLang release whose {found.file} has it")]
