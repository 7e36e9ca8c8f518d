"""SIGINT, SIGTERM and SIGHUP to a real `orch run` of a sweep over several rehearsal hosts, at
chosen moments (a server launching, ready, under its workload): after each, no file of any host's
installed stand-in differs from its pristine copy, no process carries a run mark of the test's
hosts, no run is left `running`, and orch exits 130 with a line per host and the summary."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator

import pytest

import sshd
from support.cli import orch, orch_env, records, start_orch, wait_for
from support.files import installed_in
from support.processes import HOSTS, installed_everywhere, marked_processes, prepared, sweep_project

# what the controller prints at each moment (its progress lines)
MOMENTS = {"launch": "server launched", "ready": "ready after", "workload": "sending"}
TERMINAL = {"succeeded", "failed", "interrupted"}


def interrupt(project: Path, spec: Path, sig: signal.Signals, moment: str, delay: float = 0.0,
              hosts: tuple[str, ...] = HOSTS) -> tuple[subprocess.Popen, str, float]:
    proc = start_orch(project, "run", str(spec), "--hosts", ",".join(hosts), tests_on_path=True, new_session=True)
    before = wait_for(proc, MOMENTS[moment])
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=120)
    return proc, before + rest, time.monotonic() - sent


def assert_clean(project: Path, pristine: dict[str, dict[str, str]], proc: subprocess.Popen, output: str,
                 sig: signal.Signals) -> None:
    assert proc.returncode == 130, output
    for host, files in pristine.items():
        now = installed_in(project / host)
        assert now == files, f"{host}: files left patched: {sorted(k for k in now if now.get(k) != files.get(k))}"
    assert marked_processes(project) == [], output
    runs = records(project)
    assert runs and all(r["status"] in TERMINAL for r in runs), [(r["uid"], r["status"]) for r in runs]
    cut = [r for r in runs if r["status"] == "interrupted"]
    # none cut: the signal came as the last run ended, and every run ended on its own
    assert cut or all(r["status"] == "succeeded" for r in runs), [(r["uid"], r["status"]) for r in runs]
    assert all(f"interrupted by {sig.name}" in r["error"] for r in cut), [r["error"] for r in cut]
    text = " ".join(output.split())
    assert f"{sig.name}: stopping every host's server" in text
    for host in pristine:
        assert re.search(rf"{host}\W+(run \S+ interrupted|no run was in progress)", text), output
    assert "runs" in output and "interrupted" in output  # the summary table


# SIGINT under the workload is the case `make test` runs; the other signals and moments, and the
# sshd host, under `-m slow` (a closed terminal, SIGHUP, has its own case below)
@pytest.mark.parametrize("sig,moment", [
    (signal.SIGINT, "workload"),
    pytest.param(signal.SIGTERM, "launch", marks=pytest.mark.slow),
    pytest.param(signal.SIGHUP, "ready", marks=pytest.mark.slow),
], ids=["SIGINT-workload", "SIGTERM-launch", "SIGHUP-ready"])
def test_a_signal_stops_every_host_and_reverts_every_patch(project, sig, moment):
    spec = sweep_project(project)
    pristine = prepared(project, spec)
    proc, output, took = interrupt(project, spec, sig, moment)
    assert_clean(project, pristine, proc, output, sig)
    assert took < 45


def test_a_second_ctrl_c_says_what_is_left_and_the_cleanup_still_finishes(project):
    spec = sweep_project(project)
    pristine = prepared(project, spec)
    proc = start_orch(project, "run", str(spec), "--hosts", ",".join(HOSTS), tests_on_path=True, new_session=True)
    output = wait_for(proc, "sending")
    proc.send_signal(signal.SIGINT)
    output += wait_for(proc, "stopping every host's server")
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    output += rest
    text = " ".join(output.split())
    assert ("orch revert --host" in text and "finishes the cleanup" in text) or "nothing left running" in text, output
    assert_clean(project, pristine, proc, output, signal.SIGINT)


def test_orch_revert_stops_a_server_left_by_a_run_already_marked_ended(project):
    """A server alive under a run that says it ended (the issue's "interrupted, reverted" with its
    port held): `orch revert` stops it, found by its run mark."""
    spec = sweep_project(project, ("h1",))
    done = orch(project, "run", str(spec), "--hosts", "h1", "--dry-run", tests_on_path=True)
    assert done.returncode == 0, done.stderr
    package = project / "h1" / "rehearsal" / "sglang"
    shutil.copytree(package, project / "pristine")
    proc = start_orch(project, "run", str(spec), "--hosts", "h1", tests_on_path=True, new_session=True)
    wait_for(proc, "sending")
    proc.kill()
    proc.communicate(timeout=60)
    # as the issue found it: files restored, no journal, no lock, the run says it ended; its server is up
    shutil.rmtree(package)
    shutil.copytree(project / "pristine", package)
    shutil.rmtree(project / "h1" / "journal")
    (project / "h1" / "lock").unlink()
    [run] = records(project)
    from orchestrator.store.database import Store

    store = Store(f"sqlite:///{project / 'orch.db'}")
    store.update_run(store.get(run["uid"]), status="interrupted", error="marked ended by hand")
    assert marked_processes(project)
    done = orch(project, "revert", "--host", "h1", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert marked_processes(project) == []
    assert f"stopped the server run {run['uid']} left running" in " ".join(done.stdout.split())


@pytest.mark.slow
@pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")
def test_sigterm_over_a_real_sshd_host_and_a_local_one(project, tmp_path, monkeypatch):
    with far_host(project, tmp_path, monkeypatch) as entry:
        spec = sweep_project(project, ("h1",), entry)
        hosts = ("h1", "far")
        pristine = installed_everywhere(project, spec, hosts)
        proc, output, _ = interrupt(project, spec, signal.SIGTERM, "workload", hosts=hosts)
        assert_clean(project, pristine, proc, output, signal.SIGTERM)


@contextlib.contextmanager
def far_host(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A rehearsal host `far` over a real sshd (its own HOME, no agent): its inventory entry."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    server = sshd.start(tmp_path / "sshd", "far")
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_line())
        yield server.rehearsal_entry(known, project / "far")
    finally:
        server.stop()


def test_a_closed_terminal_stops_every_host_and_reverts_every_patch(project):
    """`orch run` on a pseudo-terminal whose other end is closed (the terminal window goes away):
    SIGHUP, and every later write to the terminal fails; the cleanup happens all the same."""
    import pty

    spec = sweep_project(project)
    pristine = prepared(project, spec)
    pid, master = pty.fork()
    if pid == 0:  # the child: `orch run` with the pty as its controlling terminal
        os.chdir(project)
        env = orch_env(project, tests_on_path=True)
        os.execvpe(sys.executable, [sys.executable, "-m", "orchestrator.cli", "run", str(spec), "--hosts",
                                    ",".join(HOSTS)], env)
    screen = b""
    deadline = time.monotonic() + 120
    while b"sending" not in screen and time.monotonic() < deadline:
        try:
            screen += os.read(master, 65536)
        except OSError:
            break
    assert b"sending" in screen, screen.decode(errors="replace")
    os.close(master)  # the terminal is gone: the kernel sends SIGHUP
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 130
    for host, files in pristine.items():
        assert installed_in(project / host) == files, f"{host}: files left patched"
    assert marked_processes(project) == []
    runs = records(project)
    assert runs and all(r["status"] in TERMINAL for r in runs)
    assert any("interrupted by SIGHUP" in (r["error"] or "") for r in runs), [r["error"] for r in runs]


def test_ctrl_c_after_the_output_pipe_closed_still_cleans_up(project):
    """`orch run ... | tee log` and Ctrl-C: tee dies with orch's group, so every line orch writes
    during its cleanup meets a closed pipe; the lines are lost, the cleanup is not."""
    spec = sweep_project(project)
    pristine = prepared(project, spec)
    proc = start_orch(project, "run", str(spec), "--hosts", ",".join(HOSTS), tests_on_path=True, new_session=True)
    wait_for(proc, "sending")
    proc.stdout.close()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    for host, files in pristine.items():
        assert installed_in(project / host) == files, f"{host}: files left patched"
    assert marked_processes(project) == []
    runs = records(project)
    assert runs and all(r["status"] in TERMINAL for r in runs), [(r["uid"], r["status"]) for r in runs]
    assert not (project / HOSTS[0] / "journal").exists() or not any((project / HOSTS[0] / "journal").rglob("*.json"))


TRIALS = int(os.environ.get("ORCH_INTERRUPT_TRIALS", "20"))


@pytest.mark.slow
@pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")
def test_signals_at_random_moments_leave_nothing_behind(project, tmp_path, monkeypatch):
    """The trial matrix over a 3-host sweep (two local hosts and one over a real sshd): a random
    signal at a random moment plus a random delay, TRIALS times."""
    with far_host(project, tmp_path, monkeypatch) as entry:
        _trials(project, sweep_project(project, HOSTS, entry), (*HOSTS, "far"))


def _trials(project: Path, spec: Path, hosts: tuple[str, ...]) -> None:
    pristine = installed_everywhere(project, spec, hosts)
    chance = random.Random(13)
    took_s: list[float] = []
    for trial in range(TRIALS):
        sig = chance.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
        moment = chance.choice(list(MOMENTS))
        delay = chance.uniform(0, 1.0)
        proc, output, took = interrupt(project, spec, sig, moment, delay, hosts=hosts)
        if proc.returncode == 0:  # the sweep ended before the signal: nothing to check but the files
            assert all(installed_in(project / h) == files for h, files in pristine.items())
            continue
        assert_clean(project, pristine, proc, output, sig)
        assert took < 45, f"trial {trial}: cleanup took {took:.1f} s"
        took_s.append(took)
        (project / "orch.db").unlink(missing_ok=True)
    # the figures for the record (`pytest -s`): how many trials a signal cut, and how long they took to exit
    print(f"\n{len(took_s)} of {TRIALS} trials interrupted, all clean; signal to exit: "
          f"median {sorted(took_s)[len(took_s) // 2]:.2f} s, max {max(took_s):.2f} s" if took_s else "no trial interrupted")
