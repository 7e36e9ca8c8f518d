"""Is the host free for a run: nobody on its port, nobody else's compute on the GPUs it will use,
enough GPUs for its tensor-parallel size; and is the server answering on the port really the run's?

Checked before anything on the host changes: a squatter on the port would otherwise answer the
readiness probe and the workload for the run's server, and a GPU held by another job gives an OOM
minutes into the launch (or, worse, a slow run that looks like a result).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.core import shell
from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from orchestrator.remote import Connection

BUSY_MIB = 1024  # memory in use on a GPU with no process of ours: another job (or a container's) holds it


@dataclass(frozen=True)
class Holder:
    pid: int
    name: str
    user: str
    pgid: int
    mark: str | None  # the run folder of the orch run that started it, if any

    def describe(self) -> str:
        return f"pid {self.pid} ({self.name}, user {self.user})"


@dataclass(frozen=True)
class Listener:
    listening: bool
    holders: tuple[Holder, ...]


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    used_mib: int | None
    total_mib: int | None


@dataclass(frozen=True)
class GpuApp:
    gpu_uuid: str
    pid: int | None
    name: str
    used_mib: int | None


@dataclass(frozen=True)
class GpuUse:
    gpus: tuple[Gpu, ...]
    apps: tuple[GpuApp, ...]


async def listener(conn: Connection, host: Host, port: int) -> Listener:
    done = await conn.run(shell.port_holders(host.python, port), timeout=30, idempotent=True)
    return parse_listener(host, port, done.out, done.err)


def parse_listener(host: Host, port: int, out: str, err: str) -> Listener:
    """The port-holders JSON line of `shell.port_holders` (other lines, such as GPU rows, are passed over)."""
    try:
        line = next(line for line in out.splitlines() if line.startswith("{"))
        data = json.loads(line)
        return Listener(bool(data["listening"]), tuple(Holder(**h) for h in data["holders"]))
    except (StopIteration, ValueError, KeyError, TypeError):
        raise HostError(f"{host.name}: could not read who listens on port {port} with {host.python} "
                        f"({(err or out).strip()[-200:] or 'no output'}); set the host's `python:`") from None


def parse_gpu_use(text: str) -> GpuUse:
    gpus, apps = [], []
    for line in text.splitlines():
        marker, _, rest = line.partition(" ")
        key, _, row = rest.partition("=")
        cells = [c.strip() for c in row.split(",")]
        if marker != shell.GPU_MARKER:
            continue
        if key == "gpu" and len(cells) >= 5 and cells[0].isdigit():
            gpus.append(Gpu(int(cells[0]), cells[1], cells[2], _mib(cells[3]), _mib(cells[4])))
        elif key == "app" and len(cells) >= 4:
            apps.append(GpuApp(cells[0], _mib(cells[1]), cells[2], _mib(cells[3])))
    return GpuUse(tuple(gpus), tuple(apps))


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]": nvidia-smi cannot read it (MIG, a container)


def wanted_gpus(use: GpuUse, tp: int, visible: str | None) -> list[Gpu]:
    """The GPUs a run of `tp` ranks takes: the first `tp` of CUDA_VISIBLE_DEVICES (indices or
    UUIDs) when the run sets it, else GPUs 0..tp-1."""
    if visible:
        chosen = [v.strip() for v in visible.split(",") if v.strip()][:tp]
        return [g for g in use.gpus if str(g.index) in chosen or g.uuid in chosen]
    return [g for g in use.gpus if g.index < tp]


def gpu_problems(use: GpuUse, tp: int, visible: str | None) -> list[str]:
    """What makes the host's GPUs unfit for the run, one clause each (empty: fit, or no nvidia-smi)."""
    if not use.gpus or tp > len(use.gpus):
        return []  # no nvidia-smi, or too few GPUs (`too_few`)
    problems = []
    for gpu in wanted_gpus(use, tp, visible):
        apps = [a for a in use.apps if a.gpu_uuid == gpu.uuid]
        if apps:
            held = ", ".join(f"pid {a.pid} {a.name} {a.used_mib} MiB" for a in apps)
            problems.append(f"GPU {gpu.index} runs {held}")
        elif gpu.used_mib is not None and gpu.used_mib > BUSY_MIB:
            problems.append(f"GPU {gpu.index} has {gpu.used_mib} of {gpu.total_mib} MiB in use by processes "
                            "this user cannot see (another container or user)")
    return problems


def too_few(use: GpuUse, tp: int) -> str | None:
    if use.gpus and tp > len(use.gpus):
        return f"tp_size {tp} needs {tp} GPUs but nvidia-smi reports {len(use.gpus)}"
    return None


async def ensure_free(conn: Connection, host: Host, port: int, tp: int, visible: str | None,
                      allow_busy_gpus: bool = False) -> list[str]:
    """Raise HostError (exit 3) if the port is taken or, unless allowed, the run's GPUs are busy.
    Returns the GPU problems that `allow_busy_gpus` let pass (to record with the run). A rehearsal
    host's GPUs are simulated: whatever real ones the machine has are not the run's."""
    # one round trip: who holds the port, then nvidia-smi's GPUs and compute processes
    gpus = "" if host.rehearsal else f"; {shell.gpu_use()}"
    done = await conn.run(shell.port_holders(host.python, port) + gpus, timeout=60, idempotent=True)
    found = parse_listener(host, port, done.out, done.err)
    if found.listening:
        who = ", ".join(h.describe() for h in found.holders) or "a process of another user"
        raise HostError(f"{host.name}: port {port} is already taken by {who}; stop it, or give the run another "
                        "port (--set port=N)")
    if host.rehearsal:
        return []
    use = parse_gpu_use(done.out)
    short = too_few(use, tp)
    if short:
        raise HostError(f"{host.name}: {short}; lower tp_size or choose a host with more GPUs (--hosts)")
    problems = gpu_problems(use, tp, visible)
    if problems and not allow_busy_gpus:
        raise HostError(f"{host.name}: the run's GPUs are busy: {'; '.join(problems)}; wait for them, choose "
                        "other GPUs (env CUDA_VISIBLE_DEVICES), or pass --allow-busy-gpus")
    return problems


def owns(found: Listener, pgid: int, run_dir: str) -> bool:
    """Is the process listening one of the run's: in its process group, or carrying its run mark?
    (The mark is the folder as the host resolved it, so its last part, the run's uid, is compared.)"""
    uid = run_dir.rstrip("/").rsplit("/", 1)[-1]
    return any(h.pgid == pgid or (h.mark or "").rstrip("/").endswith("/" + uid) for h in found.holders)
