"""The SSH transport against a real OpenSSH sshd on 127.0.0.1 (skipped when sshd is not installed)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import sshd
from sshd import session
from orchestrator.errors import EXIT_HOST, HostError
from orchestrator.core.inventory import Host
from orchestrator.remote.local import LocalConnection
from orchestrator.remote.ssh import SSHConnection
from support.cli import orch

pytestmark = pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


@pytest.fixture
def server(sshd_box):
    return sshd_box


@pytest.fixture
def known(tmp_path: Path, server: sshd.Sshd) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text(server.known_line())
    return path


@pytest.fixture
def host(tmp_path: Path, server: sshd.Sshd, known: Path) -> Host:
    return server.host(known, tmp_path / "work")


def test_run_returns_exit_codes_and_output_without_raising(host):
    async def work(conn):
        plain = await conn.run("echo out; echo err >&2; exit 3")
        fed = await conn.run("tr a-z A-Z", input=b"hello")
        bash_only = await conn.run("a=(x y); echo ${#a[@]}")  # bash even if the login shell is not
        return conn.home, plain, fed, bash_only

    home, plain, fed, bash_only = session(host, work)
    assert home.startswith("/")
    assert (plain.exit_status, plain.out, plain.err, plain.ok) == (3, "out\n", "err\n", False)
    assert fed.stdout == b"HELLO" and fed.ok
    assert bash_only.out == "2\n"


def test_commands_run_on_resident_shells_framed_exactly(host):
    """One login shell serves many commands (its rc files run once); commands at once get a shell
    each; any bytes in and out (NULs, newlines, no trailing newline) come back exactly, with the
    exit status, and the next command on that shell is in step."""
    blob = bytes(range(256)) * 64

    async def work(conn):
        parents = [(await conn.run("echo $PPID", idempotent=i % 2 == 0)).out for i in range(6)]
        together = await asyncio.gather(*(conn.run("sleep 0.3; echo $PPID") for _ in range(3)))
        echoed = await conn.run("cat; printf 'tail' >&2; exit 7", input=blob)
        after = await conn.run("printf 'no newline'")
        return parents, [t.out for t in together], echoed, after

    parents, together, echoed, after = session(host, work)
    assert len(set(parents)) == 1  # the same resident bash started each command
    assert len(set(together)) == 3  # three at once: three shells
    assert (echoed.exit_status, echoed.stdout, echoed.stderr) == (7, blob, b"tail")
    assert after.stdout == b"no newline" and after.ok


def test_run_timeout_raises_host_error(host):
    async def work(conn):
        with pytest.raises(HostError, match="timed out after 0.5 s"):
            await conn.run("sleep 5", timeout=0.5)
        return await conn.run("echo still usable")

    started = time.monotonic()
    assert session(host, work).out == "still usable\n"
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_a_timed_out_command_leaves_nothing_it_started_running(host, tmp_path, transport):
    """A command given up on ends with its children (a shared host keeps no orphaned grep or Python)."""
    pid_file = tmp_path / "child.pid"
    command = f"sleep 300 & echo $! > {pid_file}; sleep 300; wait"

    async def work(conn):
        with pytest.raises(HostError, match="timed out"):
            await conn.run(command, timeout=1)

    if transport == "ssh":
        session(host, work)
    else:
        asyncio.run(work(LocalConnection(dataclasses.replace(host, transport="local"))))
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), f"the command's child {child} outlived the timeout ({transport})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended, waiting for its parent


def test_many_commands_share_one_connection_within_max_sessions(host):
    async def work(conn):
        return await asyncio.gather(*(conn.run(f"sleep 0.2; echo {i}") for i in range(24)))

    done = session(host, work)
    assert [d.out.strip() for d in done] == [str(i) for i in range(24)]


def test_write_file_is_atomic_and_keeps_mode(host, tmp_path):
    target = tmp_path / "work" / "f.txt"
    target.parent.mkdir()
    target.write_bytes(b"old")
    target.chmod(0o640)

    async def work(conn):
        await conn.write_file(str(target), b"new bytes")
        kept = await conn.stat(str(target))
        await conn.write_file(str(tmp_path / "work" / "deep" / "g.sh"), b"#!/bin/sh\n", mode=0o755)
        data = await conn.read_file(str(target))
        with pytest.raises(FileNotFoundError):
            await conn.read_file(str(tmp_path / "work" / "missing"))
        return kept, data, await conn.stat(str(tmp_path / "work" / "missing"))

    kept, data, missing = session(host, work)
    assert data == b"new bytes" and target.read_bytes() == b"new bytes"
    assert kept.mode == 0o640 and kept.size == 9 and kept.uid == os.getuid()
    assert (tmp_path / "work" / "deep" / "g.sh").stat().st_mode & 0o777 == 0o755
    assert missing is None
    assert sorted(p.name for p in target.parent.iterdir()) == ["deep", "f.txt"]  # no temp file left


def test_stat_reports_size_mtime_mode_owner(host, tmp_path):
    f = tmp_path / "work" / "s"
    f.parent.mkdir()
    f.write_bytes(b"12345")
    f.chmod(0o600)
    st = session(host, lambda conn: conn.stat(str(f)))
    assert (st.size, st.mode, st.uid, st.gid) == (5, 0o600, os.getuid(), os.getgid())
    assert abs(st.mtime - f.stat().st_mtime) < 1.5


def test_put_tree_copies_files_and_skips_bytecode(host, tmp_path):
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "__pycache__").mkdir()
    (src / "pkg" / "__init__.py").write_text("x = 1\n")
    (src / "pkg" / "sub" / "m.py").write_text("y = 2\n")
    (src / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    for i in range(30):
        (src / "pkg" / f"f{i}.txt").write_text(str(i))
    dest = tmp_path / "work" / "tree"
    session(host, lambda conn: conn.put_tree(src, str(dest)))
    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    expected = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert copied == expected
    assert (dest / "pkg" / "sub" / "m.py").read_text() == "y = 2\n"


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_forward_reaches_a_port_on_the_host(host):
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    remote_port = web.server_address[1]

    async def work(conn):
        first = await conn.forward(remote_port)
        again = await conn.forward(remote_port)
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://{first[0]}:{first[1]}/", timeout=5).read())
        return first, again, body

    try:
        first, again, body = session(host, work)
    finally:
        web.shutdown()
    assert first == again and first[0] == "127.0.0.1" and first[1] != remote_port
    assert json.loads(body) == {"ok": True}


def test_ssh_config_alias_gives_address_port_user_and_key(server, known, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-box\n  HostName {server.address}\n  Port {server.port}\n"
                      f"  User {server.host(known, tmp_path).user}\n  IdentityFile {server.client_key}\n")
    alias = Host(name="gpu-box", ssh_config=str(config), known_hosts=str(known))
    assert session(alias, lambda conn: conn.run("echo via alias")).out == "via alias\n"


def test_unknown_host_key_is_refused_with_fingerprint_and_nothing_changes(server, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = server.host(empty, tmp_path / "work")
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{server.host_key}.pub"], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    with pytest.raises(HostError) as caught:
        asyncio.run(SSHConnection.open(host))
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_HOST and "\n" not in message
    assert "box: unknown host key" in message and fingerprint in message
    assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {empty}" in message and "accept-new" in message
    assert empty.read_text() == ""
    assert not (tmp_path / "work").exists()


def test_accept_new_records_the_key_then_strict_accepts_it(server, tmp_path):
    orch_known = tmp_path / "orch_known_hosts"
    host = server.host(orch_known, tmp_path / "work", host_key_policy="accept-new")
    assert session(host, lambda conn: conn.run("true")).ok
    assert orch_known.read_text() == server.known_line()
    strict = server.host(orch_known, tmp_path / "work")
    assert session(strict, lambda conn: conn.run("true")).ok
    assert orch_known.read_text() == server.known_line()  # not written twice


def test_accept_new_default_file_is_orch_owned(server, tmp_path):
    host = dataclasses.replace(server.host(tmp_path / "unused", tmp_path / "work", host_key_policy="accept-new"),
                               known_hosts=None)
    assert session(host, lambda conn: conn.run("true")).ok
    home = Path(os.environ["HOME"])
    assert (home / ".config" / "orch" / "known_hosts").read_text() == server.known_line()
    assert not (home / ".ssh").exists()


def test_changed_host_key_is_refused_even_with_accept_new(server, tmp_path):
    other = sshd.keygen(tmp_path / "other_key")
    kind, blob = sshd.public(other).split()[:2]
    stale = f"[{server.address}]:{server.port} {kind} {blob}\n"
    known = tmp_path / "known_hosts"
    known.write_text(stale)
    host = server.host(known, tmp_path / "work", host_key_policy="accept-new")
    with pytest.raises(HostError) as caught:
        asyncio.run(SSHConnection.open(host))
    message = str(caught.value)
    assert "HOST KEY CHANGED" in message and "ssh-keygen -R" in message and str(known) in message
    assert known.read_text() == stale


def test_unreachable_host_is_a_host_error(tmp_path):
    port = sshd.free_port()  # nothing listens there
    host = Host(name="gone", address="127.0.0.1", port=port, known_hosts=str(tmp_path / "k"),
                ssh_config=str(tmp_path / "none"))
    (tmp_path / "none").touch()
    started = time.monotonic()
    with pytest.raises(HostError) as caught:
        asyncio.run(SSHConnection.open(host))
    assert caught.value.exit_code == EXIT_HOST
    assert str(caught.value).startswith(f"gone: 127.0.0.1:{port} refused") and "\n" not in str(caught.value)
    assert time.monotonic() - started < 5  # bounded retries


def test_wrong_key_is_refused_with_what_to_do(server, known, tmp_path):
    stranger = sshd.keygen(tmp_path / "stranger")
    host = server.host(known, tmp_path / "work", identity=str(stranger))
    with pytest.raises(HostError, match="refused our keys; add this machine's public key"):
        asyncio.run(SSHConnection.open(host))


# -- orch hosts check ----------------------------------------------------------------------


def test_hosts_check_json_over_two_sshd_hosts_and_local(tmp_path):
    a = sshd.start(tmp_path / "a", "box-a")
    b = sshd.start(tmp_path / "b", "box-b")
    try:
        known = tmp_path / "known_hosts"
        known.write_text(a.known_line() + b.known_line())
        fake_sglang = tmp_path / "b-work" / "rehearsal" / "sglang"
        fake_sglang.mkdir(parents=True)
        (fake_sglang / "__init__.py").write_text("raise SystemExit('imported!')\n")
        (fake_sglang / "version.py").write_text('__version__ = "0.5.9"\n')
        listening = sshd.free_port()
        (tmp_path / "inventory.yaml").write_text(
            "hosts:\n"
            + a.inventory_entry(known, tmp_path / "a-work")
            + b.inventory_entry(known, tmp_path / "b-work") + "    rehearsal: true\n"
            + f"  here:\n    transport: local\n    workdir: {tmp_path / 'here'}\n"
            + f"  gone:\n    address: 127.0.0.1\n    port: {sshd.free_port()}\n    known_hosts: {known}\n"
            + f"    ssh_config: {a.folder / 'ssh_config'}\n"
        )
        import socket

        with socket.socket() as busy:
            busy.bind(("127.0.0.1", listening))
            busy.listen()
            done = orch(tmp_path, "hosts", "check", "--hosts", "box-a,box-b,here", "--json", "--port", str(listening), timeout=60, db=False)
        assert done.returncode == 0, done.stdout + done.stderr
        facts = {f["host"]: f for f in json.loads(done.stdout)}
        assert list(facts) == ["box-a", "box-b", "here"]
        for f in facts.values():
            assert f["reachable"] and f["python"].startswith("3.") and f["python_error"] is None
            assert f["os"] and f["disk_free_bytes"] > 0 and f["rtt_ms"] > 0 and f["port_listening"] is True
            assert f["gpus"] == [] and f["gpu_count"] == 0
        assert facts["box-b"]["packages"]["sglang"] == {"version": "0.5.9", "dir": str(fake_sglang)}
        assert "sglang" not in facts["box-a"]["packages"]

        with_gone = orch(tmp_path, "hosts", "check", "--json", "--port", str(listening), timeout=60, db=False)
        assert with_gone.returncode == EXIT_HOST, with_gone.stderr
        gone = {f["host"]: f for f in json.loads(with_gone.stdout)}
        assert [h for h, f in gone.items() if not f["reachable"]] == ["gone"]
        assert "refused" in gone["gone"]["error"] and gone["box-a"]["port_listening"] is False
        assert with_gone.stderr.strip().splitlines() == ["error: 1 of 4 hosts unreachable: gone; the report above says why for each"]

        table = orch(tmp_path, "hosts", "check", "--hosts", "box-a,gone", timeout=60, db=False)
        assert table.returncode == EXIT_HOST and "box-a" in table.stdout and "unreachable" in table.stdout
    finally:
        a.stop()
        b.stop()
