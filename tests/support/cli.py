"""The `orch` command run from a test: as a subprocess (`orch`, `start_orch`), or its `main()` in
this process (`orch_main`); reading a started one's output; the runs it recorded."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

from conftest import ROOT

TESTS = ROOT / "tests"
ORCH = [sys.executable, "-m", "orchestrator.cli"]
# `python -c CONTROLLER ARGS`: orch's main() as a crash test starts it (argv[0] is `-c`)
CONTROLLER = "import orchestrator.cli as c; c.main()"


def orch_env(folder: Path, *, db: bool = True, inventory: bool = True, columns: str | None = "200",
             tests_on_path: bool = False) -> dict[str, str]:
    """This process's environment for an `orch` command in `folder`: its database `orch.db` (db),
    its `inventory.yaml` (inventory), the repo on PYTHONPATH (and tests/ with it: tests_on_path)
    and COLUMNS (None: this process's)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]) if tests_on_path else str(ROOT)}
    if db:
        env["ORCH_DB"] = f"sqlite:///{folder / 'orch.db'}"
    if inventory:
        env["ORCH_INVENTORY"] = str(folder / "inventory.yaml")
    if columns is not None:
        env["COLUMNS"] = columns
    return env


def orch(folder: Path, *args: str, timeout: float = 240, env: dict[str, str] | None = None,
         **env_options: Any) -> subprocess.CompletedProcess:
    """`orch ARGS` run to its end in `folder`, its output captured. `env`: the whole environment;
    otherwise orch_env(folder, **env_options)."""
    if env is None:
        env = orch_env(folder, **env_options)
    return subprocess.run([*ORCH, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def start_orch(project: Path, *args: str, crash: tuple[str, int] | None = None, controller: bool = False,
               new_session: bool = False, **env_options: Any) -> subprocess.Popen:
    """`orch ARGS` started in `project`, stdout and stderr together on a pipe. controller: as
    `python -c CONTROLLER`; crash (kind, nth): through support.crashing.controller_main, which SIGKILLs it
    right after the nth write of that kind (needs tests_on_path); new_session: in a session of its own."""
    command = ORCH
    if controller or crash:
        code = CONTROLLER
        if crash:
            code = f"import sys; from support.crashing import controller_main; controller_main({crash[0]!r}, {crash[1]}, sys.argv[1:])"
        command = [sys.executable, "-c", code]
    return subprocess.Popen([*command, *args], cwd=project, env=orch_env(project, **env_options),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=new_session)


def read_until(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Output lines up to and including the first holding `text`; kills `proc` if none comes."""
    deadline, seen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if text in line:
            return seen
    proc.kill()
    raise AssertionError(f"no {text!r} in orch's output:\n{seen}")


def wait_for(proc: subprocess.Popen, marker: str, seconds: float = 120) -> str:
    """The controller's output up to the first line holding `marker` (`proc` is left running)."""
    deadline, output = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        output += line
        if marker in line:
            return output
    raise AssertionError(f"no {marker!r} in the controller's output:\n{output}")


class Main(NamedTuple):
    code: Any  # main()'s exit code; None when it raised (crash) or returned
    out: str
    err: str  # "" with merge: stderr went to `out`
    crash: str | None  # the traceback of an exception that escaped main()


def orch_main(project: Path | None, args: list[str], global_args: list[str] | None = None, *,
              merge: bool = False, strict: bool = False) -> Main:
    """`orch GLOBAL_ARGS ARGS` in this process, as the `orch` script runs it. With `project`: in that
    folder, global_args by default its --db and --inventory. merge: stderr into `out`. strict: an
    exception escaping main() is raised, and main() returning without an exit code fails."""
    from orchestrator import cli

    if global_args is None:
        global_args = [] if project is None else ["--db", f"sqlite:///{project / 'orch.db'}",
                                                  "--inventory", str(project / "inventory.yaml")]
    out = io.StringIO()
    err = out if merge else io.StringIO()
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = ["orch", *global_args, *args]
    if project is not None:
        os.chdir(project)
    code, crash, exited = None, None, False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code, exited = exc.code, True
    except BaseException:  # what the `orch` script would print as a traceback
        if strict:
            raise
        crash = traceback.format_exc()
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    if strict and not exited:
        raise AssertionError("main() returned without an exit code")
    return Main(code, out.getvalue(), "" if merge else err.getvalue(), crash)


def records(project: Path) -> list[dict]:
    """Every run as `orch show --json` has it, read in-process (a subprocess each costs ~1 s)."""
    from orchestrator.store.database import Store

    store = Store(f"sqlite:///{project / 'orch.db'}")
    return [store.record(r) for r in store.runs()]


def record(project: Path, run: str = "last") -> dict:
    return json.loads(orch(project, "show", run, "--json").stdout)


# `python -c LOADED_PROBE HEAVY ARGS...`: orch's main() with ARGS, then a last line naming which of
# the comma-separated HEAVY modules it loaded
LOADED_PROBE = """
import sys
heavy, sys.argv = sys.argv[1].split(","), ["orch", *sys.argv[2:]]
import orchestrator.cli as cli
try:
    cli.main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("@@LOADED", *[name for name in heavy if name in sys.modules])
"""


def loaded_by(args: list[str], heavy: tuple[str, ...], env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> tuple[str, list[str]]:
    """`orch ARGS` in a fresh interpreter, exit 0: (its output before the probe's line, which of
    `heavy` it loaded)."""
    done = subprocess.run([sys.executable, "-c", LOADED_PROBE, ",".join(heavy), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    output, _, loaded = done.stdout.rpartition("@@LOADED")
    return output, loaded.split()
