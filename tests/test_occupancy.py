"""The host is free for a run before anything on it changes: nobody on the port, nobody else's
compute on the run's GPUs, enough GPUs; and only the run's own server counts as ready."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port
from orchestrator import engines
from orchestrator.host import occupancy, server
from orchestrator.errors import HostError, ServerError
from orchestrator.core.inventory import Host
from orchestrator.remote.local import LocalConnection
from support.cli import orch
from support.files import snapshot

# GPU 0 and the process row are what nvidia-smi printed on a real one-GPU H200 host while a torch
# process held 20 GiB there; GPUs 1-3 are the same row made idle, for the index rules.
H200 = """\
__ORCH_GPU__ gpu=0, GPU-eed01611-abf2-84af-1b88-bb5ad2e5c594, NVIDIA H200, 21007, 143771
__ORCH_GPU__ gpu=1, GPU-eed01611-abf2-84af-1b88-bb5ad2e5c595, NVIDIA H200, 0, 143771
__ORCH_GPU__ gpu=2, GPU-eed01611-abf2-84af-1b88-bb5ad2e5c596, NVIDIA H200, 0, 143771
__ORCH_GPU__ gpu=3, GPU-eed01611-abf2-84af-1b88-bb5ad2e5c597, NVIDIA H200, 0, 143771
__ORCH_GPU__ app=GPU-eed01611-abf2-84af-1b88-bb5ad2e5c594, 977, python3, 20998
"""

SQUATTER = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def local(tmp_path: Path) -> LocalConnection:
    return LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work"), python=sys.executable))


def squat(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SQUATTER, str(port)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"], capture_output=True).returncode == 0:
            return proc
        time.sleep(0.05)
    raise AssertionError("squatter never listened")


def test_gpu_rules_from_nvidia_smi_rows():
    use = occupancy.parse_gpu_use(H200)
    assert [g.index for g in use.gpus] == [0, 1, 2, 3] and use.apps[0].pid == 977
    assert occupancy.gpu_problems(use, 2, None) == ["GPU 0 runs pid 977 python3 20998 MiB"]
    assert occupancy.gpu_problems(use, 2, "2,3") == []
    assert occupancy.too_few(use, 8) == "tp_size 8 needs 8 GPUs but nvidia-smi reports 4"
    assert occupancy.too_few(use, 4) is None
    hidden = occupancy.parse_gpu_use(H200.replace("__ORCH_GPU__ app=", "not a row "))
    assert "processes this user cannot see" in occupancy.gpu_problems(hidden, 1, None)[0]
    assert occupancy.gpu_problems(occupancy.parse_gpu_use(""), 8, None) == []  # no nvidia-smi: nothing to check


def test_a_taken_port_names_the_process_holding_it(tmp_path):
    port = free_port()
    proc = squat(port)

    async def check():
        conn = local(tmp_path)
        try:
            await occupancy.ensure_free(conn, conn.host, port, 1, None)
        finally:
            await conn.close()

    try:
        with pytest.raises(HostError) as caught:
            asyncio.run(check())
    finally:
        proc.kill()
        proc.wait()
    message = str(caught.value)
    assert f"local: port {port} is already taken by pid {proc.pid} (python" in message
    assert caught.value.exit_code == 3
    assert asyncio.run(_listening(tmp_path, port)) is False


async def _listening(tmp_path: Path, port: int) -> bool:
    conn = local(tmp_path)
    try:
        return (await occupancy.listener(conn, conn.host, port)).listening
    finally:
        await conn.close()


def test_only_the_runs_own_server_counts_as_ready(tmp_path, monkeypatch):
    # The server never prints its readiness line; a stranger then answers /health_generate on its port.
    monkeypatch.setattr(server, "HEALTH_EVERY_SECONDS", 0.2)
    port = free_port()

    async def wait():
        conn = local(tmp_path)
        srv = await server.launch(conn, str(tmp_path / "work" / "runs" / "r1"), "#!/usr/bin/env bash\nexec sleep 300\n", port)
        proc = squat(port)
        try:
            await server.wait_ready(conn, srv, 20, engines.get("sglang"))
        finally:
            proc.kill()
            proc.wait()
            await server.stop(conn, srv, grace=2)
            await conn.close()

    with pytest.raises(ServerError, match=f"port {port} answers /health_generate, but the listener is pid"):
        asyncio.run(wait())


def test_orch_run_with_a_squatter_on_the_port_exits_3_and_changes_nothing(project, demo):
    port = free_port()
    proc = squat(port)
    try:
        done = orch(project, "run", str(demo), "--set", f"port={port}")
        after = snapshot(project / "host") if (project / "host").exists() else {}
        done_again = orch(project, "run", str(demo), "--set", f"port={port}")
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"port {port} is already taken by pid {proc.pid}" in done.stdout + done.stderr
    assert done_again.returncode == 3
    # the second attempt found the host exactly as the first left it: no patch, no run folder
    assert snapshot(project / "host") == after
    assert not any("/runs/" in f"/{name}" for name in after)
