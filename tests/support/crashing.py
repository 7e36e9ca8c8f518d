"""orch's controller run to be SIGKILLed at a chosen moment: right after the nth write of one kind
of file (a patch's backup, its journal record, a patched source), as a crash or a power cut
would stop it. It runs in the child process `support.cli.start_orch(crash=...)` starts."""

from __future__ import annotations

import os
import re
import signal
import sys

FILE_KINDS = (("backup", re.compile(r"/journal/[^/]+/\d+\.orig$")), ("record", re.compile(r"/journal/[^/]+/\d+\.json$")),
              ("source", re.compile(r"/sglang/.*\.py$")))


def controller_main(point: str, nth: int, argv: list[str]) -> None:
    """Run `orch argv`, SIGKILLing this process right after the `nth` write of a `point` file."""
    from orchestrator import cli
    from orchestrator.remote.local import LocalConnection
    from orchestrator.remote.ssh import SSHConnection

    seen: dict[str, int] = {}
    for transport in (LocalConnection, SSHConnection):
        def wrap(original):
            async def write_file(self, path, data, mode=None):
                await original(self, path, data, mode)
                kind = next((k for k, pattern in FILE_KINDS if pattern.search(path)), "other")
                seen[kind] = seen.get(kind, 0) + 1
                if kind == point and seen[kind] == nth:
                    os.kill(os.getpid(), signal.SIGKILL)
            return write_file
        transport.write_file = wrap(transport.write_file)
    sys.argv = ["orch", *argv]
    cli.main()
