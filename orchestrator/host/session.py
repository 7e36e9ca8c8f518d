"""A host's open connection for one command, and what it learns about the host's Python packages
(found without importing them: an engine's `__init__` imports torch) and its installed files
(`reads.py`: kept until orch changes files there)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.core import shell
from orchestrator.errors import PatchError
from orchestrator.core.inventory import Host
from .journal import Journal
from .reads import ReadingConnection, Reads
from orchestrator.remote import Connection, connect
from orchestrator.core.spec import PatchDef

VERSION = re.compile(r"^__version__\s*=\s*(?:\w+\s*=\s*)*[\"']([^\"']+)", re.MULTILINE)


def absolute(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


async def package_dir(conn: Connection, host: Host, packages: dict[str, str], name: str) -> str | None:
    """The folder of package `name` under the host's python (rehearsal folder first), cached in
    `packages`; None when it is not installed. A missing python is a PatchError."""
    if name not in packages:
        done = await conn.run(shell.package_dir(host.python, name, host.rehearsal_dir), idempotent=True)
        if done.exit_status == 127:
            raise PatchError(f"{host.name}: python {host.python} not found; set the host's `python:` in the inventory")
        folder = done.out.strip()
        if not done.ok or not folder:
            return None
        packages[name] = folder
    return packages[name]


async def package_version(conn: Connection, folder: str, files: tuple[str, ...]) -> str:
    """The `__version__` of the first of `files` (in the package folder) that sets one; "unknown"
    when none does."""
    for name in files:
        try:
            text = (await conn.read_file(f"{folder}/{name}")).decode(errors="replace")
        except FileNotFoundError:
            continue
        found = VERSION.search(text)
        if found:
            return found.group(1)
    return "unknown"


@dataclass
class HostSession:
    """A host's open connection and what we learned about it during this command."""

    host: Host
    conn: Connection
    journal: Journal
    packages: dict[str, str] = field(default_factory=dict)  # where each package is: a patch never moves one
    reads: Reads = field(default_factory=Reads)  # what was read of its installed files, until they change

    def __post_init__(self) -> None:
        self.journal.on_change = self.reads.clear  # a patch applied or reverted: nothing read before counts

    def reading(self) -> HostSession:
        """This session with its reads answered from `reads` (`reads.py`): for the stages that only
        read the host's installed files (the launch check, the preflight)."""
        return dataclasses.replace(self, conn=ReadingConnection(self.conn, self.reads))

    @classmethod
    async def open(cls, host: Host, say: Callable[[str, str], None] | None = None) -> HostSession:
        # a run finishes what it started across a dropped link; `say` hears of a slurm job's queue state
        conn = await connect(host, reconnect=True, say=say)
        workdir = absolute(host.workdir, conn.home)
        host = dataclasses.replace(host, workdir=workdir)
        conn.host = host
        return cls(host, conn, Journal(conn, workdir))

    async def close(self) -> None:
        await self.conn.close()

    async def resolve(self, patch: PatchDef) -> str:
        """`PACKAGE:relative/path` -> the file under that package's folder on the host (kept in
        `reads` until a file changes: every stage of every run resolves each patch)."""
        kept = self.reads.resolved.get(patch.file)
        if kept is not None:
            return kept
        generation = self.reads.generation
        target = await self._resolved(patch)
        self.reads.keep(generation, self.reads.resolved, patch.file, target)
        return target

    async def _resolved(self, patch: PatchDef) -> str:
        package, sep, relative = patch.file.partition(":")
        if not sep or patch.file.startswith("/"):
            return patch.file
        # `sglang.srt:models/x.py` is `sglang:srt/models/x.py`: looking up a dotted name would
        # import its parent package, so only the top-level name is ever looked up.
        package, *inner = package.split(".")
        parts = [*inner, *relative.split("/")]
        if not package or not relative or any(p in ("", ".", "..") for p in parts):
            raise PatchError(f"{patch.where}: patch '{patch.name}': `file: {patch.file}` is not PACKAGE:relative/path "
                             f"(no empty, '.' or '..' parts); e.g. mypackage:models/draft.py")
        try:
            folder = await package_dir(self.conn, self.host, self.packages, package)
        except PatchError as exc:
            raise PatchError(f"{patch.where}: patch '{patch.name}': {exc}") from None
        if folder is None:
            raise PatchError(
                f"{patch.where}: patch '{patch.name}': package '{package}' is not installed for "
                f"{self.host.python} on {self.host.name}; set the host's `python:` or use an absolute path"
            )
        return await self._inside_package(patch, folder, "/".join([folder, *parts]))

    async def _inside_package(self, patch: PatchDef, folder: str, target: str) -> str:
        """The target with every symlink resolved, which must lie in the package: one reached through a
        link out of it is refused like `..` (orch patches the package it was told of). A target that
        is itself a link inside the package is patched where it points, so the link stays a link."""
        found = await self.conn.run(f"realpath -m -- {shell.quote(folder)} {shell.quote(target)}")
        real = found.out.split("\n") if found.ok else []
        if len(real) < 2 or not real[1]:
            return target  # no realpath there: the path as written
        if real[1].startswith(real[0].rstrip("/") + "/"):
            return real[1]
        raise PatchError(f"{patch.where}: patch '{patch.name}': `file: {patch.file}` on {self.host.name} leads to "
                         f"{real[1]}, outside the package folder {real[0]} (through a symlink); patch the file where "
                         f"it lies with an absolute path, or remove the link")
