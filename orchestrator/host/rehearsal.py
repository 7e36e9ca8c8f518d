"""Installs the rehearsal SGLang (`engines/sglang/sim/`, the host's release) and its demo checkpoints onto a host."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from orchestrator.core import shell
from orchestrator.engines.sglang import rehearsal as sim
from orchestrator.core.inventory import Host
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed

STAMP = ".orch-stamp"
MAKER = sim.SIM_DIR / "make_checkpoints.py"  # the demo checkpoints, made on the host by the stand-in's teacher


def stamp(release: str) -> str:
    """A hash of the release's assembled files and the checkpoint maker: a host whose copy has
    another stamp gets a fresh copy."""
    digest = hashlib.sha256(release.encode())
    for name, path in sorted(sim.files(release).items()):
        digest.update(name.encode())
        digest.update(path.read_bytes())
    digest.update(MAKER.read_bytes())
    return digest.hexdigest()[:16]


async def install(conn: Connection, host: Host) -> str:
    """Make sure the host's rehearsal folder holds its release's tree; returns the folder."""
    folder, release = host.rehearsal_dir, host.rehearsal
    assert folder is not None and release is not None
    want = stamp(release)
    try:
        have = (await conn.read_file(f"{folder}/{STAMP}")).decode().strip()
    except FileNotFoundError:
        have = ""
    if have == want:
        return folder
    await conn.run(shell.remove_tree(f"{folder}/sglang"))
    await conn.run(shell.mkdir(folder))
    with tempfile.TemporaryDirectory(prefix="orch-rehearsal-") as staging:
        await conn.put_tree(sim.assemble(release, Path(staging)), f"{folder}/sglang")
    await conn.write_file(f"{folder}/make_checkpoints.py", MAKER.read_bytes())
    made = await conn.run(
        shell.run_python(host.python, f"{folder}/make_checkpoints.py", f"{folder}/checkpoints"), timeout=300
    )
    if not made.ok:
        raise command_failed(
            made, f"{host.name}: could not make the rehearsal checkpoints with {host.python}: "
            f"{(made.err or made.out).strip().splitlines()[-1:] or ['no output']}; the rehearsal needs Python >= 3.11 with numpy"
        )
    await conn.write_file(f"{folder}/{STAMP}", (want + "\n").encode())
    return folder
