"""A node's `Launch`, the typed record the stages read: its host, node, port, GPUs, copy of the
packages and command read once from the render context and the script rendered from it, and the
engine's reading of that command kept through a relaunch on another port."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import ROOT
from orchestrator.core import render, spec as specs
from orchestrator.core.inventory import Host
from orchestrator.run import launch as launches, multinode, rendercontext
from orchestrator.run.attempt import Attempt
from orchestrator.run.slots import Lease

EXPERIMENT = ROOT / "experiments" / "vllm_eagle.yaml"
HOSTS = [Host(name=f"h{i}", address=f"10.0.0.{i + 1}", gpus=4, python="/venv/bin/python", rehearsal="0.33.0")
         for i in range(2)]


def _plan(**params: object) -> tuple[specs.Spec, specs.RunPlan]:
    spec = specs.load(EXPERIMENT)
    plan = next(p for p in specs.expand(spec) if p.variant == "eagle3")
    return spec, dataclasses.replace(plan, params={**plan.params, **params})


def test_a_node_of_a_run_over_two_hosts_reads_its_host_rank_and_command():
    spec, plan = _plan(tp_size=2, port=30123)
    # Nodes.context reads the peers' count only: a placeholder stands for the other node's session
    nodes = multinode.Nodes((object(),), "10.0.0.1", 29500)  # type: ignore[arg-type]
    context = rendercontext.node_context(spec, plan, HOSTS[1], "u1", nodes, 1)
    script = render.launch_script(spec.template, context)
    launch = launches.of(context, script)
    assert (launch.host, launch.node, launch.nodes) == ("h1", 1, 2)
    assert (launch.port, launch.tp_size, launch.run_dir) == (30123, 2, f"{HOSTS[1].workdir}/runs/u1")
    assert launch.command == script and "--node-rank 1" in launch.command
    assert launch.asked == {} and not launch.isolated


def test_a_run_on_one_host_is_node_0_of_1_and_an_isolated_slot_names_its_own_copy():
    spec, plan = _plan()
    alone = launches.of(rendercontext.node_context(spec, plan, HOSTS[0], "u2", None, 0), "")
    assert (alone.host, alone.node, alone.nodes, alone.site) == ("h0", 0, 1, None)
    slot = Lease(1, (2, 3), 30001, plan.patches, alone=False, isolated=True).plan(plan)
    launch = launches.of(rendercontext.run_context(spec, slot, HOSTS[0], "u3"), "")
    site = f"{HOSTS[0].workdir}/runs/u3/site"
    assert launch.isolated and launch.site == site and launch.env["PYTHONPATH"].split(":")[0] == site
    assert (launch.port, launch.pinned, launch.gpus) == (30001, "2,3", "2,3")


def test_the_engines_reading_is_kept_through_a_relaunch_on_another_port():
    spec, plan = _plan()
    context = rendercontext.run_context(spec, plan, HOSTS[0], "u4")
    attempt = Attempt(spec, plan, None, None, None, None, None, context,  # type: ignore[arg-type]
                      launches.of(context, render.launch_script(spec.template, context)), "eagle3@h0 #1", {})
    asked = {"port": plan.params.get("port", specs.DEFAULT_PORT), "model": "m"}
    attempt.read(asked)
    moved = rendercontext.on_port(attempt.context, 31999)
    attempt.rendered(moved, render.launch_script(spec.template, moved))
    assert attempt.launch.port == 31999 and "31999" in attempt.launch.command
    assert attempt.launch.asked == asked  # read once, before the launch: what the effective params compare with
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.launch.port = 1  # type: ignore[misc]
