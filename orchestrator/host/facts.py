"""What `orch hosts check` learns about each host, in one round trip per host."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.core import shell
from orchestrator.errors import OrchError
from orchestrator.core.inventory import Host
from orchestrator.remote import Connection, connect
from orchestrator.remote.group import OPENS_AT_ONCE, fan_out

DEFAULT_PORT = 30000
CHECK_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str
    memory_used_mib: int | None


@dataclass(frozen=True)
class HostFacts:
    """What `orch hosts check` found on one host (one round trip), or why it could not reach it."""

    host: str
    reachable: bool
    error: str | None = None
    rtt_ms: float | None = None  # the link's round trip: the facts command's wall time less the host's part
    host_ms: float | None = None  # what the host spent gathering the facts (its Python's start-up above all)
    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    python: str | None = None
    python_path: str | None = None
    python_error: str | None = None
    packages: dict[str, dict[str, str]] = field(default_factory=dict)  # engine package -> {"version", "dir"}
    gpus: tuple[Gpu, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    disk_free_bytes: int | None = None
    workdir: str | None = None
    port: int | None = None
    port_listening: bool | None = None
    rehearsal: str | None = None  # on a rehearsal host, the release it emulates; its GPUs are simulated

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_count"] = len(self.gpus)
        return data


Packages = tuple[tuple[str, tuple[str, ...]], ...]  # (package, its version files) of each engine


async def check(host: Host, conn: Connection, port: int = DEFAULT_PORT, timeout: float = CHECK_TIMEOUT,
                packages: Packages = ()) -> HostFacts:
    """Run the facts script once; the round trip is that command's wall time (handshake excluded)
    less the time the host's own clock says it spent on the script."""
    script = shell.host_facts(host.python, host.workdir, port, host.rehearsal_dir, packages)
    started = time.perf_counter()
    done = await conn.run(script, timeout=timeout)
    rtt_ms = (time.perf_counter() - started) * 1000
    return parse(host, done.out, rtt_ms, port)


async def check_all(hosts: list[Host], port: int = DEFAULT_PORT, timeout: float = CHECK_TIMEOUT,
                    connect_timeout: float = CONNECT_TIMEOUT, limit: int = OPENS_AT_ONCE,
                    packages: Packages = ()) -> list[HostFacts]:
    """Facts for every host, in the order given; an unreachable host is a record, not an error."""
    by_name = {h.name: h for h in hosts}

    async def one(conn: Connection) -> HostFacts:
        return await check(by_name[conn.host.name], conn, port, timeout, packages)

    async def opener(host: Host) -> Connection:
        return await connect(host, timeout=connect_timeout)  # a shorter handshake timeout than a run's

    results = await fan_out(hosts, one, limit, opener=opener)
    return [r if not isinstance(r, OrchError) else HostFacts(host=name, reachable=False, error=str(r))
            for name, r in results.items()]


def parse(host: Host, text: str, rtt_ms: float, port: int) -> HostFacts:
    values: dict[str, str] = {}
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    for line in text.splitlines():
        marker, _, rest = line.partition(" ")
        if marker != shell.FACTS_MARKER:
            continue
        key, _, value = rest.partition("=")
        if key == "gpu":
            gpus.append(_gpu(value))
        elif key == "gpu_process":
            processes.append(_gpu_process(value))
        else:
            values[key] = value.strip()
    free_kib = _int(values.get("disk_free_kib"))
    host_ms = _host_ms(values)
    if host.rehearsal and not gpus:  # the rehearsal's GPUs are the inventory's count, simulated
        gpus = [Gpu("simulated (rehearsal)", None, None)] * host.gpus
    return HostFacts(
        host=host.name, reachable=True, rtt_ms=round(max(rtt_ms - (host_ms or 0.0), 0.0), 2),
        host_ms=None if host_ms is None else round(host_ms, 2), rehearsal=host.rehearsal,
        hostname=values.get("hostname") or None, os=values.get("os") or None, kernel=values.get("kernel") or None,
        python=values.get("python") or None, python_path=values.get("python_path") or None,
        python_error=(f"{host.python} failed (exit {values['python_error']}); set the host's `python:`"
                      if "python_error" in values else None),
        packages=_packages(values),
        gpus=tuple(gpus), gpu_processes=tuple(processes),
        disk_free_bytes=None if free_kib is None else free_kib * 1024, workdir=host.workdir,
        port=port, port_listening=values.get("port_listening") == "1" if "port_listening" in values else None,
    )


def _host_ms(values: dict[str, str]) -> float | None:
    """The host's own milliseconds between the script's first and last line; None where its bash
    has no $EPOCHREALTIME (before 5.0) or its clock stepped back."""
    try:  # a locale with a decimal comma writes 1700000000,123456
        began, ended = (float(values[key].replace(",", ".")) for key in ("began", "ended"))
    except (KeyError, ValueError):
        return None
    return (ended - began) * 1000 if ended >= began else None


def _packages(values: dict[str, str]) -> dict[str, dict[str, str]]:
    """{package: {"version", "dir", "distribution"}} of each package the script found (the
    distribution that installed it, where its metadata names one)."""
    found = {}
    for key, folder in values.items():
        if key.startswith("package_dir."):
            name = key.partition(".")[2]
            found[name] = {"version": values.get("package_version." + name, ""), "dir": folder}
            if values.get("package_dist." + name):
                found[name]["distribution"] = values["package_dist." + name]
    return found


def _gpu(row: str) -> Gpu:
    name, used, total = (_cells(row) + ["", "", ""])[:3]
    return Gpu(name, _int(used), _int(total))


def _gpu_process(row: str) -> GpuProcess:
    pid, name, used = (_cells(row) + ["", "", ""])[:3]
    return GpuProcess(_int(pid), name, _int(used))


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.split(",")]


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text not in (None, "") else None
    except ValueError:
        return None  # nvidia-smi prints "[N/A]" for what it cannot read
