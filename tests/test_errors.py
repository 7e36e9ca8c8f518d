"""Errors carry their evidence as typed attributes: a server that died early hands its diagnosis
up on the ServerError, a failed host command its command, exit status and stderr."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator import errors
from orchestrator.core.inventory import Host
from orchestrator.host.lock import HostLock
from orchestrator.remote import connect


def test_a_server_error_without_a_known_signature_has_no_diagnosis():
    assert errors.ServerError("not ready").diagnosis is None


def test_a_failed_host_command_carries_command_exit_status_and_stderr(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the workdir must go")

    async def go() -> None:
        conn = await connect(Host(name="here", transport="local"))
        try:
            await HostLock(conn, str(blocker / "workdir"), "run").acquire()
        finally:
            await conn.close()

    with pytest.raises(errors.RemoteCommandError) as caught:
        asyncio.run(go())
    error = caught.value
    assert isinstance(error, errors.HostError) and error.exit_code == errors.EXIT_HOST
    assert error.exit_status != 0 and str(blocker) in error.command
    assert "Not a directory" in error.stderr_tail and error.stderr_tail in str(error)


def test_stderr_tail_keeps_the_last_lines():
    assert errors.stderr_tail("\n".join(f"line {i}" for i in range(10)) + "\n\n", 3) == "line 7\nline 8\nline 9"


def test_every_error_orch_defines_is_an_orch_error():
    defined = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]
    assert len(defined) >= 12 and all(issubclass(e, errors.OrchError) for e in defined)
