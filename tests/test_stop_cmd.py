"""`orch stop` through the real CLI: a live sweep stopped from another process with `--sweep` (its
controller gets SIGTERM and cleans up), a SIGKILLed controller's leftovers stopped with `--all`, and the exit codes
of an unknown run and an unreachable host."""

from __future__ import annotations

import signal

from conftest import free_port
from support.cli import orch, records, start_orch, wait_for
from support.files import installed_in
from support.processes import HOSTS, marked_processes, prepared, sweep_project

TERMINAL = {"succeeded", "failed", "interrupted"}


def assert_nothing_left(project, pristine) -> list[dict]:
    for host, files in pristine.items():
        assert installed_in(project / host) == files, f"{host}: files left patched"
    assert marked_processes(project) == []
    runs = records(project)
    assert runs and all(r["status"] in TERMINAL for r in runs), [(r["uid"], r["status"]) for r in runs]
    return runs


def test_orch_stop_sweep_on_a_live_sweep_signals_its_controller_and_waits_for_its_cleanup(project):
    spec = sweep_project(project)
    pristine = prepared(project, spec)
    proc = start_orch(project, "run", str(spec), "--hosts", ",".join(HOSTS), tests_on_path=True, new_session=True)
    output = wait_for(proc, "sending")
    uid = records(project)[0]["uid"]
    done = orch(project, "stop", "--sweep", uid, tests_on_path=True)  # the whole sweep (`orch stop RUN` stops that run alone)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"`orch run` pid {proc.pid}: sent it SIGTERM" in text
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output + rest  # it was over before `orch stop` returned
    runs = assert_nothing_left(project, pristine)
    [stopped] = [r for r in runs if r["uid"] == uid]
    assert stopped["status"] == "interrupted" and "stopped by orch stop" in stopped["error"], stopped["error"]
    assert any(e["kind"] == "stopped" and "stopped by orch stop" in e["message"] for e in stopped["events"])


def test_orch_stop_all_after_a_sigkilled_controller_stops_its_servers_and_reverts(project):
    spec = sweep_project(project)
    pristine = prepared(project, spec)
    proc = start_orch(project, "run", str(spec), "--hosts", ",".join(HOSTS), tests_on_path=True, new_session=True)
    wait_for(proc, "sending")
    wait_for(proc, "sending")  # both hosts under their workload
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert marked_processes(project)  # the dead controller's servers hold their ports
    done = orch(project, "stop", "--all", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "stopped the server run" in text and "interrupted (stopped by orch stop)" in text, text
    runs = assert_nothing_left(project, pristine)
    assert all(r["status"] == "interrupted" and "stopped by orch stop" in r["error"] for r in runs)
    assert all(any(e["kind"] == "stopped" for e in r["events"]) for r in runs)
    again = orch(project, "stop", "--all", tests_on_path=True)  # nothing left: says so, exit 0
    assert again.returncode == 0 and "nothing left to stop" in again.stdout, again.stdout


def test_orch_stop_of_an_unknown_run_exits_2_and_of_an_unreachable_host_exits_3(project, no_user_ssh):
    done = orch(project, "stop", "no-such-run", tests_on_path=True)
    assert done.returncode == 2 and "no run 'no-such-run'" in done.stderr and "Traceback" not in done.stderr
    (project / "inventory.yaml").write_text(
        f"hosts:\n  gone:\n    transport: ssh\n    address: 127.0.0.1\n    port: {free_port()}\n"
        f"    workdir: /tmp/orch-gone\n")
    done = orch(project, "stop", "--host", "gone", tests_on_path=True)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "gone" in done.stderr and "Traceback" not in done.stderr
