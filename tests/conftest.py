"""Shared fixtures: a throw-away experiment folder, inventory and database per test."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def group_alive(pgid: int) -> bool:
    """A process of the group is alive on this machine; zombies (exited, not yet reaped by an init
    that does not reap) do not count, as in orch's own check."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the repo's template, a local rehearsal inventory and its own database."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "sglang_launch.sh.j2").write_text((ROOT / "templates" / "sglang_launch.sh.j2").read_text())
    (tmp_path / "experiments").mkdir()
    (tmp_path / "inventory.yaml").write_text(
        "hosts:\n"
        "  local:\n"
        "    transport: local\n"
        f"    workdir: {tmp_path / 'host'}\n"
        "    gpus: 8\n"
        "    rehearsal: true\n"
    )
    return tmp_path


@pytest.fixture
def demo(project: Path) -> Path:
    """The project with the demo experiment (experiments/eagle_debug.yaml) copied in; its path."""
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", project / "experiments" / "eagle_debug.yaml")
    return project / "experiments" / "eagle_debug.yaml"


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """orch's local caches (manifests, transformed checkpoints, flag sets) go to a temp folder,
    shared by the session's tests and by the orch commands they start."""
    os.environ["ORCH_CACHE"] = str(tmp_path_factory.mktemp("orch-cache"))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ORCH_DB", "ORCH_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    os.environ.setdefault("COLUMNS", "200")


@pytest.fixture
def no_user_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A throw-away HOME and no agent: nothing may read or write the user's ~/.ssh or ~/.orch."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def sshd_box(tmp_path: Path):
    """A real OpenSSH sshd on 127.0.0.1 with its own host key and client key."""
    import sshd

    running = sshd.start(tmp_path / "sshd", "box")
    yield running
    running.stop()


@pytest.fixture(params=["local", "sshd"])
def where(request, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The project's only host `local`: this machine, or a real sshd on 127.0.0.1 (same workdir)."""
    if request.param == "sshd":
        import sshd

        sshd.require_sshd()
        home = tmp_path / "home"
        home.mkdir()
        monkeypatch.setenv("HOME", str(home))  # the user's ~/.ssh is never read
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        server = sshd.start(tmp_path / "sshd", "local")
        known = tmp_path / "known_hosts"
        known.write_text(server.known_line())
        (project / "inventory.yaml").write_text(
            "hosts:\n" + server.inventory_entry(known, project / "host")
            + f"    python: {sys.executable}\n    gpus: 8\n    rehearsal: true\n")
        yield request.param
        server.stop()
    else:
        yield request.param


@pytest.fixture
def push_target(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(host, reconnect) for the checkpoint push transport named by the test's parameter (one of
    support.push.TRANSPORTS); the ssh ones against a real sshd on 127.0.0.1."""
    from orchestrator.core.inventory import Host

    kind = request.param
    if kind == "local":
        yield Host(name="here", transport="local", workdir=str(tmp_path / "host")), False
        return
    import sshd

    if sshd.sshd_missing():
        pytest.skip(sshd.sshd_missing())
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # nothing here may read the user's ~/.ssh
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    server = sshd.start(tmp_path / "sshd", "box")
    known = tmp_path / "known_hosts"
    known.write_text(server.known_line())
    yield server.host(known, tmp_path / "host"), kind == "ssh-commands"
    server.stop()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    """The bad-input corpus's rehearsal host (support.corpus): a workdir with the rehearsal SGLang
    installed (by a healthy dry run), and a port held by a listener; (workdir, placeholders)."""
    from support.cli import orch_main
    from support.corpus import build

    workdir = tmp_path_factory.mktemp("corpus-host") / "work"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    places = {"@WORKDIR@": str(workdir), "@BUSY_PORT@": str(listener.getsockname()[1]),
              "@CLOSED_PORT@": str(free_port()), "@PYTHON@": sys.executable, "@NOT_UTF8@": os.fsdecode(b"\xe9")}
    project = build({"args": []}, tmp_path_factory.mktemp("corpus-install"), places)
    code, out, err, crash = orch_main(project, ["run", "exp.yaml", "--dry-run"])
    assert (code, crash) == (0, None), out + err + (crash or "")
    yield workdir, places
    listener.close()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the session (tests/pg.py), stopped at its end. Skips with the
    reason where PostgreSQL cannot be had (not root, no apt); as root with apt (CI) a missing one
    fails, since `make test` installs it."""
    import shutil

    import pg

    reason = pg.missing()
    if reason:
        if os.environ.get("CI") or (os.geteuid() == 0 and shutil.which("apt-get")):
            pytest.fail(f"{reason}; as root with apt the PostgreSQL tests must run: `make postgres-deps`")
        pytest.skip(reason)
    cluster = pg.start()
    yield cluster
    cluster.stop()


from wheels import sglang_python  # noqa: E402,F401  (fixture: real SGLang wheels in throw-away venvs)

