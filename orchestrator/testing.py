"""A `Connection` that touches no host, for fast tests of what orch does in what order.

`FakeConnection` keeps the host's files in memory, answers each command from a script (the first
rule whose pattern matches, newest rule first; anything unscripted succeeds with no output, or is
refused with `strict=True`), and records every call in order. Failures are injected per operation
and path, so a test can make the third write fail and look at what was left behind:

    fake = FakeConnection(files={"/srv/model.py": b"x = 1\\n"})
    fake.script(r"^cat -- ", stdout=b"")               # e.g. no journal records yet
    fake.fail("write_file", "/srv/model.py", OSError("disk full"))
    ...
    assert [c.op for c in fake.calls] == ["stat", "run", "write_file", ...]

The real transports (`remote/local.py`, `remote/ssh.py` against a real sshd) keep their own tests;
this one stands in only where the question is sequencing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.inventory import Host
from orchestrator.remote.base import Completed, FileStat, Reconnection

__all__ = ["Call", "FakeConnection", "Reply", "UnscriptedCommand"]

Respond = Callable[["FakeConnection", str], "Reply | Completed"]


class UnscriptedCommand(AssertionError):
    """A strict fake was sent a command no rule of its script matches."""


@dataclass(frozen=True)
class Call:
    """One call on the connection: `op` is the method ("run", "write_file", ...), `target` the
    command or the path, `data` the bytes written (write_file, put_file) or sent as input (run)."""

    op: str
    target: str
    data: bytes | None = None


@dataclass(frozen=True)
class Reply:
    """What a scripted command prints and how it exits."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_status: int = 0


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    respond: Respond
    times: int | None  # answers left; None: every time


@dataclass
class _File:
    data: bytes
    mode: int = 0o644
    mtime: float = 0.0
    uid: int = 1000
    gid: int = 1000


@dataclass
class _Failure:
    op: str
    path: str
    error: BaseException
    times: int | None


class FakeConnection:
    """The `Connection` protocol over in-memory files and a scripted command table."""

    def __init__(self, host: Host | None = None, *, files: Mapping[str, bytes] | None = None,
                 home: str = "/home/orch", strict: bool = False):
        self.host = host or Host(name="fake", transport="local", workdir=f"{home}/.orch")
        self.home = home
        self.strict = strict
        self.calls: list[Call] = []
        self.reopened: list[Reconnection] = []  # what `reconnections` answers; a test may add to it
        self.closed = False
        self._files = {path: _File(data) for path, data in (files or {}).items()}
        self._rules: list[_Rule] = []
        self._failures: list[_Failure] = []
        self._clock = 0.0

    # -- arranging -------------------------------------------------------------------------

    def script(self, pattern: str, *, stdout: bytes = b"", stderr: bytes = b"", exit_status: int = 0,
               respond: Respond | None = None, times: int | None = None) -> None:
        """Answer commands matching the regex `pattern` (searched anywhere in the command) with
        this output and status, or with what `respond(fake, command)` returns (it may change the
        fake's files, as the real command would); `times`: for that many commands only."""
        fixed = Reply(stdout, stderr, exit_status)
        self._rules.insert(0, _Rule(re.compile(pattern), respond or (lambda _fake, _command: fixed), times))

    def fail(self, op: str, path: str, error: BaseException, *, times: int | None = 1) -> None:
        """Make `op` ("read_file", "write_file", "stat", "put_file", "put_tree") on `path` raise
        `error` (`times` times; None: always). The failed call is still recorded."""
        self._failures.append(_Failure(op, path, error, times))

    def set_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Put a file on the fake host without recording a call (the host's state before the test)."""
        self._files[path] = _File(data, mode, self._tick())

    # -- looking -----------------------------------------------------------------------------

    @property
    def files(self) -> dict[str, bytes]:
        """Every file on the fake host now, by path."""
        return {path: f.data for path, f in self._files.items()}

    def mode(self, path: str) -> int:
        return self._files[path].mode

    @property
    def commands(self) -> list[str]:
        """The commands run, in order."""
        return [c.target for c in self.calls if c.op == "run"]

    def ops(self, *ops: str) -> list[tuple[str, str]]:
        """(op, target) of every call, or of the calls of these ops only."""
        return [(c.op, c.target) for c in self.calls if not ops or c.op in ops]

    # -- the protocol ------------------------------------------------------------------------

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        return tuple(self.reopened)

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        self.calls.append(Call("run", command, input))
        for rule in self._rules:
            if rule.times != 0 and rule.pattern.search(command):
                if rule.times is not None:
                    rule.times -= 1
                answer = rule.respond(self, command)
                if isinstance(answer, Completed):
                    return answer
                return Completed(command, answer.exit_status, answer.stdout, answer.stderr)
        if self.strict:
            raise UnscriptedCommand(f"no rule of the script matches: {command}")
        return Completed(command, 0, b"", b"")

    async def read_file(self, path: str) -> bytes:
        self._record("read_file", path)
        if path not in self._files:
            raise FileNotFoundError(path)
        return self._files[path].data

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        self._record("write_file", path, data)
        kept = self._files.get(path)
        self._files[path] = _File(data, mode if mode is not None else kept.mode if kept else 0o644, self._tick())

    async def stat(self, path: str) -> FileStat | None:
        self._record("stat", path)
        found = self._files.get(path)
        if found is None:
            return None
        return FileStat(len(found.data), found.mtime, found.mode, found.uid, found.gid)

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        self._record("put_tree", remote_dir)
        for source in sorted(local_dir.rglob("*")):
            if source.is_file() and "__pycache__" not in source.parts and source.suffix != ".pyc":
                relative = source.relative_to(local_dir).as_posix()
                self._files[f"{remote_dir.rstrip('/')}/{relative}"] = _File(source.read_bytes(), mtime=self._tick())

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        data = local.read_bytes()
        self._record("put_file", path, data[offset:])
        kept = self._files[path].data[:offset] if path in self._files else b"\0" * offset
        self._files[path] = _File(kept.ljust(offset, b"\0") + data[offset:], mtime=self._tick())
        if advance is not None:
            advance(len(data) - offset)

    async def forward(self, remote_port: int) -> tuple[str, int]:
        self.calls.append(Call("forward", str(remote_port)))
        return ("127.0.0.1", remote_port)

    async def close(self) -> None:
        self.calls.append(Call("close", ""))
        self.closed = True

    # -- inside ------------------------------------------------------------------------------

    def _record(self, op: str, path: str, data: bytes | None = None) -> None:
        self.calls.append(Call(op, path, data))
        for failure in self._failures:
            if failure.op == op and failure.path == path and failure.times != 0:
                if failure.times is not None:
                    failure.times -= 1
                raise failure.error

    def _tick(self) -> float:
        """A clock that moves on each change, so mtimes order the writes."""
        self._clock += 1.0
        return self._clock

