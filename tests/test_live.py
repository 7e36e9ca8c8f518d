"""`orch run`'s progress: the plain log off a terminal (each warning once, with its count), the live
table on a real pseudo-terminal, and the summary's param columns."""

from __future__ import annotations

import os
import pty
import re
import select
import struct
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from support.cli import ORCH, orch
from support.specs import rehearsal_experiment

def sweep_spec(requests: int = 4) -> str:
    """Two variants x two steps on the host `new`: four runs of `requests` requests each."""
    return rehearsal_experiment(  # 0.5.23 deprecates --disable-cuda-graph: every run's flag check warns the same
        "sweep", hosts=["new"], params={"disable_cuda_graph": True},
        workload={"requests": requests, "max_new_tokens": 32, "concurrency": 2},
        extra="matrix:\n  speculative_num_steps: [2, 3]\n"
              "variants:\n  narrow: {}\n  wide:\n    params: {speculative_eagle_topk: 2}\nready_timeout: 60\n")


DEPRECATED = "--disable-cuda-graph is deprecated"


@pytest.fixture
def sweep(project: Path) -> Path:
    (project / "inventory.yaml").write_text(
        f"hosts:\n  new:\n    transport: local\n    workdir: {project / 'host'}\n    gpus: 8\n    rehearsal: \"0.5.23\"\n")
    path = project / "experiments" / "sweep.yaml"
    path.write_text(sweep_spec())
    return path


def test_plain_log_gives_each_warning_once_and_the_summary_a_column_per_param(project, sweep):
    done = orch(project, "run", str(sweep), "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    flat = re.sub(r"\s+", " ", done.stdout)  # a long line wraps at the log's width
    assert flat.count(DEPRECATED) == 2, done.stdout  # the first, where it happened; the count, once, before the table
    # the first run to reach its flag check says it (the four start at once: either variant's)
    assert re.search(r"\d\d:\d\d:\d\d (narrow|wide)@new #\d+ warning: \S+sglang_launch.sh.j2:\d+: " + DEPRECATED, flat), flat
    [tally] = [i for i, line in enumerate(lines) if line.startswith("warning (x")]
    assert lines[tally].startswith("warning (x4): ") and "@new" not in lines[tally], lines[tally]
    assert tally < next(i for i, line in enumerate(lines) if line.startswith("runs"))
    # one column per param that tells the runs apart: the matrix's, then the variants'
    # (a param-adjusted warning may name speculative_num_steps too: the header is the line that names the variant)
    header = next(line for line in lines if "speculative_num_steps" in line and "variant" in line)
    assert header.index("variant") < header.index("speculative_num_steps") < header.index("speculative_eagle_topk")
    rows = [re.sub(r"\s+", " ", line.strip("│┃ ")) for line in lines if " succeeded " in line and "│" in line]
    points = sorted(tuple(cell.strip() for cell in row.split("│")[1:4]) for row in rows)
    assert points == [("narrow", "2", "1"), ("narrow", "3", "1"), ("wide", "2", "2"), ("wide", "3", "2")], rows


def test_a_dry_run_counts_its_repeated_warnings_too(project, sweep):
    done = orch(project, "run", str(sweep), "--dry-run", "--set", "port=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.sub(r"\s+", " ", done.stdout).count(DEPRECATED) == 2, done.stdout
    assert any(line.startswith("warning (x4): ") for line in done.stdout.splitlines()), done.stdout


def _screen(project: Path, *args: str, timeout: float = 120, ctrl_c_at: str | None = None,
            columns: int = 160) -> tuple[int, str]:
    """`orch ...` on a pseudo-terminal of `columns` columns: its exit code and every byte it wrote;
    with `ctrl_c_at`, Ctrl-C typed on the terminal once the screen shows that text."""
    import fcntl
    import termios

    env = {**os.environ, "ORCH_DB": f"sqlite:///{project / 'orch.db'}", "ORCH_INVENTORY": str(project / "inventory.yaml"),
           "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: orch on the terminal
        os.chdir(project)
        os.execve(sys.executable, [*ORCH, *args], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if ctrl_c_at is not None and ctrl_c_at.encode() in out:
            os.write(fd, b"\x03")  # the terminal sends SIGINT to orch, its foreground process
            ctrl_c_at = None
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def _table_lines(text: str) -> list[str]:
    """Every line the live table drew (each drawing from its title to the line before the next
    timestamped log line, warning or summary)."""
    found = []
    for drawing in text.split("runs in progress")[1:]:
        for row in drawing.splitlines()[1:]:
            # a line printed above the table starts where the table's cursor was left
            drawn = re.split(r"\d\d:\d\d:\d\d |warning|runs\b", row)[0]
            if drawn:
                found.append(drawn)
            if drawn != row:
                break
    return found


def test_live_table_on_a_terminal_of_80_columns_shows_each_run_with_its_phase(project, sweep):
    sweep.write_text(sweep_spec(requests=40))  # a workload long enough to show its progress
    code, screen = _screen(project, "run", str(sweep), "--variant", "narrow", "--set", f"port={free_port()}", columns=80)
    assert code == 0, screen
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).replace("\r", "")  # colours and cursor moves out
    assert "runs in progress" in text
    for phase in ("check flags", "launch", "wait ready", "revert patches", "succeeded"):
        assert phase in text, phase
    assert "\x1b[2K" in screen or "\x1b[1A" in screen  # rows rewritten in place, not appended
    # the run's own lines go to its row, not to the screen as a log
    assert not re.search(r"\d\d:\d\d:\d\d narrow@new #\d+ ready after", text)
    flat = re.sub(r"\s+", " ", text)  # a long line wraps at the terminal's width
    assert flat.count(DEPRECATED) == 2 and "warning (x2): " in text  # the first, then the count
    # each cursor move ends a line: what is printed above the table starts after one
    drawn = _table_lines(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", re.sub(r"\x1b\[(\d*A|2K)", "\n", screen)))
    assert drawn and max(len(row.rstrip()) for row in drawn) <= 80, "\n".join(r for r in drawn if len(r.rstrip()) > 80)
    # the swept param is a column (its last word); one variant, one host: no column for either
    header = next(row for row in drawn if row.startswith("run "))
    assert header.split()[:2] == ["run", "steps"] and "variant" not in header and "host" not in header, header
    # while the workload runs, its accept length and tok/s so far, on the row of its steps
    assert re.search(r"^\d+\s+[23]\s+(\d\s+)?workload \d+ s\s+[\d.]+\s+[\d.]+", "\n".join(drawn), re.M), drawn
    last = text[text.rindex("runs in progress"):text.rindex("warning (x2)")]  # its final state
    assert "2 finished: 2 succeeded" in last, last  # the finished runs fold into a count
    summary = text[text.rindex("\nruns"):]
    assert " steps " in summary and summary.count(" succeeded ") == 2, summary  # a terminal's short label


def test_the_live_table_of_a_tuning_sweep_fits_80_columns_and_folds_what_finished():
    """12 plans (steps x topk x 3 repeats) over three hosts: the swept params as columns, the nine
    finished runs one line, no line wider than 80."""
    import io

    from rich.console import Console

    from orchestrator.cli.live import Board
    from orchestrator.core.spec import RunPlan
    from orchestrator.run.attempt import Stage

    def plan(steps: int, topk: int, repeat: int) -> RunPlan:
        point = {"speculative_num_steps": steps, "speculative_eagle_topk": topk}
        return RunPlan("tune", "default", {**point, "port": 30000, "tp_size": 8}, {}, (), {}, repeat,
                       ("h1", "h2", "h3"), point=point)

    plans = [plan(steps, topk, repeat) for steps in (3, 5) for topk in (1, 4) for repeat in (0, 1, 2)][:12]
    board = Board(Console(file=io.StringIO(), force_terminal=True, width=80), lambda *line: None,
                  lambda label: lambda kind, amount: None)
    board.expect(plans)
    for i, each in enumerate(plans):
        label = f"default@sglang-h{i % 3 + 1} #{i + 1}"
        board.known(label, {"run": i + 1, "gpus": "0-7", "engine": "sglang", "plan": each.key})
        board.stage(label, Stage.WORKLOAD)
        board.message(label, "ready after 12.3 s; sending 400 requests of sharegpt_v3_unfiltered_cleaned_split.json")
        board.known(label, {"accept_len": 2.61, "output_tok_s": 1234.5})
        if i < 9:
            board.known(label, {"status": "failed" if i == 4 else "succeeded"})
    board.stop()
    screen = Console(file=io.StringIO(), width=80)
    screen.print(board.table())
    lines = screen.file.getvalue().splitlines()
    assert max(len(row) for row in lines) <= 80, "\n".join(lines)
    header = next(row for row in lines if row.startswith("run "))
    assert header.split()[:5] == ["run", "steps", "topk", "repeat", "host"], header
    assert "default" not in "\n".join(lines) and "GPUs" not in header  # the same on every row: no column
    rows = [row.split()[:5] for row in lines if re.match(r"\d+\s+\d+\s", row)]
    assert rows == [["10", "5", "4", "0", "sglang-h1"], ["11", "5", "4", "1", "sglang-h2"],
                    ["12", "5", "4", "2", "sglang-h3"]], lines
    assert "9 finished: 8 succeeded, 1 failed" in lines, lines
    assert any("ready after" in row for row in lines)  # the note keeps what room is left


@pytest.mark.slow
def test_ctrl_c_on_the_terminal_leaves_the_table_then_the_cleanup_and_the_summary(project, sweep):
    sweep.write_text(sweep_spec(requests=400))
    code, screen = _screen(project, "run", str(sweep), "--variant", "narrow", "--set", f"port={free_port()}",
                           ctrl_c_at="sending 400 requests")
    assert code == 130, screen
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    assert "SIGINT: stopping every host's server" in text
    summary = text[text.rindex("\nruns"):]
    assert " interrupted " in summary and " steps " in summary, summary  # the swept param, by its short label
    assert screen.rindex("\x1b[?25h") > screen.rindex("\x1b[?25l")  # the cursor is given back


def test_board_keeps_one_row_per_run_and_prints_what_a_note_cannot_hold():
    import io

    from rich.console import Console

    from orchestrator.cli.live import Board
    from orchestrator.run.attempt import Stage

    printed: list[tuple[str, str]] = []
    board = Board(Console(file=io.StringIO(), force_terminal=True, width=160), lambda *line: printed.append(line),
                  lambda label: lambda kind, amount: None)
    board.message("h", "connected")  # a host's line: above the table
    board.known("v@h #1", {"run": 1, "gpus": "0,1", "engine": "sglang"})
    board.known("v@h #2", {"run": 2, "gpus": "2,3", "engine": "sglang"})  # at once on the same host
    board.stage("v@h #1", Stage.WORKLOAD)
    board.message("v@h #1", "ready after 1.0 s")
    board.message("v@h #2", "preflight WARNING: w\nwhy: y\nfix: f")
    board.message("v@h #1", "preflight WARNING: w\nwhy: y\nfix: f")  # every point finds it: said once, counted
    board.warning("v@h #1", "the same")
    board.warning("v@h #2", "the same")
    board.known("v@h #1", {"accept_len": 2.5, "output_tok_s": 900.0, "status": "succeeded"})
    assert [(r.run_id, r.gpus, r.phase, r.note) for r in board.rows] == [
        (1, "0,1", "succeeded", "ready after 1.0 s"), (2, "2,3", "starting", "preflight WARNING: w")]
    assert board.rows[0].measures == {"accept_len": 2.5, "output_tok_s": 900.0}
    assert printed == [("h", "connected"), ("v@h #2", "preflight WARNING: w\nwhy: y\nfix: f"),
                       ("v@h #1", "warning: the same")]
    assert board.finish() == ["preflight WARNING: w (x2: said once above)", "warning (x2): the same"]
    assert board.finish() == []
    push = board.transfer("v@h #2 draft")  # a run's checkpoint push: in its row
    push("total", 3 * 2**20)
    push("advance", 2**20)
    assert board.rows[1].note == "push draft: 1.0 of 3.0 MiB"


def test_measures_so_far_come_from_the_completed_requests_at_most_twice_a_second():
    from orchestrator import engines
    from orchestrator.engines.base import RequestResult, WorkloadResult
    from orchestrator.engines.sglang.engine import VERIFY_STEPS
    from orchestrator.run import workload

    told: list[dict[str, float]] = []
    on = workload.so_far(engines.get("sglang"), lambda **values: told.append(values))
    first = RequestResult(10, 30, 0.1, {VERIFY_STEPS: 10})  # 3 tokens per verify step
    second = RequestResult(10, 20, 0.1, {VERIFY_STEPS: 10})
    on(WorkloadResult((first,), 0.2))
    on(WorkloadResult((first, second), 0.4))  # too soon: not worked out
    on(WorkloadResult((first, second), 1.0))
    assert told == [{"output_tok_s": 150.0, "accept_len": 3.0}, {"output_tok_s": 50.0, "accept_len": 2.5}]
