"""`orch ls --sort/--host/--where/--csv/--json` on runs written through the real Store into a real SQLite file."""

from __future__ import annotations

import csv
import io
import json

import pytest

from support.cli import orch_main
from support.specs import make_run
import tuning_runs
from orchestrator.store.database import FAILED, Store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Runs 1-4: steps 3, 5, 3, 7 with accept 2.0, 3.0, 2.2, 2.9, on hosts a, b, a, b; run 5 failed."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('ls') / 'orch.db'}")
    for n, (steps, accept) in enumerate([(3, 2.0), (5, 3.0), (3, 2.2), (7, 2.9)]):
        make_run(store, n, steps=steps, accept=accept, tok_s=100 + n, host="ab"[n % 2])
    make_run(store, 4, steps=9, accept=None, tok_s=None, status=FAILED)
    return store


def ids(out: str) -> list[int]:
    return [r["id"] for r in json.loads(out)]


def test_sort_puts_the_best_first_and_the_limit_keeps_the_best(store, monkeypatch, capsys):
    _, out, _, _ = orch_main(None, ["ls", "--sort", "accept_len", "--json"], ["--db", store.url], strict=True)
    assert ids(out) == [2, 4, 3, 1, 5]  # the failed run has no accept length: last
    _, out, _, _ = orch_main(None, ["ls", "--sort", "accept_len", "-n", "2", "--json"], ["--db", store.url], strict=True)
    assert ids(out) == [2, 4]
    _, out, _, _ = orch_main(None, ["ls", "--sort", "startup_s", "--json"], ["--db", store.url], strict=True)  # a duration: ascending
    assert ids(out) == [1, 2, 3, 4, 5]
    code, out, _, _ = orch_main(None, ["ls", "--sort", "accept_len"], ["--db", store.url], strict=True)
    assert code == 0 and "accept_len" in out.splitlines()[2]  # the header, below the title and the table's top


def test_host_and_where_filter_and_json_carries_params_and_metrics(store, monkeypatch, capsys):
    _, out, _, _ = orch_main(None, ["ls", "--host", "b", "--json"], ["--db", store.url], strict=True)
    assert ids(out) == [2, 4]
    _, out, _, _ = orch_main(None, ["ls", "--where", "steps=3", "--where", "topk=1", "--json"], ["--db", store.url], strict=True)
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [1, 3]
    assert rows[0]["params"]["steps"] == 3 and rows[0]["metrics"]["accept_len"] == 2.0
    assert rows[0]["metrics"]["output_tok_s"] == 100.0
    _, out, _, _ = orch_main(None, ["ls", "--where", "steps=3", "-n", "1", "--json"], ["--db", store.url], strict=True)
    assert ids(out) == [3]  # the newest of the matching runs


def test_csv_has_a_column_per_param_and_metric(store, monkeypatch, capsys):
    _, out, _, _ = orch_main(None, ["ls", "--csv", "-e", "sweep", "--status", "succeeded"], ["--db", store.url], strict=True)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["id"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[1]["steps"] == "5" and rows[1]["accept_len"] == "3.0" and rows[1]["host"] == "b"


@pytest.mark.parametrize(("args", "message"), [
    (("ls", "--sort", "accept_length"), "--sort accept_length: no run has that metric; did you mean 'accept_len'?"),
    (("ls", "--status", "succeded"), "is not a run status; use one of running, succeeded, failed, interrupted; "
                                     "did you mean 'succeeded'?"),
    (("ls", "--where", "step=3"), "--where step: no run listed has a param 'step'; did you mean 'steps'?"),
])
def test_bad_ls_input_is_one_line_and_exit_2(store, monkeypatch, capsys, args, message):
    code, _, err, _ = orch_main(None, [*args], ["--db", store.url], strict=True)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def table(out: str) -> tuple[str, list[str], list[list[str]]]:
    """`orch ls`'s title, its header's cells and each row's."""
    lines = out.splitlines()
    cells = [[c.strip() for c in line.strip("┃│").split("┃" if "┃" in line else "│")] for line in lines[1:]
             if line.startswith(("┃", "│"))]
    return lines[0], cells[0], cells[1:]


def test_the_table_shows_what_tells_the_runs_apart_and_the_headline_metrics(store, monkeypatch, capsys):
    """steps differs between the runs: a column; topk is the same in all, and port, the GPU slot and
    the model path (written with `{{ host.* }}`) differ only by host: none. What all the runs share
    is said above the table; the hosts differ: a column."""
    code, out, _, _ = orch_main(None, ["ls", "-e", "sweep", "--status", "succeeded"], ["--db", store.url], strict=True)
    title, header, rows = table(out)
    assert code == 0 and title == "4 runs of sweep, variant fixed"
    assert header == ["id", "host", "steps", "status", "accept_len", "output_tok_s", "started"]
    assert [row[:6] for row in rows][1] == ["2", "b", "5", "succeeded", "3", "101"]


def test_a_tuning_sweep_on_80_columns_shows_steps_topk_and_the_objective(tmp_path, monkeypatch):
    """steps x topk x 2 repeats (the repeats on two ports): steps and topk by their short labels, and
    the objective's metric beside accept length and throughput, in no line wider than 80: the
    repeat index gives way first (the start time before it), and shows where there is room."""
    from rich.console import Console

    from orchestrator.cli import ui

    store = tuning_runs.fill(tmp_path / "orch.db", {"minimize": "itl_ms_p99", "subject_to": ["accept_len >= 2"]})

    def screen(*args: str) -> str:
        """`orch ls ARGS` on a terminal of 80 columns."""
        drawn = io.StringIO()
        monkeypatch.setattr(ui, "console", Console(file=drawn, width=80, force_terminal=True, color_system=None))
        code, _, _, _ = orch_main(None, ["ls", *args], ["--db", store.url], strict=True)
        assert code == 0
        return drawn.getvalue()

    drawn = screen()
    title, header, rows = table(drawn)
    assert title == "18 runs of tuning, variant sweep, on local"
    assert header == ["id", "steps", "topk", "status", "accept_len", "output_tok_s", "itl_ms_p99"]
    assert len(rows) == 18 and rows[-1][1:3] == ["5", "4"]
    assert max(len(line) for line in drawn.splitlines()) <= 80
    header = table(screen("--sort", "accept_len", "-n", "2"))[1]  # two repeats of one point
    assert header == ["id", "repeat", "status", "accept_len", "output_tok_s", "itl_ms_p99", "flags"]  # cut to fit
