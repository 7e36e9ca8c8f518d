"""The Connection protocol is whole on every transport: nothing in orch probes a transport for an
optional method (put_file, reconnections) or asks which transport it is."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.core.inventory import Host
from orchestrator.remote import connect
from orchestrator.remote.base import Connection
from orchestrator.remote.local import LocalConnection
from orchestrator.remote.reconnecting import ReconnectingConnection
from orchestrator.remote.ssh import SSHConnection

PROTOCOL = [name for name in vars(Connection) if not name.startswith("_")] + ["host", "home"]


def test_every_transport_has_every_member_of_the_protocol():
    assert {"put_file", "reconnections", "run", "forward"} <= set(PROTOCOL)
    host = Host(name="here", transport="local")
    local = LocalConnection(host)

    async def reopen(_: Host) -> LocalConnection:
        return local

    # made without a link: only their members are looked at
    for conn in (local, SSHConnection(host, None, "/home/x"), ReconnectingConnection(host, local, reopen)):
        missing = [name for name in PROTOCOL if not hasattr(conn, name)]
        assert not missing, f"{type(conn).__name__} lacks {missing}"


def test_local_put_file_resumes_at_an_offset_and_cuts_what_was_beyond(tmp_path: Path):
    source, target = tmp_path / "source", tmp_path / "target"
    source.write_bytes(b"0123456789")
    target.write_bytes(b"01234XXXXXXXXXXXXXXX")  # a part file: its first 5 bytes are ours, the rest is stale
    moved: list[int] = []

    async def go() -> None:
        conn = await connect(Host(name="here", transport="local"))
        await conn.put_file(source, str(target), 5, moved.append)
        assert conn.reconnections == ()
        await conn.close()

    asyncio.run(go())
    assert target.read_bytes() == b"0123456789" and sum(moved) == 5
