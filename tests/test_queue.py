"""The shared queue through `orch run`: hosts take their runs from one queue, so a host that cannot
be reached leaves its plans to the others."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, free_port
from test_run import orch


def test_a_plan_an_unreachable_host_would_have_run_runs_on_another(project: Path):
    closed = free_port()  # nothing listens there: the connection is refused at once
    with (project / "inventory.yaml").open("a") as inventory:
        inventory.write("  gone:\n    transport: ssh\n    address: 127.0.0.1\n"
                        f"    port: {closed}\n    user: nobody\n    known_hosts: {project / 'known_hosts'}\n"
                        f"    workdir: {project / 'gone'}\n    gpus: 8\n    rehearsal: true\n")
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text())
    done = orch(project, "run", str(spec), "--hosts", "local,gone", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gone" in done.stdout and "left the sweep" in done.stdout
    listing = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["host"], r["status"]) for r in listing] == [
        ("story", "local", "succeeded"), ("fixed", "local", "succeeded")]
