"""Reconnecting over a real OpenSSH sshd on 127.0.0.1: what is resent after a dropped link, what is
not, forwards that keep their address, and refusals that stop reconnecting at once."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import sshd
from orchestrator.run import collect
from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from orchestrator.remote import LinkLost, connect
from orchestrator.remote.local import LocalConnection
from orchestrator.remote.reconnecting import ReconnectingConnection, reconnections
from orchestrator.store.database import Run, Store

pytestmark = pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


@pytest.fixture
def server(sshd_box):
    return sshd_box


@pytest.fixture
def host(tmp_path: Path, server: sshd.Sshd):
    known = tmp_path / "known_hosts"
    known.write_text(server.known_line())
    return server.host(known, tmp_path / "work")


def session(host, work):
    async def go():
        conn = await connect(host, reconnect=True)
        assert isinstance(conn, ReconnectingConnection)
        try:
            return await work(conn)
        finally:
            await conn.close()
    return asyncio.run(go())


async def drop_once(server: sshd.Sshd, counter: Path, count: int) -> None:
    """The link dropped once the command has run `count` times in all (a loaded machine may take
    longer than any fixed delay to start it)."""
    while not counter.exists() or counter.read_text().count("ran") < count:
        await asyncio.sleep(0.05)
    assert await asyncio.to_thread(server.drop_connections) > 0


def test_a_command_that_may_have_run_is_resent_only_when_idempotent(host, server, tmp_path):
    counter = tmp_path / "count"
    command = f"echo ran >> {counter}; sleep 3"

    async def work(conn):
        dropping = asyncio.create_task(drop_once(server, counter, 1))
        with pytest.raises(LinkLost) as lost:
            await conn.run(command)
        await dropping
        once = counter.read_text().count("ran")
        dropping = asyncio.create_task(drop_once(server, counter, 2))
        again = await conn.run(command, idempotent=True)
        await dropping
        return lost.value, once, again, len(conn.reconnections)

    lost, once, again, reconnects = session(host, work)
    assert lost.started and "box: the connection to" in str(lost) and "dropped" in str(lost)
    assert once == 1  # not resent
    assert again.ok and counter.read_text().count("ran") == 3  # the idempotent one ran again after reconnecting
    assert reconnects == 2


def test_concurrent_calls_on_a_dropped_link_reconnect_once(host, server, tmp_path):
    (tmp_path / "f").write_bytes(b"x")

    async def work(conn):
        await conn.run("true")
        await asyncio.to_thread(server.drop_connections)
        await asyncio.sleep(0.3)
        stats = await asyncio.gather(*(conn.stat(str(tmp_path / "f")) for _ in range(6)))
        data = await conn.read_file(str(tmp_path / "f"))
        return stats, data, len(conn.reconnections)

    stats, data, reconnects = session(host, work)
    assert [s.size for s in stats] == [1] * 6 and data == b"x"
    assert reconnects == 1


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_forward_keeps_its_local_address_across_a_reconnect(host, server):
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    fetch = lambda a: json.loads(urllib.request.urlopen(f"http://{a[0]}:{a[1]}/", timeout=5).read())

    async def work(conn):
        first = await conn.forward(web.server_address[1])
        before = await asyncio.to_thread(fetch, first)
        await asyncio.to_thread(server.drop_connections)
        await asyncio.sleep(0.3)
        await conn.run("true", idempotent=True)  # any call notices the drop and reconnects
        after = await asyncio.to_thread(fetch, first)
        return first, await conn.forward(web.server_address[1]), before, after, len(conn.reconnections)

    try:
        first, again, before, after, reconnects = session(host, work)
    finally:
        web.shutdown()
    assert first == again and before == after == {"ok": True} and reconnects == 1


def test_a_changed_host_key_on_reconnect_stops_at_once_and_later_calls_fail_fast(host, server):
    async def work(conn):
        await conn.run("true")
        server.kill()
        for name in ("host_key", "host_key.pub"):
            (server.folder / name).unlink()
        sshd.keygen(server.folder / "host_key")  # the "reinstalled" host: same address, new key
        server.relaunch()
        started = time.monotonic()
        with pytest.raises(HostError) as refused:
            await conn.run("true")
        took = time.monotonic() - started
        with pytest.raises(HostError) as later:
            await conn.stat("/")
        return str(refused.value), took, str(later.value)

    refused, took, later = session(host, work)
    assert refused.startswith("box: the connection to") and "HOST KEY CHANGED" in refused
    assert "orch revert --host box" in refused and "\n" not in refused
    assert took < 3  # no backoff: waiting cannot make a changed key right
    assert later.startswith("box: still unreachable (reconnecting gave up earlier")


def test_a_host_that_stays_down_fails_with_the_reason_after_bounded_attempts(host, server, monkeypatch):
    from orchestrator.remote import reconnecting

    monkeypatch.setattr(reconnecting, "RECONNECT_ATTEMPTS", 2)
    monkeypatch.setattr(reconnecting, "RECONNECT_BACKOFF", 0.2)

    async def work(conn):
        await conn.run("true")
        server.kill()
        with pytest.raises(HostError) as down:
            await conn.read_file("/etc/hostname")
        return str(down.value)

    message = session(host, work)
    assert message.startswith("box: the connection to") and "2 attempts to reconnect" in message
    assert "refused or reset the connection" in message and "orch revert --host box" in message


def test_resumable_upload_goes_through_the_wrapper_and_resends_after_a_drop(host, server, tmp_path):
    source = tmp_path / "blob"
    source.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    target = tmp_path / "work" / "blob.part"
    target.parent.mkdir()
    target.write_bytes(source.read_bytes()[:1000])  # an earlier push stopped after 1000 bytes

    async def work(conn):
        await conn.run("true")
        await asyncio.to_thread(server.drop_connections)
        await asyncio.sleep(0.3)
        await conn.put_file(source, str(target), 1000)
        return len(conn.reconnections)

    assert session(host, work) == 1
    assert target.read_bytes() == source.read_bytes()


def test_each_reopened_link_is_recorded_and_a_run_tells_which_ones_cut_its_workload(host, server, tmp_path):
    async def work(conn):
        for _ in range(2):  # once before the "workload", once while it runs
            await conn.run("true")
            await asyncio.to_thread(server.drop_connections)
            await asyncio.sleep(0.3)
            await conn.stat("/")
        return list(reconnections(conn))

    before, during = session(host, work)
    assert before.reason.startswith("the connection to") and "dropped" in before.reason  # no "box: " in front
    assert before.at < during.at and before.at.endswith("+00:00")
    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    run = Run(uid="u", experiment="e", variant="v", host="box", params={}, env={}, command="")
    store.add(run)
    cut = collect.record_reconnections(store, run, "box", [before, during], since=0, workload_from=1)
    assert cut == (f"the SSH link to box dropped during the workload ({during.reason}) and was reopened: "
                   "the requests in flight were cut")
    events = store.record(run)["events"]
    assert [(e["kind"], e["at"]) for e in events] == [("reconnected", before.at), ("reconnected", during.at)]
    assert events[0]["message"] == f"the SSH link to box was reopened after it was lost: {before.reason}"
    assert collect.record_reconnections(store, run, "box", [before], since=0, workload_from=1) is None
    assert collect.record_reconnections(store, run, "box", [before, during], since=2, workload_from=None) is None
    assert reconnections(LocalConnection(Host(name="here", transport="local"))) == ()
