"""The rehearsal SGLang server (orchestrator/sim), run as real processes from a copied tree.

Each test copies `orchestrator/sim/sglang` and `make_checkpoints.py` into a temporary folder
(as orch does on a host), makes the checkpoints there and launches
`python -m sglang.launch_server` with that folder first on PYTHONPATH.
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

SIM = Path(__file__).resolve().parent.parent / "orchestrator" / "sim"
SPEC_ARGS = [
    "--speculative-algorithm", "EAGLE3",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip
PROMPTS = ["the quick brown fox", "lorem ipsum dolor sit amet", "one two three four", "a b c d e f g"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_tree(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SIM / "sglang", dest / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SIM / "make_checkpoints.py", dest / "make_checkpoints.py")
    return dest


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Path:
    root = copy_tree(tmp_path_factory.mktemp("rehearsal"))
    subprocess.run([sys.executable, str(root / "make_checkpoints.py"), str(root / "checkpoints")], check=True, capture_output=True)
    return root


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
            except (urllib.error.URLError, ConnectionError, socket.timeout):
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
def sims(rehearsal: Path, tmp_path: Path):
    made: list[Sim] = []

    def make(root: Path | None = None) -> Sim:
        sim = Sim(root or rehearsal, tmp_path / f"server-{len(made)}.log")
        made.append(sim)
        return sim

    try:
        yield make
    finally:
        for sim in made:
            sim.stop()


def accept_lengths(sim: Sim, max_new_tokens: int = 96) -> list[float]:
    out = sim.post("/generate", {"text": PROMPTS, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
    return [o["meta_info"]["spec_accept_length"] for o in out]


# --- checkpoints -----------------------------------------------------------------------------


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


def test_checkpoints_layout_and_idempotence(rehearsal: Path):
    ck = rehearsal / "checkpoints"
    total = sum(p.stat().st_size for p in ck.rglob("*") if p.is_file())
    assert total < 4 * 1024 * 1024
    target = json.loads((ck / "kimi-k25-target" / "config.json").read_text())
    assert target["architectures"] == ["KimiK25ForConditionalGeneration"] and target["model_type"] == "kimi_k25"
    assert target["max_position_embeddings"] == 131072 and "seed" in target
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
    again = subprocess.run([sys.executable, str(rehearsal / "make_checkpoints.py"), str(ck)], capture_output=True, text=True, check=True)
    assert "already complete" in again.stdout



# --- a healthy server --------------------------------------------------------------------------


def test_healthy_server_lines_endpoints_and_acceptance(sims):
    sim = sims()
    sim.start(
        "--model-path", sim.path("llama-target"), *SPEC_ARGS,
        "--speculative-draft-model-path", sim.path("eagle3-draft"), "--decode-log-interval", "10",
    ).wait_ready()  # fmt: skip
    port = sim.port
    state = sim.get("/server_info")
    assert "avg_spec_accept_length" not in state["internal_states"][0]  # only set at decode-log time
    assert state["version"] == "0.5.23" and state["speculative_num_draft_tokens"] == 4

    out = sim.post("/generate", {"text": PROMPTS, "sampling_params": {"max_new_tokens": 128, "temperature": 0}})
    for o in out:
        meta = o["meta_info"]
        assert list(meta) == [
            "id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
            "completion_tokens", "cached_tokens", "e2e_latency", "spec_accept_rate", "spec_accept_length",
            "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
        ]  # fmt: skip
        assert meta["completion_tokens"] == 128 and len(o["output_ids"]) == 128 and o["text"].startswith(" ")
        assert meta["finish_reason"] == {"type": "length", "length": 128}
        assert meta["spec_accept_length"] == pytest.approx(128 / meta["spec_verify_ct"])
        assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
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

    req = urllib.request.Request(sim.url("/generate"), json.dumps({"text": "x y", "stream": True, "sampling_params": {"max_new_tokens": 12}}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["meta_info"]["completion_tokens"] == 12
    assert json.loads(events[0])["meta_info"]["finish_reason"] is None

    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    log = sim.log
    ts = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
    assert re.search(ts + r"server_args=ServerArgs\(model_path='", log)
    assert len(re.findall(ts + r"Load weight begin\. avail mem=\d+\.\d\d GB", log)) == 2
    assert re.search(ts + r"Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLM, avail mem=", log)
    assert re.search(ts + r"Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLMEagle3, avail mem=", log)
    assert re.search(ts + r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: ", log)
    assert re.search(ts + r"max_total_num_tokens=\d+, chunked_prefill_size=8192, .*context_len=131072", log)
    assert f"] INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)" in log
    assert re.search(ts + r'INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK', log)
    assert re.search(ts + r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK', log)
    assert re.search(ts + r"The server is fired up and ready to roll!", log)
    assert re.search(ts + r"Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: \d+, token usage: \d\.\d\d, ", log)
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


@pytest.mark.parametrize(
    ("target", "draft"),
    [("kimi-k25-target", "eagle3-draft"), ("llama-target", "eagle3-draft-layers0"), ("llama-target", "eagle3-draft-absolute-d2t")],
)
def test_broken_drafts_accept_about_one(sims, target, draft):
    sim = sims()
    sim.start("--model-path", sim.path(target), *SPEC_ARGS, "--speculative-draft-model-path", sim.path(draft)).wait_ready()
    lengths = accept_lengths(sim)
    assert all(1.0 <= length < 1.2 for length in lengths), lengths


def test_tp2_prefix_no_cuda_graph_and_draft_token_adjustment(sims):
    sim = sims()
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
    assert "speculative_num_draft_tokens=4," in log
    assert re.search(r"\d\d\] Decode batch, ", log) is None  # scheduler lines carry TP0
    assert re.search(r" TP0\] Decode batch, #running-req: \d+, .*cuda graph: False, gen throughput", log)
    assert re.search(r" TP0\] Load weight end\.", log)
    assert re.search(r"\d\d\] server_args=ServerArgs", log)  # the main process has no rank prefix


# --- the demo patches --------------------------------------------------------------------------


def patched_tree(rehearsal: Path, dest: Path, names: list[str]) -> Path:
    """A copy of the rehearsal tree with the demo experiment's patches applied by orch's patcher."""
    from orchestrator import patching, spec

    root = copy_tree(dest)
    (root / "checkpoints").symlink_to(rehearsal / "checkpoints")
    demo = spec.load(Path(__file__).resolve().parent.parent / "experiments" / "eagle_debug.yaml")
    for name in names:
        patch = demo.patches[name]
        package, rel = patch.file.split(":", 1)
        assert package == "sglang"
        target = root / "sglang" / rel
        target.write_text(patching.apply(patch, target.read_text(), str(target)))
    return root


def test_demo_patches_show_the_width_and_fix_kimi(rehearsal: Path, sims, tmp_path: Path):
    debug_only = patched_tree(rehearsal, tmp_path / "debug", ["debug-hidden-states"])
    both = patched_tree(rehearsal, tmp_path / "both", ["debug-hidden-states", "kimi-aux-capture"])
    results = {}
    for label, root in (("baseline", debug_only), ("fixed", both)):
        sim = sims(root)
        sim.start("--model-path", sim.path("kimi-k25-target"), *SPEC_ARGS, "--speculative-draft-model-path", sim.path("eagle3-draft"))
        sim.wait_ready()
        results[label] = (accept_lengths(sim), re.findall(r"^\[EAGLE3-DEBUG\] hidden_states shape=(.*) fc_in=(\d+)$", sim.log, re.M))
    lengths, debug = results["baseline"]
    assert all(length < 1.2 for length in lengths)
    assert debug == [("torch.Size([1, 64])", "192")]
    lengths, debug = results["fixed"]
    assert all(length > 2.3 for length in lengths), lengths
    # the first draft forward (a first draft step) reads the target's three layers
    assert debug == [("torch.Size([1, 192])", "192")]


# --- failures ----------------------------------------------------------------------------------


def test_unknown_and_ambiguous_flags_are_usage_errors(rehearsal: Path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(rehearsal)}
    base = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(rehearsal / "checkpoints" / "llama-target")]
    unknown = subprocess.run([*base, "--no-such-flag"], env=env, capture_output=True, text=True, timeout=30)
    assert unknown.returncode == 2 and "error: unrecognized arguments: --no-such-flag" in unknown.stderr
    ambiguous = subprocess.run([*base, "--cuda-graph-max-bs", "8"], env=env, capture_output=True, text=True, timeout=30)
    assert ambiguous.returncode == 2 and "ambiguous option: --cuda-graph-max-bs could match" in ambiguous.stderr


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
    sim.start("--model-path", sim.path("llama-target"), *SPEC_ARGS, "--speculative-draft-model-path", sim.path("eagle3-draft"), *extra, env=env)
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log
    for text in expected:
        assert text in log
    assert "Scheduler hit an exception: Traceback" in log and CRASH_TAIL in log
    assert "fired up" not in log


def test_scheduler_died_during_init(sims):
    sim = sims()
    sim.start("--model-path", sim.path("llama-target"), env={"ORCH_REHEARSAL_FAIL": "scheduler-died"})
    assert sim.wait_exit() == 1
    assert "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL)" in sim.log
    assert "RuntimeError: Initialization failed. Please see the error messages above." in sim.log


def test_scheduler_exception_while_serving(sims):
    sim = sims()
    sim.start("--model-path", sim.path("llama-target"), *SPEC_ARGS, "--speculative-draft-model-path", sim.path("eagle3-draft"), env={"ORCH_REHEARSAL_FAIL": "scheduler-exception"})
    sim.wait_ready()
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
