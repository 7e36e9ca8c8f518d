"""`orch run --resume` end to end: the shipped demo (its params use `{{ host.* }}`) on the rehearsal
host, a real SQLite file, a new free port on every invocation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from support.cli import ORCH, orch

AUX_DOC = '"""Set the layers to capture for EAGLE3 speculative decoding."""'  # in kimi-aux-capture: `fixed` only


def runs(project: Path) -> list[tuple[int, str, str]]:
    return [(r["id"], r["variant"], r["status"]) for r in json.loads(orch(project, "ls", "--json").stdout)]


def run(project: Path, spec: Path, *args: str):
    return orch(project, "run", str(spec), "--set", f"port={free_port()}", *args)


@pytest.mark.slow  # a long story of several whole runs, kept out of `make test`: `pytest -m slow` runs it
def test_resume_runs_exactly_the_failed_then_the_changed_plan(project, demo):
    shipped = demo.read_text()
    assert AUX_DOC in shipped and "{{ host." in shipped
    # `fixed` fails before its server starts: its patched file does not compile
    demo.write_text(shipped.replace(AUX_DOC, AUX_DOC + " )("))
    first = run(project, demo)
    assert first.returncode != 0
    assert runs(project) == [(1, "story", "succeeded"), (2, "fixed", "failed")]

    demo.write_text(shipped)
    again = run(project, demo, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "story (repeat 0): skipped, run 1 succeeded" in again.stdout
    assert "fixed (repeat 0): no succeeded run yet: runs" in again.stdout
    assert runs(project)[2:] == [(3, "fixed", "succeeded")]

    idle = run(project, demo, "--resume")
    assert idle.returncode == 0, idle.stdout + idle.stderr
    assert "story (repeat 0): skipped, run 1 succeeded" in idle.stdout
    assert "fixed (repeat 0): skipped, run 3 succeeded" in idle.stdout
    assert "nothing to do" in idle.stdout
    assert len(runs(project)) == 3

    demo.write_text(shipped.replace(AUX_DOC, '"""Set the layers EAGLE3 captures."""'))
    changed = run(project, demo, "--resume")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "story (repeat 0): skipped, run 1 succeeded" in changed.stdout
    # what changed, from the parts run 3 recorded: the patch whose text was edited
    assert "fixed (repeat 0): fingerprint changed since run 3 (patch kimi-aux-capture): runs again" in changed.stdout
    assert runs(project)[3:] == [(4, "fixed", "succeeded")]


def test_resume_says_what_changed_since_the_run_it_does_not_skip(project, demo):
    first = run(project, demo, "--variant", "story")
    assert first.returncode == 0, first.stdout + first.stderr
    again = run(project, demo, "--variant", "story", "--resume", "--set", "speculative_num_steps=5",
                "--set", "env.HF_TOKEN=hf_abcdefgh12345678", "--dry-run")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ("story (repeat 0): fingerprint changed since run 1 (speculative_num_steps=3→5, env HF_TOKEN): runs again"
            in again.stdout), again.stdout
    assert "hf_abcdefgh" not in again.stdout + again.stderr


def test_resume_after_an_interrupted_run_runs_exactly_the_missing_plan(project, demo):
    env = {**os.environ, "ORCH_DB": f"sqlite:///{project / 'orch.db'}", "ORCH_INVENTORY": str(project / "inventory.yaml"),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*ORCH, "run", str(demo), "--set", f"port={free_port()}"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, deadline = "", time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        output += line
        if "fixed@local" in line and "started" in line:
            break
    time.sleep(0.5)  # somewhere in the `fixed` run: patching, starting, serving
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output + rest
    assert [(v, s) for _, v, s in runs(project)] == [("story", "succeeded"), ("fixed", "interrupted")]

    resumed = run(project, demo, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "story (repeat 0): skipped, run 1 succeeded" in resumed.stdout
    assert "fixed (repeat 0): no succeeded run yet: runs" in resumed.stdout
    assert runs(project)[2:] == [(3, "fixed", "succeeded")]
