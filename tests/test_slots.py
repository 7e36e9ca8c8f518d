"""GPU slots through `orch run` on the local 8-GPU rehearsal host: runs that fit run at once, each
on its own GPUs and port; runs of one patch set share its application (runs of different sets at
once: test_overlay.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from conftest import ROOT, free_port
from support.cli import orch
from support.files import sglang_tree, shipped, snapshot
from support.specs import runs, window


def experiment(project: Path, *, repeats: int = 1) -> Path:
    """The demo at tp_size 4: two of its runs fit the host's 8 GPUs at once."""
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("tp_size: 8", "tp_size: 4")
    path = project / "experiments" / "slots.yaml"
    path.write_text(text + f"\nrepeats: {repeats}\n")
    return path


def test_two_tp4_runs_share_the_host_on_their_own_gpus_and_ports(project, tmp_path):
    port = free_port()
    with socket.create_server(("127.0.0.1", port + 1)):  # another process holds the second slot's port
        done = orch(project, "run", str(experiment(project, repeats=2)), "--variant", "fixed", "--set", f"port={port}")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = runs(project)
    assert [r["status"] for r in (first, second)] == ["succeeded", "succeeded"]
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in (first, second)} == {"0,1,2,3", "4,5,6,7"}
    assert {r["params"]["port"] for r in (first, second)} == {port, port + 2}
    for r in (first, second):
        assert f"export CUDA_VISIBLE_DEVICES={r['env']['CUDA_VISIBLE_DEVICES']}" in r["command"]
        assert "export ORCH_REHEARSAL_GPUS=4" in r["command"] and f"--port {r['params']['port']}" in r["command"]
    (a_up, a_down), (b_up, b_down) = window(first), window(second)
    assert a_up < b_down and b_up < a_down, "the two servers were never up at once"
    # one patch set, applied once and reverted once the last run of it ended
    kinds = [e["kind"] for r in (first, second) for e in r["events"]]
    assert kinds.count("patches-shared") == 1 and kinds.count("patches-kept") == 1
    assert all(p["state"] == "reverted" for r in (first, second) for p in r["patches"])
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)



def test_two_runs_of_one_set_reaching_the_apply_at_once_apply_it_once(project, tmp_path, monkeypatch):
    """The first run's apply is slowed before it writes (its writability check takes 3 s): the
    second run of the same set, there meanwhile, waits for it and joins, never applying the set a
    second time over the same files."""
    import asyncio

    import orchestrator
    from orchestrator.run import stages

    check = stages._ensure_writable
    calls = []

    async def slow_first(attempt, prepared):
        calls.append(attempt.run.uid)
        if len(calls) == 1:
            await asyncio.sleep(3)
        await check(attempt, prepared)
    monkeypatch.setattr(stages, "_ensure_writable", slow_first)
    outcomes = orchestrator.run_experiment(experiment(project, repeats=2), inventory=project / "inventory.yaml",
                                           db=f"sqlite:///{project / 'slots.db'}", variants=["fixed"],
                                           overrides=[f"port={free_port()}"])
    assert [o.status for o in outcomes] == ["succeeded", "succeeded"], [o.error for o in outcomes]
    assert len(calls) == 1  # the second run joined the set: it had nothing to write
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
