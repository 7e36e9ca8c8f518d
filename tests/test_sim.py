"""The rehearsal SGLang server (orchestrator/rehearsal/trees/sglang), run as real processes from an assembled tree.

Each release's tree is assembled into a temporary folder (the base plus that release's overlay, as
orch installs it on a host), next to one set of checkpoints made by `make_checkpoints.py`, and
`python -m sglang.launch_server` runs with that folder first on PYTHONPATH.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from orchestrator.rehearsal import sglang as rehearsal_sim

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang"
DEMO = ROOT / "experiments" / "eagle_debug.yaml"
SPEC_ARGS = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
PROMPTS = ["the quick brown fox", "lorem ipsum dolor sit amet", "one two three four", "a b c d e f g"]
DEBUG = re.compile(r"^\[EAGLE3-DEBUG\] hidden_states shape=(.*) fc_in=(\d+)$", re.M)
ONE_LAYER, THREE_LAYERS = "torch.Size([1, 64])", "torch.Size([1, 192])"  # hidden size 64
NO_METHOD = "'KimiVLForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'"
CRASH = {  # the start-up error each release raises for a target class without the method
    "0.4.10": f"AttributeError: {NO_METHOD}",
    "0.5.9": f"AttributeError: {NO_METHOD}",
    "0.5.23": "ValueError: Model KimiVLForConditionalGeneration does not implement set_eagle3_layers_to_capture, "
              "which EAGLE3 aux hidden-state capture requires.",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("checkpoints") / "checkpoints"
    subprocess.run([sys.executable, str(ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang" / "make_checkpoints.py"), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory, checkpoints):
    """tree(release, patches=()) -> a folder holding that release's `sglang/` (the demo experiment's
    patches applied by orch's patcher) and the shared checkpoints."""
    made: dict[tuple, Path] = {}

    def get(release: str = rehearsal_sim.DEFAULT_RELEASE, patches: tuple[str, ...] = ()) -> Path:
        key = (release, tuple(patches))
        if key not in made:
            root = tmp_path_factory.mktemp(f"sim-{release}")
            rehearsal_sim.assemble(release, root)
            (root / "checkpoints").symlink_to(checkpoints)
            apply_demo_patches(root, patches)
            made[key] = root
        return made[key]

    return get


def apply_demo_patches(root: Path, names) -> None:
    from orchestrator.core import patching, spec

    demo = spec.load(DEMO)
    for name in names:
        patch = demo.patches[name]
        package, rel = patch.file.split(":", 1)
        assert package == "sglang"
        target = root / "sglang" / rel
        target.write_text(patching.apply(patch, target.read_text(), str(target)))


class Sim:
    """One server process; always stopped by the fixture that made it."""

    def __init__(self, root: Path, log: Path):
        self.root, self.log_path, self.proc, self.port = root, log, None, None

    def start(self, *args: str, env: dict | None = None, port: int | None = None) -> Sim:
        self.port = port or free_port()
        full_env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(self.root),
            "ORCH_REHEARSAL_LOAD_SECONDS": "0",
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
            **(env or {}),
        }
        full_env = {k: v for k, v in full_env.items() if v is not None}
        cmd = [sys.executable, "-m", "sglang.launch_server", *args, "--port", str(self.port)]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def spec(self, target: str, algorithm: str, draft: str = "eagle3-draft", *extra: str, env: dict | None = None) -> Sim:
        return self.start("--model-path", self.path(target), "--speculative-algorithm", algorithm,
                          "--speculative-draft-model-path", self.path(draft), *SPEC_ARGS, *extra, env=env)

    def path(self, name: str) -> str:
        return str(self.root / "checkpoints" / name)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, timeout: float = 20) -> Sim:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log}")
            try:
                with urllib.request.urlopen(self.url("/health_generate"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except (TimeoutError, urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.05)
        pytest.fail(f"server not ready after {timeout} s:\n{self.log}")

    def wait_exit(self, timeout: float = 20) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"server still running after {timeout} s:\n{self.log}")

    def get(self, path: str):
        with urllib.request.urlopen(self.url(path), timeout=30) as r:
            body = r.read()
            return json.loads(body) if r.headers.get("content-type", "").startswith("application/json") else body.decode()

    def post(self, path: str, obj: dict):
        req = urllib.request.Request(self.url(path), json.dumps(obj).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def sims(tree, tmp_path: Path):
    """sims(release="0.5.9", patches=()) -> a Sim on that release's tree."""
    made: list[Sim] = []

    def make(release: str = rehearsal_sim.DEFAULT_RELEASE, patches: tuple[str, ...] = ()) -> Sim:
        sim = Sim(tree(release, patches), tmp_path / f"server-{len(made)}.log")
        made.append(sim)
        return sim

    try:
        yield make
    finally:
        for sim in made:
            sim.stop()


def generate(sim: Sim, max_new_tokens: int = 96) -> list[dict]:
    return sim.post("/generate", {"text": PROMPTS, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})


def accept_lengths(sim: Sim, max_new_tokens: int = 96) -> list[float]:
    return [o["meta_info"]["completion_tokens"] / o["meta_info"]["spec_verify_ct"] for o in generate(sim, max_new_tokens)]


def failed_at_start(sim: Sim) -> str:
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log
    assert "Scheduler hit an exception: Traceback" in log and "fired up" not in log
    return log


# --- the installed files --------------------------------------------------------------------


def read_safetensors(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    dtypes = {"F16": np.float16, "F32": np.float32, "I64": np.int64, "BOOL": np.bool_}
    out = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + start : 8 + n + end], dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
    return out


def test_checkpoints_layout_and_idempotence(checkpoints: Path):
    ck = checkpoints
    total = sum(p.stat().st_size for p in ck.rglob("*") if p.is_file())
    assert total < 4 * 1024 * 1024
    kimi = json.loads((ck / "kimi-k25-target" / "config.json").read_text())
    assert kimi["architectures"] == ["KimiK25ForConditionalGeneration"] and kimi["model_type"] == "kimi_k25"
    text = kimi["text_config"]  # the text model's settings, as Kimi publishes them
    assert text["model_type"] == "deepseek_v3" and text["max_position_embeddings"] == 131072 and "seed" in text
    assert "hidden_size" not in kimi and "vision_config" in kimi
    assert json.loads((ck / "kimi-vl-target" / "config.json").read_text())["architectures"] == ["KimiVLForConditionalGeneration"]
    assert json.loads((ck / "llama-target" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    config = json.loads((ck / "eagle3-draft" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["max_position_embeddings"] == 2048
    assert config["draft_vocab_size"] < config["vocab_size"] and config["num_hidden_layers"] == 1
    hidden = config["hidden_size"]
    healthy = read_safetensors(ck / "eagle3-draft" / "model.safetensors")
    assert healthy["fc.weight"].shape == (hidden, 3 * hidden) and healthy["fc.weight"].dtype == np.float16
    assert healthy["d2t"].dtype == np.int64 and healthy["t2d"].dtype == np.bool_
    hot = healthy["d2t"] + np.arange(len(healthy["d2t"]))
    assert (np.flatnonzero(healthy["t2d"]) == hot).all()
    assert {f"midlayer.self_attn.{p}_proj.weight" for p in "qkvo"} <= set(healthy)
    layers0 = read_safetensors(ck / "eagle3-draft-layers0" / "model.safetensors")
    assert not any(k.startswith("midlayer.") for k in layers0) and "layers.0.mlp.down_proj.weight" in layers0
    absolute = read_safetensors(ck / "eagle3-draft-absolute-d2t" / "model.safetensors")
    assert (absolute["d2t"] == hot).all()
    again = subprocess.run([sys.executable, str(ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang" / "make_checkpoints.py"), str(ck)], capture_output=True, text=True, check=True)
    assert "already complete" in again.stdout


def test_each_release_installs_its_own_code_shapes(tree):
    def text(release: str, rel: str) -> str | None:
        path = tree(release) / "sglang" / rel
        return path.read_text() if path.exists() else None

    assert rehearsal_sim.releases() == ("0.4.10", "0.5.9", "0.5.23") and rehearsal_sim.DEFAULT_RELEASE == "0.5.9"
    gate, flag_on = "if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:", "self.eagle_use_aux_hidden_state = True"
    call = "self.model.set_eagle3_layers_to_capture("
    # 0.4.10: the version in version.py; gate and call in model_runner.py; no Kimi-K2.5, no `sglang serve`
    assert text("0.4.10", "version.py").strip() == '__version__ = "0.4.10.post2"' and text("0.4.10", "_version.py") is None
    runner = text("0.4.10", "srt/model_executor/model_runner.py")
    assert gate in runner and call in runner and 'get("use_aux_hidden_state"' not in runner and "hasattr(" not in runner
    assert text("0.4.10", "srt/models/kimi_k25.py") is None and text("0.4.10", "cli/main.py") is None
    # 0.5.9: _version.py; gate, flag and unconditional call in model_runner.py; Kimi-K2.5 without the hooks
    assert "__version__ = version = '0.5.9'" in text("0.5.9", "_version.py") and "0.0.0.dev0" in text("0.5.9", "version.py")
    runner = text("0.5.9", "srt/model_executor/model_runner.py")
    assert gate in runner and flag_on in runner and call in runner and "hasattr(" not in runner
    kimi = text("0.5.9", "srt/models/kimi_k25.py")
    assert "class KimiK25ForConditionalGeneration(nn.Module):" in kimi
    assert "self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)" in kimi
    assert "def set_eagle3_layers_to_capture" not in kimi and "def get_embed_and_head" not in kimi
    assert "EntryClass = [KimiK25ForConditionalGeneration]" in kimi
    assert "def set_eagle3_layers_to_capture" in text("0.5.9", "srt/models/deepseek_v2.py")
    # 0.5.23: the gate and the hasattr check in model_runner_components; Kimi-K2.5 delegates
    assert "__version__ = version = '0.5.23'" in text("0.5.23", "_version.py")
    assert "is_eagle3" not in text("0.5.23", "srt/model_executor/model_runner.py")
    aux = text("0.5.23", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py")
    assert "if spec_algorithm.is_eagle3():" in aux and "config.eagle_use_aux_hidden_state = True" in aux
    setup = text("0.5.23", "srt/model_executor/model_runner_components/attention_backend_setup.py")
    assert 'if not hasattr(model, "set_eagle3_layers_to_capture"):' in setup and "raise ValueError(" in setup
    assert "self.language_model.set_eagle3_layers_to_capture(layer_ids)" in text("0.5.23", "srt/models/kimi_k25.py")
    assert "def set_eagle3_layers_to_capture" not in text("0.4.10", "srt/models/deepseek_v2.py")
    # draft loader: `midlayer` only up to 0.5.9, `layers` + the legacy remap in 0.5.23
    for release in ("0.4.10", "0.5.9"):
        assert "self.midlayer = " in text(release, "srt/models/llama_eagle3.py")
    eagle3 = text("0.5.23", "srt/models/llama_eagle3.py")
    assert "self.layers = nn.ModuleList(" in eagle3 and '"midlayer": "layers.0"' in eagle3
    # nothing in the base tree gates capture: each release's own files decide
    base = [p.read_text() for p in (SIM / "sglang").rglob("*.py")]
    assert not any("is_eagle3()" in t and "eagle_use_aux_hidden_state" in t for t in base)


@pytest.mark.parametrize(("release", "wheel"), [("0.4.10", "0.4.10.post2"), ("0.5.9", "0.5.9"), ("0.5.23", "0.5.23")])
def test_each_release_s_flags_are_that_release_s(tree, sglang_python, release, wheel):
    """Read by orch's own static scan: every flag the rehearsal declares, the real release declares too."""
    from orchestrator.engines.sglang import flags
    from wheels import package_dir

    def options(package: Path):
        sources = {str(p.relative_to(package)): p.read_text() for pattern in flags.SOURCE_FILES for p in package.glob(pattern)}
        return flags.scan(sources, release)

    ours, real = options(tree(release) / "sglang"), options(package_dir(sglang_python(wheel)))
    assert ours.options <= real.options, sorted(ours.options - real.options)
    assert set(ours.deprecated) == set(real.deprecated) & ours.options
    assert ("--cuda-graph-max-bs" in ours.options) == (release != "0.5.23")


# --- what a release prints and serves ---------------------------------------------------------


def test_healthy_server_on_0_5_23(sims):
    sim = sims("0.5.23")
    sim.spec("llama-target", "EAGLE3", "eagle3-draft", "--decode-log-interval", "10").wait_ready()
    port = sim.port
    state = sim.get("/server_info")
    assert "avg_spec_accept_length" not in state["internal_states"][0]  # only set at decode-log time
    assert state["version"] == "0.5.23" and state["speculative_num_draft_tokens"] == 4

    out = generate(sim, 128)
    for o in out:
        meta = o["meta_info"]
        assert list(meta) == [
            "id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
            "completion_tokens", "cached_tokens", "e2e_latency", "spec_accept_rate", "spec_accept_length",
            "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct", "spec_correct_drafts_histogram",
        ]  # fmt: skip
        assert meta["completion_tokens"] == 128 and len(o["output_ids"]) == 128 and o["text"].startswith(" ")
        assert meta["finish_reason"] == {"type": "length", "length": 128}
        assert meta["spec_accept_length"] == pytest.approx(128 / meta["spec_verify_ct"])
        assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
        histogram = meta["spec_correct_drafts_histogram"]  # verify steps by drafts accepted (bonus excluded)
        assert sum(histogram) == meta["spec_verify_ct"] and len(histogram) <= 4
        assert sum(n * count for n, count in enumerate(histogram)) == meta["spec_num_correct_drafts"]
        assert 2.3 < meta["spec_accept_length"] < 3.6, meta
    single = sim.post("/generate", {"input_ids": [1, 5, 6, 7], "sampling_params": {"max_new_tokens": 16}})
    assert single["meta_info"]["prompt_tokens"] == 4 and single["meta_info"]["completion_tokens"] == 16

    state = sim.get("/get_server_info")
    assert state["internal_states"][0]["avg_spec_accept_length"] > 2.3
    assert sim.get("/model_info")["architectures"] == ["LlamaForCausalLM"]
    assert sim.get("/v1/models")["data"][0]["max_model_len"] == 131072
    assert sim.get("/flush_cache").startswith("Cache flushed.\nPlease check backend logs")
    assert "avg_spec_accept_length" not in sim.get("/server_info")["internal_states"][0]
    with pytest.raises(urllib.error.HTTPError) as missing:
        sim.get("/no_such_endpoint")
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as no_metrics:
        sim.get("/metrics")  # only with --enable-metrics
    assert no_metrics.value.code == 404

    req = urllib.request.Request(sim.url("/generate"), json.dumps({"text": "x y", "stream": True, "sampling_params": {"max_new_tokens": 12}}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["meta_info"]["completion_tokens"] == 12
    assert json.loads(events[0])["meta_info"]["finish_reason"] is None

    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    log = sim.log
    ts = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
    assert re.search(ts + r"server_args=\{'model_path': '", log)  # 0.5.23 logs a dict
    assert "ServerArgs(" not in log
    assert len(re.findall(ts + r"Load weight begin\. avail mem=\d+\.\d\d GB", log)) == 2
    assert re.search(ts + r"Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLM, avail mem=", log)
    assert re.search(ts + r"Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLMEagle3, avail mem=", log)
    assert re.search(ts + r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: ", log)
    assert re.search(ts + r"max_total_num_tokens=\d+, chunked_prefill_size=8192, .*context_len=131072", log)
    assert f"] INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)" in log
    assert re.search(ts + r'INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK', log)
    assert re.search(ts + r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK', log)
    assert re.search(ts + r"The server is fired up and ready to roll!", log)
    assert re.search(ts + r"Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: \d+, token usage: \d\.\d\d, "
                     r".*#pending-token: 0, cuda graph: False, input throughput \(token/s\): \d+\.\d\d$", log, re.M)
    decode = re.findall(
        ts + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d\.\d\d, accept len: (\d\.\d\d), "
        r"accept rate: (\d\.\d\d), cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+$",
        log,
        re.M,
    )
    assert decode and all(float(length) > 1.8 for length, _ in decode)
    assert "Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead." in log
    assert "Cache flushed successfully!" in log and "TP0" not in log
    assert "INFO:     Shutting down" in log


def test_0_5_9_formats(sims):
    sim = sims("0.5.9")
    sim.spec("llama-target", "EAGLE3", "eagle3-draft", "--decode-log-interval", "10", "--enable-metrics").wait_ready()
    assert sim.get("/server_info")["version"] == "0.5.9"
    for o in generate(sim, 64):
        meta = o["meta_info"]
        assert list(meta) == [
            "id", "finish_reason", "prompt_tokens", "weight_version", "total_retractions", "completion_tokens",
            "cached_tokens", "e2e_latency", "spec_accept_rate", "spec_accept_length", "spec_accept_token_num",
            "spec_draft_token_num", "spec_verify_ct", "spec_accept_histogram",
        ]  # fmt: skip
        assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"] and len(o["output_ids"]) == 64
    with pytest.raises(urllib.error.HTTPError) as missing:
        sim.get("/ready")  # a later endpoint
    assert missing.value.code == 404
    sim.get("/get_model_info")
    metrics = sim.get("/metrics")
    assert re.search(r'^sglang:spec_accept_length\{.*tp_rank="0"\} \d\.\d+$', metrics, re.M)
    log = sim.log
    assert re.search(r"\] server_args=ServerArgs\(model_path='[^']+', tokenizer_path=", log)
    assert re.search(r"\] Decode batch, #running-req: \d+, #token: \d+, token usage: \d\.\d\d, accept len: \d\.\d\d, "
                     r"accept rate: \d\.\d\d, cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+$", log, re.M)
    assert re.search(r"\] Prefill batch, #new-seq: \d+, .*#queue-req: \d+, input throughput \(token/s\): \d+\.\d\d, "
                     r"cuda graph: False$", log, re.M)
    assert "Endpoint '/get_model_info' is deprecated" in log
    assert "'python -m sglang.launch_server' is still supported" not in log  # 0.5.14+


def test_0_4_10_formats(sims, tree):
    sim = sims("0.4.10")
    sim.spec("llama-target", "EAGLE3", "eagle3-draft", "--decode-log-interval", "10", "--disable-cuda-graph").wait_ready()
    for o in generate(sim, 64):
        assert list(o) == ["text", "meta_info"]  # no output_ids in text mode
        assert list(o["meta_info"]) == ["id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
                                        "spec_verify_ct", "e2e_latency"]
    assert sim.get("/get_server_info")["version"] == "0.4.10.post2"
    with pytest.raises(urllib.error.HTTPError):
        sim.get("/server_info")
    log = sim.log
    assert re.search(r"\] server_args=ServerArgs\(model_path='", log)
    assert re.search(r"\] Decode batch\. #running-req: \d+, #token: \d+, token usage: \d\.\d\d, accept len: \d\.\d\d, "
                     r"cuda graph: False, gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+, $", log, re.M)
    assert re.search(r"\] Prefill batch\. #new-seq: \d+, .*#running-req: \d+, #queue-req: \d+, $", log, re.M)
    assert "is deprecated" not in log
    serve = subprocess.run([sys.executable, "-m", "sglang.cli.main", "serve", "--model-path", "x"], cwd=tree("0.4.10"),
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree("0.4.10"))}, capture_output=True, text=True)
    assert serve.returncode == 1 and "No module named 'sglang.cli'" in serve.stderr  # `sglang serve` came later


# --- EAGLE-3 aux capture, release by release ---------------------------------------------------


@pytest.mark.parametrize("release", rehearsal_sim.releases())
def test_eagle_hands_an_eagle3_draft_one_layer(sims, release):
    """`--speculative-algorithm EAGLE` with an EAGLE-3 draft: no capture (gated on EAGLE3), fc skipped,
    accept length ~1.0, and no error anywhere."""
    sim = sims(release, ("debug-hidden-states",))
    sim.spec("llama-target", "EAGLE").wait_ready()
    assert all(1.0 <= length < 1.2 for length in accept_lengths(sim))
    assert DEBUG.findall(sim.log) == [(ONE_LAYER, "192")]
    assert "Error" not in sim.log and "Traceback" not in sim.log


@pytest.mark.parametrize("release", rehearsal_sim.releases())
def test_eagle3_without_the_method_fails_at_start_up(sims, release):
    sim = sims(release)
    sim.spec("kimi-vl-target", "EAGLE3")
    log = failed_at_start(sim)
    assert CRASH[release] in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    # 0.5.23 checks before capturing the CUDA graphs; older releases call the method after them
    assert ("Capture target verify CUDA graph end" in log) == (release != "0.5.23")


@pytest.mark.parametrize(("release", "target", "patches"), [
    ("0.4.10", "llama-target", ()),
    ("0.5.9", "kimi-k25-target", ("kimi-embed-and-head", "kimi-aux-capture")),  # the demo's fix
    ("0.5.23", "kimi-k25-target", ()),  # ships the delegation
])  # fmt: skip
def test_eagle3_with_the_method_hands_three_layers(sims, release, target, patches):
    sim = sims(release, ("debug-hidden-states", *patches))
    sim.spec(target, "EAGLE3").wait_ready()
    assert all(length > 2.3 for length in accept_lengths(sim))
    # the first draft forward (a first draft step) reads the target's three layers
    assert DEBUG.findall(sim.log) == [(THREE_LAYERS, "192")]


def test_kimi_k25_on_0_5_9_lacks_both_hooks(sims):
    story = sims("0.5.9")
    story.spec("kimi-k25-target", "EAGLE")  # the EAGLE worker asks the target for its embedding and head
    log = failed_at_start(story)
    assert "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'get_embed_and_head'" in log
    assert "type=LlamaForCausalLMEagle3" in log  # after the draft loaded
    unfixed = sims("0.5.9", ("kimi-embed-and-head",))
    unfixed.spec("kimi-k25-target", "EAGLE3")
    log = failed_at_start(unfixed)
    assert "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'" in log
    assert "type=LlamaForCausalLMEagle3" not in log  # the target's runner fails first


@pytest.mark.parametrize("release", rehearsal_sim.releases())
def test_draft_saved_with_layers0_keys(sims, release):
    """`layers.0.*` keys: dropped silently by the `midlayer` loader, remapped and loaded by 0.5.23."""
    sim = sims(release)
    sim.spec("llama-target", "EAGLE3", "eagle3-draft-layers0").wait_ready()
    lengths = accept_lengths(sim)
    if release == "0.5.23":
        assert all(length > 2.3 for length in lengths), lengths
    else:
        assert all(1.0 <= length < 1.2 for length in lengths), lengths


def test_draft_with_absolute_d2t_accepts_about_one(sims):
    sim = sims()
    sim.spec("llama-target", "EAGLE3", "eagle3-draft-absolute-d2t").wait_ready()
    assert all(1.0 <= length < 1.2 for length in accept_lengths(sim))


@pytest.mark.parametrize(("release", "captured"), [("0.4.10", True), ("0.5.9", False), ("0.5.23", False)])
def test_use_aux_hidden_state_false_in_the_draft_config(sims, checkpoints, tmp_path, release, captured):
    """0.5.9+ read `eagle_config.use_aux_hidden_state` and capture nothing; 0.4.10 does not read it."""
    draft = tmp_path / "no-aux-draft"
    shutil.copytree(checkpoints / "eagle3-draft", draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"]["use_aux_hidden_state"] = False
    (draft / "config.json").write_text(json.dumps(config))
    sim = sims(release, ("debug-hidden-states",))
    sim.spec("llama-target", "EAGLE3", str(draft)).wait_ready()
    assert DEBUG.findall(sim.log) == [(THREE_LAYERS if captured else ONE_LAYER, "192")]
    lengths = accept_lengths(sim)
    assert all(length > 2.3 for length in lengths) if captured else all(length < 1.2 for length in lengths)


# --- patches, flags and failures -----------------------------------------------------------------


def test_demo_patches_apply_to_the_real_0_5_9_kimi_file(sglang_python, tmp_path):
    from wheels import package_dir

    real = package_dir(sglang_python("0.5.9"))
    copy = tmp_path / "real"
    (copy / "sglang" / "srt" / "models").mkdir(parents=True)
    shutil.copy(real / "srt" / "models" / "kimi_k25.py", copy / "sglang" / "srt" / "models" / "kimi_k25.py")
    apply_demo_patches(copy, ("kimi-embed-and-head", "kimi-aux-capture"))
    source = (copy / "sglang" / "srt" / "models" / "kimi_k25.py").read_text()
    compile(source, "kimi_k25.py", "exec")
    inside = source[source.index("class KimiK25ForConditionalGeneration"):]
    assert "    def set_eagle3_layers_to_capture(\n" in inside and "    def get_embed_and_head(self)" in inside
    assert "self.language_model.set_eagle3_layers_to_capture(layer_ids)" in inside


def test_a_model_file_that_does_not_import_is_a_warning_then_an_unknown_architecture(checkpoints, tmp_path):
    broken = tmp_path / "broken"
    rehearsal_sim.assemble("0.5.9", broken)
    (broken / "checkpoints").symlink_to(checkpoints)
    kimi = broken / "sglang" / "srt" / "models" / "kimi_k25.py"
    kimi.write_text(kimi.read_text().replace("    def pad_input_ids(", "  def pad_input_ids(", 1))
    sim = Sim(broken, broken / "server.log")
    try:
        sim.spec("kimi-k25-target", "EAGLE")
        log = failed_at_start(sim)
    finally:
        sim.stop()
    assert re.search(r"\] Ignore import error when loading sglang\.srt\.models\.kimi_k25: unindent does not match", log)
    assert "ValueError: Model architectures ['KimiK25ForConditionalGeneration'] are not supported for now." in log


def test_unknown_and_ambiguous_flags_are_usage_errors(tree):
    def launch(release, *args):
        root = tree(release)
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(root / "checkpoints" / "llama-target"), *args]
        return subprocess.run(cmd, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=30)

    unknown = launch("0.5.23", "--no-such-flag")
    assert unknown.returncode == 2 and "error: unrecognized arguments: --no-such-flag" in unknown.stderr
    ambiguous = launch("0.5.23", "--cuda-graph-max-bs", "8")
    assert ambiguous.returncode == 2 and "ambiguous option: --cuda-graph-max-bs could match" in ambiguous.stderr
    newer = launch("0.5.9", "--cuda-graph-max-bs-decode", "8")
    assert newer.returncode == 2 and "unrecognized arguments: --cuda-graph-max-bs-decode" in newer.stderr
    choice = launch("0.5.9", "--speculative-algorithm", "DFLASH")
    assert choice.returncode == 2 and "argument --speculative-algorithm: invalid choice: 'DFLASH'" in choice.stderr


def test_tp2_prefix_no_cuda_graph_and_draft_token_adjustment(sims):
    sim = sims("0.5.23")
    sim.start(
        "--model-path", sim.path("llama-target"), "--tp-size", "2", "--disable-cuda-graph",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", sim.path("eagle3-draft"),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8",
        "--decode-log-interval", "5",
    ).wait_ready()  # fmt: skip
    accept_lengths(sim, 32)
    log = sim.log
    assert "'--disable-cuda-graph' is deprecated and will be removed in a future release. Use '--cuda-graph-backend-{decode,prefill}=disabled' instead." in log
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1" in log
    assert "'speculative_num_draft_tokens': 4," in log
    assert re.search(r"\d\d\] Decode batch, ", log) is None  # scheduler lines carry TP0
    assert re.search(r" TP0\] Decode batch, #running-req: \d+, .*cuda graph: False, gen throughput", log)
    assert re.search(r" TP0\] Load weight end\.", log)
    assert re.search(r"\d\d\] server_args=\{", log)  # the main process has no rank prefix


CRASH_TAIL = "Received sigquit from a child process. It usually means the child failed."


@pytest.mark.parametrize(
    ("extra", "env", "expected"),
    [
        (["--tp-size", "16"], {"ORCH_REHEARSAL_GPUS": "8"}, [" TP8] Scheduler hit an exception: Traceback", "torch.AcceleratorError: CUDA error: invalid device ordinal"]),
        ([], {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": None}, [
            "] Scheduler hit an exception: Traceback (most recent call last):",
            "ValueError: Warning: Target model's context_length (131072) is greater than the derived context_length (2048). "
            "This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from "
            "max_position_embeddings in the model's config. To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        ]),
        ([], {"ORCH_REHEARSAL_FAIL": "oom"}, ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capacity of"]),
        ([], {"ORCH_REHEARSAL_FAIL": "not-enough-memory"}, ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.85"]),
        ([], {"ORCH_REHEARSAL_FAIL": "nccl"}, ["torch.distributed.DistBackendError: NCCL error in: "]),
    ],
    ids=["tp-above-gpus", "draft-context-length", "oom", "not-enough-memory", "nccl"],
)
def test_startup_failures(sims, extra, env, expected):
    sim = sims()
    sim.spec("llama-target", "EAGLE3", "eagle3-draft", *extra, env=env)
    log = failed_at_start(sim)
    for text in expected:
        assert text in log
    assert CRASH_TAIL in log


def test_scheduler_died_during_init(sims):
    sim = sims()
    sim.start("--model-path", sim.path("llama-target"), env={"ORCH_REHEARSAL_FAIL": "scheduler-died"})
    assert sim.wait_exit() == 1
    assert "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL)" in sim.log
    assert "RuntimeError: Initialization failed. Please see the error messages above." in sim.log


def test_scheduler_exception_while_serving(sims):
    sim = sims()
    sim.spec("llama-target", "EAGLE3", env={"ORCH_REHEARSAL_FAIL": "scheduler-exception"}).wait_ready()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        sim.post("/generate", {"text": "boom", "sampling_params": {"max_new_tokens": 32}})
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log
    assert "Scheduler hit an exception: Traceback" in log and "CUDA error: an illegal memory access was encountered" in log
    assert re.search(r"SIGQUIT received\. signum=3, frame=<frame at .*>\. It usually means one child failed\.", log)


def test_port_in_use(sims):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sim = sims()
        sim.start("--model-path", sim.path("llama-target"), port=port)
        assert sim.wait_exit() == 3
    assert (
        f"] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use"
        in sim.log
    )
