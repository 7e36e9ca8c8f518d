"""The server on a host: detached launch, readiness, early-exit detection, stop by process group."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.remote import http
from . import occupancy
from orchestrator.core import shell
from orchestrator.engines.base import Engine
from orchestrator.errors import ServerError
from orchestrator.remote import Connection

LOG_NAME = "server.log"
POLL_SECONDS = 0.1  # while the log grows; a quiet log is polled less and less often, up to
POLL_MAX_SECONDS = 0.5  # this: each poll is a command on the host (a few ms on a resident shell)
HEALTH_EVERY_SECONDS = 3.0
STOP_GRACE_SECONDS = 15.0  # SIGTERM to SIGKILL: an engine's scheduler processes need a few seconds to exit


@dataclass(frozen=True)
class Server:
    run_dir: str
    pgid: int
    port: int

    @property
    def log(self) -> str:
        return f"{self.run_dir}/{LOG_NAME}"


@dataclass(frozen=True)
class Status:
    alive: bool
    exit_code: int | None
    log_size: int
    new_bytes: bytes


async def launch(conn: Connection, run_dir: str, script: str, port: int, secrets: dict[str, str] | None = None) -> Server:
    """Write the launch script into the run folder (0700) and start it detached (setsid + nohup);
    `secrets` reach the server's environment through a 0600 file the launch reads and removes."""
    await conn.run(shell.mkdir_private(run_dir), idempotent=True)
    if secrets:
        await conn.write_file(f"{run_dir}/{shell.SECRETS_FILE}", shell.secrets_file(secrets).encode(), mode=0o600)
    await conn.write_file(f"{run_dir}/launch.sh", script.encode(), mode=0o700)
    # not idempotent: after a dropped link it is not resent (a second server would start)
    done = await conn.run(shell.launch(run_dir, "launch.sh", LOG_NAME), timeout=30)
    pid = done.out.strip().splitlines()[-1] if done.out.strip() else ""
    if not done.ok or not pid.isdigit():
        raise ServerError(f"{conn.host.name}:{run_dir}: could not start the launch script: {done.err.strip() or done.out.strip()}")
    return Server(run_dir, int(pid), port)


async def poll(conn: Connection, server: Server, offset: int) -> Status:
    """One round trip: alive?, exit code, and the log bytes written since `offset`."""
    done = await conn.run(shell.server_status(server.run_dir, LOG_NAME, offset), timeout=60, idempotent=True)
    head, _, rest = done.stdout.partition(b"\n")
    parts = head.decode(errors="replace").split()
    if len(parts) != 4 or parts[0] != shell.READY_MARKER:
        raise ServerError(f"{conn.host.name}:{server.run_dir}: run folder is gone or unreadable ({done.err.strip()})")
    exit_code = None if parts[2] == "-" else int(parts[2])
    return Status(parts[1] == "1", exit_code, int(parts[3]), rest)


async def wait_ready(
    conn: Connection,
    server: Server,
    timeout: float,
    engine: Engine,
    on_output: Callable[[bytes], None] = lambda _: None,
) -> bytes:
    """Wait for the engine's readiness line or a 200 from its health endpoint.

    Returns the log read so far. If the server exits first, raises with the diagnosis and the
    last 20 log lines; if `timeout` passes, raises saying so.
    """
    log = bytearray()
    deadline = time.monotonic() + timeout
    next_health = time.monotonic() + HEALTH_EVERY_SECONDS
    address = await conn.forward(server.port)
    pause = POLL_SECONDS
    while True:
        status = await poll(conn, server, len(log))
        log += status.new_bytes
        pause = POLL_SECONDS if status.new_bytes else min(pause * 1.5, POLL_MAX_SECONDS)
        if status.new_bytes:
            on_output(status.new_bytes)
        if engine.is_ready(bytes(log)):
            return bytes(log)
        if not status.alive or status.exit_code is not None:
            raise early_exit(conn.host.name, server, bytes(log), status.exit_code, engine)
        if time.monotonic() >= next_health:
            next_health = time.monotonic() + HEALTH_EVERY_SECONDS
            code, _ = await http.get(f"http://{address[0]}:{address[1]}{engine.health_path}", 2.0)
            if code == 200:
                await _ensure_own_listener(conn, server, engine.health_path)
                return bytes(log)
        if time.monotonic() >= deadline:
            raise ServerError(
                f"{conn.host.name}: server not ready after {timeout:.0f} s (no readiness line, {engine.health_path} "
                f"not 200); raise `ready_timeout:` or see `orch logs` for where it stalled",
                evidence=tuple(tail(bytes(log))),
            )
        await asyncio.sleep(min(pause, max(0.0, next_health - time.monotonic()) + 0.05))


async def _ensure_own_listener(conn: Connection, server: Server, health_path: str) -> None:
    """A 200 counts only when the process listening on the port is the run's own server."""
    found = await occupancy.listener(conn, conn.host, server.port)
    if not occupancy.owns(found, server.pgid, server.run_dir):
        who = ", ".join(h.describe() for h in found.holders) or "a process of another user"
        raise ServerError(f"{conn.host.name}: port {server.port} answers {health_path}, but the listener is {who}, "
                          "not this run's server; stop it or give the run another port (--set port=N)")


def early_exit(host: str, server: Server, log: bytes, exit_code: int | None, engine: Engine) -> ServerError:
    diagnosis = engine.diagnose(log)
    code = "unknown" if exit_code is None else str(exit_code)
    reason = diagnosis.summary if diagnosis else "no known failure signature in the log"
    return ServerError(
        f"{host}: server exited before it was ready (exit code {code}): {reason}",
        evidence=tuple(tail(log)), diagnosis=diagnosis,
    )


def tail(log: bytes, lines: int = 20) -> list[str]:
    return log.decode(errors="replace").splitlines()[-lines:]


@dataclass(frozen=True)
class Stopped:
    """How a server ended: gone (nothing of the run left alive), whether it needed SIGKILL, how
    many of its processes had left the process group (stopped all the same, found by the run mark),
    and the server's exit code (None when unknown: SIGKILL ends the wrapper that records it)."""

    gone: bool
    killed: bool
    strays: int
    left: tuple[int, ...] = ()
    exit_code: int | None = None

    def summary(self, grace: float) -> str:
        if not self.gone:
            return f"processes {', '.join(map(str, self.left))} of the run still alive after SIGKILL"
        said = (f"process group gone after SIGKILL: it ignored SIGTERM for {grace:.0f} s" if self.killed
                else "process group gone")
        said += f"; exit code {self.exit_code}" if self.exit_code is not None else ""
        return said + (f"; {self.strays} process(es) that had left its process group stopped too" if self.strays else "")


# Seconds between liveness checks after SIGTERM: a server that exits at once is seen gone within
# tens of milliseconds; one that takes its time costs one host command per STOP_POLL_SECONDS.
STOP_FIRST_POLLS = (0.02, 0.03, 0.05, 0.1)
STOP_POLL_SECONDS = 0.2


async def stop(conn: Connection, server: Server, grace: float = STOP_GRACE_SECONDS) -> Stopped:
    """SIGTERM every process of the run (its group, and any process carrying its run mark), wait
    up to `grace`, then SIGKILL what is left."""
    strays = len([kind for kind, _ in await _processes(conn, server, "TERM") if kind == "m"])
    deadline = time.monotonic() + grace
    pauses = iter(STOP_FIRST_POLLS)
    while time.monotonic() < deadline:
        if not await _processes(conn, server):
            return Stopped(True, False, strays, exit_code=await exit_code(conn, server))
        await asyncio.sleep(next(pauses, STOP_POLL_SECONDS))
    await _processes(conn, server, "KILL")
    left: list[tuple[str, int]] = []
    for _ in range(25):
        left = await _processes(conn, server)
        if not left:
            return Stopped(True, True, strays, exit_code=await exit_code(conn, server))
        await asyncio.sleep(STOP_POLL_SECONDS)
    return Stopped(False, True, strays, tuple(pid for _, pid in left))


async def exit_code(conn: Connection, server: Server) -> int | None:
    """The exit code the launch wrapper recorded, or None when it recorded none."""
    try:
        text = (await conn.read_file(f"{server.run_dir}/exit_code")).decode(errors="replace").strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


async def _processes(conn: Connection, server: Server, sig: str | None = None) -> list[tuple[str, int]]:
    """(`g` in the group | `m` carrying the run mark, pid) of each live process of the run."""
    done = await conn.run(shell.run_processes(server.pgid, server.run_dir, sig), idempotent=True)
    pairs = (line.split() for line in done.out.splitlines())
    return [(pair[0], int(pair[1])) for pair in pairs if len(pair) == 2 and pair[1].isdigit()]


FETCH_LIMIT = 64 << 20  # a bigger log is cut down on the host to the parts orch parses


async def read_log(conn: Connection, server: Server, engine: Engine, debug_pattern: str) -> bytes:
    """The server log (empty if there is none yet); see `fetch_log`."""
    try:
        return (await fetch_log(conn, server.log, engine.excerpt_pattern(debug_pattern), engine.log_tail_size))[0]
    except FileNotFoundError:
        return b""


async def fetch_log(conn: Connection, log: str, pattern: str | None, tail: int) -> tuple[bytes, int]:
    """A log on the host and its full size; one over FETCH_LIMIT comes as the lines matching
    `pattern` (what the engine's `parse_log` reads outside the tail; None: no cutting down), then
    its last `tail` bytes. FileNotFoundError if there is no such file."""
    found = await conn.stat(log)
    if found is None:
        raise FileNotFoundError(log)
    if found.size > FETCH_LIMIT and pattern is not None:
        done = await conn.run(shell.log_excerpt(log, pattern, tail), timeout=600)
        if done.ok:
            return done.stdout, found.size
    return await conn.read_file(log), found.size
