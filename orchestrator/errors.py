"""Every error orch raises, under one root (`OrchError`); each carries the exit code the CLI
returns, and the evidence behind it as typed attributes (a server's diagnosis, a failed remote
command) instead of attributes set after the fact."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the annotation: the records sit on the bottom floor, below every error
    from orchestrator.records import Diagnosis

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_HOST = 3
EXIT_INTERRUPTED = 130


class OrchError(Exception):
    """An error the user can act on: the message says what, where and what to do."""

    exit_code = EXIT_RUN_FAILED

    def __init__(self, message: str, *, evidence: tuple[str, ...] = ()):
        super().__init__(message)
        self.evidence = evidence


class SpecError(OrchError):
    """The experiment file, inventory, template or a command-line value is wrong."""

    exit_code = EXIT_BAD_INPUT


class PatchError(OrchError):
    """A patch cannot be applied as written (anchor missing or ambiguous, target not found)."""

    exit_code = EXIT_BAD_INPUT


class PatchCompileError(PatchError):
    """A patch leaves a Python file that no longer compiles (exit 2, nothing changed)."""


class PreflightError(SpecError):
    """The preflight found errors: the run would fail, or silently measure nothing."""


class HostError(OrchError):
    """A host could not be reached, refused us, or is held by another run."""

    exit_code = EXIT_HOST


class HostBusy(HostError):
    """Another command holds the host's lock (a live owner, or one that keeps taking it first)."""


class Unreachable(HostError):
    """The host did not answer or refused the connection: worth trying again later (not a key or
    login problem, which waiting does not fix)."""


class LinkLost(Unreachable):
    """An open connection dropped. `started`: the operation may have begun on the host before the
    link went, so only an idempotent one may be sent again."""

    def __init__(self, message: str, *, started: bool):
        super().__init__(message)
        self.started = started


class RemoteCommandError(HostError):
    """A command on a host failed: which command, its exit status and the end of what it printed
    on stderr, kept for the message and for whoever handles the error."""

    def __init__(self, message: str, *, command: str, exit_status: int, stderr: str,
                 evidence: tuple[str, ...] = ()):
        super().__init__(message, evidence=evidence)
        self.command = command
        self.exit_status = exit_status
        self.stderr_tail = stderr_tail(stderr)


def stderr_tail(stderr: str, lines: int = 5) -> str:
    """The last lines a failed command printed: what a message quotes of it."""
    return "\n".join(stderr.strip().splitlines()[-lines:])


class ServerError(OrchError):
    """The server did not start, died, or did not become ready; `diagnosis` is what its log says
    happened, when the log matched a known failure."""

    exit_code = EXIT_RUN_FAILED

    def __init__(self, message: str, *, evidence: tuple[str, ...] = (), diagnosis: Diagnosis | None = None):
        super().__init__(message, evidence=evidence)
        self.diagnosis = diagnosis


class WorkloadError(OrchError):
    """Requests to the server failed."""

    exit_code = EXIT_RUN_FAILED


class HTTPError(OrchError):
    """An HTTP request to the server got no answer (refused, cut, timed out, not HTTP), or a non-200 one."""

    exit_code = EXIT_RUN_FAILED


class StoreError(OrchError):
    """The experiment database cannot be opened or a run is not found."""

    exit_code = EXIT_BAD_INPUT
