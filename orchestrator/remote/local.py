"""The `Connection` protocol on this machine, for the `local` host (no SSH)."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from .base import Completed, FileStat, Reconnection

COPY_CHUNK = 8 * 2**20


class LocalConnection:
    def __init__(self, host: Host):
        self.host = host
        self.home = str(Path.home())

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        return ()  # no link to lose

    def _path(self, path: str) -> Path:
        return Path(os.path.expanduser(path))

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            process_group=0,  # its own group: a command given up on is ended with all it started
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except TimeoutError:
            await _end_group(proc)
            raise HostError(f"{self.host.name}: command timed out after {timeout} s: {command[:120]}") from None
        except asyncio.CancelledError:  # Ctrl-C: the terminal's SIGINT no longer reaches the group
            await _end_group(proc)
            raise
        return Completed(command, proc.returncode if proc.returncode is not None else -1, out, err)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._path(path).read_bytes)

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        try:
            await asyncio.to_thread(_write_atomic, self._path(path), data, mode)
        except OSError as exc:  # a host error with what to do, as over SSH; not a traceback
            raise _write_error(self.host.name, path, exc) from None

    async def stat(self, path: str) -> FileStat | None:
        try:
            st = self._path(path).stat()
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mtime, st.st_mode & 0o7777, st.st_uid, st.st_gid)

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        await asyncio.to_thread(
            shutil.copytree, local_dir, self._path(remote_dir), dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        await asyncio.to_thread(_copy, local, self._path(path), offset, advance)

    async def forward(self, remote_port: int) -> tuple[str, int]:
        return ("127.0.0.1", remote_port)

    async def close(self) -> None:
        return None


def _write_atomic(target: Path, data: bytes, mode: int | None) -> None:
    """Temp file in the target's folder, fsync, keep mode/owner, rename over the target."""
    target.parent.mkdir(parents=True, exist_ok=True)
    existing = target.stat() if target.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".orch-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif existing is not None:
            os.chmod(tmp, existing.st_mode & 0o7777)
        if existing is not None and os.geteuid() == 0:
            os.chown(tmp, existing.st_uid, existing.st_gid)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_error(host: str, path: str, exc: OSError) -> HostError:
    if exc.errno == errno.EROFS:
        return HostError(f"{host}: cannot write {path}: its folder is on a read-only file system; make it "
                         f"writable, or install the package where orch may write (a virtual environment of your own)")
    if isinstance(exc, PermissionError):
        return HostError(f"{host}: permission denied to write {path}; check the owner of the file or run orch "
                         f"as its owner")
    return HostError(f"{host}: could not write {path}: {exc.strerror or exc}")


def _copy(source: Path, target: Path, offset: int, advance: Callable[[int], None] | None) -> None:
    with open(source, "rb") as src, open(target, "r+b" if offset else "wb") as out:
        src.seek(offset)
        out.seek(offset)
        while chunk := src.read(COPY_CHUNK):
            out.write(chunk)
            if advance:
                advance(len(chunk))
        out.truncate()
        out.flush()
        os.fsync(out.fileno())


async def _end_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone, children and all
    await proc.wait()
