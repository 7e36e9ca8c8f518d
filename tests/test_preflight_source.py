"""The EAGLE-3 preflight against the real SGLang wheels (0.4.10.post2, 0.5.9, 0.5.23, installed
--no-deps): what each release's own source says, and `findings_for` end to end over a local host
whose python is that venv, on tiny checkpoints written from real published configs (their key
names kept, their sizes shrunk). Every rule fires where the release makes it true and stays silent
on a healthy case."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from orchestrator import engines
from orchestrator.errors import PreflightError
from orchestrator.run import launch, preflight as run_preflight
from orchestrator.run.attempt import Attempt
from orchestrator.engines.sglang import preflight_run, preflight_source
from orchestrator.core import shell
from orchestrator.core import spec as specs
from orchestrator.engines import safetensors
from orchestrator.core.inventory import Host
from orchestrator.host.session import HostSession
from orchestrator.host.session import package_dir as host_package_dir
from orchestrator.core.spec import PatchDef
from orchestrator.store.database import FindingRow, Run, Store
from reporting import Recorder
from wheels import package_dir

RELEASES = ["0.4.10.post2", "0.5.9", "0.5.23"]
FIXTURES = ROOT / "tests" / "fixtures" / "drafts"
H, V, DV = 8, 64, 16  # hidden, target vocabulary, draft vocabulary
LONG_CONTEXT = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}  # published drafts are shorter than their targets
HOT = np.array([3, 4, 5, 9, 10, 20, 21, 22, 30, 31, 40, 41, 42, 50, 51, 60])
LLAMA_PARTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")
MLA_PARTS = ("self_attn.q_a_proj", "self_attn.q_a_layernorm", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
             "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")  # Model-Optimizer's Kimi-K2 draft
KIMI_METHOD = '''    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None) -> None:
        """Set the layers to capture for EAGLE3 speculative decoding."""
        if self.{inner} is None or not hasattr(self.{inner}, "set_eagle3_layers_to_capture"):
            raise AttributeError("{inner} does not support EAGLE3 speculative decoding.")
        self.{inner}.set_eagle3_layers_to_capture(layer_ids)

'''
KIMI_EMBED = '''    def get_embed_and_head(self):
        if self.{inner} is None or not hasattr(self.{inner}, "get_embed_and_head"):
            raise AttributeError("{inner} does not support get_embed_and_head().")
        return self.{inner}.get_embed_and_head()

'''
KIMI_ANCHOR = "    def pad_input_ids(self, input_ids: List[int], mm_inputs: MultimodalInputs):"  # in the real 0.5.9 kimi_k25.py


def published(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def shrunk(config: dict, **changes) -> dict:
    """A published config with its sizes made tiny (in `text_config` too); every key kept."""
    small = {"hidden_size": H, "vocab_size": V, "intermediate_size": 2 * H}
    out = {k: small.get(k, v) for k, v in config.items()}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = shrunk(out["text_config"])
    if "draft_vocab_size" in out:
        out["draft_vocab_size"] = DV
    return {**out, **changes}


def tensors(prefix: str = "midlayer.", parts: tuple[str, ...] = LLAMA_PARTS, fc_layers: int = 3) -> dict[str, np.ndarray]:
    found = {f"{prefix}{p}.weight": np.zeros((H, H), np.float16) for p in parts}
    found.update({"fc.weight": np.zeros((H, fc_layers * H), np.float16), "norm.weight": np.ones(H, np.float16),
                  "lm_head.weight": np.zeros((DV, H), np.float16), "d2t": HOT - np.arange(DV),
                  "t2d": np.isin(np.arange(V), HOT)})
    return found


def checkpoint(folder: Path, config: dict, weights: dict[str, np.ndarray] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if weights is not None:
        safetensors.write_file(folder / "model.safetensors", None, list(weights.items()), {"format": "pt"})
    return folder


def host_for(python: Path, tmp_path: Path) -> Host:
    return Host("gpu", transport="local", workdir=str(tmp_path / "work"), python=str(python))


async def _findings(host: Host, params: dict, env: dict, patches: tuple[PatchDef, ...]) -> list:
    session = await HostSession.open(host)
    try:
        return await preflight_run.findings_for(session.conn, host, params, env, patches, packages={})
    finally:
        await session.conn.close()


def preflight(python: Path, tmp_path: Path, target: dict, draft: dict, weights: dict[str, np.ndarray] | None = None,
              algorithm: str = "EAGLE3", env: dict | None = None, patches: tuple[PatchDef, ...] = (),
              draft_folder: Path | None = None) -> dict[str, object]:
    """{code: finding} for one run of these checkpoints on a host running this SGLang."""
    target_dir = checkpoint(tmp_path / "target", target)
    draft_dir = draft_folder or checkpoint(tmp_path / "draft", draft, tensors() if weights is None else weights)
    # by SGLang's destinations, as the preflight reads them from the launch command (`flags.command_of`)
    params = {"model_path": str(target_dir), "speculative_draft_model_path": str(draft_dir), "speculative_algorithm": algorithm}
    found = asyncio.run(_findings(host_for(python, tmp_path), params, LONG_CONTEXT if env is None else env, patches))
    return {f.code: f for f in found}


LLAMA_TARGET = shrunk(published("target-llama-3.1-8b.json"))
LLAMA_DRAFT = shrunk(published("specforge-llama3-8B-eagle3.json"))
KIMI_TARGET = shrunk(published("target-kimi-k25.json"))
KIMI_DRAFT = shrunk(published("specforge-kimi-k25-eagle3.json"))


# -- facts each release's own source holds --------------------------------------------------------


@pytest.mark.parametrize("version, gate, honours, error, drafts, embed_head", [
    ("0.4.10.post2", "srt/model_executor/model_runner.py:346", False,
     "AttributeError: 'X' object has no attribute 'set_eagle3_layers_to_capture'", ["LlamaForCausalLMEagle3"],
     "srt/speculative/eagle_worker.py:138"),
    ("0.5.9", "srt/model_executor/model_runner.py:345", True,
     "AttributeError: 'X' object has no attribute 'set_eagle3_layers_to_capture'", ["LlamaForCausalLMEagle3"],
     "srt/speculative/eagle_worker.py:157"),
    ("0.5.23", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py:185", True,
     "ValueError: Model X does not implement set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state capture requires.",
     ["Eagle3DeepseekV2ForCausalLM", "LlamaForCausalLMEagle3"],
     "srt/speculative/pp_draft_embedding.py:95"),  # resolve_target_embed_and_head, from eagle_worker_v2's init_lm_head
])
def test_each_release_says_where_capture_is_gated_and_how_it_asks_the_target(sglang_python, tmp_path, version, gate,
                                                                              honours, error, drafts, embed_head):
    host = host_for(sglang_python(version), tmp_path)

    async def read():
        session = await HostSession.open(host)
        try:
            sglang = await host_package_dir(session.conn, host, {}, "sglang")
            return await preflight_source.host_source(session.conn, sglang, ["LlamaForCausalLM"], ["Eagle3Speculator"])
        finally:
            await session.conn.close()

    facts, sources, target = asyncio.run(read())
    assert (facts.gate.where, facts.gate.honours_use_aux) == (gate, honours)
    assert facts.ask.error("X") == error
    assert facts.eagle3_drafts() == drafts and target == "LlamaForCausalLM"
    assert not {"Eagle3Speculator", "GptOssForCausalLMEagle3"} & set(facts.registry)  # no release registers these
    assert facts.quoted == {}  # nor names the speculators class anywhere in srt/
    assert preflight_source.LLAMA_EAGLE3 in sources and facts.registry["LlamaForCausalLM"] == "srt/models/llama.py"
    assert facts.longer_context is (version == "0.4.10.post2")  # 0.4 let a draft's shorter context be overridden
    assert facts.embed_head_call == embed_head  # where the EAGLE worker asks the target for get_embed_and_head


@pytest.mark.parametrize("version, fires", [("0.4.10.post2", False), ("0.5.9", True), ("0.5.23", True)])
def test_a_draft_shorter_than_its_target_stops_the_releases_that_refuse_it(sglang_python, tmp_path, version, fires):
    found = preflight(sglang_python(version), tmp_path / "bare", LLAMA_TARGET, LLAMA_DRAFT, env={})
    assert list(found) == (["draft-context"] if fires else [])  # SpecForge's 2048 against Llama-3.1's 131072
    assert preflight(sglang_python(version), tmp_path / "set", LLAMA_TARGET, LLAMA_DRAFT) == {}


def test_a_name_the_source_quotes_is_found_where_it_is(sglang_python):
    srt = package_dir(sglang_python("0.5.23")) / "srt"
    found = subprocess.run(["sh", "-c", shell.file_quoting(str(srt), "LlamaForCausalLMEagle3")], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert found == str(srt / "model_loader" / "weight_utils.py")  # its weight loading names the class
    none = subprocess.run(["sh", "-c", shell.file_quoting(str(srt), "Eagle3Speculator")], capture_output=True, text=True)
    assert none.returncode == 0 and none.stdout == ""


# -- the algorithm --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", RELEASES)
def test_eagle_with_an_eagle3_draft_is_an_error_on_every_release(sglang_python, tmp_path, version):
    found = preflight(sglang_python(version), tmp_path, LLAMA_TARGET, LLAMA_DRAFT, algorithm="EAGLE")
    assert list(found) == ["algorithm-not-eagle3"]
    error = found["algorithm-not-eagle3"]
    assert error.severity == "error" and "only for EAGLE3 (srt/model_executor/" in error.what
    assert "accept length ~1.0" in error.why and "skips fc" in error.why
    assert "--speculative-algorithm EAGLE3" in error.fix


@pytest.mark.parametrize("version", RELEASES)
def test_eagle3_with_a_llama_target_is_silent_on_every_release(sglang_python, tmp_path, version):
    assert preflight(sglang_python(version), tmp_path, LLAMA_TARGET, LLAMA_DRAFT) == {}


def test_nextn_runs_as_eagle(sglang_python, tmp_path):
    found = preflight(sglang_python("0.5.23"), tmp_path, LLAMA_TARGET, LLAMA_DRAFT, algorithm="NEXTN")
    assert list(found) == ["algorithm-not-eagle3"] and "runs NEXTN as EAGLE" in found["algorithm-not-eagle3"].what


# -- the target class ---------------------------------------------------------------------------


def test_kimi_k25_on_0_5_9_fails_at_startup_with_an_attribute_error(sglang_python, tmp_path):
    found = preflight(sglang_python("0.5.9"), tmp_path, KIMI_TARGET, KIMI_DRAFT)
    assert list(found) == ["aux-capture-missing", "target-embed-head-missing"]  # the target runner asks first
    missing = found["aux-capture-missing"]
    assert missing.severity == "error" and "srt/models/kimi_k25.py" in missing.what
    assert ("the server will fail at startup with `AttributeError: 'KimiK25ForConditionalGeneration' object has no "
            "attribute 'set_eagle3_layers_to_capture'`") in missing.what


@pytest.mark.parametrize("algorithm, codes", [
    ("EAGLE3", ["aux-capture-missing", "target-embed-head-missing"]),
    ("EAGLE", ["algorithm-not-eagle3", "target-embed-head-missing"]),  # the story's own command
    ("NEXTN", ["algorithm-not-eagle3", "target-embed-head-missing"]),
])
def test_kimi_k25_on_0_5_9_has_no_embed_and_head_for_any_eagle_algorithm(sglang_python, tmp_path, algorithm, codes):
    found = preflight(sglang_python("0.5.9"), tmp_path, KIMI_TARGET, KIMI_DRAFT, algorithm=algorithm)
    assert list(found) == codes
    missing = found["target-embed-head-missing"]
    assert missing.severity == "error" and "srt/models/kimi_k25.py" in missing.what
    assert ("the server will fail at startup with `AttributeError: 'KimiK25ForConditionalGeneration' object has no "
            "attribute 'get_embed_and_head'`") in missing.what
    assert "srt/speculative/eagle_worker.py:157" in missing.why and "does not define it" in missing.why
    assert "self.language_model.get_embed_and_head()" in missing.fix


@pytest.mark.parametrize("algorithm, codes", [("EAGLE3", []), ("EAGLE", ["algorithm-not-eagle3"])])
def test_kimi_k25_on_0_5_23_delegates_to_a_class_that_has_the_methods(sglang_python, tmp_path, algorithm, codes):
    assert list(preflight(sglang_python("0.5.23"), tmp_path, KIMI_TARGET, KIMI_DRAFT, algorithm=algorithm)) == codes


@pytest.mark.parametrize("version, target, error", [
    ("0.5.23", "KimiVLForConditionalGeneration",
     "ValueError: Model KimiVLForConditionalGeneration does not implement set_eagle3_layers_to_capture, which EAGLE3 "
     "aux hidden-state capture requires."),
    ("0.4.10.post2", "DeepseekV3ForCausalLM",
     "AttributeError: 'DeepseekV3ForCausalLM' object has no attribute 'set_eagle3_layers_to_capture'"),
])
def test_each_release_is_quoted_in_its_own_words(sglang_python, tmp_path, version, target, error):
    found = preflight(sglang_python(version), tmp_path, shrunk(LLAMA_TARGET, architectures=[target]), LLAMA_DRAFT)
    assert f"the server will fail at startup with `{error}`" in found["aux-capture-missing"].what


def test_deepseek_v3_inherits_the_method_on_0_5_9(sglang_python, tmp_path):
    target = shrunk(LLAMA_TARGET, architectures=["DeepseekV3ForCausalLM"])
    assert preflight(sglang_python("0.5.9"), tmp_path, target, LLAMA_DRAFT) == {}


def test_a_patch_adding_a_delegating_method_counts_when_the_inner_class_has_it(sglang_python, tmp_path):
    fix = PatchDef("kimi-capture", "sglang:srt/models/kimi_k25.py", "e.yaml:9", KIMI_ANCHOR, "insert_before",
                   KIMI_METHOD.format(inner="language_model"))
    found = preflight(sglang_python("0.5.9"), tmp_path, KIMI_TARGET, KIMI_DRAFT, patches=(fix,))
    assert list(found) == ["aux-capture-patched", "target-embed-head-missing"]  # the other method is still missing
    assert found["aux-capture-patched"].severity == "info"
    assert "kimi-capture" in found["aux-capture-patched"].why and "DeepseekV2ForCausalLM" in found["aux-capture-patched"].why


def test_a_patch_delegating_to_an_inner_model_without_the_method_is_still_an_error(sglang_python, tmp_path):
    wrong = PatchDef("kimi-capture", "sglang:srt/models/kimi_k25.py", "e.yaml:9", KIMI_ANCHOR, "insert_before",
                     KIMI_METHOD.format(inner="vision_tower"))
    embed = PatchDef("kimi-embed", "sglang:srt/models/kimi_k25.py", "e.yaml:19", KIMI_ANCHOR, "insert_before",
                     KIMI_EMBED.format(inner="vision_tower"))
    found = preflight(sglang_python("0.5.9"), tmp_path, KIMI_TARGET, KIMI_DRAFT, patches=(wrong, embed))
    assert list(found) == ["aux-capture-missing", "target-embed-head-missing"]
    assert "`AttributeError: vision_tower does not support EAGLE3 speculative decoding.`" in found["aux-capture-missing"].what
    assert "MoonViT3dPretrainedModel" in found["aux-capture-missing"].why
    assert "`AttributeError: vision_tower does not support get_embed_and_head().`" in \
        found["target-embed-head-missing"].what


@pytest.mark.parametrize("variant, codes", [
    ("story", {"algorithm-not-eagle3": "error", "target-embed-head-patched": "info"}),
    ("fixed", {"aux-capture-patched": "info", "target-embed-head-patched": "info"}),
])
def test_the_demos_patches_add_both_methods_to_the_real_0_5_9_class(sglang_python, tmp_path, variant, codes):
    plan = next(p for p in specs.expand(specs.load(ROOT / "experiments" / "eagle_debug.yaml")) if p.variant == variant)
    algorithm = plan.params["speculative_algorithm"]
    found = preflight(sglang_python("0.5.9"), tmp_path, KIMI_TARGET, KIMI_DRAFT, algorithm=algorithm, patches=plan.patches)
    assert {c: f.severity for c, f in found.items()} == codes
    assert found["target-embed-head-patched"].why.startswith("patch kimi-embed-and-head of this run adds it")
    assert "forwards it to self.language_model, a DeepseekV3ForCausalLM" in found["target-embed-head-patched"].why


# -- the draft config -----------------------------------------------------------------------------


@pytest.mark.parametrize("version, fires", [("0.4.10.post2", False), ("0.5.9", True), ("0.5.23", True)])
def test_use_aux_hidden_state_false_turns_capture_off_where_the_source_reads_it(sglang_python, tmp_path, version, fires):
    config = shrunk(published("specforge-deepseek-v3-671b-eagle3.json"))
    off = {**config, "eagle_config": {**config["eagle_config"], "use_aux_hidden_state": False}}
    found = preflight(sglang_python(version), tmp_path / "off", LLAMA_TARGET, off)
    assert list(found) == (["aux-capture-disabled"] if fires else [])
    if fires:
        assert f"({3 * H} inputs" not in found["aux-capture-disabled"].what and f"takes {3 * H} inputs" in \
            found["aux-capture-disabled"].what
    assert preflight(sglang_python(version), tmp_path / "on", LLAMA_TARGET, config) == {}


@pytest.mark.parametrize("version, config, close", [
    ("0.5.23", "speculators-llama-3.1-8b-eagle3.json", "speculators format"),
    ("0.5.23", "specforge-gpt-oss-20B-eagle3.json", "LlamaForCausalLMEagle3"),
    ("0.5.9", "modelopt-kimi-k25-eagle3-mla.json", "LlamaForCausalLMEagle3"),
])
def test_an_unregistered_draft_architecture_is_one_error(sglang_python, tmp_path, version, config, close):
    draft = shrunk(published(config))
    if "gpt-oss" in config:
        draft["architectures"] = ["GptOssForCausalLMEagle3"]  # what a user might guess; SpecForge ships LlamaForCausalLMEagle3
    found = preflight(sglang_python(version), tmp_path, LLAMA_TARGET, draft)
    assert list(found) == ["draft-arch-unknown"]
    unknown = found["draft-arch-unknown"]
    assert draft["architectures"][0] in unknown.what and f"SGLang {version}" in unknown.what
    assert close in unknown.fix + unknown.what


def test_the_mla_draft_is_checked_on_the_release_that_registers_it(sglang_python, tmp_path):
    python = sglang_python("0.5.23")
    mla = shrunk(published("modelopt-kimi-k25-eagle3-mla.json"))
    healthy = tensors("layers.0.", MLA_PARTS)
    assert preflight(python, tmp_path / "ok", KIMI_TARGET, mla, healthy) == {}  # no alarm on MLA key names
    two = preflight(python, tmp_path / "two", KIMI_TARGET, mla, tensors("layers.0.", MLA_PARTS, fc_layers=2))
    assert list(two) == ["fc-width"]
    eagle = preflight(python, tmp_path / "eagle", KIMI_TARGET, mla, healthy, algorithm="EAGLE")
    assert list(eagle) == ["algorithm-not-eagle3"] and "Eagle3DeepseekV2ForCausalLM" in eagle["algorithm-not-eagle3"].what


# -- pytorch_model.bin only -----------------------------------------------------------------------


def bin_draft(tmp_path: Path, name: str, bin_file: str | None = None) -> Path:
    folder = tmp_path / "bin-draft"
    folder.mkdir()
    (folder / "config.json").write_text((FIXTURES / "tiny-bin" / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes((FIXTURES / (bin_file or f"{name}/pytorch_model.bin")).read_bytes())
    return folder


TINY_TARGET = published("tiny-target/config.json")
TINY_DRAFT = published("tiny-bin/config.json")


@pytest.mark.parametrize("version, name, expected", [
    ("0.5.9", "tiny-bin", []),
    ("0.5.9", "tiny-bin-layers0", ["draft-keys-dropped"]),  # the .bin's own key names reach the layout check
    ("0.5.23", "tiny-bin-layers0", []),
])
def test_a_bin_only_draft_is_read_without_torch(sglang_python, tmp_path, version, name, expected):
    found = preflight(sglang_python(version), tmp_path, TINY_TARGET, TINY_DRAFT, draft_folder=bin_draft(tmp_path, name))
    assert list(found) == expected


@pytest.mark.parametrize("bin_file, words", [
    ("legacy-format.bin", "the legacy (before torch 1.6) torch.save format"),
    ("os-system.bin", "its pickle names posix.system, which a state dict never needs; refused, nothing run"),
])
def test_a_bin_that_cannot_be_read_safely_is_one_warning(sglang_python, tmp_path, monkeypatch, bin_file, words):
    monkeypatch.chdir(tmp_path)
    found = preflight(sglang_python("0.5.9"), tmp_path, TINY_TARGET, TINY_DRAFT,
                      draft_folder=bin_draft(tmp_path, "", bin_file))
    assert list(found) == ["draft-weights-unchecked"] and found["draft-weights-unchecked"].severity == "warning"
    assert words in found["draft-weights-unchecked"].what
    assert not list(tmp_path.rglob("orch-fixture-was-executed"))  # the pickle's command never ran


# -- the run's gate -------------------------------------------------------------------------------


@pytest.mark.parametrize("allow", [(), ("algorithm-not-eagle3",)])
def test_the_gate_stores_every_finding_and_stops_only_on_errors_not_allowed(sglang_python, tmp_path, allow):
    python = sglang_python("0.5.9")
    target, draft = checkpoint(tmp_path / "target", LLAMA_TARGET), checkpoint(tmp_path / "draft", LLAMA_DRAFT, tensors())
    context = {"params": {"model_path": str(target), "draft_model_path": str(draft), "speculative_algorithm": "EAGLE"},
               "env": LONG_CONTEXT}
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    run = Run(uid="r1", experiment="e", variant="story", host="gpu")
    store.add(run)
    plan = type("Plan", (), {"variant": "story", "patches": (), "allow": allow})()
    reporter = Recorder()

    async def gate():
        session = await HostSession.open(host_for(python, tmp_path))
        try:
            script = (f"exec python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE "
                      f"--speculative-draft-model-path {draft}\n")  # what the gate reads, not the params
            await run_preflight.gate(Attempt(type("Spec", (), {"preflight": True})(), plan, engines.get("sglang"),
                                             session, store, run, reporter, context, launch.of(context, script),
                                             "story@gpu", {}))
        finally:
            await session.conn.close()

    if allow:
        asyncio.run(gate())
    else:
        with pytest.raises(PreflightError, match="algorithm-not-eagle3|only for EAGLE3"):
            asyncio.run(gate())
    [row] = store.children(run, FindingRow)
    assert (row.code, row.severity, row.allowed) == ("algorithm-not-eagle3", "error", bool(allow))
    assert reporter.texts[0].startswith("preflight ERROR (allowed)" if allow else "preflight ERROR:")
