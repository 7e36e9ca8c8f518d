"""Big files' bytes through this machine's OpenSSH client, where asyncssh's pure-Python packet
handling would be the limit (it holds a push to about half of scp's speed on a LAN).

`SSHConnection.put_file` hands a file with at least `BULK_MIN` bytes left to move to `ssh`, whose
remote `dd` writes them into the part file at their offsets: the file itself is ssh's stdin, so no
byte passes through Python, and progress is read off the file offset ssh shares with us. (ssh is
in orch's process group: a Ctrl-C or a hang-up ends it too; one that outlives a killed orch only
writes the bytes a resumed push writes, where it writes them.) The login is
the one orch's own connection made, with orch's trust: the same address, port, user, identity,
jump hosts and ssh config, every hop's key checked against the known_hosts files orch verified it
against (`hostkeys.Trust`), nothing ever written to them, never a prompt (BatchMode), nothing
secret on the command line. A key OpenSSH refuses is judged by orch's own dial again: a changed
key fails the push with the dial's message; a key orch trusts but OpenSSH would not (an entry
OpenSSH reads otherwise) leaves the bytes to SFTP.

The route is off for the connection, said once in the debug log, when there is no `ssh`, when
OpenSSH cannot log in where asyncssh did (a password, agent features OpenSSH lacks), or when an
attempt fails: the file goes on over SFTP from the bytes that arrived.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import asyncssh

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostError, Unreachable
from .dial import connect, identity_file
from .hostkeys import Trust

BULK_MIN = 32 * 2**20  # fewer bytes left go over SFTP: an OpenSSH login costs 0.1-0.3 s
BULK_AT_ONCE = 4  # ssh processes per connection (push moves FILES_AT_ONCE files at once)
PROGRESS_EVERY = 0.2  # seconds between progress reports
# AES-GCM first (the CPU's AES instructions), as orch's own connection prefers
CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr"
HOST_KEY_REFUSED = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "host key is known")
STDERR_KEPT = 2000

log = logging.getLogger(__name__)
Advance = Callable[[int], None]


class Route:
    """One connection's way to hand big files to OpenSSH, until an attempt shows it does not work."""

    def __init__(self) -> None:
        self.off: str | None = None  # why OpenSSH is not used (any more), once it is not
        self._looked = False
        self._at_once = asyncio.Semaphore(BULK_AT_ONCE)

    def takes(self, host: Host, left: int) -> bool:
        if not self._looked:
            self._looked = True
            if not shutil.which("ssh"):
                self._turn_off(host, "there is no `ssh` client on PATH")
        return self.off is None and left >= BULK_MIN

    async def send(self, host: Host, sftp: asyncssh.SFTPClient, local: Path, target: str, offset: int,
                   advance: Advance | None) -> tuple[int, int]:
        """Write `local`'s bytes from `offset` on into `target` (first cut to `offset`). Returns how
        far `target` now holds them (the whole file, unless OpenSSH failed: SFTP goes on from
        there) and how many bytes past that `advance` was already told of."""
        async with self._at_once:
            if self.off is not None:
                return offset, 0
            async with sftp.open(target, "r+b" if offset else "wb") as handle:
                await handle.truncate(offset)
            with tempfile.TemporaryDirectory(prefix="orch-ssh-") as folder:
                config = Path(folder) / "config"
                try:
                    command = _command(host, config, target, offset)
                except (OSError, ValueError, asyncssh.Error, HostError) as exc:
                    self._turn_off(host, f"its options could not be built ({exc})")
                    return offset, 0
                status, told, errors = await _run(command, local, offset, advance)
        if status == 0:
            size = (await sftp.stat(target)).size or 0
            if size == local.stat().st_size:
                _tell(advance, size - offset - told)
                log.debug("%s: %d bytes of %s moved through OpenSSH", host.name, size - offset, target)
                return size, 0
            errors = f"the host holds {size} bytes of {local.stat().st_size} after ssh ended"
        if status == 255 and any(sign in errors for sign in HOST_KEY_REFUSED):
            await self._judge_host_key(host, errors)
        arrived = (await sftp.stat(target)).size or 0
        self._turn_off(host, f"ssh exited with status {status}: {errors}")
        return arrived, max(0, offset + told - arrived)

    async def _judge_host_key(self, host: Host, errors: str) -> None:
        """OpenSSH refused the host's key: orch's own dial decides. A key it refuses fails the
        push with its message (e.g. HOST KEY CHANGED); one it trusts only turns this route off."""
        try:
            conn = await connect(host, None)
        except Unreachable as exc:  # no verdict: the bytes stay on the link orch verified
            log.debug("%s: OpenSSH refused the host key (%s); orch could not look again: %s", host.name, errors, exc)
            return
        except HostError:
            self.off = "OpenSSH refused the host key, and so does orch"
            raise
        conn.close()
        await conn.wait_closed()
        log.debug("%s: OpenSSH refused a host key orch trusts: %s", host.name, errors)

    def _turn_off(self, host: Host, why: str) -> None:
        if self.off is None:
            self.off = why
            log.debug("%s: big files go over SFTP from now on: %s", host.name, why)


def owed(advance: Advance | None, told: int) -> Advance | None:
    """`advance` that first swallows the `told` bytes it heard of already (ssh had read them, the
    host never got them: SFTP sends them again)."""
    if advance is None or told <= 0:
        return advance
    left = told

    def tell(moved: int) -> None:
        nonlocal left
        swallowed = min(left, moved)
        left -= swallowed
        _tell(advance, moved - swallowed)
    return tell


def _command(host: Host, config: Path, target: str, offset: int) -> list[str]:
    config.write_text(_config_text(host))
    command = ["ssh", "-F", str(config), "-T", "-x", "-a", "-e", "none", "-o", "ClearAllForwardings=yes",
               "-o", f"HostKeyAlias={_known_as(host)}"]
    if host.port:
        command += ["-p", str(host.port)]
    if host.user:
        command += ["-l", host.user]
    if host.proxy_jump:
        command += ["-J", host.proxy_jump]
    return [*command, "--", host.address or host.name, shell.in_bash(shell.write_stdin_at(target, offset))]


async def _run(command: list[str], local: Path, offset: int, advance: Advance | None) -> tuple[int, int, str]:
    """ssh with `local` from `offset` as its stdin; its exit status, the bytes it read (told to
    `advance` as it went) and the tail of its stderr."""
    fd = os.open(local, os.O_RDONLY)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        process = await asyncio.create_subprocess_exec(*command, stdin=fd, stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.PIPE)
        try:
            assert process.stderr is not None
            errors = asyncio.ensure_future(process.stderr.read())
            told = 0
            while True:
                done, _ = await asyncio.wait({errors}, timeout=PROGRESS_EVERY)
                read = os.lseek(fd, 0, os.SEEK_CUR) - offset  # the offset ssh's reads move: ours too
                _tell(advance, read - told)
                told = read
                if done:
                    break
            status = await process.wait()
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
    finally:
        os.close(fd)
    text = errors.result().decode(errors="replace").strip()
    return status, told, " ".join(text[-STDERR_KEPT:].split())


def _tell(advance: Advance | None, moved: int) -> None:
    if advance is not None and moved > 0:
        advance(moved)


def _config_text(host: Host) -> str:
    """The ssh config every hop reads (`-F` reaches the jump hosts' ssh too; `-o` does not): orch's
    trust and a login without prompts first (the first value OpenSSH reads wins), then the ssh
    config orch's connection read, then orch's keepalive and timeout where it sets none."""
    trust = Trust.for_host(host)
    lines = ["BatchMode yes", "StrictHostKeyChecking yes",
             "UserKnownHostsFile " + " ".join(_quoted(str(p)) for p in trust.read),
             "GlobalKnownHostsFile /dev/null", "CheckHostIP no", "UpdateHostKeys no", "ControlMaster no",
             "ControlPath none", "ForwardAgent no", "ForwardX11 no", "PermitLocalCommand no", "Compression no",
             f"Ciphers {CIPHERS}"]
    if host.identity:
        lines += ["IdentitiesOnly yes", f"IdentityFile {_quoted(identity_file(host))}"]
    user_config = _user_config(host)
    if user_config is not None:
        lines.append(f"Include {_quoted(user_config)}")
    defaults = ["ServerAliveInterval 10", "ServerAliveCountMax 3", "ConnectTimeout 10"]
    return "Host *\n" + "".join(f"  {line}\n" for line in lines) + "Host *\n" + "".join(f"  {d}\n" for d in defaults)


def _user_config(host: Host) -> str | None:
    """The ssh config orch's connection read: the host's `ssh_config:`, else ~/.ssh/config."""
    path = os.path.expanduser(host.ssh_config or "~/.ssh/config")
    if host.ssh_config and not os.path.isfile(path):
        raise HostError(f"{host.name}: the ssh config {path} does not exist")
    return os.path.abspath(path) if os.path.isfile(path) else None


def _known_as(host: Host) -> str:
    """The name orch's connection looked the host's key up under in known_hosts (the ssh config's
    HostKeyAlias or HostName, `[name]:port` off port 22), so OpenSSH looks up the same entries."""
    address = host.address or host.name
    where = {"config": [os.path.expanduser(host.ssh_config)]} if host.ssh_config else {}
    options = asyncssh.SSHClientConnectionOptions(host=address, port=host.port or (), **where, client_keys=None,
                                                  known_hosts=None, agent_path=None)
    name = options.host_key_alias or options.host
    return name if options.port == 22 else f"[{name}]:{options.port}"


def _quoted(path: str) -> str:
    """A path for an ssh config line: quoted, `%` (a token there) doubled."""
    return '"' + path.replace("%", "%%") + '"'
