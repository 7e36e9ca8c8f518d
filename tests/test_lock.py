"""The host lock: one orch command per host; owner named, lease renewed, stale locks broken."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.errors import EXIT_HOST, HostError
from orchestrator.core.inventory import Host
from orchestrator.host.lock import HostLock, read
from orchestrator.remote.local import LocalConnection
from support.cli import orch, records, start_orch, wait_for
from support.files import installed, journal_files, modified_files, snapshot
from support.specs import demo_spec
from conftest import free_port


def connection(workdir: Path) -> LocalConnection:
    return LocalConnection(Host("box", transport="local", workdir=str(workdir)))


def run(coro):
    return asyncio.run(coro)


def test_second_lock_is_refused_with_the_owners_details_and_release_frees_it(tmp_path):
    first = HostLock(connection(tmp_path), str(tmp_path), "run")
    second = HostLock(connection(tmp_path), str(tmp_path), "revert")

    async def go():
        assert await first.acquire() == []
        held = await read(first.conn, str(tmp_path))
        with pytest.raises(HostError) as refused:
            await second.acquire()
        await first.release()
        free = await read(first.conn, str(tmp_path))
        assert await second.acquire() == []
        await second.release()
        return held, refused.value, free

    held, refused, free = run(go())
    assert held.owner == first.owner and held.owner.controller == socket.gethostname() and held.owner.pid == os.getpid()
    assert refused.exit_code == EXIT_HOST
    message = str(refused)
    assert f"box: busy: {tmp_path}/lock is held by {getpass.getuser()} on controller {socket.gethostname()} " \
        f"pid {os.getpid()}" in message
    assert f"started {first.owner.started_at}" in message and "lease 60 s" in message
    assert free is None and not (tmp_path / "lock").exists()


def test_racing_controllers_never_both_win(tmp_path):
    async def race():
        locks = [HostLock(connection(tmp_path), str(tmp_path), "run") for _ in range(6)]
        results = await asyncio.gather(*(lock.acquire() for lock in locks), return_exceptions=True)
        winners = [lock for lock, result in zip(locks, results) if not isinstance(result, BaseException)]
        assert all(isinstance(r, HostError) for r in results if isinstance(r, BaseException))
        for lock in winners:
            await lock.release()
        return len(winners)

    assert [run(race()) for _ in range(5)] == [1] * 5


def test_renewal_refreshes_the_lease_and_names_the_run(tmp_path):
    lock = HostLock(connection(tmp_path), str(tmp_path), "run")

    async def go():
        await lock.acquire()
        os.utime(tmp_path / "lock", (time.time() - 50, time.time() - 50))
        assert (await read(lock.conn, str(tmp_path))).age_s >= 49
        assert await lock.renew("20260101-000000-baseline-abc123")
        renewed = await read(lock.conn, str(tmp_path))
        (tmp_path / "lock").write_text("someone else's\n")  # broken and retaken by another controller
        still_ours = await lock.renew("x")
        await lock.release()  # leaves the other controller's lock alone
        return renewed, still_ours

    renewed, still_ours = run(go())
    assert renewed.age_s < 5 and renewed.owner.run == "20260101-000000-baseline-abc123"
    assert still_ours is False and (tmp_path / "lock").read_text() == "someone else's\n"


def test_keep_alive_renews_in_the_background(tmp_path):
    lock = HostLock(connection(tmp_path), str(tmp_path), "run", lease_s=0.4)

    async def go():
        await lock.acquire()
        lock.keep_alive(lambda: "the-run")
        await asyncio.sleep(0.5)
        state = await read(lock.conn, str(tmp_path))
        await lock.release()
        return state

    state = run(go())
    assert state.owner.run == "the-run" and not lock.lost


def _lock_file(workdir: Path, **owner) -> None:
    data = {"controller": "elsewhere", "pid": 1, "pid_started": "", "token": "t0", "command": "run", "run": "",
            "started_at": "2026-01-01T00:00:00.000+00:00", "lease_s": 60.0, **owner}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "lock").write_text(json.dumps(data) + "\n")


def test_stale_locks_are_broken_and_live_ones_are_not(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    cases = {
        "dead-pid": dict(controller=socket.gethostname(), pid=gone.pid),
        "expired": dict(controller="elsewhere", pid=1),
        "live-elsewhere": dict(controller="elsewhere", pid=1),
        "live-here": dict(controller=socket.gethostname(), pid=os.getppid()),
    }
    outcomes = {}
    for name, owner in cases.items():
        workdir = tmp_path / name
        _lock_file(workdir, **owner)
        if name == "expired":
            os.utime(workdir / "lock", (time.time() - 120, time.time() - 120))
        lock = HostLock(connection(workdir), str(workdir), "run")
        try:
            broken = run(lock.acquire())
            outcomes[name] = [h.broken_because for h in broken]
            run(lock.release())
        except HostError as exc:
            outcomes[name] = str(exc)
    assert outcomes["dead-pid"] == [f"its owner, pid {gone.pid} on this controller host, is gone"]
    [expired] = outcomes["expired"]  # 120 s old when written; a slow moment may add a second
    assert re.fullmatch(r"its lease ran out \(12[0-5] s since the last renewal, lease 60 s\)", expired), expired
    assert "held by controller elsewhere pid 1" in outcomes["live-elsewhere"]
    assert f"held by controller {socket.gethostname()} pid {os.getppid()}" in outcomes["live-here"]


def test_unwritable_workdir_is_a_host_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(HostError, match=r"cannot create .*/file/w/lock"):
        run(HostLock(connection(tmp_path), str(tmp_path / "file" / "w"), "run").acquire())


# -- end to end: two `orch run` on one host ---------------------------------------------------


# the sshd case is kept out of `make test` (`pytest -m slow` runs it); the local one stays
@pytest.mark.parametrize("where", ["local", pytest.param("sshd", marks=pytest.mark.slow)], indirect=True)
def test_second_orch_run_on_a_busy_host_exits_3_and_changes_nothing(project, where):
    spec = demo_spec(project, requests=3000)
    assert orch(project, "run", str(spec), "--dry-run", "--set", "port=1", tests_on_path=True).returncode == 0  # installs the rehearsal
    original = installed(project)
    first = start_orch(project, "run", str(spec), "--variant", "story", "--set", f"port={free_port()}", controller=True, tests_on_path=True)
    try:
        wait_for(first, "sending")
        owner = json.loads((project / "host" / "lock").read_text())
        journal = {str(p): p.read_bytes() for p in (project / "host" / "journal").rglob("*") if p.is_file()}
        tree = snapshot(project / "host" / "rehearsal")
        second = orch(project, "run", str(spec), "--variant", "fixed", "--set", f"port={free_port()}", tests_on_path=True)
        assert second.returncode == EXIT_HOST, second.stdout + second.stderr
        text = " ".join((second.stdout + second.stderr).split())
        assert f"busy: {project / 'host' / 'lock'} is held by {owner['user']} on controller {owner['controller']} " \
            f"pid {first.pid}" in text
        # said once as the host refuses, once below the summary for the plan it left unrun
        assert text.count("local refused: busy:") == 1 and text.count("busy:") == 2, text
        assert owner["pid"] == first.pid and "lease renewed" in text
        assert json.loads((project / "host" / "lock").read_text())["token"] == owner["token"]
        assert {str(p): p.read_bytes() for p in (project / "host" / "journal").rglob("*") if p.is_file()} == journal
        assert snapshot(project / "host" / "rehearsal") == tree
        assert [r["variant"] for r in records(project)] == ["story"]  # no run recorded for the refused one
        revert = orch(project, "revert", "--host", "local", tests_on_path=True)  # nor may a revert undo a live run's patches
        assert revert.returncode == EXIT_HOST and "busy" in revert.stderr
        assert snapshot(project / "host" / "rehearsal") == tree
    finally:
        first.send_signal(2)
        first.communicate(timeout=120)
    assert first.returncode == 130
    assert modified_files(project, original) == [] and journal_files(project) == []
    assert not (project / "host" / "lock").exists()
