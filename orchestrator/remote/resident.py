"""Resident shells: a command over SSH runs on a bash that stays open on its channel, not on a new
exec channel of its own.

Each exec channel makes sshd start the login shell, which reads the user's rc files: pyenv or
conda init there costs 100-600 ms per command on a loaded host, ten times what the command itself
takes. A resident shell pays that once; each command is then a line on its stdin and a framed
answer on its stdout (`shell.resident_setup`), its stdout and stderr kept apart and its exit status
exact. One command at a time per shell; `SSHConnection` keeps the idle ones for the next command.
"""

from __future__ import annotations

import asyncio
import itertools

import asyncssh

from orchestrator.core import shell

START_TIMEOUT = 30.0  # seconds for the login shell (rc files) and the resident bash to answer


class Broken(Exception):
    """The resident shell ended or answered out of frame: it may have run the command."""


class NotStarted(Exception):
    """The resident shell never said it was ready (no bash, a forced command), or its channel had
    closed before the command went out: nothing ran."""


class Resident:
    """One resident bash on its own session channel."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes]):
        self.process = process
        self._tags = itertools.count(1)
        self._ready = False  # the first command goes out with the setup: no round trip waits for the shell

    @classmethod
    async def start(cls, conn: asyncssh.SSHClientConnection) -> Resident:
        """Open the channel and send the setup; the login shell's rc files run meanwhile."""
        process = await conn.create_process(shell.resident_shell(), encoding=None, stdin=asyncssh.PIPE)
        process.stdin.write(shell.resident_setup().encode())
        return cls(process)

    async def _until_ready(self) -> None:
        try:  # whatever the rc files printed comes before the marker and is dropped
            await asyncio.wait_for(self.process.stdout.readuntil((shell.RESIDENT_READY + "\n").encode()),
                                   START_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, BrokenPipeError, asyncssh.Error, OSError) as exc:
            raise NotStarted(f"the shell did not start ({type(exc).__name__})") from None
        self._ready = True

    async def run(self, command: str, input: bytes | None, held: bool) -> tuple[int, bytes, bytes]:
        """(exit status, stdout, stderr) of `command` (an `in_bash` string); Broken when the shell
        ended or its answer is out of frame (it may have run), NotStarted when it surely did not.
        `held`: the shell runs it only after saying it got it (one more round trip), so a link lost
        before then is NotStarted: for a command that must not run twice."""
        tag = f"orch{next(self._tags)}"
        size = -1 if input is None else len(input)
        try:
            self.process.stdin.write(shell.resident_call(tag, command, size, held).encode() + (input or b""))
            if not self._ready:
                await self._until_ready()
            if held:
                if (await self.process.stdout.readuntil(b"\n")).split() != [tag.encode(), b"held"]:
                    raise NotStarted("out of frame")
                self.process.stdin.write(shell.RESIDENT_GO.encode())
        except (asyncio.IncompleteReadError, BrokenPipeError, asyncssh.Error, OSError) as exc:
            if not held:
                raise Broken(f"the shell ended ({type(exc).__name__})") from None
            raise NotStarted(f"the shell's channel closed ({type(exc).__name__})") from None
        try:
            head = (await self.process.stdout.readuntil(b"\n")).split()
            if len(head) != 4 or head[0] != tag.encode() or not all(p.isdigit() for p in head[1:]):
                raise Broken(f"unexpected answer {b' '.join(head)[:80]!r}")
            status, out, err = (int(p) for p in head[1:])
            data = await self.process.stdout.readexactly(out + err)
        except (asyncio.IncompleteReadError, BrokenPipeError, asyncssh.Error, OSError) as exc:
            raise Broken(f"the shell ended ({type(exc).__name__})") from None
        return status, data[:out], data[out:]

    def stop(self) -> None:
        """TERM to the resident bash, which passes it to the command it runs (see `resident_setup`)."""
        try:
            self.process.terminate()
        except (asyncssh.Error, OSError):
            pass

    def close(self) -> None:
        self.process.close()
