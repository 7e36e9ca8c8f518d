"""A pushed checkpoint file keeps its mode bits on the host, over the local transport and a real sshd:
a weights file 0640, a script 0755, a read-only file 0444, a link as what it points to; a re-push that
finds a file's bytes there but its mode changed fixes the mode alone (no byte moves)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from support.push import TRANSPORTS, do_push, hashes, make_folder

MODES = {"model.safetensors": 0o640, "run.sh": 0o755, "config.json": 0o444, "sub/tokenizer.json": 0o600}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def checkpoint(src: Path) -> None:
    make_folder(src, {name: 4096 for name in MODES})
    for name, bits in MODES.items():
        os.chmod(src / name, bits)
    os.symlink("run.sh", src / "launch.sh")  # pushed as a plain file with its target's bytes and mode


@pytest.mark.parametrize("push_target", TRANSPORTS, indirect=True)
def test_file_modes_are_kept_and_a_mode_change_alone_moves_no_bytes(push_target, tmp_path: Path):
    host, reconnect = push_target
    src, dest, cache = tmp_path / "src", tmp_path / "host" / "ckpt", tmp_path / "cache"
    checkpoint(src)
    first = do_push(host, reconnect, src, dest, cache)
    assert first.sent_files == 5
    assert {name: mode(dest / name) for name in MODES} == MODES
    assert mode(dest / "launch.sh") == 0o755 and not (dest / "launch.sh").is_symlink()
    assert hashes(dest) == hashes(src)

    os.chmod(src / "run.sh", 0o700)  # the link follows its target
    os.chmod(src / "config.json", 0o644)
    again = do_push(host, reconnect, src, dest, cache)
    assert (again.sent_files, again.sent_bytes, again.modes_set) == (0, 0, 3), again
    assert mode(dest / "run.sh") == mode(dest / "launch.sh") == 0o700 and mode(dest / "config.json") == 0o644
    assert mode(dest / "model.safetensors") == 0o640

    os.chmod(src / "config.json", 0o444)
    make_folder(src, {"config.json": 4096}, seed=5)  # new bytes for a read-only file: replaced, still 0444
    changed = do_push(host, reconnect, src, dest, cache)
    assert (changed.sent_files, changed.modes_set) == (1, 1)
    assert mode(dest / "config.json") == 0o444 and hashes(dest) == hashes(src)

    unchanged = do_push(host, reconnect, src, dest, cache)
    assert (unchanged.sent_files, unchanged.modes_set) == (0, 0)


def test_a_transformed_copy_takes_its_modes_from_the_users_folder(tmp_path: Path):
    """The transforms' cached copy is written with the umask's modes: the user's folder says."""
    from orchestrator.core.inventory import Host

    src, copy, dest, cache = tmp_path / "src", tmp_path / "copy", tmp_path / "host" / "ckpt", tmp_path / "cache"
    checkpoint(src)
    copy.mkdir()
    (copy / "sub").mkdir()
    for name in MODES:
        shutil.copyfile(src / name, copy / name)
        os.chmod(copy / name, 0o666)
    host = Host(name="here", transport="local", workdir=str(tmp_path / "host"))

    import asyncio

    from orchestrator.host import push
    from orchestrator.remote import connect

    async def go() -> push.PushResult:
        conn = await connect(host)
        try:
            return await push.push(conn, copy, str(dest), cache=cache, modes_from=src)
        finally:
            await conn.close()

    asyncio.run(go())
    assert {name: mode(dest / name) for name in MODES} == MODES


def test_a_checkpoint_with_transforms_is_pushed_with_the_users_modes(tmp_path: Path):
    """Through the run's push (`checkpoint.push_for_run`): the transformed copy in the cache is new
    files, yet each pushed file has the mode of the user's file of that name."""
    import asyncio
    import subprocess
    import sys

    from conftest import ROOT
    from orchestrator.core.inventory import Host
    from orchestrator.core.spec import CheckpointDef
    from orchestrator.host import checkpoint as checkpoints
    from orchestrator.remote import connect

    made = tmp_path / "made"
    maker = ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang" / "make_checkpoints.py"
    subprocess.run([sys.executable, str(maker), str(made)], check=True, capture_output=True)
    src = made / "eagle3-draft"
    (src / "convert.sh").write_text("#!/bin/sh\n")
    wanted = {"model.safetensors": 0o640, "config.json": 0o444, "convert.sh": 0o755}
    for name, bits in wanted.items():
        os.chmod(src / name, bits)
    dest = tmp_path / "host" / "draft"
    spec = CheckpointDef("draft", src, str(dest), "exp.yaml:3", ({"d2t_to_absolute": True},))

    async def go() -> None:
        conn = await connect(Host(name="here", transport="local", workdir=str(tmp_path / "host")))
        try:
            await checkpoints.push_for_run((spec,), conn, {"draft": str(dest)})
        finally:
            await conn.close()

    asyncio.run(go())
    assert (dest / "model.safetensors").read_bytes() != (src / "model.safetensors").read_bytes()  # transformed
    assert {name: mode(dest / name) for name in wanted} == wanted
