"""Server reuse: a server kept up for the next plan that differs only in workload.

Plans with one server key (`plankey.server_key`) differ only in what is sent to the server (their
workload, their repeat index). The first of them on a GPU slot launches the server: flags checked,
checkpoints pushed, preflight, patches applied, launch, readiness. When its run's workload ends well,
the server is still alive and the queue holds another plan of that key that fits the host, the
server stays up and that plan's run uses it: it checks, pushes, patches and launches nothing; it
records the server it used (`Run.server_run_id`: the run that launched it, whose `command` is the
server's launch; the launching run names itself) and a "server-reused" event; it sends its own
workload and reads the server's stats before and after it, as any run.

Each run keeps the part of the server log written while it used the server (from where the run
before it stopped reading, to its last whole line): its own series, debug lines and log measures.

The last run of the chain (the queue has no more plans of the key, its run failed, or it was
interrupted) stops the server and reverts the patches of the run that launched it, setting the patch
states of every run that used them. A server left up between two runs when the sweep is cut short
is stopped and reverted by the slot (`close`).

`fresh_server: true` (experiment or variant) gives each plan a key of its own: no reuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestrator.host import server
from orchestrator.store.rowid import stored_id
from . import sharing, stages
from .attempt import Attempt, Serving as Serving  # Serving: named here too, where reuse lives
from .queue import Entry

Keep = Callable[[], Awaitable[bool]]  # does another plan of the key take the server now? (it is then reserved)


@dataclass
class Kept:
    """What a slot carries from one run to the next: the server its last run left up, and the plan
    reserved to use it."""

    serving: Serving | None = None
    next: Entry | None = None  # the plan the queue reserved for the server

    def take(self) -> Serving | None:
        serving, self.serving = self.serving, None
        return serving


def launched(attempt: Attempt, srv: server.Server) -> Serving:
    """The attempt's run launched `srv`: it is the server's first user."""
    serving = Serving(attempt, srv, users=[attempt.run])
    attempt.serving = serving
    attempt.run = attempt.store.update_run(attempt.run, server_run_id=attempt.run.id)
    return serving


def adopt_patches(attempt: Attempt, serving: Serving) -> None:
    """The attempt's run uses the server an earlier run of its key left up: the launching run's
    patch rows become its own (the same files, applied once)."""
    from orchestrator.store.database import PatchRow
    run, store = attempt.run, attempt.store
    store.add(*(PatchRow(run_id=stored_id(run), seq=row.seq, name=row.name, target=row.target, file=row.file,
                         sha256_before=row.sha256_before, sha256_after=row.sha256_after, state=row.state)
                for row in store.children(serving.launcher.run, PatchRow)))


def join(attempt: Attempt, serving: Serving) -> None:
    """The attempt's run uses the server (`adopt_patches` first): its users name it, and the event
    names the server."""
    run, launcher, store = attempt.run, serving.launcher.run, attempt.store
    serving.users.append(run)
    sharing.used_by(serving.launcher, run)
    attempt.serving = serving
    store.event(run, "server-reused", f"uses the server run {launcher.id} ({launcher.uid}) launched: pid "
                f"{serving.srv.pgid} on port {serving.srv.port}, its launch is run {launcher.id}'s command; "
                f"this run checked, pushed, patched and launched nothing")
    attempt.say(f"reuses the server of run {launcher.id} (pid {serving.srv.pgid}): no launch")


async def kept_segment(attempt: Attempt, keep: Keep) -> bytes | None:
    """The server stays up for the next plan of its key: the log this run adds (to its last whole
    line), or None when the server is to be stopped (it died, or no plan of the key is waiting)."""
    serving = attempt.serving
    if serving is None:
        return None
    status = await server.poll(attempt.session.conn, serving.srv, serving.log_offset)
    if not status.alive or not await keep():
        return None
    whole = status.new_bytes[:status.new_bytes.rfind(b"\n") + 1]
    serving.log_offset += len(whole)
    attempt.store.event(attempt.run, "server-kept", f"the server (pid {serving.srv.pgid}) stays up for the next "
                        "plan of the same server key")
    attempt.say("server kept up for the next run of the same launch")
    return whole


def own_part(serving: Serving | None, log: bytes) -> bytes:
    """The part of the whole log after what earlier users kept (a log cut down on the host for its
    size no longer lines up: it is kept whole)."""
    if serving is None or not serving.log_offset or len(log) < serving.log_offset:
        return log
    return log[serving.log_offset:]


async def close(serving: Serving) -> None:
    """Stop and revert a server left up between two runs (the sweep was cut short, or the next
    plan failed before it became a run): recorded on its last user."""
    last = dataclasses.replace(serving.launcher, run=serving.users[-1])
    await stages.stop(last, serving.srv)
    await stages.revert_patches(last, owner=serving.launcher, also=serving.later_users)
