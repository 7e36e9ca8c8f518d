"""Big files pushed through this machine's OpenSSH client (`remote/openssh.py`), against real sshds:
they arrive whole with their progress told, a part resumes from its offset, a changed host key
(the host's or its jump host's) is refused as orch's own dial refuses it, and where OpenSSH cannot
be used (no ssh client, a host it cannot log in to, an ssh that dies mid-file) the bytes go over
SFTP, said once in the debug log."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import signal
from pathlib import Path

import pytest

import sshd
from orchestrator.errors import HostError
from orchestrator.remote import connect, openssh
from orchestrator.remote.ssh import SSHConnection
from support.push import do_push, hashes, make_folder

pytestmark = pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")

MiB = 2**20
FALLBACK = "big files go over SFTP from now on"


@pytest.fixture(autouse=True)
def _small_bulk(no_user_ssh, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A throw-away HOME; files of 1 MiB and more count as big; the route's debug log captured."""
    monkeypatch.setattr(openssh, "BULK_MIN", MiB)
    caplog.set_level(logging.DEBUG, logger=openssh.__name__)


@pytest.fixture
def known(tmp_path: Path, sshd_box: sshd.Sshd) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text(sshd_box.known_line())
    return path


@pytest.fixture
def host(tmp_path: Path, sshd_box: sshd.Sshd, known: Path):
    return sshd_box.host(known, tmp_path / "work")


def said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == openssh.__name__ and words in r.getMessage()]


def random_file(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def test_big_files_move_through_openssh_whole_with_their_progress(host, tmp_path, caplog):
    src, dest = tmp_path / "src", tmp_path / "work" / "ckpt"
    sizes = {"model-1.safetensors": 3 * MiB, "sub/model-2.safetensors": 2 * MiB + 7, "config.json": 100}
    make_folder(src, sizes)
    seen: list[tuple[str, int]] = []
    result = do_push(host, False, src, dest, tmp_path / "cache", lambda kind, n: seen.append((kind, n)))
    assert hashes(dest) == hashes(src)
    assert result.sent_bytes == sum(sizes.values()) == sum(n for kind, n in seen if kind == "advance")
    assert len(said(caplog, "moved through OpenSSH")) == 2  # config.json is small: SFTP
    assert not said(caplog, FALLBACK)


def test_a_part_resumes_through_openssh_from_its_offset_and_loses_what_was_beyond(host, tmp_path, caplog):
    source = tmp_path / "blob"
    data = random_file(source, 3 * MiB)
    part = tmp_path / "work" / ".blob.part"
    part.parent.mkdir()
    part.write_bytes(b"\0" * 1000 + b"a longer, stale tail" * 100)  # kept: the first 1000 bytes only
    moved: list[int] = []

    async def work(conn):
        await conn.put_file(source, str(part), 1000, moved.append)

    sshd.session(host, work)
    assert part.read_bytes() == b"\0" * 1000 + data[1000:]  # the kept bytes were not sent again
    assert sum(moved) == len(data) - 1000
    assert said(caplog, "moved through OpenSSH") == [f"box: {len(data) - 1000} bytes of {part} moved through OpenSSH"]


def test_a_changed_host_key_is_refused_as_orchs_dial_refuses_it(host, sshd_box, known, tmp_path):
    """Another sshd, with another host key, takes the port once orch's connection is open: OpenSSH
    must not log in to it, and the push fails with the dial's own words."""
    source = tmp_path / "blob"
    random_file(source, 2 * MiB)
    part = tmp_path / "work" / ".blob.part"
    part.parent.mkdir()

    async def work(conn):
        sshd_box.stop()  # the listener only: the open connection keeps its own sshd
        impostor = sshd.start(tmp_path / "impostor", "box", port=sshd_box.port, client_key=sshd_box.client_key)
        try:
            with pytest.raises(HostError) as pushed:
                await conn.put_file(source, str(part))
            with pytest.raises(HostError) as dialed:
                await SSHConnection.open(host)
            return str(pushed.value), str(dialed.value)
        finally:
            impostor.stop()

    pushed, dialed = sshd.session(host, work)
    assert pushed == dialed and "HOST KEY CHANGED" in pushed
    assert part.stat().st_size == 0  # cut to the offset (0) over orch's own link, and no byte since
    assert known.read_text() == sshd_box.known_line()  # OpenSSH recorded nothing


def test_a_changed_jump_host_key_is_refused_too(tmp_path, caplog):
    jump = sshd.start(tmp_path / "jump", "jump")
    target = sshd.start(tmp_path / "target", "gpu1", client_key=jump.client_key)
    known = tmp_path / "known_hosts"
    known.write_text(jump.known_line() + target.known_line())
    host = target.host(known, tmp_path / "work", proxy_jump=f"{getpass.getuser()}@{jump.address}:{jump.port}")
    (tmp_path / "work").mkdir()
    source = tmp_path / "model.safetensors"
    random_file(source, 2 * MiB)

    async def work(conn):
        await conn.put_file(source, str(tmp_path / "work" / "first"))  # through the jump, by OpenSSH
        jump.stop()
        impostor = sshd.start(tmp_path / "impostor", "jump", port=jump.port, client_key=jump.client_key)
        try:
            with pytest.raises(HostError) as pushed:
                await conn.put_file(source, str(tmp_path / "work" / "second"))
            return str(pushed.value)
        finally:
            impostor.stop()

    try:
        refused = sshd.session(host, work)
    finally:
        target.stop()
        jump.stop()
    assert (tmp_path / "work" / "first").read_bytes() == source.read_bytes()
    assert len(said(caplog, "moved through OpenSSH")) == 1
    assert "HOST KEY CHANGED" in refused and "(jump host of gpu1)" in refused
    assert (tmp_path / "work" / "second").stat().st_size == 0


def test_without_an_ssh_client_big_files_go_over_sftp_said_once(host, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    src, dest = tmp_path / "src", tmp_path / "work" / "ckpt"
    make_folder(src, {"model-1.safetensors": 2 * MiB, "model-2.safetensors": 2 * MiB})
    do_push(host, False, src, dest, tmp_path / "cache")
    assert hashes(dest) == hashes(src)
    assert said(caplog, FALLBACK) == [f"box: {FALLBACK}: there is no `ssh` client on PATH"]


def test_a_host_openssh_cannot_log_in_to_gets_its_bytes_over_sftp(host, sshd_box, tmp_path, caplog):
    """An old host offering only a key exchange OpenSSH 8.2 and later no longer use by default
    (asyncssh still does): OpenSSH gives up before any byte moved, every byte goes over SFTP."""
    sshd_box.stop()
    config = sshd_box.folder / "sshd_config"
    config.write_text(config.read_text() + "KexAlgorithms diffie-hellman-group14-sha1\n")
    sshd_box.relaunch()
    src, dest = tmp_path / "src", tmp_path / "work" / "ckpt"
    sizes = {"model-1.safetensors": 2 * MiB, "model-2.safetensors": 3 * MiB}
    make_folder(src, sizes)
    seen: list[int] = []
    result = do_push(host, False, src, dest, tmp_path / "cache", lambda kind, n: seen.append(n) if kind == "advance" else None)
    assert hashes(dest) == hashes(src)
    assert sum(seen) == result.sent_bytes == sum(sizes.values())
    [fallback] = said(caplog, FALLBACK)
    assert "ssh exited with status 255" in fallback and "no matching key exchange method" in fallback
    assert not said(caplog, "moved through OpenSSH")


def ssh_children() -> list[int]:
    """Pids of the ssh clients this process started."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if name == "ssh" and int(rest[1]) == os.getpid():
            found.append(int(entry))
    return found


def test_an_ssh_that_dies_mid_file_leaves_the_rest_to_sftp_and_progress_counts_each_byte_once(host, tmp_path, caplog):
    source = tmp_path / "blob"
    data = random_file(source, 64 * MiB)
    part = tmp_path / "work" / ".blob.part"
    part.parent.mkdir()
    moved: list[int] = []

    def advance(n: int) -> None:
        if not moved:  # the first report: ssh has read some of the file
            for pid in ssh_children():
                os.kill(pid, signal.SIGKILL)
        moved.append(n)

    async def work(conn):
        await conn.put_file(source, str(part), 0, advance)

    sshd.session(host, work)
    assert part.read_bytes() == data
    assert sum(moved) == len(data)
    [fallback] = said(caplog, FALLBACK)
    assert "ssh exited with status -9" in fallback
    assert not said(caplog, "moved through OpenSSH")


def test_a_link_dropped_mid_file_is_resent_whole_by_the_reconnecting_connection(host, sshd_box, tmp_path, caplog):
    """The drop ends OpenSSH's login and orch's link at once: the wrapper reopens, and the new
    connection hands the file to OpenSSH again."""
    source = tmp_path / "blob"
    data = random_file(source, 64 * MiB)
    part = tmp_path / "work" / ".blob.part"
    part.parent.mkdir()
    dropped: list[int] = []

    def advance(n: int) -> None:
        if not dropped:
            dropped.append(sshd_box.drop_connections())

    async def go():
        conn = await connect(host, reconnect=True)
        try:
            await conn.put_file(source, str(part), 0, advance)
            return len(conn.reconnections)
        finally:
            await conn.close()

    assert asyncio.run(go()) == 1
    assert dropped[0] >= 2  # orch's link and OpenSSH's
    assert part.read_bytes() == data
    assert len(said(caplog, "moved through OpenSSH")) == 1  # on the new connection
    assert not said(caplog, FALLBACK)


def test_the_fallback_is_said_once_per_connection(host, sshd_box, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    source = tmp_path / "blob"
    data = random_file(source, 2 * MiB)

    async def work(conn):
        for name in ("a", "b", "c"):
            await conn.put_file(source, str(tmp_path / "work" / name))

    (tmp_path / "work").mkdir()
    asyncio.run(_twice(host, work))
    assert len(said(caplog, FALLBACK)) == 2  # two connections, three files each
    assert all((tmp_path / "work" / name).read_bytes() == data for name in "abc")


async def _twice(host, work) -> None:
    for _ in range(2):
        conn = await SSHConnection.open(host)
        try:
            await work(conn)
        finally:
            await conn.close()
