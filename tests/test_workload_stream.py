"""The built-in workload streams: every request timed chunk by chunk (TTFT, inter-token latencies,
end to end), its tokens and its own accept length stored as a row; per run the p50 / p90 / p99 of
each as metrics, shown by `orch show --requests`, `orch series` and `orch diff`."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import free_port
from support.cli import orch
from support.specs import experiment

from orchestrator.errors import WorkloadError
from orchestrator.remote.streams import Timing
from orchestrator.run import workload
from orchestrator.store.database import EventRow, MetricRow, RequestRow, Store

DATA = Path(__file__).parent / "fixtures" / "datasets"
LATENCIES = [f"{name}_ms_p{p}" for name in ("ttft", "itl", "e2e") for p in (50, 90, 99)]


def test_a_chunk_gap_is_spread_over_the_tokens_it_brought():
    timing = Timing(sent=10.0)
    timing.chunk(10.5, 1)  # the first token: time to first token
    timing.chunk(10.8, 4)  # a verify step that accepted 2 drafts and a bonus token: 3 tokens in 0.3 s
    timing.chunk(10.9, 4)  # no new token (a usage-only chunk): no gap of its own
    timing.chunk(11.1, 5)
    assert timing.ttft == 0.5
    assert [round(g, 6) for g in timing.itl] == [0.1, 0.1, 0.1, 0.3]  # the last gap runs from 10.8


class Streaming(BaseHTTPRequestHandler):
    """SSE as uvicorn sends it (chunked, events split across chunks) or until close; `/error` ends
    with SGLang's error event, `/missing` answers 404."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/missing"):
            body = b'{"detail":"Not Found"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        meta = lambda n: {"completion_tokens": n, "prompt_tokens": 3, "finish_reason": None}  # noqa: E731
        events = [f"data: {json.dumps({'text': ' a' * n, 'meta_info': meta(n)})}\n\n" for n in (1, 3)]
        events.append('data: {"error": {"message": "the scheduler died"}}\n\n' if self.path.startswith("/error") else
                      f"data: {json.dumps({'text': ' a a a', 'meta_info': {**meta(3), 'spec_verify_ct': 2}})}\n\n")
        raw = "".join(events + ["data: [DONE]\n\n"]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for at in range(0, len(raw), 7):  # chunk boundaries inside events
            piece = raw[at:at + 7]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def test_the_native_stream_is_read_across_chunk_boundaries_and_its_errors_are_one_line():
    from orchestrator.engines.base import Call
    from orchestrator.engines.sglang import client

    server = ThreadingHTTPServer(("127.0.0.1", 0), Streaming)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base, call = f"http://127.0.0.1:{server.server_address[1]}", Call((("user", "hi"),), 3, {"temperature": 0.0})
    try:
        done = asyncio.run(client.request(base, call))
        assert (done.prompt_tokens, done.completion_tokens, done.accept_len, done.text) == (3, 3, 1.5, " a a a")
        assert done.ttft is not None and len(done.itl) == 2  # the second event brought 2 tokens
        with pytest.raises(WorkloadError, match=r"/error/generate failed: the scheduler died$"):
            asyncio.run(client.request(base + "/error", call))
        with pytest.raises(WorkloadError, match=r"/missing/generate failed: HTTP 404"):
            asyncio.run(client.request(base + "/missing", call))
    finally:
        server.shutdown()


def test_percentiles_are_linear_between_ranks_as_bench_serving_reports():
    assert workload.percentile([], 50) is None
    assert workload.percentile([4.0], 99) == 4.0
    assert workload.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert workload.percentile([float(v) for v in range(101)], 90) == pytest.approx(90.0)


def test_an_mt_bench_file_at_two_concurrencies_records_latency_percentiles_from_one_server(project):
    """THE rehearsal run: 3 MT-Bench questions (two turns each, the second sent with the first
    answer) at concurrency 1 and 8 (`concurrency: [1, 8]`: a run per level), on one server."""
    (project / "experiments" / "question.jsonl").write_text((DATA / "mt_bench_question.jsonl").read_text())
    path = experiment(project, "",
                      "dataset: question.jsonl, format: mt-bench, max_new_tokens: 12, top_p: 0.95, concurrency: [1, 8]")
    began = time.monotonic()
    done = orch(project, "run", str(path), "--variant", "fixed", "--set", f"port={free_port()}")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout + done.stderr
    store = Store(f"sqlite:///{project / 'orch.db'}")
    made = store.runs()
    assert len(made) == 2 and {r.server_run_id for r in made} == {made[0].id}  # one server start
    for run in made:
        metrics = {m.name: m.value for m in store.children(run, MetricRow) if m.source in ("orch", "meta_info")}
        assert all(metrics[name] is not None and metrics[name] >= 0 for name in LATENCIES), metrics
        assert metrics["ttft_ms_p50"] <= metrics["ttft_ms_p99"] and metrics["e2e_ms_p50"] <= metrics["e2e_ms_p99"]
        assert metrics["accept_len"] > 1.5 and metrics["requests"] == 6 and metrics["request_throughput"] > 0
        rows = store.children(run, RequestRow)
        assert [r.seq for r in rows] == list(range(6)) and all(r.completion_tokens == 12 for r in rows)
        assert all(r.ttft_ms is not None and len(r.itl_ms) == 11 and r.accept_len > 1.5 for r in rows)
        first, second = rows[0::2], rows[1::2]  # each question's turns, in the order sent
        assert all(b.prompt_tokens > a.prompt_tokens + 12 for a, b in zip(first, second))  # turn 2 carries answer 1
        [sent] = [json.loads(e.message) for e in store.children(run, EventRow) if e.kind == "workload"]
        assert sent == {"endpoint": "generate", "max_new_tokens": 12, "temperature": 0.0, "top_p": 0.95,
                        "dataset": str(project / "experiments" / "question.jsonl"), "format": "mt-bench",
                        "num_prompts": None, "seed": 0}
    shown = orch(project, "show", "last", "--requests").stdout
    assert re.search(r"requests \(6\)", shown) and "ttft_ms" in shown and "accept_len" in shown, shown
    series = orch(project, "series", "last", "--kind", "requests", "--csv").stdout.splitlines()
    assert series[0].startswith("seq,at_s,ttft_ms,e2e_ms") and len(series) == 7
    ends = [float(line.split(",")[1]) for line in series[1:]]
    assert ends == sorted(ends)  # over the run: in the order the requests ended
    compared = orch(project, "diff", str(made[0].id), str(made[1].id)).stdout
    assert "ttft_ms_p50" in compared and "itl_ms_p99" in compared and "e2e_ms_p90" in compared, compared
    print(f"two rehearsal runs on one server in {took:.1f} s")
