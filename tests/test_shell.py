"""`orch --version` and `orch completion bash|zsh|fish`: the version from the package's metadata
with no database layer loaded; each shell's script; bash's completion of a command, a run id and
an experiment's name through the script sourced into a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.store.database import Store
from support.cli import orch
from support.specs import make_run


def completion(shell: str) -> subprocess.CompletedProcess[str]:
    """`orch completion SHELL` in the repo, with no database or inventory of a test's own."""
    return orch(ROOT, "completion", shell, timeout=60, db=False, inventory=False, columns=None)


def test_version_prints_the_package_version_and_loads_no_database_layer():
    probe = ("import sys\nimport orchestrator.cli as cli\nsys.argv = ['orch', '--version']\n"
             "try:\n    cli.main()\nexcept SystemExit as exc:\n    code = exc.code\n"
             "print('@@', code, *[m for m in ('sqlalchemy', 'sqlmodel', 'pydantic', 'rich') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    out, _, tail = done.stdout.partition("@@")
    assert out == f"orch {version('orch')}\n"
    assert tail.split() == ["0"]


@pytest.mark.parametrize("shell, marks", [("bash", ("complete -o default -F _orch_completion orch",
                                                    "_ORCH_COMPLETE=complete_bash")),
                                          ("zsh", ("#compdef orch", "_ORCH_COMPLETE=complete_zsh")),
                                          ("fish", ("complete --command orch", "_ORCH_COMPLETE=complete_fish"))])
def test_each_shell_gets_its_script(shell, marks):
    done = completion(shell)
    assert done.returncode == 0, done.stderr
    for mark in marks:
        assert mark in done.stdout


def test_a_shell_orch_does_not_complete_is_one_line_and_exit_2():
    done = completion("tcsh")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: orch completion 'tcsh': not a shell orch completes; use one of bash, zsh, fish"]


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    store = Store(url)
    for n in range(3):
        make_run(store, n, steps=3, accept=2.0, tok_s=100.0)
    return url


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_with_the_script_sourced_completes_commands_runs_and_experiments(tmp_path, db):
    """The script as `orch completion bash` prints it, sourced into bash; its function called as
    bash calls it on Tab, `orch` found on PATH (a stand-in for the installed entry point)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "orch").write_text(f"#!/bin/sh\nexec {sys.executable} -m orchestrator.cli \"$@\"\n")
    (bindir / "orch").chmod(0o755)
    script = completion("bash").stdout
    (tmp_path / "orch.bash").write_text(script)

    def tab(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" if w else "''" for w in words)
        probe = (f"source {tmp_path / 'orch.bash'}\nCOMP_WORDS=({line})\nCOMP_CWORD={len(words) - 1}\n"
                 "_orch_completion orch\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
        done = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], capture_output=True, text=True,
                              timeout=60, cwd=ROOT, env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
                                                         "PYTHONPATH": str(ROOT), "ORCH_DB": db})
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert tab("orch", "ru") == ["run"]
    assert set(tab("orch", "s")) >= {"show", "series"}
    assert tab("orch", "show", "") == ["last", "3", "2", "1"]
    assert tab("orch", "diff", "2", "") == ["last", "3", "2", "1"]
    assert tab("orch", "ls", "--experiment", "sw") == ["sweep"]
    assert tab("orch", "--db", db, "ls", "-e", "") == ["sweep"]
    assert tab("orch", "--db", f"sqlite:///{tmp_path / 'none' / 'x.db'}", "show", "") == ["last"]  # no database: no ids
