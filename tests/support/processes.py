"""Processes on this machine that a test starts or looks for: runs' servers and process groups
(read from /proc), the sweep over local rehearsal hosts, the vLLM stand-in started by hand."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

from conftest import ROOT, free_port, group_alive
from orchestrator.engines.vllm import logs

from support.cli import orch
from support.files import installed_in

HOSTS = ("h1", "h2")


def server_gone(workdir: Path, uid: str) -> bool:
    """The run's process group is gone (the hosts here share this machine's processes)."""
    return not group_alive(int((workdir / "runs" / uid / "pid").read_text()))


def node_logs(project: Path, run_id: int) -> dict[int, tuple[str, str]]:
    with sqlite3.connect(project / "orch.db") as db:
        rows = db.execute("SELECT node, host, data FROM nodelogrow WHERE run_id = ?", (run_id,)).fetchall()
    return {node: (host, zlib.decompress(data).decode()) for node, host, data in rows}


def pids(workdir: Path, uid: str) -> int:
    return int((workdir / "runs" / uid / "pid").read_text())


def server_process(pgid: int, module: bytes = b"sglang.launch_server") -> int:
    """The server's own process in the run's group (the launch wrapper aside; `module` in its
    command line), from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and module in cmdline and fields[0] != "Z":
            return int(stat.parent.name)
    raise AssertionError(f"no server process in group {pgid}")


def marked_processes(root: Path) -> list[int]:
    """Live processes whose run mark (ORCH_RUN_DIR) lies under `root`, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(") ", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        marks = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"ORCH_RUN_DIR=")]
        if state != "Z" and marks and marks[0].startswith(str(root)):
            found.append(int(entry.name))
    return found


def sweep_project(project: Path, hosts: tuple[str, ...] = HOSTS, ssh_entry: str = "") -> Path:
    """Local rehearsal hosts with their own workdirs and ports, and the demo experiment with
    enough requests that a run is still under its workload when the signal comes."""
    entries = "".join(f"  {h}:\n    transport: local\n    workdir: {project / h}\n    gpus: 8\n    rehearsal: true\n"
                      for h in hosts)
    (project / "inventory.yaml").write_text("hosts:\n" + entries + ssh_entry)
    spec = project / "experiments" / "eagle_debug.yaml"
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("requests: 16", "requests: 400")
    # each variant on its own port: the hosts are all this machine
    text = text.replace("    patches: [debug-hidden-states, kimi-embed-and-head]\n",
                        f"    patches: [debug-hidden-states, kimi-embed-and-head]\n    params: {{port: {free_port()}}}\n")
    text = text.replace("params: {speculative_algorithm: EAGLE3}", f"params: {{speculative_algorithm: EAGLE3, port: {free_port()}}}")
    spec.write_text(text)
    return spec


def prepared(project: Path, spec: Path) -> dict[str, dict[str, str]]:
    return installed_everywhere(project, spec, HOSTS)


def installed_everywhere(project: Path, spec: Path, hosts: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Install every host's stand-in (a dry run) and hash it pristine."""
    done = orch(project, "run", str(spec), "--hosts", ",".join(hosts), "--dry-run", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return {h: installed_in(project / h) for h in hosts}


# -- the vLLM stand-in started by hand: `host` is (release, folder) of an assembled release ------


def launch(host, *args: str, env: dict[str, str] | None = None):
    release, folder = host
    log = folder / f"server-{time.monotonic_ns()}.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args]
    environment = {**os.environ, "PYTHONPATH": str(folder), "VLLM_LOG_STATS_INTERVAL": "0.3",
                   "ORCH_REHEARSAL_GPUS": "8", **(env or {})}
    handle = log.open("wb")
    proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=environment, cwd=folder)
    return proc, log


def wait_ready(proc, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if logs.is_ready(log.read_bytes()):
            return
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError("server not ready")


def stop(proc) -> int:
    proc.terminate()
    return proc.wait(timeout=10)


def speculative_config(folder: Path, draft: str, method: str = "eagle3") -> str:
    """The --speculative-config of the stand-in's demo checkpoint `draft`."""
    return json.dumps({"method": method, "model": str(folder / "ck" / draft), "num_speculative_tokens": 3})
