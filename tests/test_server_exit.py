"""The stop returns as soon as the server's process group has exited, and the server's exit code is
recorded: the launch wrapper survives the group's SIGTERM long enough to write it."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port
from support.cli import orch

from orchestrator import engines
from orchestrator.host import server
from orchestrator.rehearsal import sglang as rehearsal_sim
from orchestrator.core.inventory import Host
from orchestrator.remote.local import LocalConnection

SGLANG_REHEARSAL = rehearsal_sim.STAND_IN

# exits with 7 on SIGTERM; writes `started` once its handler is in place
PROMPT_EXIT = ("#!/usr/bin/env bash\nexec python3 -c 'import signal, sys, time; "
               "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7)); open(\"started\", \"w\").write(\"up\"); time.sleep(300)'\n")


def wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.is_file():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)


async def timed_stops(tmp_path: Path, script: str, trials: int) -> list[tuple[float, server.Stopped, Path]]:
    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
    out = []
    try:
        for trial in range(trials):
            run_dir = tmp_path / "work" / "runs" / f"r{trial}"
            srv = await server.launch(conn, str(run_dir), script, 30000, {"API_TOKEN": "s3cret"})
            await asyncio.to_thread(wait_for, run_dir / "started")
            began = time.monotonic()
            stopped = await server.stop(conn, srv, grace=10)
            out.append((time.monotonic() - began, stopped, run_dir))
    finally:
        await conn.close()
    return out


def test_a_server_that_exits_on_sigterm_is_seen_gone_at_once_and_its_exit_code_is_recorded(tmp_path):
    stops = asyncio.run(timed_stops(tmp_path, PROMPT_EXIT, trials=3))
    assert min(seconds for seconds, _, _ in stops) < 0.3
    for _, stopped, run_dir in stops:
        assert stopped.gone and not stopped.killed and stopped.exit_code == 7
        assert stopped.summary(10) == "process group gone; exit code 7"
        assert (run_dir / "exit_code").read_text().strip() == "7"
        assert not (run_dir / "secrets.env").exists()  # the secrets file is still read and removed


def test_the_secrets_and_the_run_mark_still_reach_the_server(tmp_path):
    script = "#!/usr/bin/env bash\necho \"$API_TOKEN $ORCH_RUN_DIR\" > seen\necho up > started\nexec sleep 300\n"
    [(_, stopped, run_dir)] = asyncio.run(timed_stops(tmp_path, script, trials=1))
    assert (run_dir / "seen").read_text().split() == ["s3cret", str(run_dir)]
    assert stopped.gone and stopped.exit_code == 143  # sleep ends by the SIGTERM: 128 + 15


def test_a_server_killed_after_the_grace_has_no_exit_code_and_says_nothing_of_one(tmp_path):
    async def go():
        conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
        run_dir = tmp_path / "work" / "runs" / "r1"
        srv = await server.launch(conn, str(run_dir), "#!/usr/bin/env bash\ntrap '' TERM\necho up > started\n"
                                  "while :; do sleep 0.1; done\n", 30000)
        await asyncio.to_thread(wait_for, run_dir / "started")
        try:
            return await server.stop(conn, srv, grace=0.5)
        finally:
            await conn.close()

    stopped = asyncio.run(go())
    assert stopped.gone and stopped.killed and stopped.exit_code is None
    assert "exit code" not in stopped.summary(0.5)


@pytest.fixture(scope="module")
def rehearsal_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sim")
    rehearsal_sim.assemble(rehearsal_sim.DEFAULT_RELEASE, root)
    subprocess.run([sys.executable, str(SGLANG_REHEARSAL.checkpoint_maker),
                    str(root / "checkpoints")], check=True, capture_output=True)
    return root


def test_the_rehearsal_server_stops_within_0_3_s_and_exits_0(tmp_path, rehearsal_tree):
    port = 30000 + (hash(str(tmp_path)) % 20000)
    script = (f"#!/usr/bin/env bash\nexport PYTHONPATH={shlex.quote(str(rehearsal_tree))} ORCH_REHEARSAL_LOAD_SECONDS=0 "
              "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n"
              f"exec {shlex.quote(sys.executable)} -m sglang.launch_server --model-path {shlex.quote(str(rehearsal_tree))}/checkpoints/llama-target --port {port}\n"
              )

    async def go():
        conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
        results = []
        try:
            for trial in range(2):
                srv = await server.launch(conn, str(tmp_path / "work" / "runs" / f"r{trial}"), script, port)
                await server.wait_ready(conn, srv, 60, engines.get("sglang"))
                began = time.monotonic()
                stopped = await server.stop(conn, srv)
                results.append((time.monotonic() - began, stopped))
        finally:
            await conn.close()
        return results

    results = asyncio.run(go())
    assert all(stopped.gone and not stopped.killed and stopped.exit_code == 0 for _, stopped in results), results
    assert min(seconds for seconds, _ in results) < 0.3, results


def test_a_runs_stopped_event_records_the_servers_exit_code(project):
    demo = project / "experiments" / "eagle_debug.yaml"
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", demo)
    done = orch(project, "run", str(demo), "--variant", "fixed", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    [run] = json.loads(orch(project, "ls", "--json").stdout)
    events = json.loads(orch(project, "show", str(run["id"]), "--json").stdout)["events"]
    assert [e["message"] for e in events if e["kind"] == "stopped"] == ["process group gone; exit code 0"]


def test_a_killed_launch_wrapper_left_a_zombie_is_seen_gone(tmp_path):
    """Where the host's init does not reap, a wrapper killed with its group stays a zombie, which
    `kill -0` still finds: the status says the server is gone (a run's other nodes are watched so)."""
    parent = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                               "pid = os.fork()\n"
                               "if pid == 0: os._exit(0)\n"
                               "print(pid, flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(parent.stdout.readline())
        time.sleep(0.2)
        assert Path(f"/proc/{zombie}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "pid").write_text(f"{zombie}\n")
        conn = LocalConnection(Host(name="local", transport="local", workdir=str(tmp_path)))
        status = asyncio.run(server.poll(conn, server.Server(str(run_dir), zombie, free_port()), 0))
        assert not status.alive and status.exit_code is None
        (run_dir / "pid").write_text(f"{parent.pid}\n")  # a live one still counts
        assert asyncio.run(server.poll(conn, server.Server(str(run_dir), parent.pid, free_port()), 0)).alive
    finally:
        parent.kill()
        parent.wait()
