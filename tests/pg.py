"""A real PostgreSQL server for the store's tests: a throw-away cluster in a temp folder.

initdb refuses to run as root, so as root the cluster is made and run by the unprivileged `nobody`
(through runuser); otherwise by the current user. The server listens on 127.0.0.1 at a free port
with its socket in the cluster's folder, trusts local connections, and is stopped (and its folder
removed) at the end of the session. Where PostgreSQL is not installed, why is said, and its tests skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

UNPRIVILEGED = "nobody"


@dataclass
class Cluster:
    folder: Path
    port: int
    prefix: list[str]  # runs a command as the cluster's owner
    pg_ctl: str

    @property
    def url(self) -> str:
        return f"postgresql://orch@127.0.0.1:{self.port}/postgres"

    def database(self, name: str) -> str:
        """The URL of a new, empty database of this server named `name`."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=orch dbname=postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://orch@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run([*self.prefix, self.pg_ctl, "-D", str(self.folder / "data"), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


def binary(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else Debian's versioned folder (newest first)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return candidates[-1] if candidates else None


def missing() -> str | None:
    """Why a real PostgreSQL cannot run here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the PostgreSQL driver is not installed (pip install 'orch[postgres]')"
    if not binary("initdb") or not binary("pg_ctl"):
        return "PostgreSQL is not installed (`make postgres-deps` installs Debian's postgresql as root)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: cannot start PostgreSQL as an unprivileged user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start() -> Cluster:
    """initdb + pg_ctl start of a new cluster; raises RuntimeError with the server's words when it fails."""
    initdb, pg_ctl = binary("initdb"), binary("pg_ctl")
    assert initdb and pg_ctl
    folder = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam(UNPRIVILEGED)
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", UNPRIVILEGED, "--"]
    port = _free_port()
    data, log = folder / "data", folder / "server.log"
    steps = [
        [*prefix, initdb, "-D", str(data), "-U", "orch", "--auth=trust", "-E", "UTF8", "--no-sync"],
        [*prefix, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
         f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=120, cwd=folder)
        if done.returncode != 0:
            words = done.stdout + done.stderr + (log.read_text() if log.exists() else "")
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(f"PostgreSQL did not start ({' '.join(step[:len(prefix) + 1])}): {words.strip()}")
    return Cluster(folder, port, prefix, pg_ctl)
