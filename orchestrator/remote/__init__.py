"""Transports to hosts. `connect` opens the right one for a host."""

from __future__ import annotations

from ..errors import HostError
from ..inventory import Host
from .base import Completed, Connection, FileStat
from .local import LocalConnection

__all__ = ["Completed", "Connection", "FileStat", "connect"]


async def connect(host: Host) -> Connection:
    if host.transport == "local":
        return LocalConnection(host)
    try:
        from .ssh import SSHConnection
    except ImportError:
        raise HostError(
            f"{host.name}: the ssh transport is not available in this build; use transport: local"
        ) from None
    return await SSHConnection.open(host)
