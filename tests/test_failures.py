"""Each failure signature end to end: the rehearsal SGLang produces it as a real process, `orch run`
exits 1, and the run stores the diagnosis (one `orch run` of one variant per signature)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from conftest import free_port
from orchestrator.store.database import Store
from support.cli import orch, orch_env
from support.specs import rehearsal_experiment

# variant -> (its params/env in YAML, the diagnosis kind, words of the summary)
CASES = {
    "oom": ("params: {disable_cuda_graph: false}\n    env: {ORCH_REHEARSAL_FAIL: oom}", "cuda-oom",
            ["while capturing CUDA graphs", "--mem-fraction-static"]),
    "kv-pool": ("env: {ORCH_REHEARSAL_FAIL: not-enough-memory}", "kv-pool-too-small", ["--mem-fraction-static"]),
    "nccl": ("env: {ORCH_REHEARSAL_FAIL: nccl}", "nccl", ["NCCL_DEBUG=INFO"]),
    "died": ("env: {ORCH_REHEARSAL_FAIL: scheduler-died}", "scheduler-died", ["rank 0", "-9"]),
    "crash-mid-run": ("env: {ORCH_REHEARSAL_FAIL: scheduler-exception}", "scheduler-exception",
                      ["illegal memory access"]),
    "aux-capture": ('params: {model_path: "{{ host.rehearsal }}/checkpoints/kimi-k25-target"}', "missing-aux-capture",
                    ["KimiK25ForConditionalGeneration", "set_eagle3_layers_to_capture"]),
    "context-length": ('env: {SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "0"}', "context-length",
                       ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]),
}
# (A taken port no longer reaches the server: orch's own check refuses the run first, exit 3, see
# test_occupancy.py; the server's port-in-use diagnosis is read from logs in test_logs.py.)


def test_every_failure_signature_is_diagnosed(project: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        variants = "".join(f"  {name}:\n    {body}\n" for name, (body, _, _) in CASES.items())
        spec = project / "experiments" / "failures.yaml"
        spec.write_text(rehearsal_experiment(
            "failures", params={"tp_size": 2, "disable_cuda_graph": True, "port": free_port()},
            env={"ORCH_REHEARSAL_LOAD_SECONDS": "0"},
            workload={"requests": 2, "max_new_tokens": 8, "concurrency": 2},
            extra="variants:\n" + variants.replace("BUSY_PORT", port) + "ready_timeout: 60\n"))
        env = {**orch_env(project, columns=None), "ORCH_CACHE": str(project / "cache")}
        # the checkpoint preflight would stop the context-length run before launch (exit 2): the point
        # here is what the server itself prints
        done = orch(project, "run", str(spec), "--no-preflight", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    runs = json.loads(orch(project, "ls", "--json", env=env).stdout)
    # runs that fit the host's GPUs together start together (GPU slots): their ids follow no plan order
    assert sorted(r["variant"] for r in runs) == sorted(CASES) and {r["status"] for r in runs} == {"failed"}
    store = Store(env["ORCH_DB"])  # the same SQLite file, read in-process: one CLI start per run is slow
    for r in runs:
        row = store.get(str(r["id"]))
        record, log = store.record(row), store.log(row).decode(errors="replace")
        _, kind, words = CASES[r["variant"]]
        assert record["diagnosis"] and record["diagnosis"]["kind"] == kind, (r["variant"], record["diagnosis"], record["error"])
        for word in words:
            assert word.replace("BUSY_PORT", port) in record["diagnosis"]["summary"], (r["variant"], record["diagnosis"])
        assert all(line in log for line in record["diagnosis"]["evidence"])
    shown = orch(project, "show", "last", "--json", env=env)
    assert json.loads(shown.stdout)["diagnosis"]["kind"] == CASES[runs[-1]["variant"]][1]
