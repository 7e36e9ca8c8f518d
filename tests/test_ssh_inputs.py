"""Bad SSH settings in the inventory are one clear line before any connection is tried: a missing
or garbage identity file, a name that does not resolve."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.errors import HostError, SpecError
from orchestrator.core.inventory import Host
from orchestrator.remote.ssh import SSHConnection


def open_host(host: Host) -> None:
    async def go():
        conn = await SSHConnection.open(host, timeout=5)
        await conn.close()

    asyncio.run(go())


def test_a_missing_identity_file_names_the_host_and_the_key(tmp_path, no_user_ssh):
    host = Host("gpu-1", transport="ssh", address="127.0.0.1", port=1, identity=str(tmp_path / "id_missing"))
    with pytest.raises(SpecError, match=r"gpu-1: identity file .*id_missing \(the host's `identity:` in the inventory\) does not exist"):
        open_host(host)


def test_a_garbage_identity_file_is_not_a_usable_key(tmp_path, no_user_ssh):
    key = tmp_path / "id_garbage"
    key.write_text("this is not a key\n")
    host = Host("gpu-1", transport="ssh", address="127.0.0.1", port=1, identity=str(key))
    with pytest.raises(SpecError, match=r"gpu-1: identity file .*id_garbage .* is not a usable private key"):
        open_host(host)


def test_a_name_that_does_not_resolve_says_so(no_user_ssh):
    host = Host("gpu-node-that-does-not-exist.invalid", transport="ssh")
    with pytest.raises(HostError) as caught:
        open_host(host)
    message = str(caught.value)
    assert "cannot resolve gpu-node-that-does-not-exist.invalid" in message and "Unknown error" not in message
    assert "set the host's `address:`" in message
