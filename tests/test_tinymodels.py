"""The tiny real models orch makes for the real engine (orchestrator/tinymodels, run under the real
vLLM venv's python): the cache key is deterministic, and each fault copy has exactly its one fault.
No server here: the real-engine tests serve them. The models are made once per machine (minutes, into
the cache `make real-models` fills) and reused by content."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import realvllm
from conftest import ROOT
from orchestrator.engines import safetensors
from orchestrator.engines.eagle3 import d2t_form

# a first build inside the fixture takes minutes (`make real-models` makes it before the tests)
pytestmark = [pytest.mark.realvllm, pytest.mark.timeout(1800)]

MODELS = realvllm.CACHE / "models"  # the Makefile's real-models target writes here too
H, VOCAB, DRAFT_VOCAB = 256, 512, 256


def _run(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(realvllm.python()), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def made() -> dict[str, Path]:
    done = _run("-m", "orchestrator.tinymodels", "--out", str(MODELS))
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: Path(path) for name, path in json.loads(done.stdout).items()}


def tensors(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor; bf16 ones (numpy has no bf16) as their raw 16-bit words, in their shape."""
    path = folder / "model.safetensors"
    header = safetensors.read_header_file(path)
    data = path.read_bytes()
    found = {}
    for name, info in header.tensors.items():
        if info.dtype == "BF16":
            raw = data[header.data_start + info.begin:header.data_start + info.end]
            found[name] = np.frombuffer(raw, dtype=np.uint16).reshape(info.shape)
        else:
            found[name] = safetensors.read_tensor_file(path, name, header)
    return found


def config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_the_key_is_the_source_and_settings_and_names_the_folder(made):
    code = ("from orchestrator.tinymodels import cache, settings; s = settings.Settings(); "
            "print(cache.key(s), cache.key(settings.Settings(seed=1)))")
    first, second = _run("-c", code, timeout=120).stdout.split(), _run("-c", code, timeout=120).stdout.split()
    assert first == second and first[0] != first[1] and len(first[0]) == 64
    assert made["root"].name == first[0] and made["root"].parent == MODELS.resolve()


def test_a_complete_folder_is_reused_and_printed_the_same(made):
    started = time.monotonic()
    again = _run("-m", "orchestrator.tinymodels", "--out", str(MODELS), timeout=300)
    assert again.returncode == 0 and {k: Path(v) for k, v in json.loads(again.stdout).items()} == made
    assert time.monotonic() - started < 120  # an import of torch, not a training
    key = made["root"].name
    assert not [p for p in MODELS.iterdir() if p.name.startswith(f".{key[:16]}-making-")]  # none left beside it


def test_the_fitting_draft_is_in_the_layout_the_engine_loads(made):
    draft, body = tensors(made["draft"]), config(made["draft"])
    assert body["architectures"] == ["LlamaForCausalLMEagle3"] and body["draft_vocab_size"] == DRAFT_VOCAB
    assert body["num_hidden_layers"] == 1 and body["vocab_size"] == VOCAB
    assert all(k.startswith("midlayer.") for k in draft if "." in k and k.split(".")[0] not in {"fc", "norm", "lm_head"})
    assert not any("embed_tokens" in k for k in draft)  # the engine shares the target's
    assert draft["midlayer.self_attn.q_proj.weight"].shape == (H, 2 * H)
    assert draft["fc.weight"].shape == (H, 3 * H) and draft["lm_head.weight"].shape == (DRAFT_VOCAB, H)
    assert draft["d2t"].dtype == np.int64 and draft["t2d"].dtype == np.bool_ and draft["t2d"].sum() == DRAFT_VOCAB
    assert d2t_form(draft["d2t"], VOCAB, draft["t2d"]) == "offsets"
    target = config(made["target"])
    assert (target["num_hidden_layers"], target["hidden_size"], target["num_attention_heads"]) == (8, H, 4)
    assert (made["target"] / "tokenizer.json").is_file()
    build = json.loads(made["build"].read_text())
    assert build["target_follows_rule"] > 0.98 and build["draft_offline_accept_length"] >= 3.0


def test_each_fault_copy_differs_from_the_fitting_one_by_its_fault_only(made):
    faults = json.loads(made["faults"].read_text())
    assert set(faults) == {"draft-absolute-d2t", "draft-layers0", "draft-fc-mismatch", "target-2layer"}
    fitting = tensors(made["draft"])

    absolute = tensors(made["draft-absolute-d2t"])
    assert d2t_form(absolute["d2t"], VOCAB, absolute["t2d"]) == "absolute"
    assert (np.arange(DRAFT_VOCAB) + absolute["d2t"]).max() >= VOCAB  # read as offsets: past the vocabulary
    assert all(np.array_equal(absolute[k], v) for k, v in fitting.items() if k != "d2t")

    layers0 = tensors(made["draft-layers0"])
    assert {k.replace("layers.0.", "midlayer.", 1) for k in layers0} == set(fitting)
    assert not any(k.startswith("midlayer.") for k in layers0)

    narrow = tensors(made["draft-fc-mismatch"])
    assert narrow["fc.weight"].shape == (H, 2 * H) and config(made["draft-fc-mismatch"]) == config(made["draft"])
    assert all(np.array_equal(narrow[k], v) for k, v in fitting.items() if k != "fc.weight")

    short, full = tensors(made["target-2layer"]), tensors(made["target"])
    assert config(made["target-2layer"])["num_hidden_layers"] == 2
    assert set(short) == {k for k in full if not k.startswith("model.layers.") or int(k.split(".")[2]) < 2}
    assert all(np.array_equal(short[k], full[k]) for k in short)
    for name, fault in faults.items():
        assert fault["fault"] and set(fault["serve"]) == {"model", "draft"}
        assert all((made["root"] / part).is_dir() for part in fault["serve"].values()), name


def test_prompts_are_the_language_s(made):
    lines = [json.loads(line)["prompt"] for line in made["prompts"].read_text().splitlines()]
    assert len(lines) == 64 and all(p.split()[0][0] == "r" and 3 <= len(p.split()) <= 8 for p in lines)
