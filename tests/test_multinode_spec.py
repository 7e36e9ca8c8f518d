"""`nodes:` in an experiment or variant, read and checked before any host (no hosts here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.core import spec as specs
from orchestrator.core.inventory import Host
from orchestrator.errors import SpecError
from orchestrator.run import gang, multinode


def experiment(project: Path, *lines: str, variant: str = "") -> Path:
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text() + "".join(f"{line}\n" for line in lines)
    if variant:
        text = text.replace("  story:\n", f"  story:\n    {variant}\n", 1)
    path = project / "experiments" / "eagle_debug.yaml"
    path.write_text(text)
    return path


def hosts(*names: str, gpus: int = 8) -> list[Host]:
    return [Host(name=n, transport="ssh", address=f"10.0.0.{i}", gpus=gpus) for i, n in enumerate(names, 1)]


def test_nodes_default_to_one_and_a_variant_sets_its_own(project):
    plans = specs.expand(specs.load(experiment(project, "nodes: 2", variant="nodes: 4")))
    assert {p.variant: p.nodes for p in plans} == {"story": 4, "fixed": 2}
    assert {p.nodes for p in specs.expand(specs.load(experiment(project)))} == {1}


@pytest.mark.parametrize("value", ["0", "1.5", "two", "true"])
def test_nodes_must_be_a_whole_number_with_its_line(project, value):
    path = experiment(project, f"nodes: {value}")
    line = len(path.read_text().splitlines())
    with pytest.raises(SpecError) as caught:
        specs.load(path)
    assert str(caught.value).startswith(f"{path}:{line}") and "`nodes` must be a whole number >= 1" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_plan_needing_more_hosts_than_chosen_is_refused_before_any_host(project):
    plans = specs.expand(specs.load(experiment(project, "nodes: 4")))
    with pytest.raises(SpecError, match=r"needs nodes=4 hosts; the chosen hosts that can run its share have 2: a, b"):
        gang.check_fits(plans, hosts("a", "b"))
    gang.check_fits(plans, hosts("a", "b", "c", "d", gpus=2))  # tp_size 8 over 4 nodes: 2 GPUs each
    with pytest.raises(SpecError, match="have 0: none"):
        gang.check_fits(plans, hosts("a", "b", "c", "d", gpus=1))
    with pytest.raises(SpecError, match="tp_size=8 does not split over nodes=3"):
        gang.check_fits(specs.expand(specs.load(experiment(project, "nodes: 3"))), hosts("a", "b", "c"))


def test_tp_size_must_split_over_the_nodes(project):
    (plan, *_) = specs.expand(specs.load(experiment(project, "nodes: 3")))
    with pytest.raises(SpecError, match="tp_size=8 does not split over nodes=3"):
        multinode.gpus_per_node(plan)
    (plan, *_) = specs.expand(specs.load(experiment(project, "nodes: 2")))
    assert multinode.gpus_per_node(plan) == 4


def test_rank_zero_is_reached_at_its_inventory_address_or_loopback():
    assert multinode.address(hosts("a")[0]) == "10.0.0.1"
    assert multinode.address(Host(name="here", transport="local")) == "127.0.0.1"
    nodes = multinode.Nodes((), "10.0.0.1", 29500)
    assert nodes.context(0) == {"node_rank": 0, "nnodes": 1, "dist_init_addr": "10.0.0.1:29500",
                                "dist_init_host": "10.0.0.1", "dist_init_port": 29500}
