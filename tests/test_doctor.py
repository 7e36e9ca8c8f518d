"""`orch doctor` on the rehearsal host: the real command, the rehearsal SGLang of each emulated
release as real processes, a real SQLite file. Each case is a fault the rehearsal really has; the
cause must come from what the probes and the preflight read, and the fix must raise the accept length."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, free_port
from support.cli import orch
from support.specs import small_experiment


def doctor(project: Path, *args: str) -> dict:
    proc = orch(project, "doctor", *args, "--json")
    assert proc.returncode in (0, 1), proc.stderr + proc.stdout
    return json.loads(proc.stdout)


@pytest.fixture
def story(project: Path) -> Path:
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", project / "experiments" / "eagle_debug.yaml")
    return project / "experiments" / "eagle_debug.yaml"


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "probes-alone"])
def test_story_names_the_algorithm_and_confirms_the_fix(project: Path, story: Path, preflight: bool) -> None:
    args = ["experiments/eagle_debug.yaml", "--variant", "story"] + ([] if preflight else ["--no-preflight"])
    found = doctor(project, *args)
    assert found["cause"] == "algorithm-not-eagle3"
    assert found["accept_len_before"] <= 1.1 and found["accept_len_after"] >= 2.0
    assert found["fix"]["params"] == {"speculative_algorithm": "EAGLE3"}
    assert "doctor-aux-capture" in found["fix"]["patches"]  # 0.5.9's Kimi-K2.5 class lacks it
    assert any("width=64 fc_in=192" in line for line in found["evidence"])
    assert [r["variant"] for r in found["runs"]] == ["doctor-probe", "doctor-fix"]
    assert found["rule"] == "probe hidden-width" and found["preflight"] is preflight
    agrees = [line for line in found["evidence"] if line.startswith("the preflight agrees: ERROR algorithm-not-eagle3")]
    assert len(agrees) == (1 if preflight else 0)  # the probes decide; the checks second them when they ran
    listed = json.loads(orch(project, "ls", "--json").stdout)
    assert {r["variant"] for r in listed} == {"doctor-probe", "doctor-fix"}
    diff = orch(project, "diff", str(found["runs"][0]["id"]), str(found["runs"][1]["id"]))
    assert "speculative_algorithm" in diff.stdout and "accept_len" in diff.stdout
    # every probe and fix patch reverted: no file of the host's engine holds a doctor line
    tree = project / "host" / "rehearsal" / "sglang"
    assert not [p for p in tree.rglob("*.py") if "_doctor" in p.read_text() or "DOCTOR-DEBUG" in p.read_text()]


def test_a_recorded_run_is_examined_by_its_id(project: Path, story: Path) -> None:
    assert orch(project, "run", "experiments/eagle_debug.yaml", "--variant", "story").returncode == 0
    found = doctor(project, "last")
    assert found["cause"] == "algorithm-not-eagle3" and found["accept_len_after"] >= 2.0


def _layers0(project: Path, release: str | None = None) -> None:
    (project / "experiments" / "layers0.yaml").write_text(
        small_experiment("layers0", free_port(), params={
            "draft_model_path": "{{ host.rehearsal }}/checkpoints/eagle3-draft-layers0"}))
    if release:
        inventory = project / "inventory.yaml"
        inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "probes-alone"])
def test_layers0_keys_on_059_are_dropped_and_renamed_back(project: Path, preflight: bool) -> None:
    _layers0(project)
    found = doctor(project, "experiments/layers0.yaml", *([] if preflight else ["--no-preflight"]))
    assert found["cause"] == "draft-keys-dropped"
    assert found["fix"]["checkpoints"] == [{"name": "doctor_draft", "transforms": [{"rename_keys": {"layers.0.": "midlayer."}}]}]
    assert found["accept_len_before"] < 1.5 and found["accept_len_after"] >= 2.0  # two short requests: ~1.1


def test_layers0_keys_load_on_0523_so_nothing_is_wrong(project: Path) -> None:
    _layers0(project, "0.5.23")
    found = doctor(project, "experiments/layers0.yaml")
    assert found["cause"] == "none" and found["fix"] is None and found["accept_len_after"] is None
    assert found["accept_len_before"] >= 2.0 and len(found["runs"]) == 1
    assert "capture" in found["probes"]  # 0.5.23's capture call sits in model_runner_components/


@pytest.mark.parametrize("release", ["0.4.10", "0.5.23"])
def test_eagle_on_other_releases_names_the_algorithm(project: Path, release: str) -> None:
    (project / "experiments" / "eagle.yaml").write_text(
        small_experiment("eagle", free_port(), params={"speculative_algorithm": "EAGLE"}))
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    found = doctor(project, "experiments/eagle.yaml", "--no-preflight")
    assert found["cause"] == "algorithm-not-eagle3" and found["accept_len_after"] >= 2.0
    assert found["fix"]["patches"] == []  # the Llama target captures in every release


def _narrow_fc_draft(project: Path) -> Path:
    """The healthy draft with an fc that takes two layers instead of three (a draft trained for
    another target's capture)."""
    subprocess_make = orch(project, "check", "experiments/base.yaml")  # installs the rehearsal checkpoints
    assert subprocess_make.returncode == 0, subprocess_make.stderr
    source = project / "host" / "rehearsal" / "checkpoints" / "eagle3-draft"
    draft = project / "narrow-fc-draft"
    shutil.copytree(source, draft)
    weights = draft / "model.safetensors"
    data = weights.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    tensors = {name: np.frombuffer(data[8 + size + m["data_offsets"][0]:8 + size + m["data_offsets"][1]],
                                   dtype={"F16": np.float16, "F32": np.float32, "I64": np.int64, "BOOL": np.bool_}[m["dtype"]]
                                   ).reshape(m["shape"]) for name, m in header.items() if name != "__metadata__"}
    tensors["fc.weight"] = tensors["fc.weight"][:, :128].copy()
    _write_safetensors(weights, tensors)
    return draft


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    names = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        blob = np.ascontiguousarray(value).tobytes()
        header[name] = {"dtype": names[value.dtype], "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "probes-alone"])
def test_a_draft_whose_fc_does_not_fit_is_named_and_not_fixed(project: Path, preflight: bool) -> None:
    (project / "experiments" / "base.yaml").write_text(small_experiment("base", free_port()))
    draft = _narrow_fc_draft(project)
    (project / "experiments" / "narrow.yaml").write_text(
        small_experiment("narrow", free_port(), params={"draft_model_path": str(draft)}))
    found = doctor(project, "experiments/narrow.yaml", *([] if preflight else ["--no-preflight"]))
    assert found["cause"] == "fc-width"
    assert found["fix"]["runnable"] is False and found["accept_len_after"] is None
    assert any("128" in line for line in found["evidence"])


def test_bad_input_is_one_line_and_exit_2(project: Path, story: Path) -> None:
    several = orch(project, "doctor", "experiments/eagle_debug.yaml")
    assert several.returncode == 2 and "name the one to examine with --variant" in several.stderr
    unknown = orch(project, "doctor", "experiments/eagle_debug.yaml", "--variant", "nope")
    assert unknown.returncode == 2 and "no variant named nope" in unknown.stderr
    missing = orch(project, "doctor", "experiments/missing.yaml")
    assert missing.returncode == 2 and "not found" in missing.stderr
    no_run = orch(project, "doctor", "999")
    assert no_run.returncode == 2 and "no run '999'" in no_run.stderr
    no_host = orch(project, "doctor", "experiments/eagle_debug.yaml", "--variant", "story", "--hosts", "nosuch")
    assert no_host.returncode == 2 and "no host or tag 'nosuch'" in no_host.stderr
    assert json.loads(orch(project, "ls", "--json").stdout) == []  # nothing ran


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "probes-alone"])
def test_vllm_standin_absolute_d2t_is_named_and_turned_to_offsets(project: Path, preflight: bool) -> None:
    shutil.copy(ROOT / "templates" / "vllm_launch.sh.j2", project / "templates" / "vllm_launch.sh.j2")
    shutil.copy(ROOT / "experiments" / "vllm_eagle.yaml", project / "experiments" / "vllm_eagle.yaml")
    found = doctor(project, "experiments/vllm_eagle.yaml", "--variant", "absolute-d2t",
                   *([] if preflight else ["--no-preflight"]))
    assert found["cause"] == "d2t-absolute"
    assert found["rule"] == "probe d2t"  # probes decide first; the preflight's WARNING says the same
    assert any("absolute_in_t2d=256" in line for line in found["evidence"])
    assert found["fix"]["checkpoints"][0]["transforms"] == [{"d2t_to_offsets": True}]
    assert found["accept_len_before"] <= 1.1 and found["accept_len_after"] >= 2.0
    assert found["probes"] == ["draft-load"]  # the real vLLM's probes do not anchor in the stand-in's files


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "probes-alone"])
def test_a_draft_whose_aux_layers_the_target_lacks_is_named(project: Path, preflight: bool) -> None:
    (project / "experiments" / "base.yaml").write_text(small_experiment("base", free_port()))
    assert orch(project, "check", "experiments/base.yaml").returncode == 0  # installs the rehearsal checkpoints
    draft = project / "deep-aux-draft"
    shutil.copytree(project / "host" / "rehearsal" / "checkpoints" / "eagle3-draft", draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 5, 20]  # the 12-layer target has no layer 21
    (draft / "config.json").write_text(json.dumps(config))
    (project / "experiments" / "deep.yaml").write_text(
        small_experiment("deep", free_port(), params={"draft_model_path": str(draft)}))
    found = doctor(project, "experiments/deep.yaml", *([] if preflight else ["--no-preflight"]))
    assert found["cause"] == "aux-layers-mismatch"
    assert any("width=128 fc_in=192" in line for line in found["evidence"]), found["evidence"]
    assert any("layers=[1, 5, 20]" in line for line in found["evidence"]), found["evidence"]
    assert found["fix"]["runnable"] is False and found["accept_len_after"] is None


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.9", "0.5.23"])
def test_probes_anchor_and_compile_in_the_real_sglang_wheels(sglang_python, version: str) -> None:
    """Each probe prepared against the real release's own files, as the doctor's check does on a host:
    the width and loader probes anchor in every release, the capture probe in the releases whose call
    it was written for; each patched file compiles."""
    from wheels import package_dir

    from orchestrator.core import patching
    from orchestrator.engines.sglang.probes import PROBES
    from orchestrator.errors import PatchError

    package = package_dir(sglang_python(version))
    anchored: dict[str, list[str]] = {}
    for probe in PROBES.probes:
        texts: dict[Path, str] = {}
        try:
            for patch in probe.patches:
                path = package / patch.file.split(":", 1)[1]
                texts[path] = patching.apply(patch, texts.get(path) or path.read_text(), str(path))
        except (PatchError, FileNotFoundError):
            continue
        for path, text in texts.items():
            compile(text, str(path), "exec")
        anchored.setdefault(probe.name, []).append(probe.patches[0].name)
    assert anchored["hidden-width"] == ["doctor-hidden-width"]
    assert anchored["draft-keys"] == ["doctor-draft-keys-open-real"]
    capture = {"0.4.10.post2": ["doctor-capture-0.4.10"], "0.5.9": None, "0.5.23": ["doctor-capture-0.5.23"]}[version]
    assert anchored.get("capture") == capture  # 0.5.9's real call spans lines: its capture goes unprobed
