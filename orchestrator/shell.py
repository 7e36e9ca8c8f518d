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
    session leader) and, when the server ends, its exit code. Only the setsid command is put in
    the background: a backgrounded `a && b &` list would keep our output pipe open until the
    server exits.
    """
    wrapper = f"echo $$ > pid; bash {quote(script)}; echo $? > exit_code"
    return (
        f"cd {path(run_dir)} || exit 1; rm -f pid exit_code; "
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


def in_bash(command: str) -> str:
    """Run `command` under bash whatever the login shell is, so SSH hosts behave like the local one.

    The login shell has already read the user's rc files; SHLVL=2 stops this inner bash from
    reading ~/.bashrc a second time (bash does so under sshd only at shell level 1), which on hosts
    with conda or pyenv init costs 100 ms or more per command.
    """
    return f"SHLVL=2 exec bash -c {quote(command)}"


def move(source: str, target: str) -> str:
    """Rename over `target` (atomic within one filesystem)."""
    return f"mv -f -- {path(source)} {path(target)}"


FACTS_MARKER = "__ORCH_FACT__"

_FACTS_PYTHON = """\
import importlib.util, os, platform, re, sys
print("%(m)s python=" + platform.python_version())
print("%(m)s python_path=" + sys.executable)
spec = importlib.util.find_spec("sglang")
if spec and spec.submodule_search_locations:
    folder = list(spec.submodule_search_locations)[0]
    version = ""
    try:
        text = open(os.path.join(folder, "version.py")).read()
        found = re.search(r"__version__\\s*=\\s*[\\"']([^\\"']+)", text)
        version = found.group(1) if found else ""
    except OSError:
        pass
    if not version:
        try:
            import importlib.metadata
            version = importlib.metadata.version("sglang")
        except Exception:
            pass
    print("%(m)s sglang_dir=" + folder)
    print("%(m)s sglang_version=" + version)
""" % {"m": FACTS_MARKER}


def host_facts(python: str, workdir: str, port: int, pythonpath: str | None = None) -> str:
    """One script, one round trip: OS, Python, SGLang (found without importing it), GPUs, free disk in
    the workdir (or its nearest existing parent) and whether `port` is listening.

    Output: lines `__ORCH_FACT__ key=value`; GPU and GPU-process lines are nvidia-smi's CSV rows.
    """
    m = FACTS_MARKER
    prefix = f"PYTHONPATH={path(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}} " if pythonpath else ""
    port_hex = f"{int(port):04X}"
    return "\n".join([
        f'echo "{m} hostname=$(hostname 2>/dev/null || uname -n)"',
        f'echo "{m} os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -sr)"',
        f'echo "{m} kernel=$(uname -r)"',
        f"{prefix}{path(python)} -c {quote(_FACTS_PYTHON)} 2>/dev/null || echo \"{m} python_error=$?\"",
        "if command -v nvidia-smi >/dev/null 2>&1; then",
        f"  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu=/'",
        f"  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu_process=/'",
        "fi",
        f"d={path(workdir)}; while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done",
        f"echo \"{m} disk_free_kib=$(df -Pk \"$d\" | awk 'NR==2 {{print $4}}')\"",
        # /proc/net/tcp{,6} state 0A is LISTEN; needs no ss/netstat on the host
        f"if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == \"0A\" {{print $2}}' | grep -qi ':{port_hex}$';"
        f" then echo \"{m} port_listening=1\"; else echo \"{m} port_listening=0\"; fi",
    ])
