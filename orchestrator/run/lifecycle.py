"""A run as an ordered list of stages over its nodes' Attempts (rank 0's and `attempt.peers`; a run
on one host has no peers, and the same list). Each stage's `do` runs in order while the other
nodes are watched (`multinode.watched`); the cleanup is the same list run backwards: the `undo` of
each stage that holds something, whatever happened, then the run's row is closed.

    launching a server:  check flags -> check host -> push checkpoints -> preflight
                         -> patches (undo: revert every node's) -> server (undo: stop every node's,
                         read the log once, record) -> workload
    joining one:         patches (the launcher's, adopted; undo: revert them when the server stops)
                         -> server (joined; undo: stop or keep it up, record) -> workload

The steps are `bringup.py`'s, their undos `teardown.py`'s.
"""

from __future__ import annotations

from orchestrator.store.reading import SUCCEEDED
from . import bringup, multinode, teardown
from .attempt import unfailing
from .going import Going, Step

CHECK_FLAGS = Step("check flags", bringup.check_flags)
CHECK_HOST = Step("check host", bringup.check_host)
PUSH = Step("push checkpoints", bringup.push)
PREFLIGHT = Step("preflight", bringup.check_checkpoints)
# the stop and the revert run whatever stage the run reached: a launch or an apply cut short leaves
# what only they find (a server's pid file, journal records under the run's uid)
PATCHES = Step("patches", bringup.patch, undo=teardown.revert, always=True)
SERVER = Step("server", bringup.launch, undo=teardown.stop_and_record, always=True)
WORKLOAD = Step("workload", bringup.send_workload)

LAUNCHING = (CHECK_FLAGS, CHECK_HOST, PUSH, PREFLIGHT, PATCHES, SERVER, WORKLOAD)
JOINING = (  # a server another run of its key left up (`serving.py`): nothing checked, pushed or launched
    Step("patches", bringup.adopt_patches, undo=teardown.revert, always=True),
    Step("server", bringup.join, undo=teardown.stop_and_record, always=True),
    WORKLOAD,
)


def stages_of(going: Going) -> tuple[Step, ...]:
    return JOINING if going.reuse is not None else LAUNCHING


async def work(going: Going) -> None:
    """Each stage's `do`, in order; the tally says the run succeeded (unless the measures fail an
    expectation, after the stop). Another node failing cuts the run short at once."""
    async with multinode.watched(going.attempt):
        for step in stages_of(going):
            going.entered.append(step)
            await step.do(going)
    going.tally.workload_from = None  # the workload is done: a later drop cuts none of its requests
    going.tally.status, going.tally.exit_code = SUCCEEDED, 0


async def clean_up(going: Going) -> None:
    """The stage list backwards: the undo of each stage entered (or of one that undoes whatever the
    run reached), then the run's row closed. Run uncancelled by `run_one`: a second signal never
    cuts a stop or a revert short."""
    going.attempt.reporter = unfailing(going.attempt.reporter)  # a closed terminal or pipe loses lines, not the cleanup
    for step in reversed(stages_of(going)):
        if step.undo is not None and (step.always or step in going.entered):
            await step.undo(going)
    teardown.close_row(going)
