"""Host-key trust for the SSH transport: which known_hosts files vouch for a host, and the verdict
on a key none of them matches (unknown: refused with its fingerprint, or recorded under
`host_key_policy: accept-new`; changed: always refused). A connection checks the host key again
at every re-key (after each RekeyLimit bytes, 1 GiB by default): a key this check let in must be
the one every later exchange on that connection shows, as OpenSSH requires."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from orchestrator.core.inventory import Host

USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
ORCH_KNOWN_HOSTS = "~/.config/orch/known_hosts"  # the only known_hosts orch writes by default


@dataclass(frozen=True)
class Trust:
    """Which known_hosts files vouch for host keys, and where `accept-new` records a new one."""

    read: tuple[Path, ...]
    write: Path
    accept_new: bool

    @classmethod
    def for_host(cls, host: Host) -> Trust:
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

    def listed(self, host: str, addr: str, port: int | None) -> list[tuple[Path, list[asyncssh.SSHKey]]]:
        """Each file holding keys for this host, with those keys, as they are now (a connection
        loaded them at its start; another connection may have recorded a key since)."""
        found = []
        for path in self.read:
            if path.is_file():
                keys = asyncssh.match_known_hosts(asyncssh.import_known_hosts(path.read_text()), host, addr, port)[0]
                if keys:
                    found.append((path, list(keys)))
        return found

    def add(self, entry: str, key: asyncssh.SSHKey) -> None:
        self.write.parent.mkdir(parents=True, exist_ok=True)
        line = f"{entry} {key.export_public_key('openssh').decode().strip()}\n"
        fd = os.open(self.write, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@dataclass
class Verdict:
    """Why a host key was refused, filled in during the handshake for the error we raise after it."""

    message: str = ""


class HostKeyChecker(asyncssh.SSHClient):
    """Asked by asyncssh, at the first key exchange and at every re-key, about a key missing from
    the trusted entries the connection loaded at its start: unknown, changed, or one let in here
    before. One checker per connection. `jump`: the key is the host's jump host's
    (`proxy_jump:`), trusted by the same files and policy."""

    def __init__(self, host: Host, trust: Trust, verdict: Verdict, *, jump: bool = False):
        self._host = host
        self._trust = trust
        self._verdict = verdict
        self._role = f" (jump host of {host.name})" if jump else ""
        # the key let in at this connection's first exchange: asyncssh's own trusted set does not
        # learn it, so each re-key asks again, and must get the same key or nothing
        self._let_in: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        listed_port = None if port in (None, 22) else port
        entry = host if listed_port is None else f"[{host}]:{port}"
        shown = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
        if self._let_in is not None:
            return self._same_key_at_re_key(key)
        listed = self._trust.listed(host, addr, listed_port)
        if any(key in keys for _, keys in listed):  # recorded since this connection started
            self._let_in = key
            return True
        if listed:
            vouching = listed[0][0]
            self._verdict.message = (
                f"{self._host.name}: HOST KEY CHANGED for {entry}{self._role}: it now presents {shown} but {vouching} "
                f"holds another key; this may be an attack, so orch refuses; if the host was reinstalled, "
                f"remove the old key with `ssh-keygen -R '{entry}' -f {vouching}` and connect again")
            return False
        if self._trust.accept_new:
            self._trust.add(entry, key)
            self._let_in = key
            return True
        scan = f"ssh-keyscan -p {port} {host}" if listed_port else f"ssh-keyscan {host}"
        self._verdict.message = (
            f"{self._host.name}: unknown host key for {entry}{self._role}: {shown}; if that fingerprint is right, "
            f"trust it with `{scan} >> {self._trust.write}`, or set `host_key_policy: accept-new` for this host")
        return False

    def _same_key_at_re_key(self, key: asyncssh.SSHKey) -> bool:
        """A re-key must show the key the connection was opened with, whatever the files say now.
        A refusal drops the link (asyncssh: "Host key is not trusted"); a reconnect then meets
        the full check above, with its message."""
        return key == self._let_in
