"""Text from a host, a log or a run never drives the terminal: ESC, BEL, CR, BS and the other C0 and
C1 controls are printed as escapes (`\\x1b`), newline and tab only where a block of lines is
printed, and rich markup in such text is printed as written, not applied."""

from __future__ import annotations

import io
import re
import sys

import pytest
from rich.console import Console

from orchestrator.cli import live, text, ui
from orchestrator.host.facts import Gpu, HostFacts
from support.cli import orch_main
from support.corpus import build

# set the title, colour, bell, overprint the line, erase back, clear the screen (C1 CSI), markup
HOSTILE = "\x1b]0;owned\x07\x1b[31mred\r\x08[bold]fake[/bold] \x9b2J\x00end"
SHOWN = "\\x1b]0;owned\\x07\\x1b[31mred\\r\\x08[bold]fake[/bold] \\x9b2J\\x00end"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what may never reach the terminal raw


@pytest.fixture
def screen(monkeypatch):
    """ui's consoles writing into strings, as wide as a terminal, with colour (as on a terminal)."""
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(ui, "console", Console(file=out, width=400, force_terminal=True, highlight=False))
    monkeypatch.setattr(ui, "errors", Console(file=err, width=400, force_terminal=True, highlight=False))
    monkeypatch.setattr(ui, "reporter", ui.Plain())

    def read() -> str:
        printed = out.getvalue() + err.getvalue()
        return without_rich_codes(printed)

    return read


def without_rich_codes(printed: str) -> str:
    """The output less rich's own CSI codes (colours, the cursor): the only ESC orch may print. Text
    made visible carries a backslash, not an ESC, so it is never taken for one of them."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed)


def clean(printed: str) -> str:
    assert not RAW_CONTROL.search(printed), repr(printed)
    return printed


def test_visible_shows_every_control_and_keeps_lines_in_a_block():
    assert text.visible(HOSTILE) == SHOWN
    assert text.visible("a\tb\nc\r\x7f\x85") == "a\\tb\\nc\\r\\x7f\\x85"
    assert text.visible("a\tb\nc\r", block=True) == "a\tb\nc\\r"
    assert text.visible("plain text, é and 😀 stay") == "plain text, é and 😀 stay"
    assert text.line("[red]x[/red]") == "\\[red]x\\[/red]"


def test_an_error_from_a_host_is_printed_visible_and_unstyled(screen):
    ui.error(f"box: command failed: {HOSTILE}", (f"stderr: {HOSTILE}",))
    printed = clean(screen())
    assert f"error: box: command failed: {SHOWN}" in printed
    assert f"| stderr: {SHOWN}" in printed


def test_progress_lines_keep_their_line_breaks_and_show_the_rest(screen):
    ui.progress(f"base@box{HOSTILE}", f"first {HOSTILE}\nsecond\tline")
    printed = clean(screen())
    assert f"base@box{SHOWN} first {SHOWN}" in printed
    assert re.search(r"\n {9}second\s+line", printed)  # the tab kept (rich prints it as spaces)


def test_hosts_check_cells_are_visible_and_a_python_error_stays_red(screen):
    facts = HostFacts(host="box", reachable=True, rtt_ms=1.0, os=f"Linux {HOSTILE}", python=None,
                      python_error=f"python3: {HOSTILE}",
                      packages={"sglang": {"version": "0.5.9", "dir": f"/opt/{HOSTILE}"}},
                      gpus=(Gpu(f"H100 {HOSTILE}", 0, 80000),), disk_free_bytes=2**30, port=30000, port_listening=False)
    ui.host_facts([facts, HostFacts(host="down", reachable=False, error=f"unreachable: {HOSTILE}")])
    printed = clean(screen())
    assert f"Linux {SHOWN}" in printed and f"python3: {SHOWN}" in printed and f"/opt/{SHOWN}" in printed
    assert f"H100 {SHOWN}" in printed and f"unreachable: unreachable: {SHOWN}" in printed
    assert "[red]" not in printed  # markup of orch's own is applied, not printed


def test_patch_listings_and_findings_are_visible(screen):
    ui.patches([{"host": "box", "run_id": 1, "run": "uid", "name": "p", "seq": 1, "file": f"/pkg/{HOSTILE}.py",
                 "state": "drifted"}])
    ui.findings([{"variant": "v", "host": "box", "findings": [
        {"severity": "error", "what": f"what {HOSTILE}", "why": f"why {HOSTILE}", "fix": f"fix {HOSTILE}"}]}])
    printed = clean(screen())
    assert f"/pkg/{SHOWN}.py" in printed
    for word in ("what", "why:", "fix:"):
        assert re.search(rf"{re.escape(word)} .*{re.escape(SHOWN)}", printed), word


def test_the_live_table_shows_a_runs_note_visible():
    board = live.Board(Console(file=io.StringIO(), width=400, force_terminal=True), lambda label, message: None,
                       lambda label: (lambda kind, amount: None))
    board.known("base@box #1", {"run": 1})
    board.message("base@box #1", f"note {HOSTILE}"[:60])
    board.stop()  # the live display redraws with its own CR; the table's cells are what is checked
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=True).print(board.table())
    printed = clean(without_rich_codes(out.getvalue()))
    assert "note \\x1b]0;owned\\x07" in printed


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_raw_log_output_is_exact_in_a_pipe_and_visible_on_a_terminal(monkeypatch, terminal):
    out = io.StringIO()
    out.isatty = lambda: terminal  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stdout", out)
    ui.raw_outside(f"line one {HOSTILE}\nline\ttwo\n")
    if terminal:
        assert out.getvalue() == f"line one {SHOWN}\nline\ttwo\n"
    else:
        assert out.getvalue() == f"line one {HOSTILE}\nline\ttwo\n"


def test_a_runs_hostile_debug_line_and_error_print_visible_in_show(host, tmp_path):
    """A real run whose patched server prints ESC, BEL, CR and markup in its debug line: `orch show`
    prints it visible, and the run's own progress lines too."""
    _, places = host
    hostile = "\\x1b]0;owned\\x07\\x1b[31m[bold]fake[/bold]\\rX\\x08"
    project = build({"experiment": {"edit": [['print("[CORPUS-DEBUG] reached", flush=True)',
                                              f'print("[CORPUS-DEBUG] {hostile}", flush=True)']]}, "args": []},
                    tmp_path, places)
    code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
    assert (code, crash) == (0, None), out + err + (crash or "")
    code, out, err, crash = orch_main(project, ["show", "last"])
    assert (code, crash) == (0, None), out + err + (crash or "")
    printed = clean(out + err)
    assert "[CORPUS-DEBUG] \\x1b]0;owned\\x07\\x1b[31m[bold]fake[/bold]\\rX\\x08" in printed
