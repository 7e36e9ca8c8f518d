"""Transports to hosts. `connect` opens the right one for a host."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from .base import Completed, Connection, FileStat, LinkLost, Reconnection, Unreachable
from .local import LocalConnection

__all__ = ["Completed", "Connection", "FileStat", "LinkLost", "Reconnection", "Unreachable", "connect",
           "is_this_machine"]


def is_this_machine(host: Host) -> bool:
    """The host is the machine orch runs on: its home and GPUs are this machine's, known without connecting."""
    return host.transport == "local"


async def connect(host: Host, *, reconnect: bool = False, timeout: float | None = None,
                  say: Callable[[str, str], None] | None = None) -> Connection:
    """A connection to `host`; with `reconnect`, an SSH one that reopens after a dropped link
    (`reconnecting.py`) for commands that must finish what they started, such as a run.
    `timeout` bounds an SSH handshake (default: the ssh config's, else the transport's).
    A slurm host is a node of an allocation made now (`slurm.py`; `say` hears of the job's queue
    state), released when the connection closes."""
    if host.slurm is not None:
        from .slurm import NodeConnection

        return await NodeConnection.open(host, say or (lambda _label, _text: None),
                                         lambda login: connect(login, reconnect=reconnect, timeout=timeout))
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

        return await ReconnectingConnection.open(host, lambda h: SSHConnection.open(h, timeout=timeout))
    return await SSHConnection.open(host, timeout=timeout)
