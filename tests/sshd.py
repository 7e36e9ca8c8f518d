"""Real OpenSSH sshd processes for the tests: on 127.0.0.1, or one per network namespace (a fleet).

Every sshd has its own host key, config, authorized key and pid file in a temp folder; clients get
their own key and known_hosts. Nothing here reads or writes the user's ~/.ssh.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.core.inventory import Host

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start without it


def sshd_missing() -> str | None:
    """Why real-sshd tests cannot run here, or None."""
    if not os.access(SSHD, os.X_OK):
        return "OpenSSH sshd is not installed (`make system-deps` installs openssh-server as root)"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen is not installed (openssh-client)"
    return None


def require_sshd() -> None:
    reason = sshd_missing()
    if reason:
        pytest.skip(reason)


def keygen(path: Path) -> Path:
    """A fresh ed25519 key pair at `path` (private) and `path`.pub."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "orch-test", "-f", str(path)],
                   check=True, capture_output=True)
    return path


def public(key: Path) -> str:
    return Path(f"{key}.pub").read_text().strip()


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def known_entry(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def session(host: Host, work):
    """Open a connection, run `work(conn)`, always close."""
    from orchestrator.remote.ssh import SSHConnection

    async def go():
        conn = await SSHConnection.open(host)
        try:
            return await work(conn)
        finally:
            await conn.close()
    return asyncio.run(go())


@dataclass
class Sshd:
    """One running sshd and what a client needs to reach it."""

    name: str
    address: str
    port: int
    folder: Path
    host_key: Path
    client_key: Path
    process: subprocess.Popen | None = None
    netns: str | None = None

    def known_line(self) -> str:
        """The known_hosts line that trusts this sshd's host key."""
        kind, blob = public(self.host_key).split()[:2]
        return f"{known_entry(self.address, self.port)} {kind} {blob}\n"

    def host(self, known_hosts: Path, workdir: Path, **overrides: object) -> Host:
        """An inventory entry for this sshd; `ssh_config` points at an empty file so ~/.ssh/config is not read."""
        empty_config = self.folder / "ssh_config"
        empty_config.touch()
        values: dict = dict(
            name=self.name, transport="ssh", address=self.address, port=self.port, user=getpass.getuser(),
            identity=str(self.client_key), ssh_config=str(empty_config), known_hosts=str(known_hosts),
            workdir=str(workdir),
        )
        values.update(overrides)
        return Host(**values)

    def inventory_entry(self, known_hosts: Path, workdir: Path) -> str:
        h = self.host(known_hosts, workdir)
        return (f"  {h.name}:\n    transport: ssh\n    address: {h.address}\n    port: {h.port}\n    user: {h.user}\n"
                f"    identity: {h.identity}\n    ssh_config: {h.ssh_config}\n    known_hosts: {h.known_hosts}\n"
                f"    workdir: {h.workdir}\n")

    def rehearsal_entry(self, known_hosts: Path, workdir: Path) -> str:
        """An inventory entry for a rehearsal host reached over SSH: this test Python on the far
        side (the same machine), 8 simulated GPUs."""
        return (self.inventory_entry(known_hosts, workdir)
                + f"    rehearsal: true\n    gpus: 8\n    python: {sys.executable}\n")

    def client_options(self, *lines: str) -> None:
        """Options for orch's SSH client to this host (e.g. `ServerAliveInterval 1`), in the
        `ssh_config` file its inventory entry names."""
        (self.folder / "ssh_config").write_text("".join(f"{line}\n" for line in lines))

    def kill(self) -> None:
        """SIGKILL the listening sshd and every per-connection sshd under it (by pid), as a crash
        would: open connections drop, new ones are refused. Processes a session started in their
        own session (a server launched with setsid) are not sshd's and keep running."""
        if self.process is None:
            return
        for pid in [*_sshd_descendants(self.process.pid), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self.process = None

    def drop_connections(self) -> int:
        """SIGKILL the per-connection sshd processes (by pid): every open connection drops at once,
        while the listening sshd keeps accepting new ones. Returns how many were killed."""
        killed = 0
        for pid in _sshd_descendants(self.process.pid if self.process else 0):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        return killed

    def relaunch(self) -> None:
        """Start this sshd again with the same config, host key and port."""
        command = [SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")]
        if self.netns:
            command = ["ip", "netns", "exec", self.netns, *command]
        with open(self.folder / "sshd.log", "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_listening(self)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def start(folder: Path, name: str = "sshd", *, address: str = "127.0.0.1", port: int | None = None,
          client_key: Path | None = None, netns: str | None = None) -> Sshd:
    """Start sshd in the foreground (-D -e) with its own keys and config; wait until it accepts."""
    require_sshd()
    folder.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    host_key = keygen(folder / "host_key")
    client_key = client_key or keygen(folder / "client_key")
    (folder / "authorized_keys").write_text(public(client_key) + "\n")
    port = port or free_port(address)
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"ListenAddress {address}", f"Port {port}", f"HostKey {host_key}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", f"PidFile {folder / 'sshd.pid'}",
        "StrictModes no", "PermitRootLogin yes", "UsePAM no", "UseDNS no",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "AllowTcpForwarding yes", "Subsystem sftp internal-sftp", "PrintMotd no", "LogLevel ERROR", "",
    ]))
    command = [SSHD, "-D", "-e", "-f", str(config)]
    if netns:
        command = ["ip", "netns", "exec", netns, *command]
    log = open(folder / "sshd.log", "wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    server = Sshd(name, address, port, folder, host_key, client_key, process, netns)
    _wait_listening(server)
    return server


def _sshd_descendants(root: int) -> list[int]:
    """Pids of the sshd processes below `root` (the per-connection ones), from /proc."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        parents[int(entry)], names[int(entry)] = int(rest[1]), name
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                frontier.append(pid)
                if names[pid].startswith("sshd"):
                    found.append(pid)
    return found


def _wait_listening(server: Sshd, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"sshd exited at start: {(server.folder / 'sshd.log').read_text()[-500:]}")
        try:
            with socket.create_connection((server.address, server.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"sshd on {server.address}:{server.port} did not listen within {seconds} s")


# -- a fleet in network namespaces ------------------------------------------------------------


def netns_missing() -> str | None:
    """Why a namespace fleet cannot be built here, or None."""
    reason = sshd_missing()
    if reason:
        return reason
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "iproute2 (`ip`) is not installed"
    probe = f"orchprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    subprocess.run(command, check=True, capture_output=True, text=True)


def _unused_subnet() -> str:
    """A 10.x.y.0/24 no interface or route on this machine uses yet (so we only touch our own addresses)."""
    taken = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    taken += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(100):
        prefix = f"10.{random.randint(200, 249)}.{random.randint(0, 255)}"
        if f"{prefix}." not in taken:
            return prefix
    raise RuntimeError("no unused 10.200-249.x.0/24 subnet found for the test fleet")


@dataclass
class Fleet:
    """`count` hosts, each a network namespace with a veth on one bridge and its own sshd on port 22."""

    folder: Path
    count: int
    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    prefix: str = ""
    servers: list[Sshd] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    bridge_up: bool = False

    @property
    def bridge(self) -> str:
        return f"orchbr{self.tag}"

    def veth(self, index: int) -> str:
        """The bridge-side end of host `index`'s link (cut it to make the host unreachable)."""
        return f"v{self.tag}h{index}"

    def start(self) -> Fleet:
        self.prefix = _unused_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        self.bridge_up = True
        _ip("addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        client_key = keygen(self.folder / "client_key")
        for index in range(self.count):
            self.servers.append(self._host(index, client_key))
        return self

    def _host(self, index: int, client_key: Path) -> Sshd:
        ns, inner, address = f"orch{self.tag}n{index}", f"v{self.tag}n{index}", f"{self.prefix}.{10 + index}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        _ip("link", "add", self.veth(index), "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", self.veth(index), "master", self.bridge, "up")
        _ip("addr", "add", f"{address}/24", "dev", inner, netns=ns)
        _ip("link", "set", inner, "up", netns=ns)
        _ip("link", "set", "lo", "up", netns=ns)
        return start(self.folder / f"h{index}", f"h{index:02d}", address=address, port=22,
                     client_key=client_key, netns=ns)

    def known_hosts(self) -> Path:
        path = self.folder / "known_hosts"
        path.write_text("".join(s.known_line() for s in self.servers))
        return path

    def cut(self, index: int) -> None:
        _ip("link", "set", self.veth(index), "down")

    def restore(self, index: int) -> None:
        _ip("link", "set", self.veth(index), "up")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        for ns in self.namespaces:  # the veth pairs go with their namespace
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self.bridge_up:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self.servers, self.namespaces, self.bridge_up = [], [], False


FAST_FAILURE = ("ServerAliveInterval 1", "ServerAliveCountMax 2", "ConnectTimeout 2")  # a cut link shows in ~2 s


def fast_failing_fleet(folder: Path, count: int):
    """A started Fleet of `count` namespace hosts whose clients give up on a dead link quickly
    (FAST_FAILURE), stopped afterwards: the body of a module-scoped fixture (`yield from`)."""
    built = Fleet(folder, count)
    try:
        built.start()
        for server in built.servers:
            server.client_options(*FAST_FAILURE)
        yield built
    finally:
        built.stop()
