"""The static flag scan and the EAGLE-3 source facts, against the real vLLM 0.10.1.1 and 0.33.0
files (tests/vllm_wheels.py), and against the rehearsal tree (which must scan like the real one)."""

from pathlib import Path

import pytest

from orchestrator.engines.vllm import flags, source
from orchestrator.rehearsal import vllm as rehearsal
from vllm_wheels import RELEASES, sources

TEMPLATE = Path(__file__).parents[1] / "templates" / "vllm_launch.sh.j2"
SCRIPT = """exec /venv/bin/vllm serve /ckpt/kimi \\
  --tensor-parallel-size 8 \\
  --max_model_len 4096 \\
  --speculative-config '{"method": "eagle3", "model": "/ckpt/draft", "num_speculative_tokens": 3}' \\
  --host 127.0.0.1 --port 30000
"""


@pytest.fixture(scope="module", params=RELEASES)
def real(request):
    return request.param, flags.scan(sources(request.param, flags.SOURCE_FILES), request.param)


def test_real_flags_are_found(real):
    _, found = real
    for flag in ("--model", "--port", "--host", "--tensor-parallel-size", "-tp", "--max-model-len",
                 "--gpu-memory-utilization", "--speculative-config", "--enforce-eager", "--no-enforce-eager",
                 "--trust-remote-code", "--served-model-name", "--uvicorn-log-level", "--no-enable-prefix-caching"):
        assert flag in found.options, flag
    assert "eagle3" in found.methods and {"method", "model", "num_speculative_tokens"} <= set(found.spec_keys)


def test_a_good_command_line_passes(real):
    assert flags.check(SCRIPT, real[1]) == []


def test_an_unknown_flag_is_named_with_the_closest(real):
    version, found = real
    problems = flags.check(SCRIPT.replace("--tensor-parallel-size", "--tp-size"), found)
    assert [p.flag for p in problems] == ["--tp-size"] and problems[0].line == 2
    assert problems[0].message == f"vLLM {version} has no flag --tp-size"


def test_a_removed_flag_is_unknown_only_where_it_was_removed(real):
    version, found = real
    problems = flags.check(SCRIPT.replace("--host 127.0.0.1", "--disable-log-requests --host 127.0.0.1"), found)
    assert bool(problems) == (version == "0.33.0")  # deprecated in 0.10.1.1 (arg_utils.py:1752), gone later


def test_speculative_config_json_is_checked(real):
    version, found = real
    bad = SCRIPT.replace('"method": "eagle3"', '"method": "EAGLE3"').replace('"num_speculative_tokens"', '"num_steps"')
    messages = [p.message for p in flags.check(bad, found)]
    assert any("method 'EAGLE3' is not one vLLM" in m and "eagle3" in m for m in messages)
    assert any("key 'num_steps' is not a field" in m for m in messages)
    assert flags.check(SCRIPT.replace('{"method"', '{method'), found)[0].message.startswith("--speculative-config is not JSON")


def test_messages_point_at_the_template_line():
    found = flags.FlagSet("0.33.0", frozenset({"--port"}))
    text = "exec vllm serve m \\\n  --portt 1\n"
    line = flags.messages(flags.check(text, found), "templates/x.j2", "a\nexec vllm serve m \\\n  --portt {{ port }}\n")
    assert line == ["templates/x.j2:3: vLLM 0.33.0 has no flag --portt; did you mean --port?"]


def test_source_facts_of_the_real_releases():
    old, new = (sources(v, ("config/*.py", "model_executor/models/*.py")) for v in RELEASES)
    assert source.eagle3_model_types(old).model_types == ("llama", "qwen") and source.eagle3_model_types(new) is None
    (every_old, drafts_old), (every_new, drafts_new) = (source.registry(s[source.REGISTRY]) for s in (old, new))
    assert "LlamaForCausalLMEagle3" not in drafts_old and "LlamaForCausalLMEagle3" in drafts_new
    assert "KimiK25ForConditionalGeneration" not in every_old
    path = "model_executor/models/deepseek_v2.py"
    assert not source.supports_eagle3(old[path], "DeepseekV3ForCausalLM", path)[0]
    assert source.supports_eagle3(new[path], "DeepseekV3ForCausalLM", path)[0]
    assert source.draft_loader(old[source.DRAFT_LOADER]).remaps_midlayer
    assert not source.draft_loader(old[source.DRAFT_LOADER]).fc_from_layer_ids
    assert source.draft_loader(new[source.DRAFT_LOADER]).fc_from_layer_ids


@pytest.mark.parametrize("release", rehearsal.releases())
def test_the_rehearsal_tree_scans_like_a_real_one(release, tmp_path):
    tree = rehearsal.assemble(release, tmp_path)
    texts = {str(p.relative_to(tree)): p.read_text() for g in flags.SOURCE_FILES for p in tree.glob(g)}
    found = flags.scan(texts, release)
    assert flags.check(SCRIPT, found) == []
    real = flags.scan(sources(release, flags.SOURCE_FILES), release)
    assert found.options - real.options == set(), "the rehearsal invents no flag"
    assert set(found.methods) <= set(real.methods)
