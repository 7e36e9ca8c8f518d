"""The inventory's hosts and what orch left on them: what `orch hosts` lists, `orch patches`
finds and `orch clean` removes (each host inside its lifecycle, `host/lifecycle.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.core.inventory import Host
    from orchestrator.host.cleanup import Verdict
    from orchestrator.host.journal import PatchRecord
    from orchestrator.host.lifecycle import Held, Locking
    from orchestrator.store.database import Store

T = TypeVar("T")
_Where = str | PathLike[str]
_Report = Callable[[str, str], None]
_DEFAULT_INVENTORY = "inventory.yaml"
_DEFAULT_DB = "sqlite:///orch.db"


@dataclass(frozen=True)
class HostEntry:
    """A host of the inventory as `orch hosts` lists it: `where` is this machine, `user@address`
    or its Slurm allocation."""

    name: str
    transport: str
    where: str
    gpus: int
    workdir: str
    rehearsal: bool
    tags: tuple[str, ...]


def list_hosts(*, inventory: _Where = _DEFAULT_INVENTORY) -> list[HostEntry]:
    """`orch hosts`: the inventory's hosts, in its order."""
    from orchestrator.core import inventory as inventories
    from orchestrator.remote import is_this_machine

    found = []
    for h in inventories.load(Path(inventory)).hosts.values():
        where = "this machine" if is_this_machine(h) else f"{h.user + '@' if h.user else ''}{h.address or h.name}"
        where = h.slurm.describe() if h.slurm else where
        found.append(HostEntry(h.name, h.transport, where, h.gpus, h.workdir, bool(h.rehearsal), tuple(h.tags)))
    return found


def _chosen(hosts: Sequence[str], inventory: _Where) -> list[Host]:
    """The hosts (or tags) named; every host of the inventory when none is."""
    from orchestrator.core import inventory as inventories

    hosts_file = inventories.load(Path(inventory))
    return hosts_file.select(tuple(hosts) or list(hosts_file.hosts))


def _on_hosts(hosts: list[Host], work: Callable[[Held], Awaitable[T]], report: _Report,
              locking: Locking | None = None) -> dict[str, T | OrchError]:
    """`work` on every host at once, each inside the host lifecycle."""
    import asyncio  # here, not at the top: `orch --help` does without it

    from orchestrator.host import lifecycle

    return asyncio.run(lifecycle.on_hosts(hosts, work, report, locking))


def _quiet(host: str, message: str) -> None:
    """The default report: a library call prints nothing."""


def list_patches(hosts: Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                 report: _Report | None = None) -> dict[str, list[dict[str, Any]] | OrchError]:
    """`orch patches --json`: per host (names or tags; default: every host of the inventory), each
    file orch has patched (or left drifted) and by which run: `{host, run, run_id, seq, name,
    target, file, state, sha256_before, sha256_after, backup}`; a file changed by hand since orch's
    revert left it is drifted too. Or the host's error."""
    chosen = _chosen(hosts, inventory)
    store = _store(db)
    found: dict[str, list[dict[str, Any]] | OrchError] = {}
    for name, result in _on_hosts(chosen, _patch_states, report or _quiet).items():
        found[name] = result if isinstance(result, OrchError) else [
            {"host": name, "run": r.run, "run_id": _run_id(store, r.run), "seq": r.seq, "name": r.name,
             "target": r.target, "file": r.file, "state": r.state, "sha256_before": r.sha256_before,
             "sha256_after": r.sha256_after, "backup": r.backup} for r in result]
    return found


async def _patch_states(held: Held) -> list[PatchRecord]:
    """The journal's records as their files are now, and each file changed since a revert left it."""
    from orchestrator.host.reverting import changed_since_revert

    return [*await held.session.journal.status(), *(r for r, _ in await changed_since_revert(held))]


def _run_id(store: Store, uid: str) -> int | None:
    try:
        return store.get(uid).id
    except OrchError:
        return None  # a run recorded in another database


def _store(db: str) -> Store:
    from orchestrator.store.database import Store

    return Store(db)


def clean_hosts(hosts: Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                older_than: float = 7.0, big_logs: bool = False, dry_run: bool = False,
                report: _Report | None = None) -> dict[str, list[Verdict] | OrchError]:
    """`orch clean`: the run folders of runs ended more than `older_than` days ago removed from the
    hosts (names or tags; default: every host of the inventory) once their logs are in the database;
    `big_logs`: also those whose log was too big to store whole; `dry_run`: remove nothing, take no
    lock. Per host, a verdict for each folder (removed, or kept and why), or the host's error."""
    from datetime import timedelta

    from orchestrator.host import cleanup
    from orchestrator.host.lifecycle import Locking

    chosen = _chosen(hosts, inventory)
    store = _store(db)

    async def one(held: Held) -> list[cleanup.Verdict]:  # a dead run's leftovers were recovered first
        session = held.session
        return await cleanup.clean(session.conn, store, session.host.name, f"{session.host.workdir}/runs",
                                   timedelta(days=older_than), big_logs, dry_run)

    # a dry run only looks: no lock taken, nothing recovered; else never while a run starts or ends
    locking = None if dry_run else Locking("clean", store)
    return _on_hosts(chosen, one, report or _quiet, locking)
