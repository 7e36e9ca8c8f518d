"""A server's processes on a host: launched detached in a session of their own, watched through
their run folder, found by their process group or their run mark, and signalled."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .quoting import join, path, pythonpath_prefix, quote

READY_MARKER = "__ORCH_STATUS__"
RUN_MARK = "ORCH_RUN_DIR"  # in the environment of every process of a server orch started: its run folder
SECRETS_FILE = "secrets.env"

# The launch wrapper `$p` killed (its group with it) may stay a zombie where the host's init does not
# reap: `kill -0` still succeeds on it, so its state is read too (an unreadable /proc counts as alive).
_NOT_ZOMBIE = '{ s=; { read -r s < /proc/$p/stat; } 2>/dev/null; s=${s##*") "}; [ "${s%% *}" != Z ]; }'

# A shell function: `live_group` exits 0 while a process of the group `$g` is alive. Zombies do not
# count: an exited process the host's init has not reaped yet holds no GPU, port or file.
LIVE_GROUP = (
    'live_group() { for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; '
    's=${s##*") "}; set -f; set -- $s; set +f; [ "$1" != Z ] && [ "$3" = "$g" ] && return 0; done; return 1; }; '
)

# The process groups with a live (not zombie) process, in `$groups` as " pgid pgid ... ": one pass
# over /proc, however many groups are asked about (a pass per group costs the folders times the
# host's processes: `runfolders.py`).
LIVE_GROUPS = (
    'groups=" $(for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; '
    's=${s##*") "}; set -f; set -- $s; set +f; [ "$1" != Z ] && printf \'%s \' "$3"; done) "; '
)


def _require_variable_names(names: Iterable[str]) -> None:
    """Names that go into a shell's environment unquoted must be variable names."""
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not an environment variable name: {name!r}")


def secrets_file(secrets: dict[str, str]) -> str:
    """The text of a run's secrets file: `NAME='value'` lines a shell reads with `set -a; . file`."""
    _require_variable_names(secrets)
    return "".join(f"{name}={quote(value)}\n" for name, value in secrets.items())


def launch(run_dir: str, script: str = "launch.sh", log: str = "server.log") -> str:
    """Start `script` detached in its own session; it outlives our connection.

    The wrapper writes its own pid (which is also the process-group id, since setsid made it the
    session leader) and, when the server ends, its exit code. Only the setsid command is put in
    the background: a backgrounded `a && b &` list would keep our output pipe open until the
    server exits.
    """
    # The stop signals the whole group, the wrapper too: its TERM/INT trap (a no-op, run once the
    # server has exited) keeps it alive to write the exit code. A trapped signal is reset to the
    # default in the server, which the signal reaches directly as a member of the group.
    # secrets.env (0600, when the run has secrets) is read into the environment, then removed:
    # the server inherits the values, and no file or command line keeps them.
    wrapper = (f"trap : TERM INT; echo $$ > pid; if [ -f {SECRETS_FILE} ]; then set -a; . ./{SECRETS_FILE}; set +a; "
               f"rm -f {SECRETS_FILE}; fi; bash {quote(script)}; echo $? > exit_code")
    return (
        f"cd {path(run_dir)} || exit 1; rm -f pid exit_code; "
        f'{RUN_MARK}="$PWD" setsid nohup bash -c {quote(wrapper)} > {quote(log)} 2>&1 < /dev/null & '
        f"for _ in $(seq 50); do [ -s {path(run_dir)}/pid ] && break; sleep 0.1; done; "
        f"cat {path(run_dir)}/pid"
    )


def run_tool(run_dir: str, python: str, module: str, argv: Iterable[str], env: dict[str, str],
             pythonpath: str | None, output: str) -> str:
    """Run `python -m module argv...` in the run folder with `env` (`pythonpath` first on PYTHONPATH),
    its stdout and stderr into `output` there; the command's status is the tool's."""
    _require_variable_names(env)
    exports = "".join(f"export {name}={quote(value)}; " for name, value in env.items())
    return (f"mkdir -p -- {path(run_dir)} && cd {path(run_dir)} || exit 1; {exports}{pythonpath_prefix(pythonpath, export=True)}"
            f"{path(python)} -m {quote(module)} {join(argv)} > {quote(output)} 2>&1 < /dev/null")


def server_status(run_dir: str, log: str, offset: int) -> str:
    """One round trip: is the server alive, its exit code if it ended, and log bytes from `offset`.

    Output: a status line `__ORCH_STATUS__ <alive 0|1> <exit code or -> <log size>` then the bytes.
    """
    d = path(run_dir)
    return (
        f"cd {d} 2>/dev/null || exit 4; "
        f"p=$(cat pid 2>/dev/null); a=0; [ -n \"$p\" ] && kill -0 -- \"$p\" 2>/dev/null && {_NOT_ZOMBIE} && a=1; "
        f"e=$(cat exit_code 2>/dev/null || echo -); s=$(stat -c %s {quote(log)} 2>/dev/null || echo 0); "
        f"echo {READY_MARKER} $a $e $s; tail -c +{int(offset) + 1} {quote(log)} 2>/dev/null | head -c $((s - {int(offset)}))"
    )


def group_alive(pgid: int) -> str:
    """Exit 0 while any process of the group is alive (zombies aside)."""
    return f"g={int(pgid)}; {LIVE_GROUP}live_group"


def run_processes(pgid: int, run_dir: str, sig: str | None = None) -> str:
    """Print `g PID` for every live process of the group `pgid` and `m PID` for every other one
    carrying `run_dir`'s run mark (a child that left the group with `setsid ... &`); with `sig`,
    signal the group and each of the others (a second signal to a member could cut its shutdown
    short and change its exit code).

    Zombies are left out: an exited child the host's init has not reaped yet holds no GPU and no
    port. One grep reads every process's environment (the run mark, NUL-separated entries); per
    process only builtins run (its /proc stat), so a busy host is scanned in tens of milliseconds
    (bash's `read` of each environment, byte by byte, took 0.5-0.8 s on a loaded 2-core host).
    """
    signal = f'[ "$k" = m ] && kill -s {quote(sig)} -- "$p" 2>/dev/null; ' if sig else ""
    group = f"kill -s {quote(sig)} -- -{int(pgid)} 2>/dev/null; " if sig else ""
    return (
        f'{group}cd {path(run_dir)} 2>/dev/null || exit 0; want="{RUN_MARK}=$PWD"; '
        'marked=" $(grep -lzxF -- "$want" /proc/[0-9]*/environ 2>/dev/null | tr "\\n" " ")"; '
        'for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; '
        's=${s##*") "}; set -f; set -- $s; set +f; [ "$1" = Z ] && continue; p=${d#/proc/}; k=g; '
        f'if [ "$3" != {int(pgid)} ]; then case "$marked" in *" $d/environ "*) k=m ;; *) continue ;; esac; fi; '
        f'{signal}echo "$k $p"; done; true'
    )


def group_started_in(pgid: int, run_dir: str) -> str:
    """Exit 0 if a process of the group carries `run_dir` as its run mark (see `launch`): after a
    reboot the pid in a pid file may name somebody else's processes, which must not be signalled.
    Reads /proc directly (no procps needed); a process's environment is readable only by its owner."""
    return (
        f'cd {path(run_dir)} 2>/dev/null || exit 1; want="{RUN_MARK}=$PWD"; '
        'for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; '
        f's=${{s##*") "}}; set -f; set -- $s; set +f; [ "$3" = {int(pgid)} ] || continue; '
        '{ tr "\\0" "\\n" < "$d/environ"; } 2>/dev/null | grep -qxF -- "$want" && exit 0; '
        "done; exit 1"
    )


def kill_pid(pid: int) -> str:
    return f"kill {int(pid)} 2>/dev/null; true"
