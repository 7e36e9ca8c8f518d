"""A host behind a jump host (`proxy_jump:`), with two real OpenSSH sshds on 127.0.0.1: the jump's
key goes through orch's host-key policy like the host's own, and errors name the jump."""

from __future__ import annotations

import asyncio
import getpass
import os
import subprocess
import time
from pathlib import Path

import pytest

import sshd
from sshd import session
from orchestrator.errors import EXIT_HOST, HostError
from orchestrator.core.inventory import Host
from orchestrator.remote.base import Unreachable
from orchestrator.remote.ssh import SSHConnection

pytestmark = pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


@pytest.fixture
def jump(tmp_path: Path):
    running = sshd.start(tmp_path / "jump", "jump")
    yield running
    running.stop()


@pytest.fixture
def target(tmp_path: Path, jump: sshd.Sshd):
    """The host behind the jump; one client key logs in to both (the host's `identity:`)."""
    running = sshd.start(tmp_path / "target", "gpu1", client_key=jump.client_key)
    yield running
    running.stop()


def behind(target: sshd.Sshd, jump: sshd.Sshd, known: Path, workdir: Path, **overrides: object) -> Host:
    return target.host(known, workdir, proxy_jump=f"{getpass.getuser()}@{jump.address}:{jump.port}", **overrides)


def refusal(host: Host) -> str:
    with pytest.raises(HostError) as caught:
        asyncio.run(SSHConnection.open(host))
    assert caught.value.exit_code == EXIT_HOST and "\n" not in str(caught.value)
    return str(caught.value)


def fingerprint(server: sshd.Sshd) -> str:
    return subprocess.run(["ssh-keygen", "-lf", f"{server.host_key}.pub"], capture_output=True, text=True,
                          check=True).stdout.split()[1]


def jump_links(jump: sshd.Sshd) -> int:
    """How many client connections the jump's sshd serves now."""
    return len(sshd._sshd_descendants(jump.process.pid))


def wait_no_jump_links(jump: sshd.Sshd) -> bool:
    deadline = time.monotonic() + 5
    while jump_links(jump) and time.monotonic() < deadline:
        time.sleep(0.05)
    return jump_links(jump) == 0


def nothing_written(tmp_path: Path) -> bool:
    home = Path(os.environ["HOME"])
    return not (tmp_path / "work").exists() and not (home / ".config").exists() and not (home / ".ssh").exists()


def test_command_runs_on_the_host_through_the_jump(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    host = behind(target, jump, known, tmp_path / "work")

    async def work(conn):
        return await conn.run("echo behind the jump"), jump_links(jump)

    done, links_while_open = session(host, work)
    assert done.out == "behind the jump\n"
    assert links_while_open == 1
    assert wait_no_jump_links(jump)  # closing the host's connection closed the jump's
    assert known.read_text() == jump.known_line() + target.known_line()


def test_jump_given_as_ssh_config_alias(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    target.client_options("Host bastion", f"  HostName {jump.address}", f"  Port {jump.port}",
                          f"  User {getpass.getuser()}")
    host = target.host(known, tmp_path / "work", proxy_jump="bastion")
    assert session(host, lambda conn: conn.run("echo via alias")).out == "via alias\n"


def test_unknown_jump_key_is_refused_naming_the_jump_and_nothing_is_written(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(target.known_line())  # the host is trusted, its jump is not
    message = refusal(behind(target, jump, known, tmp_path / "work"))
    assert message.startswith(f"gpu1: unknown host key for [127.0.0.1]:{jump.port} (jump host of gpu1): ")
    assert fingerprint(jump) in message
    assert f"ssh-keyscan -p {jump.port} 127.0.0.1 >> {known}" in message and "accept-new" in message
    assert known.read_text() == target.known_line()
    assert nothing_written(tmp_path)
    assert wait_no_jump_links(jump)


def test_ssh_config_proxy_jump_goes_through_the_same_policy(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(target.known_line())
    target.client_options("Host gpu-alias", f"  HostName {target.address}",
                          f"  ProxyJump {getpass.getuser()}@{jump.address}:{jump.port}")
    message = refusal(target.host(known, tmp_path / "work", address="gpu-alias"))
    assert f"unknown host key for [127.0.0.1]:{jump.port} (jump host of gpu1)" in message
    assert known.read_text() == target.known_line()


def test_unknown_host_key_behind_a_trusted_jump_closes_the_jump(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line())
    message = refusal(behind(target, jump, known, tmp_path / "work"))
    assert message.startswith(f"gpu1: unknown host key for [127.0.0.1]:{target.port}: ")
    assert fingerprint(target) in message and "jump host" not in message
    assert wait_no_jump_links(jump)


def test_accept_new_records_the_jump_key_too(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    host = behind(target, jump, known, tmp_path / "work", host_key_policy="accept-new")
    assert session(host, lambda conn: conn.run("true")).ok
    assert known.read_text() == jump.known_line() + target.known_line()
    strict = behind(target, jump, known, tmp_path / "work")
    assert session(strict, lambda conn: conn.run("true")).ok
    assert known.read_text() == jump.known_line() + target.known_line()  # not written twice


def test_changed_jump_key_is_refused_even_with_accept_new(jump, target, tmp_path):
    kind, blob = sshd.public(sshd.keygen(tmp_path / "other_key")).split()[:2]
    stale = f"[{jump.address}]:{jump.port} {kind} {blob}\n"
    known = tmp_path / "known_hosts"
    known.write_text(stale + target.known_line())
    message = refusal(behind(target, jump, known, tmp_path / "work", host_key_policy="accept-new"))
    assert message.startswith(f"gpu1: HOST KEY CHANGED for [127.0.0.1]:{jump.port} (jump host of gpu1): ")
    assert fingerprint(jump) in message
    assert f"ssh-keygen -R '[127.0.0.1]:{jump.port}' -f {known}" in message
    assert known.read_text() == stale + target.known_line()
    assert nothing_written(tmp_path)


def test_a_malformed_jump_is_a_clear_error(target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(target.known_line())
    message = refusal(target.host(known, tmp_path / "work", proxy_jump="me@box:ssh"))
    assert message.startswith("gpu1: cannot read the jump host 'me@box:ssh'") and "proxy_jump" in message


def test_host_down_behind_the_jump_is_unreachable_and_closes_the_jump(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    host = behind(target, jump, known, tmp_path / "work")
    target.stop()
    with pytest.raises(Unreachable) as caught:
        asyncio.run(SSHConnection.open(host))
    assert str(caught.value).startswith(f"gpu1: {host.user}@127.0.0.1:{target.port} refused or reset the connection")
    assert wait_no_jump_links(jump)


def test_a_jump_that_forbids_forwarding_says_so(jump, target, tmp_path):
    config = jump.folder / "sshd_config"
    config.write_text(config.read_text().replace("AllowTcpForwarding yes", "AllowTcpForwarding no"))
    jump.stop()
    jump.relaunch()
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    message = refusal(behind(target, jump, known, tmp_path / "work"))
    assert message.startswith(
        f"gpu1: the jump host would not open a connection to {getpass.getuser()}@127.0.0.1:{target.port} ")
    assert "AllowTcpForwarding yes" in message


def test_a_jump_with_a_proxy_jump_of_its_own_is_refused_before_connecting(jump, target, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    target.client_options("Host bastion", f"  HostName {jump.address}", f"  Port {jump.port}", "  ProxyJump outer")
    message = refusal(target.host(known, tmp_path / "work", proxy_jump="bastion"))
    assert message == ("gpu1: the ssh config gives the jump host bastion a ProxyJump of its own (outer); list the "
                       "whole chain in the host's `proxy_jump:` (`outer,bastion`) or set `ProxyJump none` for bastion")
