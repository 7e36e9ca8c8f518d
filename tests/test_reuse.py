"""Server reuse: plans that differ only in workload (and repeat) use one server in turn; each run
records the server it used; the last one stops it and reverts the patches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conftest import free_port
from support.cli import orch
from support.files import sglang_tree, shipped, snapshot
from support.specs import experiment, runs

from orchestrator.core import spec as specs
from orchestrator.errors import SpecError
from orchestrator.run import plankey


def plans(path: Path, *overrides: str) -> list[specs.RunPlan]:
    spec = specs.load(path)
    return plankey.fingerprinted(spec, specs.expand(spec, overrides, ("fixed",)))


def test_workload_matrix_and_repeats_share_a_server_key_fresh_server_does_not(project):
    shared = plans(experiment(project, "matrix: {workload.concurrency: [1, 2]}\nrepeats: 2\n"))
    assert [p.workload.concurrency for p in shared] == [1, 1, 2, 2]
    assert "workload.concurrency" not in shared[0].params  # a workload field, not a template param
    assert len({p.server_key for p in shared}) == 1 and len({p.fingerprint for p in shared[::2]}) == 2
    fresh = plans(experiment(project, "matrix: {workload.concurrency: [1, 2]}\nfresh_server: true\n"))
    assert len({p.server_key for p in fresh}) == 2
    steps = plans(experiment(project, "matrix: {speculative_num_steps: [2, 3]}\n"))
    assert len({p.server_key for p in steps}) == 2  # a launch param: a server each
    by_set = plans(experiment(project, ""), "workload.max_new_tokens=8")
    assert by_set[0].workload.max_new_tokens == 8 and by_set[0].server_key == plans(experiment(project, ""))[0].server_key


@pytest.mark.parametrize("extra, where, says", [
    ("matrix: {workload.concurrency: [1, 0]}\n", "reuse.yaml:", "workload.concurrency must be a whole number >= 1"),
    ("matrix: {workload.speed: [1]}\n", "reuse.yaml:", "unknown workload field 'speed'"),
    ("fresh_server: sometimes\n", "reuse.yaml:", "`fresh_server` must be true or false"),
])
def test_bad_workload_keys_are_one_line_errors_with_where(project, extra, where, says):
    with pytest.raises(SpecError) as caught:
        plans(experiment(project, extra))
    assert where in str(caught.value) and says in str(caught.value)


def test_bad_set_workload_value_is_refused_before_any_host(project):
    done = orch(project, "run", str(experiment(project, "")), "--set", "workload.requests=-1")
    assert done.returncode == 2 and "workload.requests must be a whole number >= 1" in done.stderr + done.stdout
    assert not (project / "host" / "runs").exists() or not any((project / "host" / "runs").iterdir())


def test_runs_differing_only_in_workload_use_one_server_in_turn(project, tmp_path):
    path = experiment(project, "matrix: {workload.concurrency: [1, 2]}\nrepeats: 2\n",
                      "requests: 4, max_new_tokens: 24, concurrency: 4")
    done = orch(project, "run", str(path), "--variant", "fixed", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    made = runs(project)
    assert [r["status"] for r in made] == ["succeeded"] * 4
    launcher = made[0]
    assert [r["server_run_id"] for r in made] == [launcher["id"]] * 4  # one server, named by every run
    kinds = [[e["kind"] for e in r["events"]] for r in made]
    assert sum(k.count("launched") for k in kinds) == 1 and sum(k.count("stopped") for k in kinds) == 1
    assert all("server-reused" in k for k in kinds[1:]) and "stopped" in kinds[-1]
    assert {r["command"] for r in made} == {launcher["command"]}  # the server's launch, recorded with each
    assert [r["params"].get("workload.concurrency") for r in made] == [1, 1, 2, 2]
    assert all(r["metrics"].get("accept_len", 0) > 1.5 for r in made)  # each measured on its own workload
    assert "startup_s" in launcher["metrics"] and all("startup_s" not in r["metrics"] for r in made[1:])
    # each run's log is its own part: the launch lines in the first, the shutdown in the last
    debug = [len(r["debug_lines"]) for r in made]
    assert debug[0] >= 1 and debug[1:] == [0, 0, 0]  # the debug print fires once per server
    # the patches were applied once and reverted once, after the last run; every run's rows say so
    assert all(p["state"] == "reverted" for r in made for p in r["patches"]) and len(made[3]["patches"]) == 3
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
    shown = orch(project, "show", str(made[2]["id"])).stdout
    assert f"server: the one run {launcher['id']} launched" in shown


def test_a_sweep_cut_short_between_runs_stops_the_kept_server_and_reverts(project, tmp_path):
    """Cancelled right when a run leaves its server up for the next plan: the slot stops it."""
    from orchestrator import run_experiment_async
    from orchestrator.store.database import Store

    path = experiment(project, "repeats: 3\n", "requests: 2, max_new_tokens: 16, concurrency: 2")
    db = f"sqlite:///{project / 'orch.db'}"

    async def sweep() -> None:
        task = asyncio.current_task()

        def report(label: str, text: str) -> None:
            if "server kept up" in text and task is not None:
                task.get_loop().call_soon(task.cancel, "SIGINT")

        await run_experiment_async(path, inventory=project / "inventory.yaml", db=db, variants=("fixed",),
                                   overrides=(f"port={free_port()}",), report=report)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(sweep())
    made = Store(db).runs()
    assert made and all(r.status in ("succeeded", "interrupted") for r in made)
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
    leftover = [p for p in Path("/proc").glob("[0-9]*/environ") if _marks(p, project)]
    assert not leftover, "a server carrying a run mark of this project is still up"


def _marks(environ: Path, project: Path) -> bool:
    try:
        return str(project).encode() in environ.read_bytes() and b"MARK=" in environ.read_bytes()
    except OSError:
        return False


def test_a_list_in_the_workload_is_a_matrix_axis(project):
    swept = plans(experiment(project, "", "requests: 4, max_new_tokens: 24, concurrency: [1, 8]"))
    assert [p.workload.concurrency for p in swept] == [1, 8] and len({p.server_key for p in swept}) == 1
    assert [p.point for p in swept] == [{"workload.concurrency": 1}, {"workload.concurrency": 8}]
    with pytest.raises(SpecError, match=r"reuse\.yaml:\d+: `workload.concurrency` is a list here and a matrix key"):
        plans(experiment(project, "matrix: {workload.concurrency: [2]}\n", "requests: 4, concurrency: [1, 8]"))
    with pytest.raises(SpecError, match=r"reuse\.yaml:\d+: workload.concurrency must be a whole number >= 1"):
        plans(experiment(project, "", "requests: 4, concurrency: [1, 0]"))
