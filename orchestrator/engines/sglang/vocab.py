"""The draft's vocabulary checks: lm_head rows, `d2t` as offsets (SGLang adds arange), `t2d`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .facts import config_value
from orchestrator.engines.eagle3 import d2t_form
from orchestrator.engines.finding import ERROR, WARNING, Finding

if TYPE_CHECKING:
    from .facts import Facts


def check(facts: Facts, weights_read: bool) -> list[Finding]:
    """lm_head and d2t against the vocabularies; tensor checks only when the weights were read."""
    found = []
    target_vocab = config_value(facts.target_config, "vocab_size")
    draft_vocab = facts.draft_config.get("draft_vocab_size") or facts.draft_config.get("vocab_size")
    names = {k.removeprefix("model.") for k in facts.draft_tensors}
    if weights_read and target_vocab and draft_vocab and int(draft_vocab) != int(target_vocab):
        head = facts.draft_tensors.get("lm_head.weight")
        if head is None:
            found.append(Finding(ERROR, "lm-head-missing",
                                 f"no lm_head.weight in {facts.draft_path} while its vocabulary ({draft_vocab}) differs "
                                 f"from the target's ({target_vocab})",
                                 "the draft's head cannot come from the target, so it stays random",
                                 "export the draft with its lm_head"))
        elif head.shape[0] != int(draft_vocab):
            found.append(Finding(ERROR, "lm-head-shape", f"lm_head.weight has {head.shape[0]} rows, draft_vocab_size is {draft_vocab}",
                                 "logits would not line up with d2t", "fix draft_vocab_size in config.json"))
        if "d2t" not in names:
            found.append(Finding(ERROR, "d2t-missing", f"no d2t in {facts.draft_path} while the vocabularies differ",
                                 "draft token ids cannot be mapped to target ids", "export the draft with d2t/t2d"))
    if facts.d2t is not None and target_vocab:
        found.extend(_d2t(facts, int(target_vocab), draft_vocab))
    return found


def _d2t(facts: Facts, target_vocab: int, draft_vocab: Any) -> list[Finding]:
    d2t = np.asarray(facts.d2t, dtype=np.int64)
    found = []
    if draft_vocab and len(d2t) != int(draft_vocab):
        found.append(Finding(ERROR, "d2t-length", f"d2t has {len(d2t)} entries, draft_vocab_size is {draft_vocab}",
                             "every draft id needs one", "fix draft_vocab_size or re-export d2t"))
    form = d2t_form(d2t, target_vocab, facts.t2d)
    if form == "absolute":
        found.append(Finding(ERROR, "d2t-absolute",
                             f"d2t in {facts.draft_path} holds absolute target ids (e.g. d2t[1] = {d2t[1] if len(d2t) > 1 else d2t[0]}), not offsets",
                             "SGLang computes hot_token_id = d2t + arange, so every draft id maps to a wrong target "
                             "id and almost every draft token is rejected (accept length ~1.0)",
                             "add `transform: [d2t_to_offsets]` to the checkpoint in the experiment"))
    elif form == "invalid":
        found.append(Finding(ERROR, "d2t-invalid", "d2t + arange is not strictly increasing inside the target vocabulary "
                             f"({target_vocab})", "draft ids would map to wrong or out-of-range target ids",
                             "re-export the vocabulary mapping"))
    if form == "offsets" and facts.t2d is not None:
        hot = np.flatnonzero(np.asarray(facts.t2d))
        if len(facts.t2d) != target_vocab or not np.array_equal(hot, d2t + np.arange(len(d2t))):
            found.append(Finding(WARNING, "t2d-inconsistent", "t2d does not mark exactly the target ids d2t maps to",
                                 "SGLang ignores t2d, but the pair disagreeing means the mapping was exported wrong",
                                 "re-export d2t and t2d together"))
    return found
