"""Opening an SSH connection to a host: the handshake (retried while the host refuses or resets
us), the host's jump hosts, and the settings taken from the inventory and the ssh config. Every
host key, a jump host's included, meets orch's own trust and policy (`hostkeys.py`).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from dataclasses import dataclass
from typing import Any, cast

import asyncssh

from orchestrator.errors import HostError, SpecError
from orchestrator.core.inventory import Host
from .base import Unreachable
from .hostkeys import HostKeyChecker, Trust, Verdict

CONNECT_TIMEOUT = 10.0  # unless the ssh config sets ConnectTimeout
KEEPALIVE = 10.0  # unless the ssh config sets ServerAliveInterval / ServerAliveCountMax:
KEEPALIVE_COUNT = 3  # a silent link is declared lost after about 30-40 s
RETRIES = 3  # handshake attempts on a refused or reset connection (sshd restarting, MaxStartups)
BACKOFF = 0.5


async def connect(host: Host, timeout: float | None) -> asyncssh.SSHClientConnection:
    """Open and authenticate, through the host's jump hosts if it has any."""
    trust = Trust.for_host(host)
    address = host.address or host.name
    config = _read_config(host, address, _where(host))
    # the ssh config's ProxyJump: text or None (asyncssh types the option for every kind of tunnel)
    jump = await _open_jumps(host, trust, host.proxy_jump or cast(str | None, config.tunnel), timeout)
    verdict = Verdict()
    settings = {**_where(host), **_unset_by_config(config, timeout), **_options(host, trust, verdict),
                **_login(host), "tunnel": jump}
    try:
        conn = await _handshake(host, target(host), address, settings, verdict)
    except BaseException:
        await _close_quietly(jump)
        raise
    conn.set_tunnel(jump)  # as asyncssh does for its own jumps: the jump closes when this connection closes or drops
    return conn


async def _handshake(host: Host, target: str, address: str, settings: dict[str, Any],
                     verdict: Verdict) -> asyncssh.SSHClientConnection:
    """One handshake with `address` (`target` names it in errors), retried with backoff while it
    refuses or resets us."""
    delay = BACKOFF
    for attempt in range(1, RETRIES + 1):
        verdict.message = ""
        try:
            return await asyncssh.connect(address, **settings)
        except (ConnectionRefusedError, ConnectionResetError, asyncssh.ConnectionLost,
                asyncssh.ChannelOpenError) as exc:  # a jump host that cannot reach the next hop: a channel error
            if isinstance(exc, asyncssh.ChannelOpenError) and exc.code != asyncssh.OPEN_CONNECT_FAILED:
                raise HostError(f"{host.name}: the jump host would not open a connection to {target} ({reason(exc)}); "
                                f"its sshd must allow TCP forwarding (AllowTcpForwarding yes)") from None
            if attempt == RETRIES:
                raise Unreachable(f"{host.name}: {target} refused or reset the connection "
                                  f"{RETRIES} times ({reason(exc)}); check that sshd runs there") from None
        except asyncssh.HostKeyNotVerifiable:
            raise HostError(verdict.message or f"{host.name}: the host key of {target} is not trusted") from None
        except asyncssh.PermissionDenied:
            raise HostError(f"{host.name}: {target} refused our keys; add this machine's public key to "
                            f"~/.ssh/authorized_keys there, or set the host's `identity:`") from None
        except TimeoutError:
            raise Unreachable(f"{host.name}: no answer from {target} in time; "
                              f"check the address, the network and that sshd runs there") from None
        except socket.gaierror as exc:  # the name does not resolve: waiting rarely fixes that
            raise HostError(f"{host.name}: cannot resolve {address} ({reason(exc)}); set the host's `address:` "
                            "in the inventory, or check the name and DNS") from None
        except OSError as exc:  # no route, network down: the kind of trouble that passes
            raise Unreachable(f"{host.name}: cannot connect to {target}: {reason(exc)}") from None
        except asyncssh.Error as exc:
            raise HostError(f"{host.name}: cannot connect to {target}: {reason(exc)}") from None
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


# -- jump hosts ---------------------------------------------------------------------------

# one hop of a jump chain: [user@]host[:port], the host possibly an ssh config alias or [IPv6]
_HOP = re.compile(r"(?:(?P<user>[^@]+)@)?(?:\[(?P<bracketed>[^\]]+)\]|(?P<name>[^@:\[\]]+))(?::(?P<port>\d+))?")


@dataclass(frozen=True)
class _Hop:
    text: str  # as the inventory or ssh config wrote it, for errors
    address: str
    user: str | None
    port: int | None


async def _open_jumps(host: Host, trust: Trust, chain: str | None,
                      timeout: float | None) -> asyncssh.SSHClientConnection | None:
    """The host's jump hosts (`proxy_jump:`, else the ssh config's ProxyJump) in turn, each reached
    through the one before. We open them, not asyncssh, so their keys meet the host's own trust
    and policy; closing the last one closes them all."""
    through = None
    try:
        for hop in _hops(host, chain) if chain else []:
            conn = await _open_jump(host, trust, hop, through, timeout)
            conn.set_tunnel(through)
            through = conn
    except BaseException:
        await _close_quietly(through)
        raise
    return through


async def _open_jump(host: Host, trust: Trust, hop: _Hop, through: asyncssh.SSHClientConnection | None,
                     timeout: float | None) -> asyncssh.SSHClientConnection:
    """The host's ssh config, keepalive, timeout and known_hosts apply; the login is the hop's
    own (its user, else the config's), with the host's `identity:` unless the config names a key."""
    where = _config_file(host)
    if hop.user:
        where["username"] = hop.user
    if hop.port:
        where["port"] = hop.port
    config = _read_config(host, hop.address, where)
    if through is None and config.tunnel:  # asyncssh would follow it past orch's host-key checks
        raise HostError(f"{host.name}: the ssh config gives the jump host {hop.text} a ProxyJump of its own "
                        f"({config.tunnel}); list the whole chain in the host's `proxy_jump:` "
                        f"(`{config.tunnel},{hop.text}`) or set `ProxyJump none` for {hop.address}")
    verdict = Verdict()
    settings = {**where, **_unset_by_config(config, timeout), **_options(host, trust, verdict, jump=True),
                "tunnel": through}
    if host.identity and not config.config.get("IdentityFile"):
        settings["client_keys"] = [identity_file(host)]
    return await _handshake(host, f"{hop.text} (jump host of {host.name})", hop.address, settings, verdict)


def _hops(host: Host, chain: str) -> list[_Hop]:
    hops = []
    for text in (part.strip() for part in chain.split(",")):
        match = _HOP.fullmatch(text)
        if match is None:
            where = "`proxy_jump:` in the inventory" if host.proxy_jump else "ProxyJump in its ssh config"
            raise HostError(f"{host.name}: cannot read the jump host {text!r}: expected host, host:port, user@host "
                            f"or user@host:port (several separated by commas); fix the host's {where}")
        port = match["port"]
        hops.append(_Hop(text, match["bracketed"] or match["name"], match["user"], int(port) if port else None))
    return hops


async def _close_quietly(conn: asyncssh.SSHClientConnection | None) -> None:
    if conn is None:
        return
    conn.close()
    try:
        await asyncio.wait_for(conn.wait_closed(), 5)
    except (TimeoutError, asyncssh.Error, OSError):
        pass  # the link is already gone; nothing more to release on our side


# -- settings -----------------------------------------------------------------------------


def _read_config(host: Host, address: str, where: dict[str, Any]) -> asyncssh.SSHClientConnectionOptions:
    """The ssh config's settings for `address`, read without keys or known_hosts: cheap, no thread."""
    try:
        return asyncssh.SSHClientConnectionOptions(host=address, **where, client_keys=None, known_hosts=None,
                                                   agent_path=None)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise HostError(f"{host.name}: cannot read the ssh config ({reason(exc)}); check the host's "
                        f"`ssh_config:` and `proxy_jump:` in the inventory") from None


def _unset_by_config(config: asyncssh.SSHClientConnectionOptions, timeout: float | None) -> dict[str, Any]:
    """orch's keepalive and handshake timeout where the ssh config sets none (its
    ServerAliveInterval, ServerAliveCountMax and ConnectTimeout win, as users expect); an explicit
    `timeout` above both."""
    unset: dict[str, Any] = {}
    if not config.keepalive_interval:
        unset.update(keepalive_interval=KEEPALIVE, keepalive_count_max=KEEPALIVE_COUNT)
    if timeout is not None or config.connect_timeout is None:
        unset["connect_timeout"] = timeout or CONNECT_TIMEOUT
    return unset


def _where(host: Host) -> dict[str, Any]:
    """Where to connect: the ssh config to read and the port, when the inventory says."""
    where = _config_file(host)
    if host.port:
        where["port"] = host.port
    return where


def _config_file(host: Host) -> dict[str, Any]:
    return {"config": [os.path.expanduser(host.ssh_config)]} if host.ssh_config else {}


def _options(host: Host, trust: Trust, verdict: Verdict, *, jump: bool = False) -> dict[str, Any]:
    return {
        "known_hosts": trust.known(),
        "client_factory": lambda: HostKeyChecker(host, trust, verdict, jump=jump),
        # AES-GCM runs on the CPU's AES instructions: about 2.5x asyncssh's first choice, chacha20-poly1305
        "encryption_algs": "^aes128-gcm@openssh.com",
    }


def _login(host: Host) -> dict[str, Any]:
    login: dict[str, Any] = {}
    if host.user:
        login["username"] = host.user
    if host.identity:
        login["client_keys"] = [identity_file(host)]
    return login


def identity_file(host: Host) -> str:
    """The host's `identity:` file, checked to be a private key before any connection is made."""
    path = os.path.expanduser(host.identity or "")
    where = f"{host.name}: identity file {path} (the host's `identity:` in the inventory)"
    if not os.path.isfile(path):
        raise SpecError(f"{where} does not exist; point it at a private key, e.g. ~/.ssh/id_ed25519")
    try:
        asyncssh.read_private_key(path)
    except asyncssh.KeyImportError as exc:
        raise SpecError(f"{where} is not a usable private key ({exc}); use an unencrypted key or an ssh agent") from None
    except OSError as exc:
        raise SpecError(f"{where} cannot be read ({reason(exc)}); check its mode") from None
    return path


def target(host: Host) -> str:
    where = host.address or host.name
    user = f"{host.user}@" if host.user else ""
    return f"{user}{where}:{host.port}" if host.port else f"{user}{where}"


def reason(exc: BaseException) -> str:
    errno = getattr(exc, "errno", None)
    # a resolver error's errno (-2, -3) is no OS error number: its own text says what happened
    text = (getattr(exc, "reason", None) or getattr(exc, "strerror", None)
            or (os.strerror(errno) if errno else None) or str(exc) or type(exc).__name__)
    return " ".join(str(text).split())
