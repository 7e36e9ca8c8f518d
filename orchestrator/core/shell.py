"""Every command string that runs on a host is built here, and every value in it is quoted here.

Callers pass plain values; nothing else in orch joins user values into shell text.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from collections.abc import Iterable

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


def mkdir(*paths: str) -> str:
    return "mkdir -p -- " + " ".join(path(p) for p in paths)


def mkdir_private(folder: str) -> str:
    """A folder only its owner can enter (a run folder holds the launch's secrets file for a moment)."""
    return f"mkdir -p -- {path(folder)} && chmod 700 -- {path(folder)}"


RUN_MARK = "ORCH_RUN_DIR"  # in the environment of every process of a server orch started: its run folder
SECRETS_FILE = "secrets.env"


def secrets_file(secrets: dict[str, str]) -> str:
    """The text of a run's secrets file: `NAME='value'` lines a shell reads with `set -a; . file`."""
    for name in secrets:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not an environment variable name: {name!r}")
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
    for name in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not an environment variable name: {name!r}")
    exports = "".join(f"export {name}={quote(value)}; " for name, value in env.items())
    prefix = f"export PYTHONPATH={path(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}; " if pythonpath else ""
    return (f"mkdir -p -- {path(run_dir)} && cd {path(run_dir)} || exit 1; {exports}{prefix}"
            f"{path(python)} -m {quote(module)} {join(argv)} > {quote(output)} 2>&1 < /dev/null")


# The launch wrapper `$p` killed (its group with it) may stay a zombie where the host's init does not
# reap: `kill -0` still succeeds on it, so its state is read too (an unreadable /proc counts as alive).
_NOT_ZOMBIE = '{ s=; { read -r s < /proc/$p/stat; } 2>/dev/null; s=${s##*") "}; [ "${s%% *}" != Z ]; }'


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


# A shell function: `live_group` exits 0 while a process of the group `$g` is alive. Zombies do not
# count: an exited process the host's init has not reaped yet holds no GPU, port or file.
_LIVE_GROUP = (
    'live_group() { for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; '
    's=${s##*") "}; set -f; set -- $s; set +f; [ "$1" != Z ] && [ "$3" = "$g" ] && return 0; done; return 1; }; '
)


def group_alive(pgid: int) -> str:
    """Exit 0 while any process of the group is alive (zombies aside)."""
    return f"g={int(pgid)}; {_LIVE_GROUP}live_group"


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


def remove_tree(p: str) -> str:
    return f"rm -rf -- {path(p)}"


def cat_records(folder: str, pattern: str = "*/*.json") -> str:
    """Print every one-line JSON record under `folder` (nothing when there are none)."""
    return f"cat -- {path(folder)}/{pattern} 2>/dev/null; true"


def remove_files(*paths: str) -> str:
    return "rm -f -- " + " ".join(path(p) for p in paths)


def remove_empty_dir(p: str) -> str:
    return f"rmdir -- {path(p)} 2>/dev/null; true"


DEADLINE_GRACE = 2  # seconds the host's own deadline runs past the controller's


def in_bash(command: str, deadline: float | None = None) -> str:
    """Run `command` under bash whatever the login shell is, so SSH hosts behave like the local one.

    The login shell has already read the user's rc files; SHLVL=2 stops this inner bash from
    reading ~/.bashrc a second time (bash does so under sshd only at shell level 1), which on hosts
    with conda or pyenv init costs 100 ms or more per command.

    With a `deadline` (seconds), the host's `timeout` runs the command in a process group of its
    own and, on SIGTERM (what the controller sends when it gives up) or a little after the
    deadline, signals that whole group: a grep or a stuck Python a command started does not live
    on, orphaned, on a shared host. Without `timeout` there (not coreutils), plain bash.
    """
    run = f"bash -c {quote(command)}"
    if deadline is None:
        return f"SHLVL=2 exec {run}"
    limit = math.ceil(deadline) + DEADLINE_GRACE
    return (f"if command -v timeout >/dev/null 2>&1; then SHLVL=2 exec timeout -k 5 {limit} {run}; "
            f"else SHLVL=2 exec {run}; fi")


def move(source: str, target: str) -> str:
    """Rename over `target` (atomic within one filesystem)."""
    return f"mv -f -- {path(source)} {path(target)}"


FACTS_MARKER = "__ORCH_FACT__"

_DISTRIBUTION_PYTHON = r"""
def distribution(folder, package):
    # the installed distribution that owns the package (a CPU build may install it under another name);
    # only dist-infos named after the package are read (a site-packages holds hundreds)
    site = os.path.dirname(folder)
    try:
        infos = [n for n in os.listdir(site) if n.endswith(".dist-info") and n.lower().startswith(package.lower())]
    except OSError:
        return ""
    for info in sorted(infos):
        try:
            top = open(os.path.join(site, info, "top_level.txt")).read().split()
        except OSError:
            top = [info.split("-")[0]]
        if package not in top:
            continue
        try:
            head = open(os.path.join(site, info, "METADATA"), errors="replace").read(4096)
        except OSError:
            continue
        found = re.search(r"^Name:\s*(\S+)", head, re.M)
        if found:
            return found.group(1)
    return ""
"""

_FACTS_PYTHON = r"""
import importlib.util, os, re, sys
""" + _DISTRIBUTION_PYTHON + r"""
m, workdir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def fact(key, value):
    print(m, key + "=" + str(value).replace("\n", " "))
uname = os.uname()  # not socket or platform: each import costs milliseconds, on every host
fact("hostname", uname.nodename)
try:
    release = dict(line.rstrip("\n").split("=", 1) for line in open("/etc/os-release") if "=" in line)
    fact("os", release.get("PRETTY_NAME", "").strip('"') or uname.sysname)
except OSError:
    fact("os", uname.sysname + " " + uname.release)
fact("kernel", uname.release)
fact("python", sys.version.split()[0])
fact("python_path", sys.executable)
for wanted in sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else ():
    package, _, files = wanted.partition(":")
    spec = importlib.util.find_spec(package)
    if not spec or not spec.submodule_search_locations:
        continue
    folder = list(spec.submodule_search_locations)[0]
    version = ""
    for name in files.split("+"):  # the package's own version files, in the order its engine gives
        try:
            found = re.search(r"^__version__\s*=\s*(?:\w+\s*=\s*)*[\x22']([^\x22']+)", open(os.path.join(folder, name)).read(), re.M)
        except OSError:
            continue
        if found:
            version = found.group(1)
            break
    fact("package_dir." + package, folder)
    fact("package_version." + package, version)
    owner = distribution(folder, package)
    if owner:
        fact("package_dist." + package, owner)
d = workdir
while not os.path.isdir(d):
    d = os.path.dirname(d) or "/"
st = os.statvfs(d)
fact("disk_free_kib", st.f_bavail * st.f_frsize // 1024)
listening = False
for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # state 0A is LISTEN; needs no ss/netstat
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    listening = listening or any(r.split()[3] == "0A" and int(r.split()[1].rsplit(":", 1)[1], 16) == port for r in rows)
fact("port_listening", int(listening))
"""


def package_distribution(python: str, folder: str, package: str) -> str:
    """Print the name of the distribution that installed `package` (found in `folder`): its
    dist-info's METADATA `Name:`, which may differ from the package's; nothing when none names one."""
    code = "import os, re, sys\n" + _DISTRIBUTION_PYTHON + "print(distribution(sys.argv[1], sys.argv[2]))"
    return f"{path(python)} -c {quote(code)} {path(folder)} {quote(package)}"


def host_facts(python: str, workdir: str, port: int, pythonpath: str | None = None,
               packages: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> str:
    """One script, one round trip: OS, Python, each of `packages` (name, its version files; found
    without importing it: its folder and `__version__`), GPUs, free disk in
    the workdir (or its nearest existing parent) and whether `port` is listening. One Python process
    gathers all but the GPUs, so a host costs few forks; without a working Python the basic facts
    still come from the shell.

    Output: lines `__ORCH_FACT__ key=value`; GPU and GPU-process lines are nvidia-smi's CSV rows.
    """
    m = FACTS_MARKER
    prefix = f"PYTHONPATH={path(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}} " if pythonpath else ""
    return "\n".join([
        f"{prefix}{path(python)} -c {quote(_FACTS_PYTHON)} {quote(m)} {path(workdir)} {int(port)} "
        f"{quote(','.join(name + ':' + '+'.join(files) for name, files in packages))} 2>/dev/null"
        f' || {{ echo "{m} python_error=$?"; echo "{m} hostname=$(uname -n)"; echo "{m} os=$(uname -sr)";'
        f' echo "{m} kernel=$(uname -r)"; }}',
        "if command -v nvidia-smi >/dev/null 2>&1; then",
        f"  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu=/'",
        f"  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu_process=/'",
        "fi",
    ])


# -- journal durability and the host lock ------------------------------------------------------

LOCK_MARKER = "__ORCH_LOCK__"


def sync_paths(*paths: str) -> str:
    """fsync files and folders (a folder's fsync makes the renames inside it durable); a `sync`
    without file arguments (old coreutils, busybox) falls back to syncing everything."""
    return f"sync -- {' '.join(path(p) for p in paths)} 2>/dev/null || sync"


def remove_stale_temps(source: str) -> str:
    """Remove temporary files a killed writer left beside `source` (`.<name>.*.orch-tmp`)."""
    from pathlib import PurePosixPath

    p = PurePosixPath(source)
    return f"rm -f -- {path(str(p.parent))}/{quote('.' + p.name + '.')}*.orch-tmp"


def sweep_journal(root: str) -> str:
    """Remove what a killed controller can leave in the journal besides records: a saved original
    whose record was never written, temporary files, and empty run folders."""
    r = path(root)
    return (
        f"for o in {r}/*/*.orig; do [ -e \"$o\" ] || continue; [ -e \"${{o%.orig}}.json\" ] || rm -f -- \"$o\"; done; "
        f"rm -f -- {r}/*/.*.orch-tmp; rmdir -- {r}/*/ 2>/dev/null; true"
    )


def unwritable_folders(files: Iterable[str]) -> str:
    """Print each folder of `files` the host's user cannot write into (`test -w` is false on a
    read-only file system even for root): a patch writes a temporary file there and renames it."""
    folders = sorted({posixpath.dirname(f) or "/" for f in files})
    return f"for d in {' '.join(path(f) for f in folders)}; do [ -w \"$d\" ] || printf '%s\\n' \"$d\"; done; true"


def lock_take(lock: str, content: str) -> str:
    """Create `lock` holding `content` only if it does not exist. The content is written whole to a
    temporary file first and then hard-linked into place (link(2) fails if `lock` exists: atomic
    on the host), so a full disk or a crash mid-write never leaves an empty or cut lock; where the
    filesystem has no hard links, noclobber creates `lock` from the complete file (an O_EXCL create).
    On a failed write, exit 1 with the shell's error; on a lock already there, print its state
    (see `lock_state`)."""
    import posixpath

    folder, final = path(posixpath.dirname(lock)), path(lock)
    return (
        f"mkdir -p -- {folder} || exit 1; t={final}.$$.new; "
        f"printf '%s\\n' {quote(content)} > \"$t\" || {{ rm -f -- \"$t\"; exit 1; }}; "
        f"if ln -- \"$t\" {final} 2>/dev/null || {{ [ ! -e {final} ] && ( set -o noclobber; cat -- \"$t\" > {final} ) 2>/dev/null; }}; "
        f"then rm -f -- \"$t\"; echo {LOCK_MARKER} taken; else rm -f -- \"$t\"; {lock_state(lock)}; fi"
    )


def lock_state(lock: str) -> str:
    """`__ORCH_LOCK__ held <host now> <lock mtime>` then the lock's content, both by the host's
    clock (so the lease never depends on the controller's clock); `__ORCH_LOCK__ free` if absent."""
    return (
        f"m=$(stat -c %Y -- {path(lock)} 2>/dev/null) || {{ echo {LOCK_MARKER} free; exit 0; }}; "
        f"echo {LOCK_MARKER} held $(date +%s) $m; cat -- {path(lock)} 2>/dev/null; true"
    )


def lock_renew(lock: str, token: str, content: str) -> str:
    """Rewrite `lock` (new content, fresh mtime) if it still holds `token`; exit 1 if it does not.
    The new content is written whole, then renamed over the lock; where it cannot be written (a
    full disk) the temporary file goes and the lock's mtime alone is refreshed, which keeps the
    lease without needing space."""
    tmp = path(f"{lock}.{token}.tmp")
    return (
        f"grep -qF -- {quote(token)} {path(lock)} 2>/dev/null || exit 1; "
        f"{{ printf '%s\\n' {quote(content)} > {tmp} && mv -f -- {tmp} {path(lock)}; }} 2>/dev/null "
        f"|| {{ rm -f -- {tmp}; touch -c -- {path(lock)}; }}"
    )


def lock_release(lock: str, token: str) -> str:
    """Remove `lock` only if it still holds `token` (a lock broken and retaken by another stays)."""
    return f"grep -qF -- {quote(token)} {path(lock)} 2>/dev/null && rm -f -- {path(lock)}; true"


def lock_break(lock: str, content: str) -> str:
    """Remove a stale `lock` only if it still holds exactly the `content` judged stale (as `$( )`
    reads it: without NUL bytes, which no command line can carry, and trailing newlines)."""
    seen = content.replace("\0", "").rstrip("\n")
    return f"[ \"$(cat -- {path(lock)} 2>/dev/null)\" = {quote(seen)} ] 2>/dev/null && rm -f -- {path(lock)}; true"


# -- checkpoints: push and preflight ------------------------------------------------------------


def read_range(p: str, offset: int, length: int) -> str:
    """`length` bytes of a file from byte `offset` (a safetensors header without the tensors)."""
    return f"tail -c +{int(offset) + 1} -- {path(p)} | head -c {int(length)}"


def list_dirs(folder: str) -> str:
    """Names of the folders directly in `folder`, one per line (none when missing)."""
    return f"find {path(folder)} -mindepth 1 -maxdepth 1 -type d -printf '%f\\n' 2>/dev/null; true"


def list_named(folder: str, suffix: str) -> str:
    """Names of the files directly in `folder` ending in `suffix`, one per line (none when missing)."""
    return f"find {path(folder)} -maxdepth 1 -type f -name {quote('*' + suffix)} -printf '%f\\n' 2>/dev/null; true"


_ENTRY_CLASS_AWK = (  # every line of each top-level `EntryClass = ...` statement, brackets followed
    'FNR == 1 { on = 0 } /^EntryClass[ \\t]*=/ { on = 1; depth = 0 } '
    'on { print "E\\t" FILENAME "\\t" FNR "\\t" $0; o = $0; depth += gsub(/[[(]/, "", o); '
    'o = $0; depth -= gsub(/[])]/, "", o); if (depth <= 0) on = 0 }'
)


def eagle3_survey(srt: str) -> str:
    """What the EAGLE-3 preflight reads first from an installed SGLang's `srt` folder, one fact a line:
    `X<TAB>model_executor/<file>.py` for each model-runner file naming `is_eagle3(` or
    `set_eagle3_layers_to_capture`, then `E<TAB><file>.py<TAB><line><TAB><text>` for the lines of each
    `EntryClass = ...` statement in `models/*.py` (the architectures SGLang registers)."""
    runner = quote(r"is_eagle3\(|set_eagle3_layers_to_capture")
    return (f"cd {path(srt)} || exit 1; grep -rlE --include='*.py' -- {runner} model_executor 2>/dev/null"
            f" | awk '{{print \"X\\t\" $0}}'; cd models && awk {quote(_ENTRY_CLASS_AWK)} *.py; true")


def speculative_survey(srt: str, method: str) -> str:
    """`eagle3_survey`, then `S<TAB>speculative/<file>.py` for each speculative-worker file calling
    `.<method>(` (where the workers ask the target model for it)."""
    pattern = quote(rf"\.{re.escape(method)}\(")
    return (f"( {eagle3_survey(srt)} ); cd {path(srt)} 2>/dev/null && grep -rlE --include='*.py' -- {pattern}"
            f" speculative 2>/dev/null | awk '{{print \"S\\t\" $0}}'; true")


def cat_files(paths: list[str]) -> str:
    """Each file as `<byte count>\\n<bytes>`, in order; `-1\\n` for one that is not a file."""
    files = " ".join(path(p) for p in paths)
    return f'for f in {files}; do if [ -f "$f" ]; then wc -c < "$f"; cat -- "$f"; else echo -1; fi; done'


def file_quoting(folder: str, name: str) -> str:
    """The first `*.py` file under `folder` holding `name` in quotes (a name its code looks for)."""
    pattern = f"[\"']{re.escape(name)}[\"']"
    return f"grep -rlE --include='*.py' -- {quote(pattern)} {path(folder)} 2>/dev/null | head -n 1; true"


def tree_listing(folder: str, skip: tuple[str, ...] = ()) -> str:
    """`size mtime relative-path` NUL-separated for every file under `folder` (nothing when missing),
    leaving out names matching the `skip` globs."""
    excluded = "".join(f" ! -name {quote(s)}" for s in skip)
    return f"cd {path(folder)} 2>/dev/null && find . -type f{excluded} -printf '%s %T@ %P\\0'; true"


def sha256_each(folder: str, relatives: list[str]) -> str:
    """One sha256 per line for each file under `folder`, in order; `-` for a file that cannot be read."""
    files = " ".join(quote(r) for r in relatives)
    return (f"cd {path(folder)} || exit 1; for f in {files}; do "
            f"h=$(sha256sum < \"$f\" 2>/dev/null) || h=-; echo \"${{h%% *}}\"; done")


def sha256_prefix(p: str, length: int) -> str:
    """The sha256 of a file's first `length` bytes."""
    return f"head -c {int(length)} -- {path(p)} | sha256sum"


def flag_sources(folder: str, patterns: tuple[str, ...]) -> str:
    """`sha256  relative-path` of each file under `folder` matching the globs (the files that declare
    SGLang's flags), sorted, one per line; nothing when none exist."""
    for p in patterns:  # globs are expanded by the shell; they come from our own constant, never a user
        if any(c in p for c in " ;&|$`'\"\\"):
            raise ValueError(f"unsafe glob {p!r}")
    globs = " ".join(patterns)
    return f"cd {path(folder)} 2>/dev/null || exit 0; for f in {globs}; do [ -f \"$f\" ] && sha256sum -- \"$f\"; done; true"


def log_excerpt(p: str, pattern: str, tail: int) -> str:
    """A big log cut down on the host: the lines matching an extended regex (LC_ALL=C grep: bytewise,
    no locale decoding), then the log's end from the first line start in its last `tail` bytes."""
    f = path(p)
    return (f"s=$(stat -c %s -- {f}) || exit 1; t={int(tail)}; [ $t -gt $s ] && t=$s; "
            f"cut=$((s - t + $(tail -c $t -- {f} | head -n 1 | wc -c))); "
            f"head -c $cut -- {f} | LC_ALL=C grep -a -E -- {quote(pattern)}; tail -c +$((cut + 1)) -- {f}")


# -- run folders (orch clean) ---------------------------------------------------------------------

RUN_UID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")  # what orch names a run folder


def run_folders(runs_dir: str, log: str) -> str:
    """One line per run folder: disk use in KiB, the log's size (`-` if none), 1 if its server's
    process group still answers (pid recorded, no exit code yet) else 0, then the folder's name."""
    return (
        f"{_LIVE_GROUP}cd {path(runs_dir)} 2>/dev/null || exit 0; for d in */; do d=${{d%/}}; [ -d \"$d\" ] || continue; "
        f"k=$(du -sk -- \"$d\" | cut -f1); l=$(stat -c %s -- \"$d\"/{quote(log)} 2>/dev/null || echo -); a=0; "
        "if [ -f \"$d/pid\" ] && [ ! -f \"$d/exit_code\" ] && g=$(cat \"$d/pid\") && (live_group); then a=1; fi; "
        "printf '%s %s %s %s\\n' \"$k\" \"$l\" \"$a\" \"$d\"; done"
    )


def live_run_folders(runs_dir: str) -> str:
    """The name of each run folder of `runs_dir` whose server's process group (its pid file) has a
    live process, one a line; zombies aside."""
    return (
        f"{_LIVE_GROUP}cd {path(runs_dir)} 2>/dev/null || exit 0; for d in */; do d=${{d%/}}; "
        "[ -f \"$d/pid\" ] && g=$(cat \"$d/pid\") && [ -n \"$g\" ] && (live_group) && printf '%s\\n' \"$d\"; done; true"
    )


def remove_run_folders(runs_dir: str, uids: list[str]) -> str:
    """Remove the named run folders of `runs_dir`; a name that is not a run uid is refused."""
    for uid in uids:
        if not RUN_UID.fullmatch(uid):
            raise ValueError(f"not a run folder name: {uid!r}")
    return f"cd {path(runs_dir)} && rm -rf -- {join(uids)}"


# -- patches: the patched text compiled by the host's Python -----------------------------------

_COMPILE_PYTHON = r"""
import base64, json, sys
for key, name, data in json.load(sys.stdin):
    try:
        compile(base64.b64decode(data), name, "exec", dont_inherit=True)
    except Exception as exc:  # SyntaxError, IndentationError, ValueError (a NUL byte), ...
        text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        print(json.dumps([key, getattr(exc, "lineno", None), type(exc).__name__ + ": " + text]))
"""


def compile_stdin(python: str) -> str:
    """Compile, with `python`, the sources its stdin holds as JSON `[[key, file name, base64 bytes],
    ...]`, writing nothing (no file, no bytecode); print `[key, line, message]` for each that fails.
    `-S`: the standard library is all it needs, and skipping `site` (its .pth files) halves the start."""
    return f"{path(python)} -S -c {quote(_COMPILE_PYTHON)}"


# -- occupancy: who holds a port, what runs on the GPUs -----------------------------------------

_PORT_HOLDERS_PYTHON = r"""
import json, os, pwd, sys
port = int(sys.argv[1])
inodes = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        cells = row.split()
        if len(cells) > 9 and cells[3] == "0A" and int(cells[1].rsplit(":", 1)[1], 16) == port:
            inodes.add("socket:[%s]" % cells[9])
holders = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()) if inodes else ():
    try:
        links = {os.readlink("/proc/%s/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%s/fd" % pid)}
    except OSError:
        continue
    if not links & inodes:
        continue
    try:
        head, rest = open("/proc/%s/stat" % pid).read().rsplit(") ", 1)
        owner = pwd.getpwuid(os.stat("/proc/" + pid).st_uid).pw_name
        environ = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
    except (OSError, KeyError):
        continue
    mark = [e.split(b"=", 1)[1].decode("utf-8", "replace") for e in environ if e.startswith(b"MARK=")]
    holders.append({"pid": int(pid), "name": head.split("(", 1)[1], "user": owner,
                    "pgid": int(rest.split()[2]), "mark": mark[0] if mark else None})
print(json.dumps({"listening": bool(inodes), "holders": holders}))
""".replace("MARK=", RUN_MARK + "=")


def port_holders(python: str, port: int) -> str:
    """Print JSON `{"listening": bool, "holders": [{pid, name, user, pgid, mark}]}` for a TCP port
    in LISTEN state (from /proc; processes of other users are listening but not named). `-S`:
    the standard library is all it needs, and skipping `site` (its .pth files) halves the start."""
    return f"{path(python)} -S -c {quote(_PORT_HOLDERS_PYTHON)} {int(port)}"


GPU_MARKER = "__ORCH_GPU__"


def gpu_use() -> str:
    """nvidia-smi's GPUs (`gpu=index, uuid, name, used MiB, total MiB`) and compute processes
    (`app=gpu uuid, pid, name, used MiB`); prints nothing where there is no nvidia-smi."""
    m = GPU_MARKER
    return (
        "command -v nvidia-smi >/dev/null 2>&1 || exit 0; "
        "nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu=/'; "
        "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} app=/'; true"
    )


# -- overlays: a run's own patched copy of a package (`host/overlay.py`) ------------------------

OVERLAY_PAUSES = (0.3, 1)  # seconds before each walk of the tree after a failed one


def overlay_packages(site: str, packages: dict[str, str]) -> str:
    """Under `site`, one tree per package (`site/<name>`) of real folders whose files are symlinks
    to the installed ones (GNU `cp -rs`): the installed files are only read.

    A file that vanishes while cp walks the tree (another run's patch written beside its target
    and renamed onto it, a server's bytecode written the same way) fails the walk: the tree is
    walked again after a pause, and only the last walk's error is shown."""
    steps = [mkdir(site)]
    for name, folder in packages.items():
        walk = f"rm -rf -- {path(f'{site}/{name}')} && cp -rs -- {path(folder)} {path(f'{site}/{name}')}"
        tries = [f"{{ {walk} 2>/dev/null; }}", *(f"{{ sleep {p}; {walk} 2>/dev/null; }}" for p in OVERLAY_PAUSES[:-1])]
        steps.append("{ " + " || ".join([*tries, f"{{ sleep {OVERLAY_PAUSES[-1]}; {walk}; }}"]) + "; }")
    return " && ".join(steps)


def unlink_for_copy(*files: str) -> str:
    """Drop the symlinks of files about to get their own text in an overlay, with their cached
    bytecode (a symlink to the installed file's), so Python compiles the new text."""
    return "; ".join([remove_files(*files), *(remove_pycache(f) for f in files)])


# -- resident shells: one long-lived bash per SSH channel runs many commands (`remote/resident.py`) --

RESIDENT_READY = "orch-resident-ready"


def resident_shell() -> str:
    """The channel's command: a bash reading its commands from stdin (SHLVL=2, as `in_bash`)."""
    return "SHLVL=2 exec bash -s"


def resident_setup() -> str:
    """What the resident bash reads first: `__orch TAG COMMAND N [held]` runs COMMAND (an `in_bash`
    string) under its own bash, its stdin the N bytes that follow the line (none for N < 0), and
    prints `TAG STATUS OUT_BYTES ERR_BYTES`, then its stdout and stderr. `held`: it first answers
    `TAG held` and runs the command only once a line `go` follows (so a link lost before then ran
    nothing: what an exec channel that never opened promises). A TERM to the resident bash passes
    to the command (the controller gave up on it), as on an exec channel."""
    return r"""__orch_d=$(mktemp -d) || exit 1
trap 'rm -rf -- "$__orch_d"' EXIT
trap '[ -n "$__orch_pid" ] && kill -TERM "$__orch_pid" 2>/dev/null' TERM
__orch() {
  local i=/dev/null o="$__orch_d/o" e="$__orch_d/e" rc no ne
  if [ "$3" -ge 0 ]; then i="$__orch_d/i"; head -c "$3" >"$i"; fi
  if [ "$4" = held ]; then printf '%s held\n' "$1"; read -r go || exit 0; [ "$go" = go ] || exit 1; fi
  bash -c "$2" <"$i" >"$o" 2>"$e" & __orch_pid=$!
  wait "$__orch_pid"; rc=$?; __orch_pid=
  no=$(wc -c <"$o"); ne=$(wc -c <"$e")
  printf '%s %s %s %s\n' "$1" "$rc" $no $ne
  head -c "$no" "$o"; head -c "$ne" "$e"
  rm -f -- "$o" "$e" "$__orch_d/i"
}
echo """ + RESIDENT_READY + "\n"


def resident_call(tag: str, command: str, input_bytes: int, held: bool) -> str:
    """One command line for the resident bash (`resident_setup`); -1 bytes: no stdin."""
    return f"__orch {tag} {quote(command)} {int(input_bytes)}{' held' if held else ''}\n"


RESIDENT_GO = "go\n"


# -- Slurm (`remote/slurm.py`): commands run on a slurm entry's login node ----------------------

STEP_MARK = "__ORCH_STEP__"  # ends a step's stdout and stderr, then its command's exit status in 3 digits
STEP_TOKEN = "ORCH_STEP"  # in the environment of every process a step's command started
STEP_CHECK_EVERY = 10  # turns of 20 ms


def slurm_submit(name: str, comment: str, nodes: int, partition: str | None, account: str | None,
                 time: str | None, gpus_per_node: int, options: Iterable[str]) -> str:
    """Ask for `nodes` nodes: the job id (and the cluster's name after `;`) at once, however long
    the job then waits. The job's own command only holds the allocation; orch's steps overlap it."""
    args = ["sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}", f"--nodes={nodes}",
            "--output=/dev/null", "--wrap=exec sleep infinity"]
    args += [f"--{key}={value}" for key, value in (("partition", partition), ("account", account), ("time", time))
             if value is not None]
    if gpus_per_node:
        args.append(f"--gpus-per-node={gpus_per_node}")
    return join([*args, *options])


def slurm_job_state(job: str) -> str:
    """`STATE REASON NODELIST` of the job; nothing (or an error) once Slurm has forgotten it."""
    return f"squeue -h -j {quote(job)} -o '%T %r %N'"


def slurm_hostnames(nodelist: str) -> str:
    return f"scontrol show hostnames {quote(nodelist)}"


def slurm_node_addrs(nodelist: str) -> str:
    """`NODE ADDRESS` per node of `nodelist`: the address Slurm reaches each node at (NodeAddr),
    which the job's other nodes reach it at too (a node in several partitions is listed once each)."""
    return f"sinfo -h -N -n {quote(nodelist)} -o '%N %o'"


def slurm_own_jobs(name: str) -> str:
    """`ID COMMENT` of the user's jobs named `name`."""
    return f"squeue --me -h --name {quote(name)} -o '%i %k'"


def slurm_cancel(job: str) -> str:
    return f"scancel {quote(job)}"


def slurm_step(job: str, node: str, gpus: int, chdir: str, command: str, token: str, with_input: bool) -> str:
    """Run `command` on `node` as a step of `job` (`srun --overlap`: beside the job's other steps),
    through files in a temp folder on the login node.

    A step lasts while any process it started lives, so a server launched detached survives the
    command that launched it (a cluster that tracks a step's processes by cgroup ends them all with
    the step): on the node, the command's processes carry `token` in their environment, and once
    the command is done the step ends its stdout and stderr with STEP_MARK and its exit status,
    then waits while a process carrying the token lives. On the login node, srun runs in a session
    of its own; this returns as soon as both streams end with the mark, their bytes without it.
    No mark: srun itself failed (the job is gone, the node is not in it): stderr starts with a
    STEP_MARK line, then srun's own, and its status stands.
    """
    node_side = (f"{STEP_TOKEN}={quote(token)} bash -c {quote(command)}; c=$?; "
                 f"printf '{STEP_MARK}%03d\\n' \"$c\"; printf '{STEP_MARK}%03d\\n' \"$c\" >&2; exec >/dev/null 2>&1; "
                 f"while grep -qsxz {quote(f'{STEP_TOKEN}={token}')} /proc/[0-9]*/environ; do sleep 1; done")
    srun = ["srun", f"--jobid={job}", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--overlap", "--quiet",
            f"--chdir={chdir}", *([f"--gres=gpu:{gpus}"] if gpus else []), "bash", "-c", node_side]
    n = len(STEP_MARK) + 4
    ends = f'[ "$(tail -c {n} "$d/out" | head -c {len(STEP_MARK)})" = {STEP_MARK} ] && [ "$(tail -c {n} "$d/err" | head -c {len(STEP_MARK)})" = {STEP_MARK} ]'
    # The wait costs no process while srun runs: `kill -0` and a `read` with a timeout on a fifo
    # nobody writes are builtins; the marks are looked for every CHECK_EVERY turns only (a step
    # whose command left processes running, such as a server's launch, is seen done that late).
    return (
        "d=$(mktemp -d) || exit 1; trap 'rm -rf \"$d\"' EXIT; mkfifo \"$d/tick\" && exec 9<>\"$d/tick\" || exit 1; "
        + ('cat > "$d/in"; ' if with_input else ': > "$d/in"; ')
        + f'setsid {join(srun)} < "$d/in" > "$d/out" 2> "$d/err" & p=$!; i=0; '
        + f"while kill -0 $p 2>/dev/null; do i=$((i + 1)); "
        + f"if [ $((i % {STEP_CHECK_EVERY})) = 0 ] && {ends}; then break; fi; read -t 0.02 -u 9 _; done; "
        + f"if {ends}; then head -c -{n} \"$d/out\"; head -c -{n} \"$d/err\" >&2; "
        + f'exit $((10#$(tail -c 4 "$d/out" | head -c 3))); fi; '
        + f'wait $p; c=$?; cat "$d/out"; echo {STEP_MARK} >&2; cat "$d/err" >&2; exit $c'
    )


NO_FILE = 44  # `read_file`'s status for a missing file


def read_file(p: str) -> str:
    return f"if [ -e {path(p)} ]; then cat -- {path(p)}; else exit {NO_FILE}; fi"


def write_stdin(p: str, mode: int | None) -> str:
    """Stdin into `p` atomically: a temp file beside it (the old file's mode and owner, or `mode`),
    flushed, renamed over it."""
    folder, name = posixpath.split(p)
    keep = (f"chmod {mode:o} \"$t\"" if mode is not None else
            f"{{ [ ! -e {path(p)} ] || {{ chmod --reference={path(p)} \"$t\" && {{ chown --reference={path(p)} \"$t\" 2>/dev/null; true; }}; }}; }}")
    return (f"mkdir -p -- {path(folder or '.')} && t=$(mktemp {path(folder or '.')}/{quote('.' + name)}.XXXXXX.orch-tmp) "
            f"|| exit 1; {{ cat > \"$t\" && {keep} && sync -- \"$t\" && mv -f -- \"$t\" {path(p)}; }} || {{ rm -f -- \"$t\"; exit 1; }}")


def stat_line(p: str) -> str:
    """`size mtime mode(octal) uid gid` of `p`; fails when it does not exist."""
    return f"stat -c '%s %Y %a %u %g' -- {path(p)}"


def untar_stdin(folder: str) -> str:
    return f"mkdir -p -- {path(folder)} && tar -x -C {path(folder)}"


# A relay on the login node to a port on a node's loopback: each connection it accepts (on the
# login node's loopback, reached through the login connection's own forward) is carried by one
# srun step whose Python joins its stdin/stdout to 127.0.0.1:PORT on the node. It prints its own
# port, and ends once the job no longer runs (checked every 30 s) or when orch stops it.
_NODE_PIPE_PYTHON = r"""
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
"""

_RELAY_PYTHON = r"""
import socket, subprocess, sys, threading, time
job, step = sys.argv[1], sys.argv[2:]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
print(server.getsockname()[1], flush=True)
def carry(conn):
    proc = subprocess.Popen(step, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    def up():
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                proc.stdin.write(data)
                proc.stdin.flush()
        except OSError:
            pass
        try:
            proc.stdin.close()
        except OSError:
            pass
    threading.Thread(target=up, daemon=True).start()
    try:
        while True:
            data = proc.stdout.read1(65536)
            if not data:
                break
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    conn.close()
    proc.kill()
    proc.wait()
def watch():
    while True:
        time.sleep(30)
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
        if state.stdout.strip() != "RUNNING":
            server.close()
            raise SystemExit
threading.Thread(target=watch, daemon=True).start()
while True:
    conn, _ = server.accept()
    threading.Thread(target=carry, args=(conn,), daemon=True).start()
"""
RELAY_MARK = "__ORCH_RELAY__"


def slurm_relay(job: str, node: str, node_python: str, port: int) -> str:
    """Start the relay to `port` on `node` detached on the login node: prints `RELAY_MARK pid port`."""
    step = ["srun", f"--jobid={job}", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--overlap", "--quiet",
            "--unbuffered", node_python, "-S", "-c", _NODE_PIPE_PYTHON, str(int(port))]
    return (f"f=$(mktemp) || exit 1; setsid nohup python3 -S -c {quote(_RELAY_PYTHON)} {join([job, *step])} "
            f"> \"$f\" 2>&1 < /dev/null & p=$!; for _ in $(seq 100); do [ -s \"$f\" ] && break; sleep 0.05; done; "
            f"echo {RELAY_MARK} $p $(head -n 1 \"$f\"); rm -f \"$f\"")


def kill_pid(pid: int) -> str:
    return f"kill {int(pid)} 2>/dev/null; true"


_DISK_FREE_PYTHON = r"""
import os, sys
for p in sys.argv[1:]:
    d = p
    while not os.path.isdir(d):
        d = os.path.dirname(d) or "/"
    st = os.statvfs(d)
    m = os.path.realpath(d)
    while not os.path.ismount(m):
        m = os.path.dirname(m)
    print(p, st.f_bavail * st.f_frsize, m, sep="\t")
"""


def disk_free(python: str, paths: Iterable[str]) -> str:
    """Print `path<TAB>free bytes<TAB>mount point` per path (its nearest existing folder's disk)."""
    return f"{path(python)} -S -c {quote(_DISK_FREE_PYTHON)} " + " ".join(path(p) for p in paths)


def keep_original(file: str, restore: str) -> str:
    """Keep the file's current bytes at `restore` (beside it, so on its disk) before it is replaced:
    a hard link (no new space: the replaced inode lives on in it), else a copy keeping mode and owner."""
    return f"ln -f -- {path(file)} {path(restore)} 2>/dev/null || cp -p -- {path(file)} {path(restore)}"


def rename_over(source: str, target: str) -> str:
    """Rename `source` over `target` in one folder: a rename needs no free space on the disk."""
    return f"mv -f -- {path(source)} {path(target)}"


def free_port(python: str) -> str:
    """Print a TCP port free on the host now (the kernel's choice for a bind to port 0)."""
    code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    return f"{path(python)} -S -c {quote(code)}"
