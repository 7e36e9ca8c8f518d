"""An experiment's own errors are found once, before any run starts: a patch anchor found 0 or 2
times (checked against the host's file once per patch set), a template name undefined for one
variant, an unknown preflight code. One line, exit 2, no run recorded for any plan, nothing on the
host changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from support.cli import orch
from support.files import snapshot

ANCHOR = 'find: "hidden_states = forward_batch.spec_info.hidden_states"'
SWEEP = "matrix:\n  speculative_num_steps: [2, 3, 4, 5]\n"  # 4 plans of the fixed variant


@pytest.fixture
def demo(project: Path) -> Path:
    spec = project / "experiments" / "eagle_debug.yaml"
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("port: 30000", f"port: {free_port()}")
    spec.write_text(text)
    return spec


def installed(project: Path) -> dict[str, str]:
    orch(project, "check", "experiments/eagle_debug.yaml", "--variant", "fixed")  # the rehearsal tree, installed
    return snapshot(project / "host" / "rehearsal" / "sglang")


def runs(project: Path) -> list[dict]:
    return json.loads(orch(project, "ls", "--json").stdout)


def error_lines(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error")]


@pytest.mark.parametrize("anchor, count", [
    ('find: "this text is in no file"', "0 times"),
    ('find: "hidden_states"', "times"),  # many times in llama_eagle3.py
])
def test_a_bad_anchor_in_a_sweep_stops_it_before_any_run(project, demo, anchor, count):
    demo.write_text(demo.read_text().replace(ANCHOR, anchor) + SWEEP)
    before = installed(project)
    done = orch(project, "run", str(demo), "--variant", "fixed")
    assert done.returncode == 2, done.stdout + done.stderr
    assert runs(project) == []  # no failed run per plan
    [line] = {line for line in error_lines(done)}  # one line, however many plans
    assert "debug-hidden-states" in line and count in line, line
    assert snapshot(project / "host" / "rehearsal" / "sglang") == before
    assert not (project / "host" / "runs").exists() or not list((project / "host" / "runs").iterdir())


def test_a_name_undefined_in_one_variant_stops_every_run(project, demo):
    template = project / "templates" / "sglang_launch.sh.j2"
    template.write_text(template.read_text().replace(
        "  --port {{ port | q }} \\\n", "  --port {{ port | q }} \\\n{% if variant == 'story' %}  {{ nosuch | q }} \\\n{% endif %}", 1))
    done = orch(project, "run", str(demo))
    assert done.returncode == 2, done.stdout + done.stderr
    assert runs(project) == []  # not even the fixed variant's, which renders
    assert any("'nosuch' is undefined" in line for line in error_lines(done)), done.stdout + done.stderr


def test_an_unknown_preflight_code_is_one_line_before_any_host(project, demo):
    demo.write_text(demo.read_text().replace("allow: [algorithm-not-eagle3]", "allow: [algorithm-not-eagle]"))
    done = orch(project, "run", str(demo))
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert "unknown preflight code 'algorithm-not-eagle'" in line and "did you mean algorithm-not-eagle3?" in line
    assert line.startswith("error: ") and "eagle_debug.yaml:" in line
    assert runs(project) == [] and not (project / "host").exists()  # no host was touched


def test_a_dry_run_reports_a_bad_anchor_once_for_the_experiment(project, demo):
    demo.write_text(demo.read_text().replace(ANCHOR, 'find: "this text is in no file"') + SWEEP)
    before = installed(project)
    done = orch(project, "run", str(demo), "--variant", "fixed", "--dry-run")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    [line] = error_lines(done)  # once, not once per plan
    assert "launch_server" not in said  # stopped before any plan's script was shown, as a run stops
    assert "0 times" in line and "debug-hidden-states" in line, said
    assert runs(project) == []
    assert snapshot(project / "host" / "rehearsal" / "sglang") == before
