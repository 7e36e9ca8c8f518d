"""The `Connection` protocol over SSH (asyncssh). The only module that imports asyncssh.

One connection per host, reused by every stage of a command: commands run on exec channels (at
most `CHANNELS` open at once, under stock sshd's `MaxSessions 10`), files move over one SFTP
channel, and the server's port is reached through local port forwarding.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import secrets
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from .. import shell
from ..errors import HostError
from ..inventory import Host
from .base import Completed, FileStat

CHANNELS = 8  # per connection, the SFTP channel included; stock sshd allows 10 (MaxSessions)
CONNECT_TIMEOUT = 10.0
KEEPALIVE = 15.0
RETRIES = 3  # handshake attempts on a refused or reset connection (sshd restarting, MaxStartups)
BACKOFF = 0.5
PUT_FILES_AT_ONCE = 16
SKIPPED_NAMES = ("__pycache__",)
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
ORCH_KNOWN_HOSTS = "~/.config/orch/known_hosts"  # the only known_hosts orch writes by default


class SSHConnection:
    def __init__(self, host: Host, conn: asyncssh.SSHClientConnection, home: str):
        self.host = host
        self.home = home
        self._conn = conn
        self._commands = asyncio.Semaphore(CHANNELS - 1)
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_lock = asyncio.Lock()
        self._forwards: dict[int, asyncssh.SSHListener] = {}

    @classmethod
    async def open(cls, host: Host, *, timeout: float = CONNECT_TIMEOUT) -> "SSHConnection":
        conn = await _connect(host, timeout)
        self = cls(host, conn, "")
        try:
            # over SFTP, not `echo $HOME`: no login shell, whose rc files (conda, pyenv) can cost 100s of ms
            sftp = await self._sftp_client()
            self.home = await asyncio.wait_for(sftp.realpath("."), timeout)
        except (asyncio.TimeoutError, asyncssh.Error) as exc:
            conn.close()
            raise HostError(f"{host.name}: logged in to {_target(host)} but its SFTP subsystem did not answer "
                            f"({_reason(exc)}); enable `Subsystem sftp` in the host's sshd_config") from None
        except BaseException:
            conn.close()
            raise
        return self

    # -- commands -------------------------------------------------------------------------

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None) -> Completed:
        """Run `command` under bash (as the local transport does), whatever the login shell is."""
        async with self._commands:
            try:
                process = await self._conn.create_process(
                    shell.in_bash(command), encoding=None,
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
                raise HostError(f"{self.host.name}: could not run a command: {_reason(exc)}; "
                                f"check the connection with `orch hosts check --hosts {self.host.name}`") from None
        status = done.exit_status if done.exit_status is not None else -1
        return Completed(command, status, done.stdout or b"", done.stderr or b"")

    # -- files ----------------------------------------------------------------------------

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

    # -- ports ----------------------------------------------------------------------------

    async def forward(self, remote_port: int) -> tuple[str, int]:
        """One listener per remote port for the life of the connection."""
        listener = self._forwards.get(remote_port)
        if listener is None:
            try:
                listener = await self._conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", remote_port)
            except (asyncssh.Error, OSError) as exc:
                raise HostError(f"{self.host.name}: could not forward a local port to port {remote_port} "
                                f"on the host: {_reason(exc)}; the host's sshd must allow TCP forwarding") from None
            self._forwards[remote_port] = listener
        return ("127.0.0.1", listener.get_port())

    async def close(self) -> None:
        for listener in self._forwards.values():
            listener.close()
        self._forwards.clear()
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        self._conn.close()
        try:
            await asyncio.wait_for(self._conn.wait_closed(), 5)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
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
                    raise HostError(f"{self.host.name}: the SFTP subsystem is not available: {_reason(exc)}; "
                                    f"enable `Subsystem sftp` in the host's sshd_config") from None
            return self._sftp

    async def _rename(self, sftp: asyncssh.SFTPClient, tmp: str, target: str) -> None:
        try:
            await sftp.posix_rename(tmp, target)
        except asyncssh.SFTPOpUnsupported:  # servers without the OpenSSH extension: mv is still atomic
            moved = await self.run(shell.move(tmp, target))
            if not moved.ok:
                raise HostError(f"{self.host.name}: could not move {tmp} over {target}: {moved.err.strip()}") from None

    def _file_error(self, verb: str, path: str, exc: asyncssh.SFTPError) -> Exception:
        if isinstance(exc, asyncssh.SFTPPermissionDenied):
            return PermissionError(f"{self.host.name}: permission denied to {verb} {path}; "
                                   f"check the owner of the file or log in as its owner")
        return HostError(f"{self.host.name}: could not {verb} {path}: {exc.reason}")


def _stop(process: asyncssh.SSHClientProcess) -> None:
    """Ask sshd to kill a command we gave up on (OpenSSH >= 7.9 honours channel signals)."""
    try:
        process.kill()
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


async def _connect(host: Host, timeout: float) -> asyncssh.SSHClientConnection:
    """Open and authenticate, retrying with backoff while the host refuses or resets us."""
    trust = _Trust.for_host(host)
    delay = BACKOFF
    for attempt in range(1, RETRIES + 1):
        verdict = _Verdict()
        try:
            return await asyncssh.connect(
                host.address or host.name, **_options(host, trust, verdict, timeout),
            )
        except (ConnectionRefusedError, ConnectionResetError, asyncssh.ConnectionLost) as exc:
            if attempt == RETRIES:
                raise HostError(f"{host.name}: {_target(host)} refused or reset the connection "
                                f"{RETRIES} times ({_reason(exc)}); check that sshd runs there") from None
        except asyncssh.HostKeyNotVerifiable:
            raise HostError(verdict.message or f"{host.name}: the host key of {_target(host)} is not trusted") from None
        except asyncssh.PermissionDenied:
            raise HostError(f"{host.name}: {_target(host)} refused our keys; add this machine's public key to "
                            f"~/.ssh/authorized_keys there, or set the host's `identity:`") from None
        except asyncio.TimeoutError:
            raise HostError(f"{host.name}: no answer from {_target(host)} within {timeout:g} s; "
                            f"check the address, the network and that sshd runs there") from None
        except (asyncssh.Error, OSError) as exc:
            raise HostError(f"{host.name}: cannot connect to {_target(host)}: {_reason(exc)}") from None
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def _options(host: Host, trust: "_Trust", verdict: "_Verdict", timeout: float) -> dict:
    options: dict = {
        "known_hosts": trust.known(),
        "client_factory": lambda: _HostKeyChecker(host, trust, verdict),
        "connect_timeout": timeout,
        "keepalive_interval": KEEPALIVE,
        "keepalive_count_max": 4,
    }
    if host.ssh_config:
        options["config"] = [os.path.expanduser(host.ssh_config)]
    if host.port:
        options["port"] = host.port
    if host.user:
        options["username"] = host.user
    if host.identity:
        options["client_keys"] = [os.path.expanduser(host.identity)]
    if host.proxy_jump:
        options["tunnel"] = host.proxy_jump
    return options


def _target(host: Host) -> str:
    where = host.address or host.name
    user = f"{host.user}@" if host.user else ""
    return f"{user}{where}:{host.port}" if host.port else f"{user}{where}"


def _reason(exc: BaseException) -> str:
    errno = getattr(exc, "errno", None)
    text = (getattr(exc, "reason", None) or (os.strerror(errno) if errno else None) or str(exc)
            or type(exc).__name__)
    return " ".join(str(text).split())


# -- host keys --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Trust:
    """Which known_hosts files vouch for host keys, and where `accept-new` records a new one."""

    read: tuple[Path, ...]
    write: Path
    accept_new: bool

    @classmethod
    def for_host(cls, host: Host) -> "_Trust":
        accept_new = host.host_key_policy == "accept-new"
        if host.known_hosts:
            own = Path(os.path.expanduser(host.known_hosts))
            return cls((own,), own, accept_new)
        orch = Path(os.path.expanduser(ORCH_KNOWN_HOSTS))
        return cls((Path(os.path.expanduser(USER_KNOWN_HOSTS)), orch), orch, accept_new)

    def known(self) -> asyncssh.SSHKnownHosts:
        """Every trusted entry; always an object, so asyncssh never falls back to files of its own."""
        known = asyncssh.SSHKnownHosts()
        for path in self.read:
            if path.is_file():
                known.load(path.read_text())
        return known

    def vouching_file(self, host: str, addr: str, port: int | None) -> Path | None:
        """The first file holding some key for this host (so a different key means it CHANGED)."""
        for path in self.read:
            if path.is_file():
                keys = asyncssh.match_known_hosts(asyncssh.import_known_hosts(path.read_text()), host, addr, port)[0]
                if keys:
                    return path
        return None

    def add(self, entry: str, key: asyncssh.SSHKey) -> None:
        self.write.parent.mkdir(parents=True, exist_ok=True)
        line = f"{entry} {key.export_public_key('openssh').decode().strip()}\n"
        fd = os.open(self.write, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@dataclass
class _Verdict:
    """Why a host key was refused, filled in during the handshake for the error we raise after it."""

    message: str = ""


class _HostKeyChecker(asyncssh.SSHClient):
    """Asked by asyncssh about a key no trusted entry matches: unknown, or changed."""

    def __init__(self, host: Host, trust: _Trust, verdict: _Verdict):
        self._host = host
        self._trust = trust
        self._verdict = verdict

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        listed_port = None if port in (None, 22) else port
        entry = host if listed_port is None else f"[{host}]:{port}"
        shown = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
        vouching = self._trust.vouching_file(host, addr, listed_port)
        if vouching is not None:
            self._verdict.message = (
                f"{self._host.name}: HOST KEY CHANGED for {entry}: it now presents {shown} but {vouching} "
                f"holds another key; this may be an attack, so orch refuses; if the host was reinstalled, "
                f"remove the old key with `ssh-keygen -R '{entry}' -f {vouching}` and connect again")
            return False
        if self._trust.accept_new:
            self._trust.add(entry, key)
            return True
        scan = f"ssh-keyscan -p {port} {host}" if listed_port else f"ssh-keyscan {host}"
        self._verdict.message = (
            f"{self._host.name}: unknown host key for {entry}: {shown}; if that fingerprint is right, trust it "
            f"with `{scan} >> {self._trust.write}`, or set `host_key_policy: accept-new` for this host")
        return False
