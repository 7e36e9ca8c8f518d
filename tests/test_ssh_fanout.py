"""Fan-out: bounded concurrent opens, per-host results and errors (no sshd needed)."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from orchestrator.remote.group import fan_out, first_hop


class FakeConnection:
    def __init__(self, host: Host):
        self.host = host
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_fan_out_bounds_opens_to_one_sshd_but_not_the_work_and_keeps_order():
    hosts = [Host(name=f"h{i}", address="10.0.0.1", port=22) for i in range(20)]  # one sshd, 20 names
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


def _most_opening_at_once(hosts: list[Host], limit: int) -> int:
    opening = {"now": 0, "most": 0}

    async def opener(host: Host) -> FakeConnection:
        opening["now"] += 1
        opening["most"] = max(opening["most"], opening["now"])
        await asyncio.sleep(0.02)
        opening["now"] -= 1
        return FakeConnection(host)

    async def work(conn: FakeConnection) -> str:
        return conn.host.name

    asyncio.run(fan_out(hosts, work, limit=limit, opener=opener))
    return opening["most"]


def test_hosts_behind_different_sshds_handshake_side_by_side_and_a_jump_host_bounds_its_own():
    """MaxStartups is each sshd's: 12 hosts of their own open at once; 12 behind one jump host, or
    one address on one port, 3 at a time; the first hop of a chain is the one bounded."""
    apart = [Host(name=f"n{i}", address=f"10.0.0.{i}") for i in range(12)]
    assert _most_opening_at_once(apart, 3) == 12
    jumped = [Host(name=f"j{i}", address=f"10.1.0.{i}", proxy_jump="bastion, inner") for i in range(12)]
    assert _most_opening_at_once(jumped, 3) == 3
    same = [Host(name=f"s{i}", address="10.2.0.1", port=2222) for i in range(6)] + [
        Host(name=f"t{i}", address="10.2.0.1", port=2223) for i in range(6)]
    assert _most_opening_at_once(same, 3) == 6  # two sshds on two ports: 3 each
    assert first_hop(jumped[0]) == "jump:bastion" and first_hop(Host(name="plain")) == "ssh:plain:22"


def test_fan_out_lets_bugs_propagate():
    async def opener(host: Host) -> FakeConnection:
        return FakeConnection(host)

    async def work(conn: FakeConnection) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        asyncio.run(fan_out([Host(name="a")], work, opener=opener))
