"""Patches on SGLang's real installed sources (published wheels, --no-deps, no torch): applied and
reverted through the journal and shown by `orch run --dry-run`; afterwards the installed files
are byte-identical to the wheel's. Also: `PACKAGE:path` resolved without importing the package,
and a missing package or file is a clear error before anything changes."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

import sshd
from orchestrator.errors import PatchError
from orchestrator.host.session import HostSession
from orchestrator.core.inventory import Host
from orchestrator.host.journal import REVERTED
from orchestrator.core.spec import PatchDef
from support.cli import orch
from wheels import package_dir

VERSIONS = ["0.5.23", "0.4.10.post2"]
TARGET = "sglang:srt/models/llama_eagle3.py"
ANCHOR = "hidden_states = forward_batch.spec_info.hidden_states"
DEBUG_LINE = 'print(f"[EAGLE3-DEBUG] hidden_states shape={hidden_states.shape}", flush=True)'
# One diff for both versions: the anchor sits at line 147 in 0.4.10.post2 and 237 in 0.5.23, and
# exact context is found at either offset.
WIDTH_DIFF = """\
--- a/srt/models/llama_eagle3.py
+++ b/srt/models/llama_eagle3.py
@@ -147,2 +147,3 @@
         hidden_states = forward_batch.spec_info.hidden_states
+        print(f"[WIDTH-DEBUG] in={hidden_states.shape[-1]} embeds={embeds.shape[-1]}", flush=True)
         if hidden_states.shape[-1] != embeds.shape[-1]:
"""
PRINT = PatchDef("debug-print", TARGET, "e.yaml:1", ANCHOR, "insert_after", DEBUG_LINE + "\n")
DIFF = PatchDef("width-diff", TARGET, "e.yaml:2", diff=WIDTH_DIFF)


def tree_hashes(folder: Path) -> dict[str, str]:
    """Every installed file of the package, bytecode caches aside."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def wheel_file_hash(python: Path) -> str:
    """The sha256 the wheel's RECORD lists for the target (what pip installed, before any test)."""
    folder = package_dir(python)
    record = next(folder.parent.glob("sglang-*.dist-info")) / "RECORD"
    for line in record.read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if name == "sglang/srt/models/llama_eagle3.py":
            import base64

            return base64.urlsafe_b64decode(digest.split("=", 1)[1] + "==").hex()
    raise AssertionError("llama_eagle3.py not in the wheel's RECORD")


async def apply_and_revert(host: Host, patches: list[PatchDef]) -> tuple[str, str, list[str]]:
    """Resolve, apply every patch through the journal, read the patched text, revert."""
    session = await HostSession.open(host)
    try:
        file = await session.resolve(patches[0])
        before, after = await session.journal.prepare(patches[0], file)
        records = [await session.journal.apply("r1", 1, patches[0], file, before, after)]
        for seq, patch in enumerate(patches[1:], 2):
            b, a = await session.journal.prepare(patch, file)
            records.append(await session.journal.apply("r1", seq, patch, file, b, a))
        patched = (await session.conn.read_file(file)).decode()
        reverted = await session.journal.revert("r1")
        assert await session.journal.records() == []
        return file, patched, [r.state for r in reverted]
    finally:
        await session.conn.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_print_and_diff_on_the_real_file_through_the_journal(version, sglang_python, tmp_path):
    python = sglang_python(version)
    folder = package_dir(python)
    before = tree_hashes(folder)
    target = folder / "srt" / "models" / "llama_eagle3.py"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == wheel_file_hash(python)
    mode = target.stat().st_mode
    host = Host("gpu", transport="local", workdir=str(tmp_path / "work"), python=str(python))

    file, patched, states = asyncio.run(apply_and_revert(host, [DIFF, PRINT]))
    assert file == str(target) and states == [REVERTED, REVERTED]
    lines = patched.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == ANCHOR)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    assert lines[at + 1] == indent + DEBUG_LINE  # inserted right after, indented like the anchor
    assert lines[at + 2].strip().startswith('print(f"[WIDTH-DEBUG]')
    assert lines[at + 3].strip() == "if hidden_states.shape[-1] != embeds.shape[-1]:"
    compile(patched, str(target), "exec")  # still valid Python (compiled, never imported)

    assert tree_hashes(folder) == before
    assert hashlib.sha256(target.read_bytes()).hexdigest() == wheel_file_hash(python)
    assert target.stat().st_mode == mode
    assert list((tmp_path / "work" / "journal").iterdir()) == []


def test_real_file_over_a_real_sshd_host(sglang_python, tmp_path, monkeypatch):
    sshd.require_sshd()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    python = sglang_python(VERSIONS[0])
    folder = package_dir(python)
    before = tree_hashes(folder)
    target = folder / "srt" / "models" / "llama_eagle3.py"
    target.chmod(0o640)  # an unusual mode, to see it kept through patch and revert
    server = sshd.start(tmp_path / "sshd", "gpu")
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.known_line())
        host = server.host(known, tmp_path / "work", python=str(python))
        file, patched, states = asyncio.run(apply_and_revert(host, [DIFF, PRINT]))
    finally:
        server.stop()
    assert states == [REVERTED, REVERTED] and DEBUG_LINE in patched and "[WIDTH-DEBUG]" in patched
    assert tree_hashes(folder) == before
    assert target.stat().st_mode & 0o777 == 0o640
    target.chmod(0o644)


def test_package_path_is_resolved_without_importing_the_package(sglang_python, tmp_path):
    python = sglang_python(VERSIONS[0])
    host = Host("gpu", transport="local", workdir=str(tmp_path), python=str(python))
    probe = os.popen(f"{python} -c 'import sglang' 2>&1").read()
    assert "Error" in probe  # importing it fails here (no torch and friends): resolve must not import

    async def go(patch):
        session = await HostSession.open(host)
        try:
            return await session.resolve(patch)
        finally:
            await session.conn.close()

    folder = package_dir(python)
    assert asyncio.run(go(PRINT)) == str(folder / "srt" / "models" / "llama_eagle3.py")
    dotted = PatchDef("p", "sglang.srt:models/llama_eagle3.py", "e.yaml:3", ANCHOR, "replace", ANCHOR)
    assert asyncio.run(go(dotted)) == str(folder / "srt" / "models" / "llama_eagle3.py")
    for bad, message in [("nosuchpkg:x.py", "package 'nosuchpkg' is not installed for"),
                         ("sglang:../../etc/passwd", "is not PACKAGE:relative/path")]:
        with pytest.raises(PatchError, match=message):
            asyncio.run(go(PatchDef("p", bad, "e.yaml:4", ANCHOR, "replace", ANCHOR)))


# -- through the orch command -----------------------------------------------------------------


def real_project(tmp_path: Path, python: Path, target: str = TARGET) -> Path:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.sh.j2").write_text(
        "exec {{ host.python | qpath }} -m sglang.launch_server --port {{ port | q }}\n")
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "width.patch").write_text(WIDTH_DIFF)
    insert = DEBUG_LINE.replace('"', '\\"')
    (tmp_path / "experiments" / "real.yaml").write_text(
        "name: real\nhosts: [gpu]\ntemplate: ../templates/t.sh.j2\nparams: {port: 30000}\npatches:\n"
        f"  width-diff:\n    file: {target}\n    diff: width.patch\n"
        f"  debug-print:\n    file: {target}\n    find: \"{ANCHOR}\"\n    insert_after: \"{insert}\"\n"
        "variants:\n  both: {patches: [width-diff, debug-print]}\n")
    (tmp_path / "inventory.yaml").write_text(
        f"hosts:\n  gpu:\n    transport: local\n    workdir: {tmp_path / 'host'}\n    python: {python}\n"
        "    gpus: 1\n    rehearsal: false\n")
    return tmp_path / "experiments" / "real.yaml"


@pytest.mark.parametrize("version", VERSIONS)
def test_dry_run_shows_each_patch_as_a_diff_and_changes_nothing(version, sglang_python, tmp_path):
    python = sglang_python(version)
    folder = package_dir(python)
    before = tree_hashes(folder)
    spec = real_project(tmp_path, python)
    done = orch(tmp_path, "run", str(spec), "--dry-run", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    target = str(folder / "srt" / "models" / "llama_eagle3.py")
    flat = "".join(out.split())  # a long path may be wrapped on the terminal's width
    assert f"patch'width-diff'->{target}" in flat and f"patch'debug-print'->{target}" in flat
    assert f"--- a/{target.lstrip('/')}" in out
    assert "+        print(f\"[WIDTH-DEBUG]" in out and f"+        {DEBUG_LINE}" in out
    assert f"         {ANCHOR}" in out  # context line
    assert tree_hashes(folder) == before
    assert not (tmp_path / "host" / "lock").exists() and not (tmp_path / "host" / "journal").exists()


@pytest.mark.parametrize("target,message", [
    ("nosuchpkg:srt/models/llama_eagle3.py", "package 'nosuchpkg' is not installed for"),
    ("sglang:srt/models/no_such_model.py", "no_such_model.py does not exist; check `file:`"),
])
def test_missing_package_or_file_exits_2_before_anything_changes(target, message, sglang_python, tmp_path):
    python = sglang_python(VERSIONS[0])
    folder = package_dir(python)
    before = tree_hashes(folder)
    spec = real_project(tmp_path, python, target)
    done = orch(tmp_path, "run", str(spec), tests_on_path=True)
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert message in text and "real.yaml:" in text
    assert tree_hashes(folder) == before
    journal = tmp_path / "host" / "journal"
    assert not journal.exists() or list(journal.rglob("*")) == []
    assert not (tmp_path / "host" / "lock").exists()
    assert not (tmp_path / "host" / "runs").exists()  # no server was launched
