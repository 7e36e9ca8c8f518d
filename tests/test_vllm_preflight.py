"""The EAGLE-3 preflight against the real vLLM 0.10.1.1 and 0.33.0 sources, with the demo
checkpoints' configs: each rule fires where the release really fails, and stays silent where it serves."""

import numpy as np
import pytest

from orchestrator.engines.vllm import preflight
from vllm_wheels import sources

PATTERNS = ("config/*.py", "model_executor/models/*.py")
KIMI = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"model_type": "deepseek_v3", "hidden_size": 64}}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}
DRAFT = {"architectures": ["Eagle3LlamaForCausalLM"], "num_hidden_layers": 1, "vocab_size": 1024,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}}
TENSORS = {"midlayer.self_attn.q_proj.weight": (64, 128), "midlayer.mlp.down_proj.weight": (64, 128),
           "fc.weight": (64, 192), "norm.weight": (64,), "lm_head.weight": (256, 64), "d2t": (256,), "t2d": (1024,)}
OFFSETS = np.repeat(np.arange(128), 2)[:256] * 2


def facts(version, target=LLAMA, draft=DRAFT, tensors=TENSORS, method="eagle3", d2t=OFFSETS):
    return preflight.Facts(version, sources(version, PATTERNS), {"method": method, "model": "/d", "num_speculative_tokens": 3},
                           target, draft, tensors, d2t)


def codes(found):
    return sorted(f.code for f in found)


@pytest.mark.parametrize("version", ["0.10.1.1", "0.33.0"])
def test_healthy_llama_run_is_silent(version):
    assert preflight.check(facts(version)) == []


def test_kimi_target_by_release():
    assert codes(preflight.check(facts("0.10.1.1", target=KIMI))) == ["target-arch-unregistered"]
    assert preflight.check(facts("0.33.0", target=KIMI)) == []


def test_deepseek_target_on_0_10_1_1_fails_twice_over():
    deepseek = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64}
    assert codes(preflight.check(facts("0.10.1.1", target=deepseek))) == ["target-eagle3-unsupported",
                                                                         "target-model-type-unsupported"]


def test_specforge_draft_name_only_where_unregistered():
    named = {**DRAFT, "architectures": ["LlamaForCausalLMEagle3"]}
    assert codes(preflight.check(facts("0.10.1.1", draft=named))) == ["draft-arch-unregistered"]
    assert preflight.check(facts("0.33.0", draft=named)) == []


def test_method_eagle_with_an_eagle3_draft():
    named = {**DRAFT, "architectures": ["LlamaForCausalLMEagle3"]}
    assert codes(preflight.check(facts("0.33.0", draft=named, method="eagle"))) == ["method-eagle-with-eagle3-draft"]


def test_unknown_method():
    assert codes(preflight.check(facts("0.33.0", method="EAGLE3"))) == ["method-unknown"]


def test_fc_width_follows_the_release():
    two_layers = {**DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5]}}
    narrow = {**TENSORS, "fc.weight": (64, 128)}
    assert codes(preflight.check(facts("0.33.0", draft=two_layers, tensors=narrow))) == []
    assert codes(preflight.check(facts("0.10.1.1", draft=two_layers, tensors=narrow))) == ["fc-width"]


def test_unknown_draft_keys():
    extra = {**TENSORS, "layers.1.mlp.up_proj.weight": (128, 64)}
    assert codes(preflight.check(facts("0.33.0", tensors=extra))) == ["draft-keys-unknown"]


def test_absolute_d2t_warns():
    found = preflight.check(facts("0.33.0", d2t=OFFSETS + np.arange(256)))
    assert codes(found) == ["d2t-absolute"] and found[0].severity == "warning"
