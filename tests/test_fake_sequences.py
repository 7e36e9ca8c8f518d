"""The order of host commands when orch starts and stops a server, on the shipped fake Connection
(`orchestrator.testing`): the secrets and the script are on the host before the launch command, a
launch that fails is never sent twice, and a stop is SIGTERM, liveness checks, then SIGKILL only
for a server still alive after the grace. test_fake_connection.py holds the journal's, the lock's
and recovery's orders; test_crash.py and test_interrupt.py the same stories on real processes."""

from __future__ import annotations

import asyncio
import re

import pytest

from orchestrator.core import shell
from orchestrator.errors import ServerError
from orchestrator.host import server
from orchestrator.testing import FakeConnection, Reply

RUN_DIR = "/home/orch/.orch/runs/run1"
PID = 4242
SCRIPT = "#!/bin/bash\nexec python -m sglang.launch_server --port 30000\n"


def exactly(command: str) -> str:
    """A script pattern that matches this one command only."""
    return f"^{re.escape(command)}$"


def launched(fake: FakeConnection, secrets: dict[str, str] | None = None) -> server.Server:
    return asyncio.run(server.launch(fake, RUN_DIR, SCRIPT, 30000, secrets))


def stopped(fake: FakeConnection, grace: float) -> server.Stopped:
    return asyncio.run(server.stop(fake, server.Server(RUN_DIR, PID, 30000), grace=grace))


def alive_until(signal: str | None):
    """A host where the run's group answers the liveness check until `signal` is sent to it
    (None: it never dies)."""
    state = {"alive": True}

    def processes(_fake: FakeConnection, command: str) -> Reply:
        if signal is not None and command == shell.run_processes(PID, RUN_DIR, signal):
            state["alive"] = False
            return Reply(stdout=f"g {PID}\n".encode())
        return Reply(stdout=f"g {PID}\n".encode() if state["alive"] else b"")

    return processes


def test_launch_puts_the_secrets_and_the_script_on_the_host_before_starting_it():
    fake = FakeConnection()
    fake.script(exactly(shell.launch(RUN_DIR, "launch.sh", server.LOG_NAME)), stdout=f"{PID}\n".encode())
    started = launched(fake, {"HF_TOKEN": "hf_x"})
    assert started.pgid == PID
    assert fake.ops() == [
        ("run", shell.mkdir_private(RUN_DIR)),
        ("write_file", f"{RUN_DIR}/{shell.SECRETS_FILE}"),
        ("write_file", f"{RUN_DIR}/launch.sh"),
        ("run", shell.launch(RUN_DIR, "launch.sh", server.LOG_NAME)),
    ]
    assert fake.mode(f"{RUN_DIR}/{shell.SECRETS_FILE}") == 0o600 and fake.mode(f"{RUN_DIR}/launch.sh") == 0o700
    assert fake.files[f"{RUN_DIR}/launch.sh"] == SCRIPT.encode()


def test_a_launch_that_fails_is_reported_and_never_sent_twice():
    fake = FakeConnection()
    fake.script(exactly(shell.launch(RUN_DIR, "launch.sh", server.LOG_NAME)), stderr=b"setsid: not found\n",
                exit_status=127)
    with pytest.raises(ServerError, match="could not start the launch script: setsid: not found"):
        launched(fake)
    assert fake.commands.count(shell.launch(RUN_DIR, "launch.sh", server.LOG_NAME)) == 1
    assert fake.commands[-1] == shell.launch(RUN_DIR, "launch.sh", server.LOG_NAME)  # nothing after it


def test_a_server_that_exits_on_sigterm_is_never_sent_sigkill():
    fake = FakeConnection(files={f"{RUN_DIR}/exit_code": b"0\n"})
    fake.script("", respond=alive_until("TERM"))
    done = stopped(fake, grace=5)
    assert (done.gone, done.killed, done.exit_code) == (True, False, 0)
    assert fake.ops() == [
        ("run", shell.run_processes(PID, RUN_DIR, "TERM")),
        ("run", shell.run_processes(PID, RUN_DIR)),  # gone at the first check
        ("read_file", f"{RUN_DIR}/exit_code"),
    ]


def test_a_server_that_ignores_sigterm_gets_sigkill_after_the_grace_then_is_checked_gone():
    fake = FakeConnection()
    fake.script("", respond=alive_until("KILL"))
    done = stopped(fake, grace=0.1)
    assert (done.gone, done.killed, done.exit_code) == (True, True, None)  # SIGKILL ends the wrapper too
    term, kill = shell.run_processes(PID, RUN_DIR, "TERM"), shell.run_processes(PID, RUN_DIR, "KILL")
    check = shell.run_processes(PID, RUN_DIR)
    commands = fake.commands
    assert commands[0] == term and commands.count(kill) == 1
    between = commands[1:commands.index(kill)]
    assert between and set(between) == {check}, "only liveness checks between SIGTERM and SIGKILL"
    assert commands[commands.index(kill) + 1:] == [check]
    assert fake.ops("read_file") == [("read_file", f"{RUN_DIR}/exit_code")]


def test_a_server_that_survives_sigkill_is_reported_with_its_pids(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(server, "STOP_POLL_SECONDS", 0.001)  # 25 checks after SIGKILL, quickly
    fake = FakeConnection()
    fake.script("", respond=alive_until(None))
    done = stopped(fake, grace=0.05)
    assert (done.gone, done.killed, done.left) == (False, True, (PID,))
    kill = shell.run_processes(PID, RUN_DIR, "KILL")
    assert fake.commands.count(kill) == 1 and fake.commands[-1] == shell.run_processes(PID, RUN_DIR)
    assert not fake.ops("read_file")  # no exit code is read for a server still running
