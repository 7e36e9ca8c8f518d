"""Fan-out: bounded concurrent opens, per-host results and errors (no sshd needed)."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from orchestrator.remote.group import fan_out


class FakeConnection:
    def __init__(self, host: Host):
        self.host = host
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_fan_out_bounds_opens_but_not_the_work_and_keeps_order():
    hosts = [Host(name=f"h{i}") for i in range(20)]
    opening = {"now": 0, "most": 0}
    working = {"now": 0, "most": 0}
    opened: list[FakeConnection] = []

    async def opener(host: Host) -> FakeConnection:
        opening["now"] += 1
        opening["most"] = max(opening["most"], opening["now"])
        await asyncio.sleep(0.02)
        opening["now"] -= 1
        if host.name == "h7":
            raise HostError("h7: no answer")
        conn = FakeConnection(host)
        opened.append(conn)
        return conn

    async def work(conn: FakeConnection) -> str:
        working["now"] += 1
        working["most"] = max(working["most"], working["now"])
        await asyncio.sleep(0.1)
        working["now"] -= 1
        if conn.host.name == "h3":
            raise HostError("h3: command failed")
        return conn.host.name.upper()

    results = asyncio.run(fan_out(hosts, work, limit=4, opener=opener))
    assert list(results) == [h.name for h in hosts]
    assert opening["most"] == 4
    assert working["most"] > 4
    assert isinstance(results["h7"], HostError) and isinstance(results["h3"], HostError)
    assert results["h0"] == "H0"
    assert all(c.closed for c in opened)


def test_fan_out_lets_bugs_propagate():
    async def opener(host: Host) -> FakeConnection:
        return FakeConnection(host)

    async def work(conn: FakeConnection) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        asyncio.run(fan_out([Host(name="a")], work, opener=opener))
