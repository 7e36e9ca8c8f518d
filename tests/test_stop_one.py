"""`orch stop RUN` on a live sweep stops that run alone: it is recorded failed, "stopped by orch
stop", and the sweep's other plans still run; `orch stop --sweep RUN` stops the whole sweep."""

from __future__ import annotations

from support.cli import orch, records, start_orch, wait_for
from support.processes import marked_processes
from support.specs import three_plans


def test_orch_stop_run_stops_that_run_alone_and_the_sweep_goes_on(project):
    spec = three_plans(project, requests=400)
    sweep = start_orch(project, "run", str(spec))
    try:
        wait_for(sweep, "sending")  # the first run under its workload
        [first] = records(project)
        done = orch(project, "stop", first["uid"])
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 0, said
        assert f"run {first['uid']} failed (stopped by orch stop); the rest of its sweep goes on" in said, said
        assert sweep.poll() is None  # the sweep goes on
        rest, _ = sweep.communicate(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 1, rest  # one run did not succeed
    runs = records(project)
    assert [(r["params"]["speculative_num_steps"], r["status"]) for r in runs] == [
        (2, "failed"), (3, "succeeded"), (4, "succeeded")], [(r["uid"], r["status"], r["error"]) for r in runs]
    assert runs[0]["error"] == "stopped by orch stop"
    kinds = [e["kind"] for e in runs[0]["events"]]
    assert "stop-asked" in kinds and "stopping" in kinds, kinds
    assert marked_processes(project) == []  # its server was stopped, as were the others'


def test_orch_stop_sweep_stops_every_run_of_the_sweep(project):
    spec = three_plans(project, requests=400)
    sweep = start_orch(project, "run", str(spec))
    try:
        wait_for(sweep, "sending")
        [first] = records(project)
        done = orch(project, "stop", "--sweep", first["uid"])
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 0, said
        assert "sent it SIGTERM" in said, said
        rest, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 130, rest
    runs = records(project)
    assert [r["status"] for r in runs] == ["interrupted"], [(r["uid"], r["status"]) for r in runs]
    assert "stopped by orch stop" in runs[0]["error"]
    assert "2 configuration(s) not run (interrupted by SIGTERM):" in rest, rest
    assert "speculative_num_steps=3" in rest and "speculative_num_steps=4" in rest, rest
    assert marked_processes(project) == []


def test_orch_stop_takes_one_form(project):
    done = orch(project, "stop", "last", "--sweep", "last")
    assert done.returncode == 2 and "say one thing to stop" in done.stderr, done.stderr
