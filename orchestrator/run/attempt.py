"""One attempt at a run plan on a host, as every stage of the run receives it: the `Attempt`; the
`Stage`s a run goes through, in order; and the `Reporter` the stages tell the user through
(implemented by `cli/ui.py`: `ui.reporter`).

A stage takes the Attempt, not a bag of (spec, plan, session, store, run, report, context): what it
may read is typed here, and a stage that needs more says so in this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.core.secrets import hide
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.engines.base import Engine
from orchestrator.host import server
from orchestrator.host.push import Progress
from orchestrator.host.session import HostSession
from . import launch as launches
from .launch import Launch

if TYPE_CHECKING:
    from orchestrator.store.database import Run, Store


class Stage(enum.Enum):
    """The stages of a run as it reports them, in the order its stage list (`lifecycle.py`) enters
    them (cleanup stages run whatever happened before)."""

    CHECK_FLAGS = "check flags"
    CHECK_HOST = "check host"  # port and GPUs free
    PUSH = "push checkpoints"
    PREFLIGHT = "preflight"
    PREPARE_PATCHES = "prepare patches"
    APPLY_PATCHES = "apply patches"
    LAUNCH = "launch"
    WAIT_READY = "wait ready"
    WORKLOAD = "workload"
    STOP = "stop"  # cleanup from here on
    READ_LOG = "read log"
    RECORD = "record"
    REVERT = "revert patches"


class Reporter(Protocol):
    """How the stages tell the user what happens (named hooks, no callables with attributes)."""

    def message(self, label: str, text: str) -> None:
        """A progress line for `label` (a run's `variant@host #id`, or a host's name)."""

    def warning(self, label: str, text: str) -> None:
        """Something the user should look at; the work goes on."""

    def transfer(self, label: str) -> Progress:
        """Progress of one transfer of bytes (a checkpoint push): ("total", n), ("advance", n)...,
        then ("end", 0) whatever happened."""

    def stage(self, label: str, stage: Stage) -> None:
        """A run entered `stage`."""

    def known(self, label: str, values: dict[str, Any]) -> None:
        """What is now known of a run: `run` (its id, when it starts), `gpus`, `engine` and `plan`
        (its key); the measures so far (by metric name: `accept_len`, `output_tok_s`...); `status`
        when it ends."""


class Lines:
    """A Reporter made of one (label, text) callable, such as the library face's `report`:
    warnings are lines starting "warning: ", transfers and stages are not shown."""

    def __init__(self, say: Callable[[str, str], None]):
        self._say = say

    def message(self, label: str, text: str) -> None:
        self._say(label, text)

    def warning(self, label: str, text: str) -> None:
        self._say(label, f"warning: {text}")

    def transfer(self, label: str) -> Progress:
        return _unshown

    def stage(self, label: str, stage: Stage) -> None:
        return None

    def known(self, label: str, values: dict[str, Any]) -> None:
        return None


def _unshown(kind: str, amount: int) -> None:
    return None


class Hiding:
    """A Reporter that hides a run's secret values from everything it passes on."""

    def __init__(self, inner: Reporter, secrets: dict[str, str]):
        self._inner = inner
        self._secrets = secrets

    def message(self, label: str, text: str) -> None:
        self._inner.message(label, hide(text, self._secrets))

    def warning(self, label: str, text: str) -> None:
        self._inner.warning(label, hide(text, self._secrets))

    def transfer(self, label: str) -> Progress:
        return self._inner.transfer(hide(label, self._secrets))

    def stage(self, label: str, stage: Stage) -> None:
        self._inner.stage(label, stage)

    def known(self, label: str, values: dict[str, Any]) -> None:
        self._inner.known(label, values)  # ids, GPUs, numbers and a status: no secret in them


class Unfailing:
    """A reporter whose lines may be lost but never stop a cleanup: `orch run | tee` after Ctrl-C
    writes to a closed pipe (which rich's console turns into SystemExit), a hung-up terminal answers EIO."""

    def __init__(self, inner: Reporter):
        self._inner = inner

    def message(self, label: str, text: str) -> None:
        with _lost_if_unwritable():
            self._inner.message(label, text)

    def warning(self, label: str, text: str) -> None:
        with _lost_if_unwritable():
            self._inner.warning(label, text)

    def transfer(self, label: str) -> Progress:
        with _lost_if_unwritable():
            return self._inner.transfer(label)
        return _unshown  # the progress of a transfer nobody can see

    def stage(self, label: str, stage: Stage) -> None:
        with _lost_if_unwritable():
            self._inner.stage(label, stage)

    def known(self, label: str, values: dict[str, Any]) -> None:
        with _lost_if_unwritable():
            self._inner.known(label, values)


def _lost_if_unwritable() -> contextlib.suppress:
    """What a closed pipe or a hung-up terminal raises, swallowed: rich turns a broken pipe into SystemExit, once quiet."""
    return contextlib.suppress(OSError, SystemExit)


def unfailing(reporter: Reporter) -> Reporter:
    return Unfailing(reporter)


def hiding(reporter: Reporter, secrets: dict[str, str]) -> Reporter:
    """`reporter` with the run's secret values hidden; itself when the run has none."""
    return Hiding(reporter, secrets) if secrets else reporter


@dataclass
class Attempt:
    """A run plan being run on a host: what every stage reads, and the run row it records into."""

    spec: Spec
    plan: RunPlan
    engine: Engine
    session: HostSession
    store: Store
    run: Run
    reporter: Reporter  # secrets already hidden
    context: dict[str, Any]  # the render context of the launch script (`rendercontext.py`): what a relaunch renders anew from
    launch: Launch  # the context and the script rendered from it read once (`launch.of`): what the stages read
    label: str  # `variant@host #id`, what its progress lines start with (runs at once on a host differ by id)
    secrets: dict[str, str]  # the run's secret values by name: hidden from all it prints and records
    stage: Stage | None = None
    serving: Serving | None = None  # the server the run uses, once launched or joined (serving.py)
    peers: list[Attempt] = field(default_factory=list)  # rank 0's: the run on each other node, in rank order

    @property
    def node(self) -> int:
        """Its node rank in a run over several hosts (multinode.py); 0 for every other run."""
        return self.launch.node

    def rendered(self, context: dict[str, Any], script: str) -> None:
        """The launch rendered anew (another port): its context, and their reading with the
        engine's reading of the command kept (it was read once, before the launch)."""
        self.context = context
        self.launch = launches.of(context, script, self.launch.asked)

    def read(self, asked: Mapping[str, object]) -> None:
        """The engine's reading of the launch command (`Engine.launch_args`), read once by the flag check."""
        self.launch = dataclasses.replace(self.launch, asked=asked)

    def enter(self, stage: Stage) -> None:
        self.stage = stage
        if self.node == 0:  # a run over several hosts is one row of the live table: rank 0's
            self.reporter.stage(self.label, stage)

    def known(self, **values: Any) -> None:
        self.reporter.known(self.label, values)

    @property
    def gpus(self) -> str:
        """The run's GPUs as a row shows them: the visible devices when pinned, else how many."""
        return self.launch.gpus

    def say(self, text: str) -> None:
        self.reporter.message(self.label, text)

    def warn(self, text: str) -> None:
        self.reporter.warning(self.label, text)

    @property
    def says(self) -> Callable[[str, str], None]:
        """The reporter's message hook, for the host and engine layers (which take a `Say`)."""
        return self.reporter.message


@dataclass(eq=False)
class Serving:
    """A server up on a host, and the runs that used it in turn (the one that launched it first).
    Beside the Attempt, which names it: reuse (serving.py) makes and hands them on."""

    launcher: Attempt  # its journal records hold the originals of the patched files
    srv: server.Server
    base_url: str = ""  # where the runs send their requests (the forward of the launching run)
    log_offset: int = 0  # the log bytes the runs before the current one kept
    read_so_far: bytes = b""  # the log read while waiting for readiness: what there is if the stop fails
    users: list[Run] = field(default_factory=list)

    @property
    def later_users(self) -> list[Run]:
        return self.users[1:]
