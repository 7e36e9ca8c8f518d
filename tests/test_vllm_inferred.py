"""A `--speculative-config` without a method: vLLM infers one from the draft's path, each release
its own way, and the preflight reads the host's own rule instead of calling the method unknown.
0.10.1.1 takes `eagle3-` in the path for method eagle (the EAGLE-3 draft then fails at start-up);
0.32.0 and 0.33.0 take `eagle3` for eagle3. The real sources and the stand-in's agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import free_port
from orchestrator.engines.vllm import inferred, source
from orchestrator.rehearsal import vllm as rehearsal
from support.cli import orch
from vllm_wheels import source_tree

DRAFT = "/ck/eagle3-draft"


def spec_sources(folder: Path) -> dict[str, str]:
    return {p: (folder / p).read_text() for p in source.SPEC_FILES if (folder / p).exists()}


@pytest.mark.parametrize("release, method", [("0.10.1.1", "eagle"), ("0.33.0", "eagle3")])
def test_the_real_releases_infer_their_own_method_from_the_path(release, method):
    found = inferred.rules(spec_sources(source_tree(release) / "vllm"))
    assert inferred.method_for(found, DRAFT) == method, found
    assert inferred.method_for(found, "/ck/EAGLE-LLaMA3-8B") == "eagle"
    assert inferred.method_for(found, "/ck/target") is None


@pytest.mark.realvllm
def test_the_real_0_32_0_source_infers_eagle3():
    import realvllm

    found = inferred.rules(spec_sources(realvllm.package()))
    assert inferred.method_for(found, DRAFT) == "eagle3" and found[0] == (("eagle-",), "eagle")


@pytest.mark.parametrize("release", ["0.10.1.1", "0.33.0"])
def test_the_stand_in_carries_the_same_rules_as_its_release(release, tmp_path):
    tree = rehearsal.assemble(release, tmp_path)
    real = inferred.rules(spec_sources(source_tree(release) / "vllm"))
    assert inferred.rules(spec_sources(tree))[:len(real[:2])] == real[:2]  # eagle and eagle3, in order


NO_METHOD = """#!/usr/bin/env bash
set -euo pipefail
export PYTHONPATH={{ host.rehearsal | qpath }}${PYTHONPATH:+:$PYTHONPATH}
export ORCH_REHEARSAL_GPUS=8
exec {{ host.python | qpath }} -m vllm.entrypoints.cli.main serve {{ model_path | q }} \\
  --speculative-config '{"model": "{{ draft_model_path }}", "num_speculative_tokens": 3}' \\
  --port {{ port | q }}
"""

EXPERIMENT = """name: no_method
engine: vllm
hosts: [local]
template: ../templates/no_method.sh.j2
params:
  model_path: "{{ host.rehearsal }}/checkpoints/llama-target"
  draft_model_path: "{{ host.rehearsal }}/checkpoints/eagle3-draft"
  port: @PORT@
variants:
  base: {}
workload: {requests: 2, max_new_tokens: 8, concurrency: 1}
ready_timeout: 60
"""


@pytest.mark.parametrize("release, method, error", [("0.10.1.1", "eagle", True), ("0.33.0", "eagle3", False)])
def test_check_reads_the_method_the_host_infers(project, release, method, error):
    (project / "templates" / "no_method.sh.j2").write_text(NO_METHOD)
    spec = project / "experiments" / "no_method.yaml"
    spec.write_text(EXPERIMENT.replace("@PORT@", str(free_port())))
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    done = orch(project, "check", str(spec), "--json")
    found = {f["code"]: f for g in json.loads(done.stdout) for f in g["findings"]}
    assert "method-unknown" not in found, found
    assert found["method-inferred"]["severity"] == "warning" and f"'{method}'" in found["method-inferred"]["what"]
    assert ("method-eagle-with-eagle3-draft" in found) is error, found
    if release == "0.33.0":  # it serves: the stand-in infers as its release does
        ran = orch(project, "run", str(spec))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        record = json.loads(orch(project, "show", "last", "--json").stdout)
        assert record["effective_params"]["speculative_config"]["method"] == "eagle3"
