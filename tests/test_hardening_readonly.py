"""A patch into a package folder orch cannot write, on a `transport: local` host: one line naming the
host and the file, exit 3 (as over SSH), and nothing on the host changed. The suite runs as root,
whom file modes do not stop, so the folder is a read-only bind mount of itself."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from orchestrator.core.inventory import Host
from orchestrator.errors import HostError
from orchestrator.remote.local import LocalConnection

from support.cli import orch_main
from support.corpus import build
from support.files import modes_snapshot


@pytest.fixture
def read_only_package(host):
    """The rehearsal host's installed sglang folder, mounted read-only over itself for the test."""
    workdir, _ = host
    [package] = [p for p in workdir.rglob("sglang") if p.is_dir() and (p / "srt").is_dir()
                 and "__pycache__" not in p.parts]
    mounted = subprocess.run(f"mount --bind {package} {package} && mount -o remount,ro,bind {package} {package}",
                             shell=True, capture_output=True, text=True)
    if mounted.returncode != 0:
        subprocess.run(["umount", str(package)], capture_output=True)
        pytest.skip(f"cannot bind-mount read-only here: {mounted.stderr.strip()}")
    try:
        yield package
    finally:
        subprocess.run(["umount", str(package)], check=False)


def test_a_patch_into_a_read_only_package_folder_is_one_line_exit_3(host, read_only_package, tmp_path):
    workdir, places = host
    project = build({"args": []}, tmp_path, places)
    target = read_only_package / "srt" / "models" / "llama_eagle3.py"
    before = modes_snapshot(workdir)
    code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
    shown = f"exit {code}\nstdout:\n{out}\nstderr:\n{err}\n{crash or ''}"
    assert crash is None and "Traceback" not in out + err, shown
    assert code == 3, shown
    # the run's progress line (wrapped to the terminal's width: unwrapped here) says it all
    said = " ".join(out.split())
    assert (f"run 1 failed: local: cannot write {target.parent} (a read-only file system, or no write "
            f"permission), so patch 'debug-print' cannot change {target}; nothing was changed; make the folder "
            "writable, or install the package where orch may write") in said, shown
    assert modes_snapshot(workdir) == before, shown  # no journal folder, no saved original, no temporary file


def test_a_local_write_into_a_read_only_folder_is_a_host_error(read_only_package):
    """Below the check before patching: the local connection's own write says what and where."""
    target = read_only_package / "srt" / "models" / "llama_eagle3.py"
    original = target.read_bytes()
    conn = LocalConnection(Host("local", transport="local", workdir="/tmp"))
    with pytest.raises(HostError) as caught:
        asyncio.run(conn.write_file(str(target), b"changed\n"))
    assert str(caught.value) == (f"local: cannot write {target}: its folder is on a read-only file system; make it "
                                 "writable, or install the package where orch may write (a virtual environment of "
                                 "your own)")
    assert target.read_bytes() == original
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".orch-tmp")]
