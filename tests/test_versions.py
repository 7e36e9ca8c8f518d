"""The demo experiment against the rehearsal SGLang speaking three releases (ORCH_REHEARSAL_LOG_STYLE):
accept length from every source the release has, the server-info endpoint it answers on, and the
`sglang serve` entrypoint; all through one real `orch run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, free_port

# style -> (server-info endpoint, decode lines carry "accept rate", entrypoint)
STYLES = {"0.4.10": ("/get_server_info", False, "module"), "0.5.3": ("/get_server_info", True, "module"),
          "0.5.23": ("/server_info", True, "serve")}


def test_demo_under_each_log_style(project: Path):
    demo = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    head, _, _ = demo.partition("\nvariants:\n")
    variants = "".join(
        f"  style-{style.replace('.', '-')}:\n    patches: [debug-hidden-states, kimi-aux-capture]\n"
        f"    params: {{entrypoint: {entrypoint}}}\n    env: {{ORCH_REHEARSAL_LOG_STYLE: \"{style}\"}}\n"
        for style, (_, _, entrypoint) in STYLES.items())
    text = (head.replace("  port: 30000\n", f"  port: {free_port()}\n  extra_args: [--decode-log-interval, '10']\n")
            + "\nvariants:\n" + variants + "workload: {requests: 4, max_new_tokens: 64, concurrency: 2}\n"
            + "ready_timeout: 60\n")
    spec = project / "experiments" / "styles.yaml"
    spec.write_text(text)
    env = {**os.environ, "ORCH_DB": f"sqlite:///{project / 'orch.db'}", "ORCH_INVENTORY": str(project / "inventory.yaml"),
           "PYTHONPATH": str(ROOT), "ORCH_CACHE": str(project / "cache")}

    def orch(*args):
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=240)

    done = orch("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    for run, (style, (endpoint, has_rate, entrypoint)) in zip(json.loads(orch("ls", "--json").stdout), STYLES.items()):
        record = json.loads(orch("show", str(run["id"]), "--json").stdout)
        sources = {s["source"]: s["value"] for s in record["metric_sources"]["accept_len"]}
        assert set(sources) == {"meta_info", f"server_info:{endpoint}", "decode_log"}, (style, sources)
        assert all(value is not None and value > 2.0 for value in sources.values()), (style, sources)
        assert record["metrics"]["accept_len"] == sources["meta_info"]
        assert (record["metrics"]["accept_rate"] is not None) == has_rate, style
        decode = [s for s in record["series"] if s["kind"] == "decode"]
        assert decode and all(s["accept_len"] > 1.0 for s in decode)
        log = orch("logs", str(run["id"])).stdout
        old = style != "0.5.23"
        assert ("Decode batch. #running-req" in log) == old and ("Decode batch, #running-req" in log) == (not old)
        assert ('"GET /get_model_info HTTP/1.1" 200' in log) == old
        assert ("is deprecated" in log) == (not old)  # --disable-cuda-graph, from 0.5.14 on
        assert ("sglang.cli.main serve" in record["command"]) == (entrypoint == "serve")
