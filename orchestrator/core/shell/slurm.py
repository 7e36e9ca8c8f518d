"""Slurm (`remote/slurm.py`, `remote/allocation.py`): commands run on a slurm entry's login node
to hold an allocation, run steps on its nodes and relay a node's port."""

from __future__ import annotations

from collections.abc import Iterable

from . import programs
from .quoting import join, quote

STEP_MARK = "__ORCH_STEP__"  # ends a step's stdout and stderr, then its command's exit status in 3 digits
STEP_TOKEN = "ORCH_STEP"  # in the environment of every process a step's command started
STEP_CHECK_EVERY = 10  # turns of 20 ms
RELAY_MARK = "__ORCH_RELAY__"


# -- the allocation -----------------------------------------------------------------------------


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


# -- steps --------------------------------------------------------------------------------------


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
        + "while kill -0 $p 2>/dev/null; do i=$((i + 1)); "
        + f"if [ $((i % {STEP_CHECK_EVERY})) = 0 ] && {ends}; then break; fi; read -t 0.02 -u 9 _; done; "
        + f"if {ends}; then head -c -{n} \"$d/out\"; head -c -{n} \"$d/err\" >&2; "
        + 'exit $((10#$(tail -c 4 "$d/out" | head -c 3))); fi; '
        + f'wait $p; c=$?; cat "$d/out"; echo {STEP_MARK} >&2; cat "$d/err" >&2; exit $c'
    )


# -- the relay to a node's port -----------------------------------------------------------------


def slurm_relay(job: str, node: str, node_python: str, port: int) -> str:
    """Start the relay to `port` on `node` detached on the login node: prints `RELAY_MARK pid port`.

    The relay (programs/relay.py) listens on the login node's loopback, reached through the login
    connection's own forward; each connection it accepts is carried by one srun step whose Python
    (programs/node_pipe.py) joins its stdin/stdout to 127.0.0.1:PORT on the node. It ends once the
    job no longer runs (checked every 30 s) or when orch stops it."""
    step = ["srun", f"--jobid={job}", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--overlap", "--quiet",
            "--unbuffered", node_python, "-S", "-c", programs.source("node_pipe"), str(int(port))]
    return (f"f=$(mktemp) || exit 1; setsid nohup python3 -S -c {quote(programs.source('relay'))} {join([job, *step])} "
            f"> \"$f\" 2>&1 < /dev/null & p=$!; for _ in $(seq 100); do [ -s \"$f\" ] && break; sleep 0.05; done; "
            f"echo {RELAY_MARK} $p $(head -n 1 \"$f\"); rm -f \"$f\"")
