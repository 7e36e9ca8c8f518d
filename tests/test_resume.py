"""`orch run --resume` end to end: the shipped demo (its params use `{{ host.* }}`) on the rehearsal
host, a real SQLite file, a new free port on every invocation."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import free_port
from test_run import demo, orch  # noqa: F401  (demo: fixture)

AUX_DOC = '"""Set the layers to capture for EAGLE3 speculative decoding."""'  # in kimi-aux-capture: `fixed` only


def runs(project: Path) -> list[tuple[int, str, str]]:
    return [(r["id"], r["variant"], r["status"]) for r in json.loads(orch(project, "ls", "--json").stdout)]


def run(project: Path, spec: Path, *args: str):
    return orch(project, "run", str(spec), "--set", f"port={free_port()}", *args)


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
    assert "fixed (repeat 0): fingerprint changed since run 3: runs again" in changed.stdout
    assert runs(project)[3:] == [(4, "fixed", "succeeded")]
