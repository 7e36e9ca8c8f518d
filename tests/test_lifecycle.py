"""The host lifecycle (open -> lock -> recover -> install -> work -> unlock) and the typed stages:
every host's work runs at once through fan_out (orch check included), a held lock refuses with
HostBusy and leaves the host as it was, a push reports its bytes through the Reporter, a server
that dies early hands its diagnosis up on the ServerError."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import engines
from orchestrator.core.inventory import Host
from orchestrator.core.spec import CheckpointDef
from orchestrator.errors import HostBusy, ServerError
from orchestrator.host import lifecycle, server
from orchestrator.host.lifecycle import Held, Locking
from orchestrator.host.lock import HostLock
from orchestrator.remote import connect
from orchestrator.run import check, launch, stages
from orchestrator.run.attempt import Attempt
from orchestrator.store.database import CheckpointRow, Run, Store
from reporting import Recorder


def local_hosts(tmp_path: Path, count: int) -> list[Host]:
    return [Host(name=f"h{i}", transport="local", workdir=str(tmp_path / f"h{i}")) for i in range(count)]


def test_every_hosts_work_runs_at_once(tmp_path: Path):
    hosts = local_hosts(tmp_path, 3)
    everyone = asyncio.Barrier(3)  # passes only when all three hosts' work is under way together

    async def work(held: Held) -> str:
        await asyncio.wait_for(everyone.wait(), 10)
        return held.session.host.name

    async def go() -> dict[str, object]:
        return await lifecycle.on_hosts(hosts, work, Recorder().message)

    assert asyncio.run(go()) == {"h0": "h0", "h1": "h1", "h2": "h2"}


def test_orch_check_checks_every_host_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    hosts = local_hosts(tmp_path, 2)
    plans = [SimpleNamespace(variant=f"v{i}", params={}, tp_size=1, nodes=1) for i in range(2)]  # one per host (least loaded first)
    both = asyncio.Barrier(2)

    async def checking(spec: object, plan: SimpleNamespace, session: object) -> dict[str, str]:
        await asyncio.wait_for(both.wait(), 10)  # serial hosts would wait here for ever
        return {"variant": plan.variant, "host": session.host.name}  # type: ignore[attr-defined]

    monkeypatch.setattr(check, "_check_one", checking)
    spec = SimpleNamespace(engine="sglang", checkpoints=())
    groups = asyncio.run(check.check_plans(spec, plans, hosts))  # type: ignore[arg-type]
    assert groups == [{"variant": "v0", "host": "h0"}, {"variant": "v1", "host": "h1"}]


def test_a_held_lock_refuses_with_host_busy_and_recovers_nothing(tmp_path: Path):
    [host] = local_hosts(tmp_path, 1)
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    worked: list[str] = []

    async def go() -> object:
        conn = await connect(host)
        other = HostLock(conn, host.workdir, "run")
        await other.acquire()
        try:
            return (await lifecycle.on_hosts([host], lambda held: _note(worked), Recorder().message,
                                             Locking("clean", store)))["h0"]
        finally:
            await other.release()
            await conn.close()

    refused = asyncio.run(go())
    assert isinstance(refused, HostBusy) and str(refused).startswith("h0: busy: ") and refused.exit_code == 3
    assert worked == [] and not (tmp_path / "h0" / "journal").exists()


async def _note(worked: list[str]) -> None:
    worked.append("work")


def test_the_lock_is_released_after_the_work_even_when_it_fails(tmp_path: Path):
    [host] = local_hosts(tmp_path, 1)
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")

    async def failing(held: Held) -> None:
        assert held.lock is not None and (tmp_path / "h0" / "lock").exists()
        raise HostBusy("h0: the work gave up")

    results = asyncio.run(lifecycle.on_hosts([host], failing, Recorder().message, Locking("revert", store)))
    assert str(results["h0"]) == "h0: the work gave up"
    assert not (tmp_path / "h0" / "lock").exists()


def test_a_push_reports_its_bytes_through_the_reporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "draft"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"\0" * 3000)
    [host] = local_hosts(tmp_path, 1)
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    run = Run(uid="r1", experiment="e", variant="v", host="h0")
    store.add(run)
    recorder = Recorder()
    spec = SimpleNamespace(checkpoints=(CheckpointDef("draft", source, "", "exp.yaml:3"),))
    dest = str(tmp_path / "h0" / "draft")

    async def go() -> None:
        session = await lifecycle.open_session(host)
        try:
            context = {"checkpoints": {"draft": dest}}
            attempt = Attempt(spec, SimpleNamespace(variant="v"), engines.get(), session, store, run,  # type: ignore[arg-type]
                              recorder, context, launch.of(context, ""), "v@h0", {})
            await stages.push_checkpoints(attempt)
        finally:
            await session.close()

    asyncio.run(go())
    events = recorder.transfers["v@h0 draft"]
    assert events[0] == ("total", 3000) and events[-1] == ("end", 0)
    assert sum(n for kind, n in events if kind == "advance") == 3000
    [row] = store.children(run, CheckpointRow)
    assert (row.sent_files, row.sent_bytes) == (1, 3000) and (Path(dest) / "model.safetensors").stat().st_size == 3000
    assert any(text.startswith("checkpoint draft -> ") for text in recorder.texts)


OOM_LOG = ("[2025-01-01 00:00:00] Load weight begin.\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
           "of 79.10 GiB of which 1.00 GiB is free.\n")


def test_a_server_that_exits_before_ready_raises_with_its_diagnosis(tmp_path: Path):
    (tmp_path / "log.txt").write_text(OOM_LOG)
    script = f"#!/bin/bash\ncat {tmp_path / 'log.txt'}\nexit 1\n"

    async def go() -> ServerError:
        conn = await connect(Host(name="here", transport="local"))
        srv = await server.launch(conn, str(tmp_path / "run"), script, 39999)
        started = time.monotonic()
        with pytest.raises(ServerError) as caught:
            await server.wait_ready(conn, srv, 30, engines.get("sglang"))
        assert time.monotonic() - started < 20
        await conn.close()
        return caught.value

    error = asyncio.run(go())
    assert error.diagnosis is not None and error.diagnosis.kind == "cuda-oom"
    assert error.diagnosis.summary in str(error) and any("CUDA out of memory" in e for e in error.evidence)
