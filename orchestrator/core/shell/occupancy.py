"""What is taken on a host (`host/occupancy.py`, `host/diskspace.py`): who holds a port, what runs
on the GPUs, a port still free, the free disk under paths."""

from __future__ import annotations

from collections.abc import Iterable

from . import programs
from .process import RUN_MARK
from .quoting import path, quote

GPU_MARKER = "__ORCH_GPU__"


def port_holders(python: str, port: int) -> str:
    """Print JSON `{"listening": bool, "holders": [{pid, name, user, pgid, mark}]}` for a TCP port
    in LISTEN state (from /proc; processes of other users are listening but not named; `mark`: the
    holder's run mark). `-S`: the standard library is all it needs, and skipping `site` (its .pth
    files) halves the start."""
    return f"{path(python)} -S -c {quote(programs.source('port_holders'))} {int(port)} {quote(RUN_MARK)}"


def free_port(python: str) -> str:
    """Print a TCP port free on the host now (the kernel's choice for a bind to port 0)."""
    return f"{path(python)} -S -c {quote(programs.source('free_port'))}"


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


def disk_free(python: str, paths: Iterable[str]) -> str:
    """Print `path<TAB>free bytes<TAB>mount point` per path (its nearest existing folder's disk)."""
    return f"{path(python)} -S -c {quote(programs.source('disk_free'))} " + " ".join(path(p) for p in paths)
