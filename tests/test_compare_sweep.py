"""End to end: a real rehearsal sweep (2 values of a param, 2 repeats, the smallest workload) recorded
in a real SQLite file, then `orch compare` names the best configuration. Slow (7 s on a quiet machine,
20 s on a busy one, most of it the sweep): its quick sibling is test_compare.py, the same command on
runs written through the real Store."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, free_port
from support.cli import orch


@pytest.mark.slow
def test_compare_names_the_best_configuration_of_a_rehearsal_sweep(project):
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    text = text.replace("requests: 16", "requests: 2").replace("max_new_tokens: 96", "max_new_tokens: 8")
    path = project / "experiments" / "sweep.yaml"
    path.write_text(text + "\nmatrix:\n  speculative_num_steps: [3, 5]\nrepeats: 2\n")
    done = orch(project, "run", str(path), "--variant", "fixed", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    done = orch(project, "compare", "eagle_debug", "--json", "--by", "accept_len")  # the CPU stand-in's tok/s is noise
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    # the engine ran steps 5 with 6 draft tokens (topk 1: steps + 1), not the 4 asked: compare groups by what ran
    assert data["varying"] == ["speculative_num_steps", "speculative_num_draft_tokens"] and "port" not in data["constant"]
    assert {r["params"]["speculative_num_steps"]: r["params"]["speculative_num_draft_tokens"] for r in data["rows"]} == {3: 4, 5: 6}
    assert [r["n"] for r in data["rows"]] == [2, 2]
    best = data["rows"][0]
    # the rehearsal server accepts more draft tokens per step with more steps
    assert best["mark"] == "best" and best["params"]["speculative_num_steps"] == 5
    assert best["metrics"]["accept_len"]["median"] > data["rows"][1]["metrics"]["accept_len"]["max"]
    table = orch(project, "compare", "eagle_debug", "--by", "accept_len").stdout
    assert "best by accept_len: speculative_num_steps=5" in table
