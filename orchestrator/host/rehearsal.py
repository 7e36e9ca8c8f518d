"""Installs an engine's rehearsal stand-in (the host's release of it) and its demo checkpoints onto
a host: the tree under `<rehearsal dir>/<package>`, first on PYTHONPATH at launch."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.engines.base import Engine
from orchestrator.errors import HostError
from orchestrator.rehearsal import stand_in as stand_in_of
from orchestrator.rehearsal.standin import StandIn
from orchestrator.remote import Connection
from .journal import Journal


def release_for(host: Host, stand_in: StandIn) -> str:
    """The host's `rehearsal:` release when it is one of this stand-in's, else the stand-in's default
    (a bare release in the inventory names one engine's; the other engines keep their default)."""
    return host.rehearsal if host.rehearsal in stand_in.releases() else stand_in.default_release


def stamp(stand_in: StandIn, release: str) -> str:
    """A hash of the release's assembled files and the checkpoint maker: a host whose copy has
    another stamp gets a fresh copy."""
    digest = hashlib.sha256(release.encode())
    for name, path in sorted(stand_in.files(release).items()):
        digest.update(name.encode())
        digest.update(path.read_bytes())
    digest.update(stand_in.checkpoint_maker.read_bytes())
    return digest.hexdigest()[:16]


async def install(conn: Connection, host: Host, engine: Engine) -> str:
    """Make sure the host's rehearsal folder holds the engine's stand-in at the host's release;
    returns the folder."""
    folder, stand_in = host.rehearsal_dir, stand_in_of(engine.name)
    assert folder is not None
    if stand_in is None:
        raise HostError(f"{host.name}: engine {engine.name} has no rehearsal stand-in; run it on a host with "
                        f"{engine.name} installed (not `rehearsal:`)")
    release = release_for(host, stand_in)
    want, stamp_file = stamp(stand_in, release), f"{folder}/.orch-stamp-{engine.name}"
    try:
        have = (await conn.read_file(stamp_file)).decode().strip()
    except FileNotFoundError:
        have = ""
    if have == want:
        return folder
    await conn.run(shell.remove_tree(f"{folder}/{engine.package}"))
    # the fresh copy is another release's files, not a hand edit: what orch left in the old one is moot
    await Journal(conn, host.workdir).drop_baselines_under(f"{folder}/{engine.package}")
    await conn.run(shell.mkdir(folder))
    with tempfile.TemporaryDirectory(prefix="orch-rehearsal-") as staging:
        await conn.put_tree(stand_in.assemble(release, Path(staging)), f"{folder}/{engine.package}")
    maker = f"{folder}/make_checkpoints_{engine.name}.py"
    await conn.write_file(maker, stand_in.checkpoint_maker.read_bytes())
    made = await conn.run(shell.run_python(host.python, maker, f"{folder}/checkpoints"), timeout=300)
    if not made.ok:
        raise HostError(
            f"{host.name}: could not make the rehearsal checkpoints with {host.python}: "
            f"{(made.err or made.out).strip().splitlines()[-1:] or ['no output']}; the rehearsal needs Python >= 3.11 with numpy"
        )
    await conn.write_file(stamp_file, (want + "\n").encode())
    return folder
