"""The pure checkpoint checks, the safetensors reader/writer and the transforms, on generated
fixtures, the rehearsal's checkpoints and the real SGLang wheels' source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from orchestrator.host import checkpoint
from orchestrator.run import preflight as run_preflight
from orchestrator.errors import PreflightError
from orchestrator.core import spec as specs
from orchestrator.engines.sglang import classes, preflight
from orchestrator.engines import safetensors
from orchestrator.engines.sglang.preflight import ERROR, INFO, LAYERS, MIDLAYER, WARNING, Capture, Facts, Finding
from orchestrator.engines.sglang.source import EMBED_HEAD, METHOD, Ask, Gate, HostSource
from orchestrator.errors import SpecError
from orchestrator.core.spec import CheckpointDef
from wheels import package_dir

HIDDEN, VOCAB, DRAFT_VOCAB = 8, 64, 16
HOST = HostSource(  # what the real 0.5.9 source says (test_preflight_source.py reads it from the wheel)
    Gate("srt/model_executor/model_runner.py:345", honours_use_aux=True),
    Ask("srt/model_executor/cuda_graph_runner.py:365", "AttributeError", None),
    {"LlamaForCausalLMEagle3": "srt/models/llama_eagle3.py", "LlamaForCausalLM": "srt/models/llama.py",
     "KimiK25ForConditionalGeneration": "srt/models/kimi_k25.py", "LlamaForCausalLMEagle": "srt/models/llama_eagle.py"},
    embed_head_call="srt/speculative/eagle_worker.py:157",
)
KIMI = ("KimiK25ForConditionalGeneration", "srt/models/kimi_k25.py")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Path:
    """The rehearsal's checkpoints, made by its own script (as on a host)."""
    out = tmp_path_factory.mktemp("rehearsal") / "checkpoints"
    subprocess.run([sys.executable, str(ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang" / "make_checkpoints.py"), str(out)], check=True)
    return out


def draft_tensors(prefix: str = "midlayer.", fc_in: int = 3 * HIDDEN, lm_head: bool = True) -> dict[str, np.ndarray]:
    hot = np.array([3, 4, 5, 9, 10, 20, 21, 22, 30, 31, 40, 41, 42, 50, 51, 60])
    tensors = {f"{prefix}{part}.weight": np.zeros((HIDDEN, HIDDEN), np.float16) for part in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")}
    tensors.update({"fc.weight": np.zeros((HIDDEN, fc_in), np.float16), "norm.weight": np.ones(HIDDEN, np.float16),
                    "d2t": hot - np.arange(DRAFT_VOCAB), "t2d": np.isin(np.arange(VOCAB), hot)})
    if lm_head:
        tensors["lm_head.weight"] = np.zeros((DRAFT_VOCAB, HIDDEN), np.float16)
    return tensors


def facts(tensors: dict[str, np.ndarray] | None = None, layout: str = MIDLAYER, **changes) -> Facts:
    tensors = draft_tensors() if tensors is None else tensors
    infos = {k: safetensors.TensorInfo(k, safetensors.encode(v)[0], v.shape, 0, 0) for k, v in tensors.items()}
    values = dict(
        sglang_version="0.5.23", layout=layout, target_path="/t",
        target_config={"architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "vocab_size": VOCAB,
                       "max_position_embeddings": 4096},
        draft_path="/d",
        draft_config={"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": HIDDEN, "num_hidden_layers": 1,
                      "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "max_position_embeddings": 4096},
        draft_tensors=infos, d2t=tensors.get("d2t"), t2d=tensors.get("t2d"),
        capture=Capture("LlamaForCausalLM", "srt/models/llama.py", True),
        embed_head=Capture("LlamaForCausalLM", "srt/models/llama.py", True),
        params={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4},
        env={}, source=HOST,
    )
    values.update(changes)
    return Facts(**values)


def aux_off() -> dict:
    return {**facts().draft_config, "eagle_config": {"use_aux_hidden_state": False}}


def codes(found) -> dict[str, str]:
    return {f.code: f.severity for f in found}


def test_a_healthy_draft_has_no_findings():
    assert preflight.check(facts()) == []


@pytest.mark.parametrize("case, make, expected", [
    ("layers.0 keys on a midlayer SGLang", lambda: facts(draft_tensors("layers.0.")), {"draft-keys-dropped": ERROR}),
    ("layers.0 keys on 0.5.12+", lambda: facts(draft_tensors("layers.0."), layout=LAYERS), {}),
    ("midlayer keys on 0.5.12+ are remapped", lambda: facts(layout=LAYERS), {}),
    ("layers.1 beyond one layer", lambda: facts(draft_tensors("layers.1."), layout=LAYERS), {"draft-keys-dropped": ERROR}),
    ("unknown key", lambda: facts({**draft_tensors(), "extra.bias": np.zeros(2, np.float16)}), {"draft-keys-unknown": WARNING}),
    ("fc for two aux layers", lambda: facts(draft_tensors(fc_in=2 * HIDDEN)), {"fc-width": ERROR}),
    ("no lm_head with a smaller vocab", lambda: facts(draft_tensors(lm_head=False)), {"lm-head-missing": ERROR}),
    ("absolute d2t", lambda: facts(d2t=draft_tensors()["d2t"] + np.arange(DRAFT_VOCAB)), {"d2t-absolute": ERROR}),
    ("d2t past the vocabulary", lambda: facts(d2t=np.full(DRAFT_VOCAB, VOCAB), t2d=None), {"d2t-invalid": ERROR}),
    ("t2d disagreeing", lambda: facts(t2d=np.roll(draft_tensors()["t2d"], 1)), {"t2d-inconsistent": WARNING}),
    ("short draft context", lambda: facts(draft_config={**facts().draft_config, "max_position_embeddings": 2048}),
     {"draft-context": ERROR}),
    ("draft tokens rewritten", lambda: facts(params={**facts().params, "speculative_num_draft_tokens": 8}),
     {"draft-tokens-adjusted": WARNING}),
    ("no aux capture", lambda: facts(capture=Capture("KimiK25ForConditionalGeneration", "srt/models/kimi_k25.py", False)),
     {"aux-capture-missing": ERROR}),
    ("aux capture added by a patch", lambda: facts(capture=Capture("K", "srt/models/k.py", False, ("fix",))),
     {"aux-capture-patched": INFO}),
    ("EAGLE with an EAGLE-3 draft", lambda: facts(params={**facts().params, "speculative_algorithm": "EAGLE"}),
     {"algorithm-not-eagle3": ERROR}),
    ("NEXTN runs as EAGLE", lambda: facts(params={**facts().params, "speculative_algorithm": "NEXTN"}),
     {"algorithm-not-eagle3": ERROR}),
    ("capture turned off by the draft config", lambda: facts(draft_config=aux_off()), {"aux-capture-disabled": ERROR}),
    ("a host that ignores use_aux_hidden_state", lambda: facts(
        draft_config=aux_off(), source=HostSource(Gate("m.py:1", honours_use_aux=False), HOST.ask, HOST.registry)), {}),
    ("EAGLE on a host that does not gate capture on EAGLE3", lambda: facts(
        params={**facts().params, "speculative_algorithm": "EAGLE"}, source=HostSource(None, HOST.ask, HOST.registry)), {}),
    ("EAGLE leaves the target's method alone", lambda: facts(
        params={**facts().params, "speculative_algorithm": "EAGLE"},
        capture=Capture("KimiK25ForConditionalGeneration", "srt/models/kimi_k25.py", False)), {"algorithm-not-eagle3": ERROR}),
    ("an unregistered draft", lambda: facts(draft_config={**facts().draft_config, "architectures": ["GptOssForCausalLMEagle3"]}),
     {"draft-arch-unknown": ERROR}),
    ("an unregistered draft the host's code names", lambda: facts(
        draft_config={**facts().draft_config, "architectures": ["Eagle3Speculator"]},
        source=HostSource(HOST.gate, HOST.ask, HOST.registry, {"Eagle3Speculator": "srt/utils/hf_transformers/config.py"})),
     {"draft-arch-converted": INFO}),
    ("no get_embed_and_head", lambda: facts(embed_head=Capture(*KIMI, False)), {"target-embed-head-missing": ERROR}),
    ("get_embed_and_head with EAGLE too", lambda: facts(embed_head=Capture(*KIMI, False),
                                                        params={**facts().params, "speculative_algorithm": "EAGLE"}),
     {"algorithm-not-eagle3": ERROR, "target-embed-head-missing": ERROR}),
    ("get_embed_and_head with an EAGLE (not EAGLE-3) draft", lambda: facts(
        embed_head=Capture(*KIMI, False), params={**facts().params, "speculative_algorithm": "EAGLE"},
        draft_config={**facts().draft_config, "architectures": ["LlamaForCausalLMEagle"]}),
     {"draft-arch": INFO, "target-embed-head-missing": ERROR}),
    ("get_embed_and_head added by a patch", lambda: facts(embed_head=Capture(*KIMI, False, ("fix",))),
     {"target-embed-head-patched": INFO}),
    ("a host whose workers never ask for get_embed_and_head", lambda: facts(
        embed_head=Capture(*KIMI, False), source=HostSource(HOST.gate, HOST.ask, HOST.registry)), {}),
    ("a target class not found is not said twice", lambda: facts(embed_head=Capture(*KIMI, None)), {}),
    ("weights that could not be read", lambda: facts({}, weights_unread="/d/pytorch_model.bin: the legacy format"),
     {"draft-weights-unchecked": WARNING}),
    ("no weight files", lambda: facts({}, weight_files=0, d2t=None, t2d=None), {"draft-weights-missing": ERROR}),
])
def test_each_failure_mode_is_reported(case, make, expected):
    assert codes(preflight.check(make())) == expected, case


def test_findings_say_what_why_and_how_to_fix():
    ids = np.arange(3, 3 + DRAFT_VOCAB) * 2
    by_code = {f.code: f for f in preflight.check(facts(draft_tensors("layers.0."), d2t=ids, t2d=np.isin(np.arange(VOCAB), ids),
                                                        draft_config={**facts().draft_config, "max_position_embeddings": 1}))}
    assert "layers.0." in by_code["draft-keys-dropped"].what and "midlayer" in by_code["draft-keys-dropped"].fix
    assert "accept length ~1.0" in by_code["draft-keys-dropped"].why
    assert "d2t_to_offsets" in by_code["d2t-absolute"].fix
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in by_code["draft-context"].what
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in by_code["draft-context"].fix


def test_the_context_variable_set_in_the_env_silences_the_error():
    short = {**facts().draft_config, "max_position_embeddings": 2048}
    assert preflight.check(facts(draft_config=short, env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})) == []
    assert preflight.check(facts(draft_config=short, sglang_version="0.4.10.post2")) == []  # 0.4 allowed it by default


def test_d2t_form_tells_offsets_from_absolute_ids(rehearsal):
    healthy = safetensors.read_tensor_file(rehearsal / "eagle3-draft" / "model.safetensors", "d2t")
    absolute = safetensors.read_tensor_file(rehearsal / "eagle3-draft-absolute-d2t" / "model.safetensors", "d2t")
    t2d = safetensors.read_tensor_file(rehearsal / "eagle3-draft" / "model.safetensors", "t2d")
    assert preflight.d2t_form(healthy, 1024, t2d) == "offsets"
    assert preflight.d2t_form(absolute, 1024, t2d) == "absolute"
    assert preflight.d2t_form(healthy, 1024, None) == "offsets"
    assert preflight.d2t_form(absolute, 1024, None) == "absolute"
    assert preflight.d2t_form(np.array([5, 3, 1]), 1024, None) == "invalid"


def test_safetensors_round_trip_and_ranged_header(tmp_path):
    tensors = draft_tensors()
    path = tmp_path / "m.safetensors"
    safetensors.write_file(path, None, list(tensors.items()), {"format": "pt"})
    data = path.read_bytes()
    length = safetensors.header_length(data[:8])
    header = safetensors.parse_header(data[: 8 + length])  # the header alone, as a ranged read gets it
    assert header.keys() == list(tensors) and header.metadata == {"format": "pt"}
    assert header.data_start % 8 == 0
    for name, value in tensors.items():
        assert np.array_equal(safetensors.read_tensor_file(path, name), value)
    with pytest.raises(safetensors.FormatError, match="not plausible"):
        safetensors.parse_header(b"\xff" * 16, "x")
    with pytest.raises(safetensors.FormatError, match="truncated"):
        safetensors.parse_header(data[:20], "x")


def test_rename_keys_reproduces_the_healthy_draft_byte_for_byte(rehearsal, tmp_path):
    spec = CheckpointDef("d", rehearsal / "eagle3-draft-layers0", "/x", "exp.yaml:3",
                         ({"rename_keys": {"layers.0.": "midlayer."}},))
    made = checkpoint.prepare(spec, tmp_path / "cache")
    fixed = made.folder / "model.safetensors"
    healthy = rehearsal / "eagle3-draft" / "model.safetensors"
    assert made.folder != spec.src and made.source_hash != made.result_hash
    assert safetensors.read_header_file(fixed).keys() == safetensors.read_header_file(healthy).keys()
    assert fixed.read_bytes() == healthy.read_bytes()
    assert (spec.src / "model.safetensors").read_bytes() != fixed.read_bytes()  # never in place
    again = checkpoint.prepare(spec, tmp_path / "cache")  # content-addressed: reused, not rewritten
    assert again.folder == made.folder and fixed.stat().st_mtime_ns == (again.folder / "model.safetensors").stat().st_mtime_ns


def test_d2t_to_offsets_fixes_absolute_ids_and_refuses_offsets(rehearsal, tmp_path):
    spec = CheckpointDef("d", rehearsal / "eagle3-draft-absolute-d2t", "/x", "exp.yaml:3", ({"d2t_to_offsets": True},))
    made = checkpoint.prepare(spec, tmp_path / "cache")
    assert (made.folder / "model.safetensors").read_bytes() == (rehearsal / "eagle3-draft" / "model.safetensors").read_bytes()
    healthy = CheckpointDef("d", rehearsal / "eagle3-draft", "/x", "exp.yaml:3", ({"d2t_to_offsets": True},))
    with pytest.raises(SpecError, match="exp.yaml:3: transform d2t_to_offsets: .* already holds offsets"):
        checkpoint.prepare(healthy, tmp_path / "cache")


def test_layout_is_read_from_the_real_sglang_source(sglang_python, rehearsal):
    old = package_dir(sglang_python("0.4.10.post2"))
    new = package_dir(sglang_python("0.5.23"))
    assert preflight.draft_layout((old / "srt/models/llama_eagle3.py").read_text(), "0.4.10.post2") == MIDLAYER
    assert preflight.draft_layout((new / "srt/models/llama_eagle3.py").read_text(), "0.5.23") == LAYERS
    assert preflight.draft_layout("self.midlayer = LlamaDecoderLayer(config)", "0.5.23") == MIDLAYER  # source wins
    assert preflight.draft_layout(None, "0.5.12.post1") == LAYERS and preflight.draft_layout(None, "0.5.11") == MIDLAYER


def test_class_facts_on_the_real_model_files(sglang_python):
    new = package_dir(sglang_python("0.5.23"))
    old = package_dir(sglang_python("0.4.10.post2"))
    kimi_text = (new / "srt/models/kimi_k25.py").read_text()
    kimi = classes.class_facts(kimi_text, "KimiK25ForConditionalGeneration", "k.py", METHOD)
    assert kimi.defines and kimi.delegate == "language_model" and kimi.inner == "DeepseekV3ForCausalLM"
    assert kimi.refusal == "AttributeError: language_model does not support EAGLE3 speculative decoding."
    embed = classes.class_facts(kimi_text, "KimiK25ForConditionalGeneration", "k.py", EMBED_HEAD)
    assert embed.defines and embed.delegate == "language_model" and embed.inner == "DeepseekV3ForCausalLM"
    assert embed.refusal == "AttributeError: language_model does not support get_embed_and_head()."
    llama = classes.class_facts((new / "srt/models/llama.py").read_text(), "LlamaForCausalLM", "l.py", METHOD)
    assert llama.defines and llama.delegate is None
    v3 = classes.class_facts((old / "srt/models/deepseek_v2.py").read_text(), "DeepseekV3ForCausalLM", "d.py", METHOD)
    assert not v3.defines and v3.bases == ("DeepseekV2ForCausalLM",)
    v2 = (old / "srt/models/deepseek_v2.py").read_text()
    assert not classes.class_facts(v2, "DeepseekV2ForCausalLM", "d.py", METHOD).defines
    assert classes.class_facts(v2, "DeepseekV2ForCausalLM", "d.py", EMBED_HEAD).defines  # 0.4.10 has this one
    assert classes.class_facts("class A:\n    pass\n", "B", "x.py", METHOD) is None


def test_allowed_errors_are_marked_and_do_not_block():
    found = [Finding(ERROR, "algorithm-not-eagle3", "w", "y", "f"), Finding(ERROR, "fc-width", "w", "y", "f"),
             Finding(WARNING, "draft-keys-unknown", "w", "y", "f")]
    marked = preflight.acknowledged(found, ("algorithm-not-eagle3", "draft-keys-unknown"))
    assert [f.allowed for f in marked] == [True, False, False]  # only errors are ever marked
    assert [f.code for f in preflight.blocking(marked, ("algorithm-not-eagle3",))] == ["fc-width"]
    assert preflight.blocking(found, ("algorithm-not-eagle3", "fc-width")) == []
    assert [f.code for f in preflight.blocking(found)] == ["algorithm-not-eagle3", "fc-width"]
    assert marked[0].as_json()["allowed"] is True and marked[0].severity == ERROR  # the severity stays


def test_a_finding_is_reported_as_severity_what_why_fix():
    found = preflight.acknowledged([Finding(ERROR, "algorithm-not-eagle3", "w", "y", "f")], ("algorithm-not-eagle3",))
    assert run_preflight.described(found[0]) == "preflight ERROR (allowed): w\nwhy: y\nfix: f"
    assert run_preflight.described(Finding(INFO, "draft-arch", "w", "y", "f")) == "preflight INFO: w\nwhy: y\nfix: f"
    run_preflight.stop_on_errors(found, ("algorithm-not-eagle3",), "story@gpu")  # allowed: no error
    with pytest.raises(PreflightError, match=r"^preflight: 1 error\(s\) in the checkpoints of story@gpu: w; "
                                                           r"fix: f \(`orch run --no-preflight` runs anyway\)$"):
        run_preflight.stop_on_errors(found, (), "story@gpu")


def write_spec(tmp_path: Path, top: str, variant: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\ntemplate: {ROOT / 'templates' / 'sglang_launch.sh.j2'}\n{top}"
                    f"variants:\n  story:\n{variant}    params: {{port: 1}}\n  fixed:\n    params: {{port: 2}}\n")
    return path


def test_preflight_allow_comes_from_the_experiment_and_its_variants(tmp_path):
    path = write_spec(tmp_path, "preflight: {allow: [draft-context]}\n",
                      "    preflight:\n      allow: [algorithm-not-eagle3, draft-context]\n")
    plans = {p.variant: p for p in specs.expand(specs.load(path))}
    assert plans["story"].allow == ("draft-context", "algorithm-not-eagle3")
    assert plans["fixed"].allow == ("draft-context",)
    assert {p.variant: p.allow for p in specs.expand(specs.load(write_spec(tmp_path, "", "")))} == {"story": (), "fixed": ()}


@pytest.mark.parametrize("top, variant, message", [
    ("", "    preflight: {allow: [algorithm-not-eagle]}\n",
     r"e\.yaml:5: unknown preflight code 'algorithm-not-eagle' in `preflight.allow`; did you mean algorithm-not-eagle3\?"),
    ("preflight: {allow: algorithm-not-eagle3}\n", "", r"e\.yaml:3: `preflight.allow` must be a list of finding codes"),
    ("preflight: {skip: [fc-width]}\n", "", r"e\.yaml:3: unknown key 'skip' in `preflight`; known: allow"),
    ("preflight: {allow: [nonsense]}\n", "", r"unknown preflight code 'nonsense' .*; known codes: algorithm-not-eagle3, "),
])
def test_a_bad_allow_is_a_spec_error_naming_the_line(tmp_path, top, variant, message):
    with pytest.raises(SpecError, match=message):
        specs.load(write_spec(tmp_path, top, variant))
