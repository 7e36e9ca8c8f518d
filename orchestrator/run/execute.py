"""The one place a run starts and ends: its row opened with an Attempt per node, its stage list
run (`lifecycle.py`) and its cleanup (the same list backwards, uncancelled) in `finally`.

    per host:  connect -> lock -> recover leftovers -> install rehearsal   (host/lifecycle.py)
    per run:   check flags -> check host -> push checkpoints -> preflight -> patches (every anchor
               checked, every patched .py compiled by the host's Python; journal first) -> server
               (launch, wait ready) -> workload; then backwards: stop, read the log once, record ->
               revert patches (a run on the server another run of its key left up: patches adopted
               -> server joined -> workload, `serving.py`)
    per host:  unlock

The sweep around the runs (hosts, queue, GPU slots) is `sweep.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
from typing import TYPE_CHECKING, Any

from . import launch as launches, lifecycle, multinode, rendercontext, serving
from .attempt import Attempt, Reporter, hiding
from .bringup import PORT_IN_USE as PORT_IN_USE  # named as execute.* too
from .dryrun import dry_run_nodes as dry_run_nodes, dry_run_one as dry_run_one
from .going import Going, Tally
from .outcome import Outcome as Outcome
from .preparing import prepare_patches as prepare_patches
from .rendercontext import run_context as run_context
from orchestrator.core import render
from orchestrator import engines
from orchestrator.errors import OrchError
from orchestrator.remote.group import uncancelled
from orchestrator.remote.reconnecting import reconnections
from orchestrator.core.secrets import hide, mask_env
from orchestrator.host.session import HostSession
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.core.clock import new_uid

if TYPE_CHECKING:  # the ORM is imported where a run is written: a dry run does without it
    from orchestrator.store.database import Store


def controller() -> str:
    """This process as runs record it (`Run.controller`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _attempt(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter,
             reuse: serving.Serving | None, nodes: multinode.Nodes | None = None) -> Attempt:
    """The run's row recorded as started, and what its stages read. A run that uses another run's
    server (`reuse`) records that server's launch as its command. A run over several hosts (`nodes`)
    is rank 0's, with an Attempt per other node (`_add_nodes`)."""
    host = session.host
    uid = new_uid(plan.variant)
    context = rendercontext.node_context(spec, plan, host, uid, nodes, 0)
    script = reuse.launcher.launch.command if reuse is not None else render.launch_script(spec.template, context)
    launch = launches.of(context, script)
    hidden = launch.secrets
    store.keep_secret(hidden)  # every row this run writes, errors and debug lines included
    from orchestrator.store.database import Run  # the ORM only where a run is written

    run = Run(
        uid=uid, experiment=spec.name, variant=plan.variant, host=launch.host, repeat=plan.repeat,
        spec_path=str(spec.path), spec=spec.raw, params={**launch.params, **_workload_params(spec, plan)},
        env=mask_env(launch.env, launch.secret_names), command=hide(launch.command, hidden), controller=controller(),
        plan_key=plan.key, fingerprint=plan.fingerprint or None,  # what --resume matches (plankey)
        server_run_id=reuse.launcher.run.id if reuse is not None else None,
    )
    store.add(run)
    if plan.fingerprint_parts:  # what a later `--resume` compares to say what changed (plankey.changes)
        store.event(run, "fingerprint", json.dumps(plan.fingerprint_parts, sort_keys=True, separators=(",", ":")))
    attempt = Attempt(spec, plan, engines.get(spec.engine), session, store, run, hiding(reporter, hidden), context,
                      launch, f"{plan.variant}@{launch.host} #{run.id}", hidden)  # the id: runs share hosts
    if nodes is not None:
        _add_nodes(attempt, nodes)
    return attempt


def _add_nodes(attempt: Attempt, nodes: multinode.Nodes) -> None:
    """An Attempt of the run for each other node, its own script rendered and recorded."""
    spec, store, run = attempt.spec, attempt.store, attempt.run
    for rank, other in enumerate(nodes.peers, 1):
        context = rendercontext.node_context(spec, attempt.plan, other.host, run.uid, nodes, rank)
        launch = launches.of(context, render.launch_script(spec.template, context))
        store.event(run, "node-script", f"node {rank} on {launch.host}:\n{hide(launch.command, attempt.secrets)}")
        store.save_log(run, b"", node=rank, host=launch.host)  # its log once stopped; names its host now (recovery)
        attempt.peers.append(multinode.peer(attempt, other, context, launch))
    store.event(run, "nodes", multinode.described(attempt.session, nodes))


def _workload_params(spec: Spec, plan: RunPlan) -> dict[str, Any]:
    """The workload fields the plan sets over the experiment's, as `workload.NAME` params: what tells
    its run apart from the others of one server in `orch diff` and the summary."""
    load = plan.workload or spec.workload
    return {f"workload.{k}": v for k, v in dataclasses.asdict(load).items() if getattr(spec.workload, k) != v}


async def _never() -> bool:
    return False


async def run_one(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter,
                  kept: serving.Kept | None = None, keep: serving.Keep = _never,
                  nodes: multinode.Nodes | None = None) -> Outcome:
    """One run: its own server brought up, or the one `kept` holds (server reuse); its workload;
    then, when `keep()` says another plan of its server key is waiting, the server is left up in
    `kept` (its log read so far), else stopped and the patches reverted. With `nodes`, the run spans
    those hosts too, rank 0 on `session`'s (`multinode.py`; no reuse)."""
    reuse = kept.take() if kept is not None else None
    attempt = _attempt(spec, plan, session, store, reporter, reuse, nodes)
    run = attempt.run
    attempt.known(run=run.id, gpus=attempt.gpus, engine=spec.engine, plan=plan.key)  # its live table row
    attempt.say(f"run {run.id} ({run.uid}) started")
    going = Going(attempt, Tally(run, len(reconnections(session.conn))), reuse, kept, keep)
    try:
        await lifecycle.work(going)
    except OrchError as exc:
        going.tally.failed(attempt, exc)
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        going.tally.cancelled(exc)  # one run stopped alone, or the sweep: the cancel goes on up
        raise
    finally:
        await uncancelled(lifecycle.clean_up(going))  # a second signal never cuts a stop or a revert short
    return going.tally.outcome(attempt)
