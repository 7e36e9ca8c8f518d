"""`orch diff EXPERIMENT --where ... --vs ...`: two configurations' repeats side by side, on runs
written through the real Store into a real SQLite file; two runs still diff as before."""

from __future__ import annotations

import json
import re

import pytest

from conftest import free_port
from support.cli import orch, orch_main
from support.specs import make_run
from orchestrator.core import compare
from orchestrator.store.database import Store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """steps 3: accept 2.0, 2.2, 2.1; steps 5: 3.0, 2.8; steps 7: 2.9 (variant other)."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('diff') / 'orch.db'}")
    rows = [(3, 2.0, "fixed"), (3, 2.2, "fixed"), (5, 3.0, "fixed"), (5, 2.8, "fixed"), (3, 2.1, "fixed"),
            (7, 2.9, "other")]
    for n, (steps, accept, variant) in enumerate(rows):
        make_run(store, n, steps=steps, accept=accept, tok_s=100 + n, variant=variant, port=30000 + n)
    return store


def test_two_configurations_side_by_side_with_spread_and_noise(store, monkeypatch, capsys):
    code, out, _, _ = orch_main(None, ["diff", "sweep", "--where", "steps=3", "--vs", "steps=5", "--json"], ["--db", store.url], strict=True)
    assert code == 0
    data = json.loads(out)
    assert data["a"]["runs"] == [1, 2, 5] and data["b"]["runs"] == [3, 4]
    assert data["params"] == {"steps": {"a": 3, "b": 5}}
    accept = data["metrics"]["accept_len"]
    assert accept["a"] == {"n": 3, "median": 2.1, "min": 2.0, "max": 2.2} and accept["b"]["median"] == 2.9
    assert accept["delta"] == pytest.approx(0.8) and accept["noise"] is False
    assert data["metrics"]["requests"]["noise"] is True  # 16 on both sides
    # a variant names a side too; 2.9 lies inside 2.8-3.0: noise
    code, out, _, _ = orch_main(None, ["diff", "sweep", "--where", "steps=5", "--vs", "variant=other",
                        "--vs", "steps=7"], ["--db", store.url], strict=True)
    assert code == 0 and "noise" in next(line for line in out.splitlines() if "accept_len" in line)


def test_side_by_side_rows():
    a = compare.Group({"s": 1}, ("p",), ["v"], [1, 2], {"m": [1.0, 2.0]})
    b = compare.Group({"s": 2}, ("p",), ["v"], [3], {"m": [5.0], "only_b": [1.0]})
    rows = {r.metric: r for r in compare.side_by_side(a, b)}
    assert rows["m"].delta == 3.5 and not rows["m"].noise
    assert rows["only_b"].a is None and rows["only_b"].delta is None and not rows["only_b"].noise


@pytest.mark.parametrize(("args", "message"), [
    (("--vs", "steps=5"), "diff side A (no --where) matches 3 configurations; pin steps, variant with --where"),
    (("--where", "steps=3", "--vs", "steps=4"), "diff side B (steps=4): no succeeded run matches"),
    (("--where", "steps=3", "--vs", "step=5"), "--vs step: no run of 'sweep' has a param 'step'; did you mean 'steps'?"),
])
def test_a_side_that_is_not_one_configuration_is_one_line_and_exit_2(store, monkeypatch, capsys, args, message):
    code, _, err, _ = orch_main(None, ["diff", "sweep", *args], ["--db", store.url], strict=True)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_two_runs_still_diff_run_by_run(store, monkeypatch, capsys):
    code, out, _, _ = orch_main(None, ["diff", "1", "3", "--json"], ["--db", store.url], strict=True)
    data = json.loads(out)
    assert code == 0 and data["a"]["id"] == 1 and data["metrics"]["accept_len"] == {"a": 2.0, "b": 3.0, "delta": 1.0}


def test_diff_hides_host_specific_and_unchanged_lines_unless_all(store, monkeypatch, capsys):
    """Runs 1 and 3 differ in their port (picked per run) and in their measures but for the request
    count: the port and the request count are left out and counted; --all shows them, and the
    params both have alike, as before. The JSON has every row, and the counts."""
    code, out, _, _ = orch_main(None, ["diff", "1", "3"], ["--db", store.url], strict=True)
    keys = {line.split("│")[2].strip() for line in out.splitlines() if line.count("│") > 3}
    assert code == 0 and {"accept_len", "output_tok_s", "startup_s"} <= keys and not keys & {"port", "requests"}
    assert out.splitlines()[-1] == "1 host-specific and 1 unchanged lines hidden; --all shows them"
    code, out, _, _ = orch_main(None, ["diff", "1", "3", "--all"], ["--db", store.url], strict=True)
    keys = {line.split("│")[2].strip() for line in out.splitlines() if line.count("│") > 3}
    assert code == 0 and {"port", "requests", "topk"} <= keys and "hidden" not in out
    data = json.loads(orch_main(None, ["diff", "1", "3", "--json"], ["--db", store.url], strict=True).out)
    assert data["params"]["port"] == {"a": 30000, "b": 30002} and data["metrics"]["requests"]["delta"] == 0
    assert data["hidden"] == {"host_specific": 1, "unchanged": 1}


def test_two_rehearsal_runs_on_two_ports_differ_in_nothing_shown_of_their_launch(project, demo):
    """The demo's fixed variant run twice on the rehearsal host, each on a port of its own: the port,
    the engine's print of it, the seed it picked at its start and the launch script's --port line
    are host-specific, left out."""
    for _ in range(2):
        done = orch(project, "run", str(demo), "--variant", "fixed", "--set", f"port={free_port()}")
        assert done.returncode == 0, done.stdout + done.stderr
    done = orch(project, "diff")
    assert done.returncode == 0, done.stderr
    hidden = re.search(r"(\d+) host-specific and (\d+) unchanged lines? hidden; --all shows them", done.stdout)
    assert hidden and int(hidden.group(1)) == 5 and int(hidden.group(2)) > 0, done.stdout  # 3 rows, a -/+ line pair
    assert "port" not in done.stdout and "random_seed" not in done.stdout and "launch script" not in done.stdout
    everything = orch(project, "diff", "--all").stdout
    assert "--port" in everything and "random_seed" in everything and "hidden" not in everything
