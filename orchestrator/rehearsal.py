"""Installs the rehearsal SGLang (`orchestrator/sim/`) and its demo checkpoints onto a host."""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import shell
from .errors import HostError
from .inventory import Host
from .remote import Connection

SIM_DIR = Path(__file__).parent / "sim"
STAMP = ".orch-stamp"


def stamp() -> str:
    """A hash of the rehearsal's files: a host whose copy has another stamp gets a fresh copy."""
    digest = hashlib.sha256()
    for path in sorted(SIM_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(str(path.relative_to(SIM_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


async def install(conn: Connection, host: Host) -> str:
    """Make sure the host's rehearsal folder holds this version; returns the folder."""
    folder = host.rehearsal_dir
    assert folder is not None
    want = stamp()
    try:
        have = (await conn.read_file(f"{folder}/{STAMP}")).decode().strip()
    except FileNotFoundError:
        have = ""
    if have == want:
        return folder
    await conn.run(shell.remove_tree(f"{folder}/sglang"))
    await conn.run(shell.mkdir(folder))
    await conn.put_tree(SIM_DIR / "sglang", f"{folder}/sglang")
    await conn.write_file(f"{folder}/make_checkpoints.py", (SIM_DIR / "make_checkpoints.py").read_bytes())
    made = await conn.run(
        shell.run_python(host.python, f"{folder}/make_checkpoints.py", f"{folder}/checkpoints"), timeout=300
    )
    if not made.ok:
        raise HostError(
            f"{host.name}: could not make the rehearsal checkpoints with {host.python}: "
            f"{(made.err or made.out).strip().splitlines()[-1:] or ['no output']}; the rehearsal needs Python >= 3.11 with numpy"
        )
    await conn.write_file(f"{folder}/{STAMP}", (want + "\n").encode())
    return folder
