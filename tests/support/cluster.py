"""The Slurm cluster of a test module (tests/slurm.py) and the demo experiment on it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import slurm
from conftest import ROOT, free_port

# what each patch of the `fixed` variant inserts: absent once it is reverted
INSERTED = {"srt/models/llama_eagle3.py": "_eagle3_debug_printed",
            "srt/models/kimi_k25.py": "def set_eagle3_layers_to_capture"}


def cluster_fixture(nodes: int = 1) -> Any:
    """A module's cluster of `nodes` nodes; skips with the reason where Slurm cannot be had, and
    fails as root with apt (CI), where `make test` installs it."""
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.Cluster]:
        reason = slurm.missing()
        if reason:
            if os.environ.get("CI") or (os.geteuid() == 0 and shutil.which("apt-get")):
                pytest.fail(f"{reason}; as root with apt the Slurm tests must run: `make slurm-deps`")
            pytest.skip(reason)
        running = slurm.start(tmp_path_factory.mktemp("slurm") / "cluster", nodes)
        before = {k: os.environ.get(k) for k in running.environ()}
        os.environ.update(running.environ())  # the orch commands the cases start find the cluster through it
        yield running
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        running.stop()
    return cluster


def slurm_project(project: Path, cluster: slurm.Cluster, requests: int, nodes: int = 1) -> Path:
    """The inventory's one host is the cluster (this machine its login node); the demo experiment's
    `fixed` variant runs there on a free port with `requests` requests (over `nodes` nodes: one
    job of them all, not exclusive)."""
    options = "    options: [--exclusive]\n" if nodes == 1 else ""
    (project / "inventory.yaml").write_text(
        "hosts:\n  cluster:\n    transport: slurm\n    login: local\n"
        f"    partition: {cluster.partition}\n    gpus_per_node: {slurm.GPUS}\n    time: \"10:00\"\n"
        f"{options}    workdir: {project / 'shared'}\n    rehearsal: true\n")
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("hosts: [local]", "hosts: [cluster]")
    text = text.replace("requests: 16", f"requests: {requests}").replace("port: 30000", f"port: {free_port()}")
    if nodes > 1:
        text = text.replace("ready_timeout: 120", f"ready_timeout: 120\nnodes: {nodes}")
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text(text)
    return spec
