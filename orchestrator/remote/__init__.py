"""Transports to hosts. `connect` opens the right one for a host."""

from __future__ import annotations

from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from .base import Completed, Connection, FileStat, LinkLost, Unreachable
from .local import LocalConnection

__all__ = ["Completed", "Connection", "FileStat", "LinkLost", "Unreachable", "connect"]


async def connect(host: Host, *, reconnect: bool = False) -> Connection:
    """A connection to `host`; with `reconnect`, an SSH one that reopens after a dropped link
    (`reconnecting.py`) for commands that must finish what they started, such as a run."""
    if host.transport == "local":
        return LocalConnection(host)
    try:
        from .ssh import SSHConnection
    except ImportError:
        raise HostError(
            f"{host.name}: the ssh transport is not available in this build; use transport: local"
        ) from None
    if reconnect:
        from .reconnecting import ReconnectingConnection

        return await ReconnectingConnection.open(host, SSHConnection.open)
    return await SSHConnection.open(host)
