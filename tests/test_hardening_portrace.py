"""A port taken between orch's check and the server's bind (another user, or another inventory host
on this machine): the rehearsal SGLang exits with SGLang's own address-in-use error, orch recognises
it, records a `port-relaunch` event and relaunches the run once on a port free on the host; a second
taken port fails the run, naming the port."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from pathlib import Path

from conftest import free_port
from support.cli import orch
from support.specs import small_experiment


class Squatter:
    """Another user: binds each port a launch script of the run names as soon as that script is
    written (after orch's check, before the server's bind: the stand-in loads for a second first),
    at most `ports` of them, and holds them until closed."""

    def __init__(self, runs: Path, ports: int):
        self.runs, self.left, self.held = runs, ports, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.01) and self.left:
            for script in self.runs.glob("*/launch.sh"):
                try:
                    found = re.search(r"--port '?(\d+)", script.read_text())
                except OSError:
                    continue
                if found and int(found.group(1)) not in self.held and self.left:
                    sock = socket.socket()
                    sock.bind(("127.0.0.1", int(found.group(1))))
                    sock.listen()
                    self.held[int(found.group(1))] = sock
                    self.left -= 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.held.values():
            sock.close()


def run_with_squatter(project: Path, ports: int) -> tuple[subprocess.CompletedProcess[str], dict, list[int], int]:
    port = free_port()
    spec = project / "experiments" / "portrace.yaml"
    spec.write_text(small_experiment("portrace", port))
    squatter = Squatter(project / "host" / "runs", ports)
    try:
        done = orch(project, "run", str(spec))
    finally:
        squatter.close()
    shown = json.loads(orch(project, "show", "last", "--json").stdout)
    return done, shown, sorted(squatter.held), port


def events(shown: dict, kind: str) -> list[str]:
    return [e["message"] for e in shown["events"] if e["kind"] == kind]


def test_a_port_taken_after_the_check_relaunches_the_run_once_on_another_port(project: Path):
    done, shown, squatted, asked = run_with_squatter(project, ports=1)
    assert squatted == [asked], done.stdout  # the test really took the run's port after the check
    assert done.returncode == 0, done.stdout + done.stderr
    assert shown["status"] == "succeeded" and shown["params"]["port"] != asked
    said = events(shown, "port-relaunch")
    assert len(said) == 2 and f"port {asked} was taken" in said[0] and "already in use" in said[0], said
    assert f"relaunched on port {shown['params']['port']}" in said[1], said
    assert f"--port {shown['params']['port']}" in shown["command"] or f"--port '{shown['params']['port']}'" in shown["command"]


def test_a_second_taken_port_fails_the_run(project: Path):
    done, shown, squatted, asked = run_with_squatter(project, ports=2)
    assert len(squatted) == 2 and squatted[0] != squatted[1], done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    assert shown["status"] == "failed" and shown["diagnosis"]["kind"] == "port-in-use", shown["error"]
    assert len(events(shown, "port-relaunch")) == 2  # one relaunch, not more
    assert not list((project / "host" / "journal").glob("*/*"))  # nothing left applied


def test_both_engines_real_address_in_use_exits_are_what_the_relaunch_reads():
    """The relaunch keys on the diagnosis kind; each engine's real bind failure yields it."""
    from orchestrator import engines
    from orchestrator.run.execute import PORT_IN_USE

    sglang = (b"[2025-01-01 00:00:00] INFO:     Waiting for application startup.\n"
              b"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
              b"address already in use\n")
    vllm = (b"INFO 01-01 00:00:00 [api_server.py:1043] vLLM API server version 0.10.1.1\n"
            b"Traceback (most recent call last):\n"
            b"  File \"/usr/lib/python3/socket.py\", line 1, in create_server\n"
            b"    sock.bind(addr)\n"
            b"OSError: [Errno 98] Address already in use\n")
    for name, log in (("sglang", sglang), ("vllm", vllm)):
        found = engines.get(name).diagnose(log)
        assert found is not None and found.kind == PORT_IN_USE, (name, found)
