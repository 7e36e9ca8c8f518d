"""The vLLM rehearsal stand-in, run as a real process: its command line, start-up failures, log
lines, /health, /v1/models, /v1/completions and /metrics, and acceptance computed from the demo
checkpoints (healthy ~3 tokens per step at 3 speculative tokens, absolute d2t ~1.0)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.engines.vllm import logs, metrics
from orchestrator.rehearsal import vllm as rehearsal
from support.processes import launch, speculative_config as spec, stop, wait_ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=rehearsal.releases())
def host(request, tmp_path_factory):
    """An assembled release and the demo checkpoints, made by the vLLM host's checkpoint maker."""
    folder = tmp_path_factory.mktemp(f"vllm-{request.param}")
    rehearsal.assemble(request.param, folder)
    shutil.copy(rehearsal.CHECKPOINT_MAKER, folder / "make_checkpoints.py")
    subprocess.run([sys.executable, str(folder / "make_checkpoints.py"), str(folder / "ck")], check=True,
                   capture_output=True, timeout=120)
    for draft in ("eagle3-draft", "eagle3-draft-absolute-d2t"):  # named as every vLLM registers it (see below)
        renamed = folder / "ck" / f"{draft}-vllm"
        shutil.copytree(folder / "ck" / draft, renamed)
        config = json.loads((renamed / "config.json").read_text())
        (renamed / "config.json").write_text(json.dumps({**config, "architectures": ["Eagle3LlamaForCausalLM"]}))
    return request.param, folder


def test_specforge_draft_name_is_unregistered_on_0_10_1_1(host):
    """0.10.1.1 keeps `LlamaForCausalLMEagle3` commented out of its registry (registry.py:265)."""
    release, folder = host
    proc, log = launch(host, "--model", str(folder / "ck" / "llama-target"), "--port", str(free_port()),
                       "--speculative-config", spec(folder, "eagle3-draft"))
    if release != "0.10.1.1":
        wait_ready(proc, log)
        assert stop(proc) == 0
        return
    assert proc.wait(timeout=30) == 1
    found = logs.diagnose_bytes(log.read_bytes())
    assert found.kind == "arch-unsupported" and "LlamaForCausalLMEagle3" in found.summary


def get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.status, answer.read()


def complete(port: int, prompt: str, tokens: int = 64) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                     data=json.dumps({"model": "m", "prompt": prompt, "max_tokens": tokens,
                                                      "temperature": 0}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def serve_and_measure(host, target: str, draft: str) -> tuple[float, Path]:
    """accept length over a small workload, from /metrics (before/after), and the log."""
    release, folder = host
    port = free_port()
    proc, log = launch(host, "--model", str(folder / "ck" / target), "--tensor-parallel-size", "8", "--port", str(port),
                       "--speculative-config", spec(folder, draft))
    try:
        wait_ready(proc, log)
        assert get(port, "/health") == (200, b"")
        before = metrics.parse(get(port, "/metrics")[1].decode())
        for i in range(4):
            answer = complete(port, f"the quick brown fox {i}")
            assert answer["usage"]["completion_tokens"] == 64 and answer["choices"][0]["text"]
        after = metrics.parse(get(port, "/metrics")[1].decode())
        time.sleep(0.8)  # one stats interval: the SpecDecoding line
    finally:
        assert stop(proc) == 0
    accept = after.minus(before).accept_len()
    assert accept is not None
    return accept, log


def test_healthy_draft_on_llama(host):
    accept, log = serve_and_measure(host, "llama-target", "eagle3-draft-vllm")
    assert 2.4 < accept < 4.0
    report = logs.parse_log(log.read_bytes())
    lines = [p for p in report.series if p.kind == logs.SPEC_SERIES]
    assert lines and all(2.0 < p.values["mean_accept_len"] <= 4.0 for p in lines)
    assert report.diagnosis is None and report.ready


def test_absolute_d2t_is_accepted_almost_never(host):
    accept, _ = serve_and_measure(host, "llama-target", "eagle3-draft-absolute-d2t-vllm")
    assert accept < 1.2


def test_kimi_k25_target_by_release(host):
    release, folder = host
    if release == "0.33.0":
        accept, _ = serve_and_measure(host, "kimi-k25-target", "eagle3-draft")
        assert accept > 2.4
        return
    proc, log = launch(host, "--model", str(folder / "ck" / "kimi-k25-target"), "--port", str(free_port()),
                       "--speculative-config", spec(folder, "eagle3-draft"))
    assert proc.wait(timeout=30) == 1
    found = logs.diagnose_bytes(log.read_bytes())
    assert found.kind == "arch-unsupported" and "KimiK25ForConditionalGeneration" in found.summary


@pytest.mark.parametrize("case", ["method-eagle", "unknown-method", "unknown-flag", "port-in-use", "tp", "max-len"])
def test_startup_failures_as_vllm_prints_them(host, case):
    release, folder = host
    port = free_port()
    args = ["--model", str(folder / "ck" / "llama-target"), "--port", str(port)]
    blocker = None
    if case == "method-eagle":
        args += ["--speculative-config", spec(folder, "eagle3-draft", "eagle")]
    elif case == "unknown-method":
        args += ["--speculative-config", spec(folder, "eagle3-draft", "EAGLE3")]
    elif case == "unknown-flag":
        args += ["--speculative-algorithm", "EAGLE3"]
    elif case == "port-in-use":
        blocker = socket.socket()
        blocker.bind(("0.0.0.0", port))
        blocker.listen()
    elif case == "tp":
        args += ["--tensor-parallel-size", "16"]
    else:
        args += ["--max-model-len", "1000000"]
    proc, log = launch(host, *args)
    code = proc.wait(timeout=30)
    if blocker:
        blocker.close()
    kinds = {"method-eagle": "arch-unsupported", "unknown-method": "spec-method-unknown",
             "unknown-flag": "bad-arguments", "port-in-use": "port-in-use", "tp": "tp-too-large",
             "max-len": "max-model-len"}
    assert code == (2 if case == "unknown-flag" else 1)
    found = logs.diagnose_bytes(log.read_bytes())
    assert found is not None and found.kind == kinds[case], log.read_text()[-1500:]
