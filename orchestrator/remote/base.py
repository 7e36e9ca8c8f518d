"""The `Connection` protocol every transport implements, and the records it returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.errors import LinkLost, RemoteCommandError, Unreachable
from orchestrator.core.inventory import Host

__all__ = ["Completed", "Connection", "FileStat", "LinkLost", "Reconnection", "Unreachable", "command_failed"]


@dataclass(frozen=True)
class Completed:
    """A finished command."""

    command: str
    exit_status: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")


def command_failed(done: Completed, message: str) -> RemoteCommandError:
    """The error for a command that failed: `message` says what and what to do; the command, its
    exit status and its stderr come along as evidence for whoever handles it."""
    return RemoteCommandError(message, command=done.command, exit_status=done.exit_status, stderr=done.err)


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: float
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True)
class Reconnection:
    """A link a connection reopened after it dropped."""

    at: str  # when the link was reopened: UTC, ISO 8601 (as the store writes times)
    reason: str  # why the old link was lost, without the leading host name


class Connection(Protocol):
    """One open line to a host, reused by every stage of a command."""

    host: Host
    home: str

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        """The links reopened so far, oldest first (traffic outside the connection, such as HTTP
        over a forward, was cut by each); empty for a transport that never reopens one."""

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        """Run a shell command built by `core/shell/`. `idempotent`: running it twice does no harm, so a
        reconnecting transport may send it again after the link dropped mid-command."""

    async def read_file(self, path: str) -> bytes:
        """A file's bytes; FileNotFoundError if it does not exist."""

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write atomically: a temporary file in the same folder renamed over `path`.
        An existing file keeps its mode and owner unless `mode` is given."""

    async def stat(self, path: str) -> FileStat | None:
        """Size, mtime, mode and owner, or None when the path does not exist."""

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        """Copy a local folder's files to the host (created if missing)."""

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        """Write a local file's bytes from `offset` on into `path` (created, or kept up to `offset`
        and cut after the end), durably; `advance(n)` as bytes move (for progress bars). Writing
        the same bytes at the same offsets again is harmless, so a dropped link may resend it."""

    async def forward(self, remote_port: int) -> tuple[str, int]:
        """A local address that reaches 127.0.0.1:`remote_port` on the host (the same address for
        the life of the connection, across reconnects)."""

    async def close(self) -> None:
        """Close forwards and the connection."""
