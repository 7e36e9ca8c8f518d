"""The `Connection` protocol over SSH (asyncssh; `dial.py` opens the connection, `hostkeys.py` judges keys).

One connection per host, reused by every stage of a command: commands run on resident shells
(`resident.py`: one bash per session channel, kept for the next command; an exec channel per
command where a resident shell cannot start), at most `CHANNELS` channels open at once, under
stock sshd's `MaxSessions 10`; files move over one SFTP channel, and the server's port is reached
through local port forwarding.

A dropped link surfaces as `LinkLost` (never as a silent exit status), a host that cannot be
reached as `Unreachable`; `remote/reconnecting.py` builds reconnection on those two.
"""

from __future__ import annotations

import asyncio
import functools
import os
import posixpath
import secrets
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import asyncssh

from orchestrator.core import shell
from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from .base import Completed, FileStat, LinkLost, Reconnection, command_failed
from . import openssh
from .dial import CONNECT_TIMEOUT, connect, reason as _reason, target as _target
from .resident import Broken, NotStarted, Resident

CHANNELS = 8  # per connection, the SFTP channel included; stock sshd allows 10 (MaxSessions)
PUT_FILES_AT_ONCE = 16
PUT_CHUNK = 8 * 2**20  # bytes read locally per round of parallel SFTP writes (put_file)
SKIPPED_NAMES = ("__pycache__",)

P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate["SSHConnection", P], Coroutine[Any, Any, R]]  # an async method


def _watch_link(doing: str) -> Callable[[Method[P, R]], Method[P, R]]:
    """SFTP calls on a dropping link fail with socket errors or asyncssh disconnects, not SFTP
    statuses: report those as `LinkLost`, like every other operation."""
    def wrap(method: Method[P, R]) -> Method[P, R]:
        @functools.wraps(method)
        async def watched(self: SSHConnection, /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await method(self, *args, **kwargs)
            except (ConnectionError, asyncssh.DisconnectError) as exc:
                raise self._lost(doing, exc, started=True) from None
            except (asyncssh.Error, OSError) as exc:
                if self._conn.is_closed() and not isinstance(exc, (FileNotFoundError, PermissionError)):
                    raise self._lost(doing, exc, started=True) from None
                raise
        return watched
    return wrap


class SSHConnection:
    def __init__(self, host: Host, conn: asyncssh.SSHClientConnection, home: str):
        self.host = host
        self.home = home
        self._conn = conn
        self._commands = asyncio.Semaphore(CHANNELS - 1)
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_lock = asyncio.Lock()
        self._forwards: dict[int, asyncssh.SSHListener] = {}
        self._residents: list[Resident] = []  # idle resident shells
        self._exec_only = False  # a resident shell would not start here: an exec channel per command
        self._bulk = openssh.Route()  # big files' bytes through OpenSSH (put_file)

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        return ()  # this connection never reopens; `reconnecting.py` wraps it to

    @classmethod
    async def open(cls, host: Host, *, timeout: float | None = None) -> SSHConnection:
        """Connect and log in; `timeout` bounds the handshake (default: the ssh config's
        ConnectTimeout, else `CONNECT_TIMEOUT`)."""
        conn = await connect(host, timeout)
        self = cls(host, conn, "")
        try:
            # over SFTP, not `echo $HOME`: no login shell, whose rc files (conda, pyenv) can cost 100s of ms
            sftp = await self._sftp_client()
            self.home = await asyncio.wait_for(sftp.realpath("."), timeout or CONNECT_TIMEOUT)
        except (TimeoutError, asyncssh.Error) as exc:
            conn.close()
            raise HostError(f"{host.name}: logged in to {_target(host)} but its SFTP subsystem did not answer "
                            f"({_reason(exc)}); enable `Subsystem sftp` in the host's sshd_config") from None
        except BaseException:
            conn.close()
            raise
        resident = await self._start_resident()  # its login shell starts now, while the caller goes on
        if resident is not None:
            self._residents.append(resident)
        return self

    # -- commands -------------------------------------------------------------------------

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        """Run `command` under bash (as the local transport does), whatever the login shell is.
        (`idempotent`: a command whose resident shell ended under it runs again on an exec channel;
        a reconnecting wrapper also resends it after a dropped link.)"""
        async with self._commands:
            if self._conn.is_closed():
                raise self._lost("run a command", None, started=False)
            if not self._exec_only:
                resident = await self._run_resident(command, timeout, input, idempotent)
                if resident is not None:
                    return resident
            try:
                process = await self._conn.create_process(
                    shell.in_bash(command, deadline=timeout), encoding=None,
                    stdin=asyncssh.DEVNULL if input is None else asyncssh.PIPE,
                )
                try:
                    if input is not None:
                        process.stdin.write(input)
                        process.stdin.write_eof()
                    done = await process.wait(check=False, timeout=timeout)
                except asyncssh.TimeoutError:
                    _stop(process)
                    raise
                finally:
                    process.close()  # not awaited: sshd holds the channel until a timed-out command ends
            except asyncssh.TimeoutError:
                raise HostError(f"{self.host.name}: command timed out after {timeout} s: {command[:120]}") from None
            except (asyncssh.Error, OSError) as exc:
                if self._conn.is_closed():  # a channel that never opened ran nothing
                    started = not isinstance(exc, asyncssh.ChannelOpenError)
                    raise self._lost("run a command", exc, started=started) from None
                raise HostError(f"{self.host.name}: could not run a command: {_reason(exc)}; "
                                f"check the connection with `orch hosts check --hosts {self.host.name}`") from None
        if done.exit_status is None and done.exit_signal is None and self._conn.is_closed():
            # asyncssh ends a command's channel without a status when the connection goes
            raise self._lost("finish a command", None, started=True)
        status = done.exit_status if done.exit_status is not None else -1
        # encoding=None: asyncssh hands bytes (its completed-process type covers text too)
        return Completed(command, status, cast(bytes, done.stdout or b""), cast(bytes, done.stderr or b""))

    async def _run_resident(self, command: str, timeout: float | None, input: bytes | None,
                            idempotent: bool) -> Completed | None:
        """`command` on an idle resident shell (a new one when none is idle); None: run it on an
        exec channel instead (no resident shell starts here, or one ended under an idempotent command)."""
        resident = self._residents.pop() if self._residents else await self._start_resident()
        if resident is None:
            return None
        try:
            status, out, err = await asyncio.wait_for(resident.run(shell.in_bash(command, deadline=timeout), input,
                                                                   held=not idempotent),
                                                      timeout)
        except TimeoutError:
            resident.stop()
            resident.close()
            raise HostError(f"{self.host.name}: command timed out after {timeout} s: {command[:120]}") from None
        except NotStarted:
            resident.close()
            if self._conn.is_closed():
                raise self._lost("run a command", None, started=False) from None
            self._exec_only = True  # e.g. no bash, or a forced command: an exec channel per command, as before
            return None
        except (Broken, asyncssh.Error, OSError) as exc:
            resident.close()
            if self._conn.is_closed() or isinstance(exc, (ConnectionError, asyncssh.DisconnectError)):
                raise self._lost("finish a command", exc, started=True) from None
            if idempotent:
                return None
            raise HostError(f"{self.host.name}: the shell running a command ended ({exc}); it may have run: "
                            f"{command[:120]}") from None
        except BaseException:  # cancelled mid-command: the shell is out of step, never reused (it ends
            resident.close()  # after the command, as an exec channel's command does once closed)
            raise
        self._residents.append(resident)
        return Completed(command, status, out, err)

    async def _start_resident(self) -> Resident | None:
        try:
            return await Resident.start(self._conn)
        except (asyncssh.Error, OSError) as exc:
            if self._conn.is_closed():
                raise self._lost("run a command", exc, started=False) from None
            self._exec_only = True  # the host refuses another session channel: the exec channel as before
            return None

    # -- files ----------------------------------------------------------------------------

    @_watch_link("read a file")
    async def read_file(self, path: str) -> bytes:
        sftp = await self._sftp_client()
        target = self._abs(path)
        try:
            async with sftp.open(target, "rb") as handle:
                return await handle.read()
        except asyncssh.SFTPNoSuchFile:
            raise FileNotFoundError(f"{self.host.name}:{target}") from None
        except asyncssh.SFTPError as exc:
            raise self._file_error("read", target, exc) from None

    @_watch_link("write a file")
    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Temp file in the target's folder, fsync, keep mode/owner, posix-rename over the target."""
        sftp = await self._sftp_client()
        target = self._abs(path)
        folder, name = posixpath.split(target)
        existing = await self.stat(target)
        tmp = f"{folder}/.{name}.{secrets.token_hex(4)}.orch-tmp"
        try:
            await sftp.makedirs(folder, exist_ok=True)
            async with sftp.open(tmp, "wb") as handle:
                await handle.write(data)
                await _fsync(handle)
            keep = mode if mode is not None else existing.mode if existing is not None else None
            if keep is not None:
                await sftp.chmod(tmp, keep)
            if existing is not None:
                await _keep_owner(sftp, tmp, existing)
            await self._rename(sftp, tmp, target)
        except asyncssh.SFTPError as exc:
            await _remove_quietly(sftp, tmp)
            raise self._file_error("write", target, exc) from None
        except BaseException:
            await _remove_quietly(sftp, tmp)
            raise

    @_watch_link("stat a file")
    async def stat(self, path: str) -> FileStat | None:
        sftp = await self._sftp_client()
        try:
            attrs = await sftp.stat(self._abs(path))
        except asyncssh.SFTPNoSuchFile:
            return None
        except asyncssh.SFTPError as exc:
            raise self._file_error("stat", self._abs(path), exc) from None
        return FileStat(attrs.size or 0, float(attrs.mtime or 0), (attrs.permissions or 0) & 0o7777,
                        attrs.uid or 0, attrs.gid or 0)

    @_watch_link("copy a folder")
    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        """Copy a folder's files (bytecode caches aside), many files in flight on one SFTP channel."""
        sftp = await self._sftp_client()
        root = self._abs(remote_dir)
        files: list[tuple[Path, str]] = []
        folders = [root]
        for here, dirs, names in os.walk(local_dir):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_NAMES)
            relative = Path(here).relative_to(local_dir).as_posix()
            base = root if relative == "." else f"{root}/{relative}"
            folders.extend(f"{base}/{d}" for d in dirs)
            files.extend((Path(here) / n, f"{base}/{n}") for n in sorted(names) if not n.endswith(".pyc"))
        try:
            for folder in folders:  # parents first: os.walk is top-down
                await sftp.makedirs(folder, exist_ok=True)
            gate = asyncio.Semaphore(PUT_FILES_AT_ONCE)

            async def put(local: Path, remote: str) -> None:
                async with gate:
                    await sftp.put(str(local), remote, preserve=False)

            await asyncio.gather(*(put(local, remote) for local, remote in files))
        except asyncssh.SFTPError as exc:
            raise self._file_error("copy a folder to", root, exc) from None

    @_watch_link("write a file")
    async def put_file(self, local: Path, path: str, offset: int = 0, advance: Callable[[int], None] | None = None) -> None:
        """Write a local file's bytes from `offset` on into `path` (created, or kept up to `offset`):
        a big file's through this machine's OpenSSH client (`openssh.py`), the rest as many SFTP
        writes in flight per chunk, the next chunk read in a thread meanwhile; `advance(n)` as
        bytes move (for progress bars)."""
        sftp = await self._sftp_client()
        target = self._abs(path)
        try:
            if self._bulk.takes(self.host, local.stat().st_size - offset):
                offset, told = await self._bulk.send(self.host, sftp, local, target, offset, advance)
                advance = openssh.owed(advance, told)
            async with sftp.open(target, "r+b" if offset else "wb") as handle:
                with open(local, "rb") as source:
                    source.seek(offset)
                    reading = asyncio.ensure_future(asyncio.to_thread(source.read, PUT_CHUNK))
                    try:
                        while chunk := await reading:
                            reading = asyncio.ensure_future(asyncio.to_thread(source.read, PUT_CHUNK))
                            await handle.write(chunk, offset)
                            offset += len(chunk)
                            if advance:
                                advance(len(chunk))
                    finally:  # never close the file under a read still running
                        await asyncio.wait({reading})
                await handle.truncate(offset)
        except asyncssh.SFTPError as exc:
            raise self._file_error("write", target, exc) from None

    # -- ports ----------------------------------------------------------------------------

    async def forward(self, remote_port: int, local_port: int = 0) -> tuple[str, int]:
        """One listener per remote port for the life of the connection; `local_port` 0 picks a free
        one (a reconnect asks for the port the old connection listened on)."""
        listener = self._forwards.get(remote_port)
        if listener is None:
            try:
                listener = await self._conn.forward_local_port("127.0.0.1", local_port, "127.0.0.1", remote_port)
            except (asyncssh.Error, OSError) as exc:
                if self._conn.is_closed():
                    raise self._lost("forward a port", exc, started=False) from None
                raise HostError(f"{self.host.name}: could not forward a local port to port {remote_port} "
                                f"on the host: {_reason(exc)}; the host's sshd must allow TCP forwarding") from None
            self._forwards[remote_port] = listener
        return ("127.0.0.1", listener.get_port())

    async def close(self) -> None:
        for resident in self._residents:
            resident.close()
        self._residents.clear()
        for listener in self._forwards.values():
            listener.close()
        self._forwards.clear()
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        self._conn.close()
        try:
            await asyncio.wait_for(self._conn.wait_closed(), 5)
        except (TimeoutError, asyncssh.Error, OSError):
            pass  # the link is already gone; nothing more to release on our side

    # -- helpers --------------------------------------------------------------------------

    def _abs(self, path: str) -> str:
        """SFTP has no `~`; paths under it are the remote home's."""
        if path == "~" or path.startswith("~/"):
            return self.home.rstrip("/") + path[1:]
        return path

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        async with self._sftp_lock:
            if self._sftp is None:
                try:
                    self._sftp = await self._conn.start_sftp_client()
                except (asyncssh.Error, OSError) as exc:
                    if self._conn.is_closed():
                        raise self._lost("open SFTP", exc, started=False) from None
                    raise HostError(f"{self.host.name}: the SFTP subsystem is not available: {_reason(exc)}; "
                                    f"enable `Subsystem sftp` in the host's sshd_config") from None
            return self._sftp

    async def _rename(self, sftp: asyncssh.SFTPClient, tmp: str, target: str) -> None:
        try:
            await sftp.posix_rename(tmp, target)
        except asyncssh.SFTPOpUnsupported:  # servers without the OpenSSH extension: mv is still atomic
            moved = await self.run(shell.move(tmp, target))
            if not moved.ok:
                raise command_failed(moved, f"{self.host.name}: could not move {tmp} over {target}: "
                                            f"{moved.err.strip()}") from None

    def _file_error(self, verb: str, path: str, exc: asyncssh.SFTPError) -> Exception:
        if isinstance(exc, asyncssh.SFTPConnectionLost) or self._conn.is_closed():
            return self._lost(f"{verb} {path}", exc, started=True)
        if isinstance(exc, asyncssh.SFTPPermissionDenied):
            return PermissionError(f"{self.host.name}: permission denied to {verb} {path}; "
                                   f"check the owner of the file or log in as its owner")
        return HostError(f"{self.host.name}: could not {verb} {path}: {exc.reason}")


    def _lost(self, doing: str, exc: BaseException | None, *, started: bool) -> LinkLost:
        why = f" ({_reason(exc)})" if exc is not None else ""
        return LinkLost(f"{self.host.name}: the connection to {_target(self.host)} dropped; could not {doing}{why}",
                        started=started)


def _stop(process: asyncssh.SSHClientProcess[bytes]) -> None:
    """Ask sshd to end a command we gave up on (OpenSSH >= 7.9 honours channel signals). TERM, not
    KILL: the host's `timeout` (see `shell.in_bash`) passes it on to every process of the command."""
    try:
        process.terminate()
    except (asyncssh.Error, OSError):
        pass


async def _fsync(handle: asyncssh.SFTPClientFile) -> None:
    try:
        await handle.fsync()
    except asyncssh.SFTPOpUnsupported:
        pass  # servers without fsync@openssh.com: the rename still never exposes a partial file


async def _keep_owner(sftp: asyncssh.SFTPClient, tmp: str, existing: FileStat) -> None:
    written = await sftp.stat(tmp)
    if (written.uid, written.gid) == (existing.uid, existing.gid):
        return
    try:
        await sftp.chown(tmp, existing.uid, existing.gid)
    except asyncssh.SFTPError:
        pass  # only root may give a file away; the file then belongs to the login user, as with `cp`


async def _remove_quietly(sftp: asyncssh.SFTPClient, path: str) -> None:
    try:
        await sftp.remove(path)
    except (asyncssh.Error, OSError):
        pass
