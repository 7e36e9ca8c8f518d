"""The workload's requests are native asyncio: several workloads at once keep all their requests in
flight, as the rehearsal server's own `#running-req` counts show (no thread pool in between)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.remote import http
from orchestrator.engines.base import WorkloadResult
from orchestrator.rehearsal import sglang as rehearsal_sim
from orchestrator.engines.sglang.engine import verify_accept_len
from orchestrator.run import workload
from orchestrator.errors import WorkloadError
from orchestrator.core.spec import Workload

SGLANG_REHEARSAL = rehearsal_sim.STAND_IN

RUNNING = re.compile(r"Decode batch.*?#running-req: (\d+)")
SPEC_ARGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """A rehearsal server logging every decode step; yields (base url, log path)."""
    root = tmp_path_factory.mktemp("sim")
    rehearsal_sim.assemble(rehearsal_sim.DEFAULT_RELEASE, root)
    checkpoints = root / "checkpoints"
    subprocess.run([sys.executable, str(SGLANG_REHEARSAL.checkpoint_maker), str(checkpoints)],
                   check=True, capture_output=True)
    port, log = free_port(), root / "server.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "ORCH_REHEARSAL_LOAD_SECONDS": "0",
           "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(checkpoints / "llama-target"),
           "--speculative-draft-model-path", str(checkpoints / "eagle3-draft"), *SPEC_ARGS,
           "--decode-log-interval", "1", "--max-running-requests", "64", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while asyncio.run(http.get(base + "/health_generate", 5.0))[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield base, log
    finally:
        proc.kill()
        proc.wait(10)


def peak_running(log: Path, offset: int) -> int:
    return max((int(n) for n in RUNNING.findall(log.read_text()[offset:])), default=0)


SGLANG = engines.get("sglang")


async def several(base: str, workloads: int, spec: Workload) -> list[WorkloadResult]:
    return await asyncio.gather(*(workload.run(SGLANG, base, spec) for _ in range(workloads)))


def test_four_workloads_at_once_keep_every_request_in_flight(rehearsal):
    # 4 x 4 = 16 requests at once: more than the default thread pool of a small machine (cores + 4)
    base, log = rehearsal
    spec = Workload(requests=4, max_new_tokens=96, concurrency=4)
    offset = len(log.read_text())
    results = asyncio.run(several(base, 4, spec))
    assert peak_running(log, offset) == 16
    assert all(len(r.requests) == 4 and r.completion_tokens == 4 * 96 and verify_accept_len(r) for r in results)


def test_one_workload_stays_within_its_concurrency(rehearsal):
    base, log = rehearsal
    offset = len(log.read_text())
    result = asyncio.run(workload.run(SGLANG, base, Workload(requests=6, max_new_tokens=32, concurrency=2)))
    assert peak_running(log, offset) == 2
    assert len(result.requests) == 6 and all(r.completion_tokens == 32 and r.latency > 0 for r in result.requests)


def test_four_workloads_at_once_take_about_as_long_as_one(rehearsal):
    base, _ = rehearsal
    spec = Workload(requests=4, max_new_tokens=64, concurrency=4)

    def timed(work) -> float:
        began = time.monotonic()
        asyncio.run(work())
        return time.monotonic() - began

    async def one_after_another() -> None:
        for _ in range(4):
            await workload.run(SGLANG, base, spec)

    # serialised they take the sum of four; batched on the server a little more than one, plus each
    # streamed chunk's handling in the stand-in's request threads. Both measured here, best of two
    # each, so a busy machine slows both alike
    serial = min(timed(one_after_another) for _ in range(2))
    assert min(timed(lambda: several(base, 4, spec)) for _ in range(2)) < 0.8 * serial


def test_server_info_comes_back_as_json(rehearsal):
    state = asyncio.run(SGLANG.server_state(rehearsal[0]))
    assert state.endpoint == "/server_info" and isinstance(state.body, dict)


def test_a_refused_or_failing_request_fails_the_workload_with_one_line(rehearsal):
    with pytest.raises(WorkloadError, match=r"/generate failed: .*refused|/generate failed: \[Errno"):
        asyncio.run(workload.run(SGLANG, f"http://127.0.0.1:{free_port()}", Workload(requests=1)))
    status, _ = asyncio.run(http.get(rehearsal[0] + "/no-such-endpoint"))
    assert status == 404
    with pytest.raises(http.HTTPError, match=r"HTTP 404"):
        asyncio.run(http.post_json(rehearsal[0] + "/no-such-endpoint", {}))


def test_nothing_answering_is_status_zero():
    assert asyncio.run(http.get(f"http://127.0.0.1:{free_port()}/health")) == (0, b"")


def test_a_chat_conversation_streams_its_second_turn_with_the_first_answer(rehearsal):
    """endpoint: chat (the server's template) on the stand-in's OpenAI stream: each turn timed,
    the second turn's prompt holds the first answer; /generate's answer carries its accept length."""
    from orchestrator.engines.base import Call

    base, _ = rehearsal
    chat = Workload(max_new_tokens=8, endpoint="chat", dataset=str(Path(__file__).parent / "fixtures" / "datasets" /
                                                                   "mt_bench_question.jsonl"), format="mt-bench",
                    num_prompts=1)
    first, second = asyncio.run(workload.run(SGLANG, base, chat)).requests
    assert first.completion_tokens == second.completion_tokens == 8 and first.text and first.ttft is not None
    assert len(first.itl) == 7 and second.prompt_tokens > first.prompt_tokens + 8
    native = asyncio.run(SGLANG.request(base, Call((("user", "the quick brown fox"),), 8, {"temperature": 0.0})))
    assert native.accept_len is not None and native.accept_len > 1.5 and len(native.itl) == 7
