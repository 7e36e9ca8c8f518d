"""One root error with a subclass per stage; each carries the exit code the CLI returns."""

from __future__ import annotations

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


class HostError(OrchError):
    """A host could not be reached, refused us, or is held by another run."""

    exit_code = EXIT_HOST


class ServerError(OrchError):
    """The server did not start, died, or did not become ready."""

    exit_code = EXIT_RUN_FAILED


class WorkloadError(OrchError):
    """Requests to the server failed."""

    exit_code = EXIT_RUN_FAILED


class StoreError(OrchError):
    """The experiment database cannot be opened or a run is not found."""

    exit_code = EXIT_BAD_INPUT
