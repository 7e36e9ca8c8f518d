"""One orch command per host at a time: `<workdir>/lock` names its owner and carries a lease.

The lock is written whole to a temporary file and then linked into place on the host (a hard link
fails where the lock exists, as an O_EXCL create does), so of two controllers racing for a host
exactly one wins, and no crash or full disk leaves an empty lock: an empty or unreadable one is
stale at once. The owner renews the lease
from a background task while it works; the lease is judged by the host's clock (the lock file's
mtime against the host's `date`), so controllers with skewed clocks still agree. A lock is stale,
and is broken with a warning, when its lease ran out or when its owner was a process on this
very controller host that is gone (checked by pid and process start time, so a reused pid does
not keep a dead owner alive).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from orchestrator.core import shell
from orchestrator.core.clock import now
from orchestrator.errors import HostBusy
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed
from . import diskspace

LEASE_SECONDS = 60.0
RENEWALS_PER_LEASE = 4
RUN_LOOK_S = 1.0  # how often the owner looks whether the run it names has changed
TAKE_ATTEMPTS = 3


@dataclass(frozen=True)
class LockOwner:
    """Who holds a host: what the lock file says."""

    controller: str  # hostname of the machine running orch
    pid: int
    pid_started: str  # the process's start time on its machine ("" where unknown)
    token: str  # unique per acquisition; renew and release act only on our own token
    command: str  # "run", "revert"
    run: str  # uid of the run being worked on ("" between runs)
    started_at: str
    lease_s: float
    user: str = ""  # who ran the command ("" in a lock an older orch wrote)

    def describe(self) -> str:
        return (f"{self.user + ' on ' if self.user else ''}controller {self.controller} pid {self.pid}, "
                f"`orch {self.command}`" + (f", run {self.run}" if self.run else "") + f", started {self.started_at}")


@dataclass(frozen=True)
class Holder:
    """A lock found on the host: its owner (None if unreadable), raw text and lease age."""

    owner: LockOwner | None
    content: str
    age_s: float
    broken_because: str = ""  # set on the holders `acquire` broke

    def stale_reason(self) -> str | None:
        """Why this lock can be broken, or None while its owner may still be working."""
        if self.owner is None:  # orch puts a lock in place only once written whole (shell.lock_take)
            return f"it is empty or unreadable ({self.content.strip()[:60]!r}), so no owner can be working under it"
        owner = self.owner
        if self.age_s > owner.lease_s:
            return f"its lease ran out ({self.age_s:.0f} s since the last renewal, lease {owner.lease_s:.0f} s)"
        if owner.controller == socket.gethostname() and owner.pid != os.getpid() and not owner_alive(owner):
            return f"its owner, pid {owner.pid} on this controller host, is gone"
        return None


class HostLock:
    def __init__(self, conn: Connection, workdir: str, command: str, *, lease_s: float = LEASE_SECONDS,
                 path: str | None = None):
        self.conn = conn
        self.path = path or f"{workdir.rstrip('/')}/lock"  # `path`: a lock of another name (`treelock.py`)
        self.owner = LockOwner(
            controller=socket.gethostname(), pid=os.getpid(), pid_started=process_started(os.getpid()),
            token=secrets.token_hex(8), command=command, run="",
            started_at=now(), lease_s=lease_s, user=_user(),
        )
        self._renewing: asyncio.Task[None] | None = None
        self.lost = False  # set when a renewal found the lock no longer ours

    async def acquire(self) -> list[Holder]:
        """Take the lock; returns the stale locks broken on the way (for warnings and events).
        Raises HostBusy (exit 3) naming the owner when a live owner holds it."""
        broken: list[Holder] = []
        for _ in range(TAKE_ATTEMPTS):
            done = await self.conn.run(shell.lock_take(self.path, _encode(self.owner)))
            if shell.LOCK_MARKER not in done.out:
                hint = _unwritable_hint(done.err)
                if "No space left" in done.err:  # which disk, and how full: the workdir may be a link elsewhere
                    hint += f"; {await diskspace.described(self.conn, self.conn.host, self.path)}"
                raise command_failed(done, f"{self.conn.host.name}: cannot create {self.path}: "
                                           f"{' '.join(done.err.split())}; {hint}")
            holder = _parse_state(done.out)
            if holder is None:  # taken
                return broken
            if not isinstance(holder, Holder):  # "free": released between our create and our look
                continue
            reason = holder.stale_reason()
            if reason is None:
                raise HostBusy(self._busy_message(holder))
            await self.conn.run(shell.lock_break(self.path, holder.content))
            broken.append(replace(holder, broken_because=reason))
        raise HostBusy(f"{self.conn.host.name}: could not take {self.path} in {TAKE_ATTEMPTS} attempts (other "
                        f"controllers took it first, or it cannot be created); see `cat {self.path}` on the host")

    def keep_alive(self, current_run: Callable[[], str]) -> None:
        """Renew the lease in the background every lease/4 seconds, naming the current run."""
        self._renewing = asyncio.create_task(self._renew_forever(current_run))

    async def renew(self, run: str = "") -> bool:
        """Refresh the lease (and the run named in it); False if the lock is no longer ours."""
        self.owner = replace(self.owner, run=run)
        # Safe to resend after a dropped link: the token makes a renewal of someone else's lock a no-op.
        done = await self.conn.run(shell.lock_renew(self.path, self.owner.token, _encode(self.owner)), idempotent=True)
        return done.ok

    async def release(self) -> None:
        """Stop renewing and remove the lock if it is still ours."""
        if self._renewing is not None:
            self._renewing.cancel()
            try:
                await self._renewing
            except (asyncio.CancelledError, Exception):
                pass  # a failed renewal already said what it could; release goes on regardless
            self._renewing = None
        await self.conn.run(shell.lock_release(self.path, self.owner.token), idempotent=True)

    async def _renew_forever(self, current_run: Callable[[], str]) -> None:
        """Renew every lease/4 seconds, and soon after the current run changes: whoever waits for
        the host (`orch run --wait`) is told which run holds it."""
        renewed = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(min(RUN_LOOK_S, self.owner.lease_s / RENEWALS_PER_LEASE))
            run, now_s = current_run(), asyncio.get_running_loop().time()
            if run == self.owner.run and now_s - renewed < self.owner.lease_s / RENEWALS_PER_LEASE:
                continue
            if not await self.renew(run):
                self.lost = True
                return
            renewed = now_s

    def _busy_message(self, holder: Holder) -> str:
        who = holder.owner.describe() if holder.owner else f"unreadable content {holder.content.strip()!r}"
        lease = f"lease {holder.owner.lease_s:.0f} s" if holder.owner else "no lease"
        return (f"{self.conn.host.name}: busy: {self.path} is held by {who}; lease renewed {holder.age_s:.0f} s ago "
                f"({lease}); wait for that command to finish (a lock whose owner died is broken once its lease "
                f"runs out, or at once from that owner's controller host)")


async def read(conn: Connection, workdir: str) -> Holder | None:
    """The host's lock as it is now, or None when no command holds the host."""
    return await read_at(conn, f"{workdir.rstrip('/')}/lock")


async def read_at(conn: Connection, path: str) -> Holder | None:
    """The lock at `path` as it is now, or None when nobody holds it."""
    done = await conn.run(shell.lock_state(path))
    holder = _parse_state(done.out)
    return holder if isinstance(holder, Holder) else None


def owner_alive(owner: LockOwner) -> bool:
    """Whether the owner process still runs on this machine (same pid and same start time)."""
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    state, started = _proc_stat(owner.pid)
    if state in ("Z", "X"):  # killed, not yet reaped by its parent: gone all the same
        return False
    return not (owner.pid_started and started and started != owner.pid_started)


def process_started(pid: int) -> str:
    """A process's start time in clock ticks since boot (Linux), "" where /proc has no answer."""
    return _proc_stat(pid)[1]


def _proc_stat(pid: int) -> tuple[str, str]:
    """(state letter, start time) from /proc/PID/stat; ("", "") where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return "", ""
    fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and parentheses
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def _user() -> str:
    """The login name this command runs as, "" where the system has none for it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (a bare container)
        return ""


def _unwritable_hint(err: str) -> str:
    if "No space left" in err or "Disk quota" in err:
        return "free space on the host's disk that holds the workdir (nothing was left behind)"
    return "check that the host's workdir is writable"


def _encode(owner: LockOwner) -> str:
    return json.dumps(asdict(owner), sort_keys=True)


def _parse_state(out: str) -> Holder | str | None:
    """None when `lock_take` took the lock, "free" when there is none, else the holder."""
    head, _, content = out.partition("\n")
    parts = head.split()
    if parts[:2] == [shell.LOCK_MARKER, "taken"]:
        return None
    if parts[:2] == [shell.LOCK_MARKER, "free"] or len(parts) != 4 or parts[0] != shell.LOCK_MARKER:
        return "free"
    age = max(0.0, float(int(parts[2]) - int(parts[3])))
    try:
        data = json.loads(content)
        # a field missing where it has a default (`user`, from an older orch) takes that default
        owner: LockOwner | None = LockOwner(**{k: data[k] for k in LockOwner.__dataclass_fields__ if k in data})
    except (ValueError, TypeError, KeyError):
        owner = None
    return Holder(owner, content, age)
