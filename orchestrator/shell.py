"""Every command string that runs on a host is built here, and every value in it is quoted here.

Callers pass plain values; nothing else in orch joins user values into shell text.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping

READY_MARKER = "__ORCH_STATUS__"


def quote(value: object) -> str:
    """Quote one value for a POSIX shell."""
    return shlex.quote(str(value))


def path(value: str) -> str:
    """Quote a path, keeping a leading `~/` meaning the remote user's home."""
    text = str(value)
    if text == "~":
        return '"$HOME"'
    if text.startswith("~/"):
        return '"$HOME"/' + shlex.quote(text[2:])
    return shlex.quote(text)


def join(args: Iterable[object]) -> str:
    """Quote and join a command's arguments."""
    return " ".join(quote(a) for a in args)


def exports(env: Mapping[str, str]) -> str:
    """`export K=V` lines for a launch script; names are checked by the spec loader."""
    return "\n".join(f"export {name}={quote(value)}" for name, value in env.items())


def mkdir(*paths: str) -> str:
    return "mkdir -p -- " + " ".join(path(p) for p in paths)


def launch(run_dir: str, script: str = "launch.sh", log: str = "server.log") -> str:
    """Start `script` detached in its own session; it outlives our connection.

    The wrapper writes its own pid (which is also the process-group id, since setsid made it the
    session leader) and, when the server ends, its exit code.
    """
    wrapper = f"echo $$ > pid; bash {quote(script)}; echo $? > exit_code"
    return (
        f"cd {path(run_dir)} && rm -f pid exit_code && "
        f"setsid nohup bash -c {quote(wrapper)} > {quote(log)} 2>&1 < /dev/null & "
        f"for _ in $(seq 50); do [ -s {path(run_dir)}/pid ] && break; sleep 0.1; done; "
        f"cat {path(run_dir)}/pid"
    )


def server_status(run_dir: str, log: str, offset: int) -> str:
    """One round trip: is the server alive, its exit code if it ended, and log bytes from `offset`.

    Output: a status line `__ORCH_STATUS__ <alive 0|1> <exit code or -> <log size>` then the bytes.
    """
    d = path(run_dir)
    return (
        f"cd {d} 2>/dev/null || exit 4; "
        f"p=$(cat pid 2>/dev/null); a=0; [ -n \"$p\" ] && kill -0 -- \"$p\" 2>/dev/null && a=1; "
        f"e=$(cat exit_code 2>/dev/null || echo -); s=$(stat -c %s {quote(log)} 2>/dev/null || echo 0); "
        f"echo {READY_MARKER} $a $e $s; tail -c +{int(offset) + 1} {quote(log)} 2>/dev/null | head -c $((s - {int(offset)}))"
    )


def signal_group(pgid: int, sig: str) -> str:
    """Signal a whole process group; quiet when it is already gone."""
    return f"kill -s {quote(sig)} -- -{int(pgid)} 2>/dev/null; true"


def group_alive(pgid: int) -> str:
    """Exit 0 while any process of the group is alive."""
    return f"kill -0 -- -{int(pgid)} 2>/dev/null"


def package_dir(python: str, package: str, pythonpath: str | None = None) -> str:
    """Print the folder of `package` under `python` without importing it (find_spec on a
    top-level name locates it without executing its `__init__`)."""
    code = (
        "import importlib.util,sys\n"
        "s=importlib.util.find_spec(sys.argv[1])\n"
        "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
    )
    prefix = f"PYTHONPATH={path(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}} " if pythonpath else ""
    return f"{prefix}{path(python)} -c {quote(code)} {quote(package)}"


def remove_pycache(source: str) -> str:
    """Remove the bytecode cached for one source file, so Python rereads the patched text."""
    from pathlib import PurePosixPath

    p = PurePosixPath(source)
    cache = p.parent / "__pycache__"
    return f"rm -f -- {path(str(cache))}/{quote(p.stem)}.*.pyc"


def run_python(python: str, script: str, *args: str) -> str:
    return " ".join([path(python), path(script), *(path(a) for a in args)])


def file_exists(p: str) -> str:
    return f"test -e {path(p)}"


def remove_tree(p: str) -> str:
    return f"rm -rf -- {path(p)}"


def cat_records(folder: str, pattern: str = "*/*.json") -> str:
    """Print every one-line JSON record under `folder` (nothing when there are none)."""
    return f"cat -- {path(folder)}/{pattern} 2>/dev/null; true"


def remove_files(*paths: str) -> str:
    return "rm -f -- " + " ".join(path(p) for p in paths)


def remove_empty_dir(p: str) -> str:
    return f"rmdir -- {path(p)} 2>/dev/null; true"
