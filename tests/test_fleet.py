"""A fleet of real sshd hosts, each in its own network namespace on one bridge (root only).

Addresses are a 10.x.y.0/24 the fixture checks is unused and creates itself, inside namespaces on
this machine; everything is torn down when the module's tests end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

import sshd
from orchestrator.host import facts as hostfacts

pytestmark = pytest.mark.skipif(sshd.netns_missing() is not None, reason=sshd.netns_missing() or "")

HOSTS = 16


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    built = sshd.Fleet(tmp_path_factory.mktemp("fleet"), HOSTS)
    try:
        built.start()
        yield built
    finally:
        built.stop()


@pytest.fixture(autouse=True)
def _no_user_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def hosts(fleet: sshd.Fleet):
    known = fleet.known_hosts()
    return [s.host(known, fleet.folder / "work" / s.name) for s in fleet.servers]


def test_hosts_check_fans_out_over_the_fleet(fleet):
    started = time.monotonic()
    facts = asyncio.run(hostfacts.check_all(hosts(fleet)))
    elapsed = time.monotonic() - started
    assert [f.host for f in facts] == [s.name for s in fleet.servers]
    assert all(f.reachable for f in facts), [f.error for f in facts if not f.reachable]
    assert all(f.python and f.disk_free_bytes and f.port_listening is False for f in facts)
    assert elapsed < 20


def test_a_cut_link_reports_that_host_unreachable_and_the_rest_succeed(fleet):
    chosen = hosts(fleet)[:6]
    fleet.cut(2)
    facts = asyncio.run(hostfacts.check_all(chosen, connect_timeout=3))
    down = [f for f in facts if not f.reachable]
    assert [f.host for f in down] == [chosen[2].name]
    assert down[0].error.startswith(f"{chosen[2].name}: ") and "\n" not in down[0].error
    assert all(f.reachable for f in facts if f.host != chosen[2].name)


def test_unknown_and_changed_keys_on_fleet_hosts_are_refused(fleet, tmp_path):
    first, second = fleet.servers[0], fleet.servers[1]
    known = tmp_path / "known_hosts"
    wrong = sshd.public(second.host_key).split()[:2]
    known.write_text(f"{first.address} {wrong[0]} {wrong[1]}\n")  # first's address, second's key
    changed = dataclasses.replace(first.host(known, tmp_path), host_key_policy="accept-new")
    unknown = second.host(known, tmp_path)
    facts = asyncio.run(hostfacts.check_all([changed, unknown]))
    assert [f.reachable for f in facts] == [False, False]
    assert "HOST KEY CHANGED" in facts[0].error and "unknown host key" in facts[1].error
    assert known.read_text() == f"{first.address} {wrong[0]} {wrong[1]}\n"
