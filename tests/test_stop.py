"""Stopping a server ends every process of its run, inside or outside its process group, kills one
that ignores SIGTERM after the grace period and says so, and never touches a stranger's process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from orchestrator.host import server
from orchestrator.core.inventory import Host
from orchestrator.remote.local import LocalConnection


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_for(path: Path, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


async def launch_and_stop(tmp_path: Path, script: str, grace: float, ready: str) -> tuple[server.Stopped, Path]:
    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
    run_dir = tmp_path / "work" / "runs" / "r1"
    srv = await server.launch(conn, str(run_dir), script, 30000)
    wait_for(run_dir / ready)
    try:
        return await server.stop(conn, srv, grace=grace), run_dir
    finally:
        await conn.close()


def test_a_child_that_left_the_process_group_is_stopped_too(tmp_path):
    script = "#!/usr/bin/env bash\nsetsid sleep 300 & echo $! > escaped\nexec sleep 300\n"
    stopped, run_dir = asyncio.run(launch_and_stop(tmp_path, script, grace=5, ready="escaped"))
    escaped = int((run_dir / "escaped").read_text())
    assert stopped.gone and not stopped.killed and stopped.strays == 1
    assert not alive(escaped)
    assert "1 process(es) that had left its process group" in stopped.summary(5)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_and_that_is_said(tmp_path):
    script = "#!/usr/bin/env bash\ntrap '' TERM\necho up > started\nwhile :; do sleep 0.1; done\n"
    began = time.monotonic()
    stopped, _ = asyncio.run(launch_and_stop(tmp_path, script, grace=1, ready="started"))
    assert stopped.gone and stopped.killed
    assert time.monotonic() - began < 10
    assert stopped.summary(1) == "process group gone after SIGKILL: it ignored SIGTERM for 1 s"


def test_a_strangers_process_is_left_alone(tmp_path):
    stranger = subprocess.Popen(["setsid", "sleep", "300"])
    try:
        script = "#!/usr/bin/env bash\necho up > started\nexec sleep 300\n"
        stopped, _ = asyncio.run(launch_and_stop(tmp_path, script, grace=5, ready="started"))
        assert stopped.gone and stopped.strays == 0
        assert alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


def test_zombies_do_not_count_as_alive(tmp_path):
    # The wrapper's child exits at once and is never reaped while the wrapper sleeps: a zombie of
    # the group, which must not hold up the stop for the whole grace period.
    script = "#!/usr/bin/env bash\n(exit 0) & sleep 0.2; echo up > started\nexec python3 -c 'import time; time.sleep(300)'\n"
    began = time.monotonic()
    stopped, _ = asyncio.run(launch_and_stop(tmp_path, script, grace=10, ready="started"))
    assert stopped.gone and not stopped.killed
    assert time.monotonic() - began < 8
