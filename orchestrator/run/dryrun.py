"""A dry run: everything rendered and checked, nothing changed on any host."""

from __future__ import annotations

from orchestrator import engines
from orchestrator.core import patching, render
from orchestrator.core.secrets import redact
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.errors import OrchError
from orchestrator.host import patchcheck
from orchestrator.host.session import HostSession
from orchestrator.store.reading import FAILED, SUCCEEDED
from . import driftcheck, launch as launches, multinode, preflight, preparing, rendercontext, stages, tool
from .attempt import Reporter
from .outcome import Outcome


async def dry_run_one(spec: Spec, plan: RunPlan, session: HostSession, reporter: Reporter,
                      nodes: multinode.Nodes | None = None) -> Outcome:
    """Render and check everything, change nothing: the script, the flag check and the preflight
    (both only read the host), and each patch as a diff. An error is the outcome (exit 2), as in a run.
    With `nodes` (a plan over several hosts, `dry_run_nodes`), every other node's script is rendered
    and checked on its host too, with its patches; the preflight and the workload are rank 0's."""
    uid = "dry-run"
    label = f"{plan.variant}@{session.host.name}"
    engine = engines.get(spec.engine)
    launch = _dry_script(spec, plan, session, reporter, label, nodes, 0)
    try:
        await engine.check_launch(session, launch.command, spec.template, reporter.message, label)
        load = plan.workload or spec.workload
        if load.tool is not None:
            found = await tool.command(engine, session, spec, load, launch.run_dir, launch.port)
            reporter.message(label, f"workload: python -m {found.module} {' '.join(found.argv)}")
        await _dry_preflight(spec, plan, session, reporter, launch, label)
        await _dry_patches(session, plan, reporter, label, spec.accept_drift)
        for rank, other in enumerate(nodes.peers if nodes is not None else (), 1):
            node_label = f"{plan.variant}@{other.host.name}"
            node = _dry_script(spec, plan, other, reporter, node_label, nodes, rank)
            await engine.check_launch(other, node.command, spec.template, reporter.message, node_label)
            await _dry_patches(other, plan, reporter, node_label, spec.accept_drift)
    except OrchError as exc:
        return Outcome(None, uid, plan.variant, session.host.name, FAILED, error=str(exc), exit_code=exc.exit_code)
    return Outcome(None, uid, plan.variant, session.host.name, SUCCEEDED)


async def dry_run_nodes(spec: Spec, plan: RunPlan, sessions: list[HostSession], reporter: Reporter) -> Outcome:
    """The dry run of a plan over several hosts, on the hosts its gang chose (rank 0 first): the
    same engine version on all of them, the rendezvous port a run would choose now (free on rank 0,
    not taken), then every node's part (`dry_run_one`). Nothing changes on any host."""
    lead = sessions[0]
    if len(sessions) < plan.nodes:  # one Slurm entry stands for its job's nodes, which a dry run never asks for
        reporter.message(f"{plan.variant}@{lead.host.name}", f"nodes={plan.nodes} on one Slurm job: a dry run checks "
                         "rank 0's part only")
        return await dry_run_one(spec, plan, lead, reporter)
    try:
        nodes = await multinode.meeting(sessions, engines.get(spec.engine), multinode.address(lead.host))
    except OrchError as exc:
        return Outcome(None, "dry-run", plan.variant, lead.host.name, FAILED, error=str(exc), exit_code=exc.exit_code)
    reporter.message(f"{plan.variant}@{lead.host.name}", f"{multinode.described(lead, nodes)} (free now; a dry run "
                     "takes nothing)")
    return await dry_run_one(spec, plan, lead, reporter, nodes)


def _dry_script(spec: Spec, plan: RunPlan, session: HostSession, reporter: Reporter, label: str,
                nodes: multinode.Nodes | None, rank: int) -> launches.Launch:
    """Node `rank`'s launch, its script shown (secrets hidden)."""
    context = rendercontext.node_context(spec, plan, session.host, "dry-run", nodes, rank)
    launch = launches.of(context, render.launch_script(spec.template, context))
    which = f"node {launch.node} of {launch.nodes}'s launch script" if nodes is not None else "launch script"
    reporter.message(label, f"{which}:\n" + redact(launch.command, launch.env, launch.secret_names))
    return launch


async def _dry_patches(session: HostSession, plan: RunPlan, reporter: Reporter, label: str, accept_drift: bool) -> None:
    """Each patch as a diff against the host's own files, every patched file compiled there; a
    file changed by hand since orch left it stops it as it stops a run (`driftcheck.py`)."""
    await driftcheck.found(session, plan, accept_drift, lambda text: reporter.message(label, text))
    prepared = await preparing.prepare_patches(session, plan)
    for patch, file, before, after in prepared:
        diff = patching.unified(before.decode(), after.decode(), file.lstrip("/"))
        reporter.message(label, f"patch '{patch.name}' -> {file}:\n{diff}")
    await patchcheck.ensure_compiles(session.conn, session.host, prepared)


async def _dry_preflight(spec: Spec, plan: RunPlan, session: HostSession, reporter: Reporter,
                         launch: launches.Launch, label: str) -> None:
    """The run's preflight without its record: findings reported, errors raised."""
    if not spec.preflight:
        reporter.message(label, "preflight skipped (--no-preflight)")
        return
    # the checkpoints are not pushed: read from their local (transformed) copies, as `orch check` does
    overlay = await stages.local_checkpoints(spec, launch.checkpoints)
    found = await engines.get(spec.engine).preflight(session, launch.command, launch.env, plan.patches, overlay, plan.allow)
    for f in found:
        reporter.message(label, preflight.described(f))
    preflight.stop_on_errors(found, plan.allow, label)
