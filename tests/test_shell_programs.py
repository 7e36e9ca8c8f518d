"""The host-side Python programs of `core/shell/programs/` tested as Python: each file compiles, runs
as the module it is, and runs as the `python -c` text a host gets (its parts inlined) through the
very command the shell package builds, against a small fixture on this machine."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import setuptools

from orchestrator.core import shell
from orchestrator.core.shell import programs

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "orchestrator" / "core" / "shell" / "programs"
NAMES = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")
PY = sys.executable


def bash(command: str, stdin: bytes | None = None, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["bash", "-c", command], input=stdin, capture_output=True, timeout=timeout)


def facts(out: bytes) -> dict[str, str]:
    lines = [line.split(" ", 1)[1] for line in out.decode().splitlines() if line.startswith(shell.FACTS_MARKER + " ")]
    return dict(line.split("=", 1) for line in lines)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site folder with one package `orchfixture` (its own version file) installed by a
    distribution named otherwise, as a CPU build may be."""
    root = tmp_path / "site"
    (root / "orchfixture").mkdir(parents=True)
    (root / "orchfixture" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (root / "orchfixture" / "version.py").write_text('__version__ = "1.2.3"\n')
    info = root / "orchfixture_cpu-1.2.3.dist-info"
    info.mkdir()
    (info / "top_level.txt").write_text("orchfixture\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: orchfixture-cpu\nVersion: 1.2.3\n")
    return root


def test_the_folder_holds_each_program_the_shell_sends():
    assert set(NAMES) == {"compile_sources", "disk_free", "distribution", "distribution_name", "facts", "free_port",
                          "node_pipe", "package_folder", "port_holders", "relay"}


@pytest.mark.parametrize("name", NAMES)
def test_each_program_compiles_as_a_file_and_as_the_text_a_host_gets(name):
    compile((FOLDER / f"{name}.py").read_text(), f"{name}.py", "exec", dont_inherit=True)
    text = programs.source(name)
    compile(text, f"<{name}>", "exec", dont_inherit=True)
    assert "from ." not in text, "a part left to import: a host has no package to import it from"


def test_a_part_is_inlined_where_a_program_imports_it():
    part = programs.source("distribution")
    assert part in programs.source("facts") and part in programs.source("distribution_name")


def test_an_installed_wheel_carries_the_programs():
    """The programs folder is a package of its own, so setuptools' package finder ships its files."""
    found = setuptools.find_packages(str(ROOT), include=["orchestrator*"])
    assert "orchestrator.core.shell.programs" in found


def test_facts_are_this_machines(tmp_path, site):
    out = bash(shell.host_facts(PY, str(tmp_path / "not" / "yet"), 1, pythonpath=str(site),
                                packages=(("orchfixture", ("missing.py", "version.py")), ("absent_pkg", ("x.py",)))))
    found = facts(out.stdout)
    assert out.returncode == 0 and "python_error" not in found
    assert found["hostname"] == os.uname().nodename and found["kernel"] == os.uname().release
    assert found["python_path"] == PY and found["python"] == sys.version.split()[0]
    assert found["package_dir.orchfixture"] == str(site / "orchfixture")
    assert found["package_version.orchfixture"] == "1.2.3"
    assert found["package_dist.orchfixture"] == "orchfixture-cpu"
    assert "package_dir.absent_pkg" not in found
    assert int(found["disk_free_kib"]) > 0 and found["port_listening"] in ("0", "1")


def test_facts_run_as_the_module_the_file_is(tmp_path, site):
    """The file as it stands (its part imported, not inlined) says what the host's text says."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    argv = [shell.FACTS_MARKER, str(tmp_path), "1", "orchfixture:version.py"]
    as_module = subprocess.run([PY, "-m", "orchestrator.core.shell.programs.facts", *argv], capture_output=True,
                               env=env, cwd=tmp_path, check=True)
    as_text = subprocess.run([PY, "-c", programs.source("facts"), *argv], capture_output=True, env=env, check=True)
    drop_disk = lambda out: [line for line in out.splitlines() if b"disk_free_kib=" not in line]  # noqa: E731
    assert drop_disk(as_module.stdout) == drop_disk(as_text.stdout)
    assert facts(as_text.stdout)["package_dist.orchfixture"] == "orchfixture-cpu"


def test_facts_see_a_listening_port(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert facts(bash(shell.host_facts(PY, str(tmp_path), port)).stdout)["port_listening"] == "1"


def test_package_folder_and_distribution_without_importing(site):
    folder = bash(shell.package_dir(PY, "orchfixture", pythonpath=str(site)))
    assert folder.returncode == 0 and folder.stdout.decode().strip() == str(site / "orchfixture")
    assert bash(shell.package_dir(PY, "absent_pkg")).stdout == b"\n"
    owner = bash(shell.package_distribution(PY, str(site / "orchfixture"), "orchfixture"))
    assert owner.stdout == b"orchfixture-cpu\n"
    assert bash(shell.package_distribution(PY, str(site / "nothing"), "nothing")).stdout == b"\n"


def test_compile_names_each_source_that_fails():
    sources = [["bad", "bad.py", b"x = ("], ["good", "good.py", b"x = 1\n"], ["nul", "nul.py", b"a\0b"]]
    stdin = json.dumps([[k, n, base64.b64encode(d).decode()] for k, n, d in sources]).encode()
    done = bash(shell.compile_stdin(PY), stdin)
    failed = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert done.returncode == 0 and [f[0] for f in failed] == ["bad", "nul"]
    assert failed[0][1] == 1 and failed[0][2].startswith("SyntaxError:")


def test_port_holders_name_the_holder_and_its_run_mark(tmp_path):
    holder = subprocess.Popen(
        [PY, "-c", "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                   "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, shell.RUN_MARK: str(tmp_path)})
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        found = json.loads(bash(shell.port_holders(PY, port)).stdout)
    finally:
        holder.kill()
        holder.wait()
    assert found["listening"] is True
    assert [(h["pid"], h["mark"]) for h in found["holders"]] == [(holder.pid, str(tmp_path))]
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        assert json.loads(bash(shell.port_holders(PY, unused.getsockname()[1])).stdout) == \
            {"listening": False, "holders": []}


def test_free_port_can_be_bound():
    port = int(bash(shell.free_port(PY)).stdout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_disk_free_per_path_from_its_nearest_folder(tmp_path):
    lines = bash(shell.disk_free(PY, [str(tmp_path), str(tmp_path / "a" / "b")])).stdout.decode().splitlines()
    rows = [line.split("\t") for line in lines]
    assert [r[0] for r in rows] == [str(tmp_path), str(tmp_path / "a" / "b")]
    assert all(int(r[1]) > 0 and os.path.ismount(r[2]) for r in rows)


def test_relay_carries_a_connection_through_its_step_to_the_node_pipe():
    """The relay with a plain local step (the node pipe under this Python, no srun): bytes reach an
    echo server on the port and come back."""
    with socket.socket() as echo:
        echo.bind(("127.0.0.1", 0))
        echo.listen()
        step = [PY, "-S", "-c", programs.source("node_pipe"), str(echo.getsockname()[1])]
        relay = subprocess.Popen([PY, "-S", "-c", programs.source("relay"), "job-1", *step], stdout=subprocess.PIPE)
        try:
            assert relay.stdout is not None
            port = int(relay.stdout.readline())
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(b"ping")
                server_side, _ = echo.accept()
                with server_side:
                    server_side.settimeout(10)
                    assert server_side.recv(16) == b"ping"
                    server_side.sendall(b"pong")
                assert client.recv(16) == b"pong"
        finally:
            relay.kill()
            relay.wait()
