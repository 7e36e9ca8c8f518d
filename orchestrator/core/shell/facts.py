"""A host's facts in one round trip (`host/facts.py`): OS, Python, packages, GPUs, free disk and
whether a port listens."""

from __future__ import annotations

from . import programs
from .quoting import path, pythonpath_prefix, quote

FACTS_MARKER = "__ORCH_FACT__"


def host_facts(python: str, workdir: str, port: int, pythonpath: str | None = None,
               packages: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> str:
    """One script, one round trip: OS, Python, each of `packages` (name, its version files; found
    without importing it: its folder and `__version__`), GPUs, free disk in
    the workdir (or its nearest existing parent) and whether `port` is listening. One Python process
    (programs/facts.py) gathers all but the GPUs, so a host costs few forks; without a working
    Python the basic facts still come from the shell.

    Output: lines `__ORCH_FACT__ key=value`; GPU and GPU-process lines are nvidia-smi's CSV rows.
    `began` and `ended` are the host's clock ($EPOCHREALTIME, bash 5) around the script, so the
    controller can tell the link's round trip from the time the host spent gathering facts.
    """
    m = FACTS_MARKER
    wanted = ",".join(name + ":" + "+".join(files) for name, files in packages)
    return "\n".join([
        f'echo "{m} began=$EPOCHREALTIME"',
        f"{pythonpath_prefix(pythonpath)}{path(python)} -c {quote(programs.source('facts'))} {quote(m)} {path(workdir)} {int(port)} "
        f"{quote(wanted)} 2>/dev/null"
        f' || {{ echo "{m} python_error=$?"; echo "{m} hostname=$(uname -n)"; echo "{m} os=$(uname -sr)";'
        f' echo "{m} kernel=$(uname -r)"; }}',
        "if command -v nvidia-smi >/dev/null 2>&1; then",
        f"  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu=/'",
        f"  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null"
        f" | sed 's/^/{m} gpu_process=/'",
        "fi",
        f'echo "{m} ended=$EPOCHREALTIME"',
    ])
