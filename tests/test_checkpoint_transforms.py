"""d2t_to_absolute, the inverse of d2t_to_offsets: it makes the fault a draft converted the wrong way
carries (the tiny models' draft-absolute-d2t), through the same code path as the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.core import checkpointdefs, spec as specs
from orchestrator.core.spec import CheckpointDef
from orchestrator.errors import SpecError
from orchestrator.host import checkpoint


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rehearsal") / "checkpoints"
    maker = ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang" / "make_checkpoints.py"
    subprocess.run([sys.executable, str(maker), str(out)], check=True)
    return out


def test_d2t_to_absolute_makes_the_absolute_fault_and_round_trips(rehearsal, tmp_path):
    spec = CheckpointDef("d", rehearsal / "eagle3-draft", "/x", "exp.yaml:3", ({"d2t_to_absolute": True},))
    made = checkpoint.prepare(spec, tmp_path / "cache")
    broken = (rehearsal / "eagle3-draft-absolute-d2t" / "model.safetensors").read_bytes()
    assert (made.folder / "model.safetensors").read_bytes() == broken
    back = CheckpointDef("d", made.folder, "/x", "exp.yaml:3", ({"d2t_to_offsets": True},))
    fixed = checkpoint.prepare(back, tmp_path / "cache")
    assert (fixed.folder / "model.safetensors").read_bytes() == (rehearsal / "eagle3-draft" / "model.safetensors").read_bytes()


def test_d2t_to_absolute_refuses_absolute_ids(rehearsal, tmp_path):
    spec = CheckpointDef("d", rehearsal / "eagle3-draft-absolute-d2t", "/x", "exp.yaml:3", ({"d2t_to_absolute": True},))
    with pytest.raises(SpecError, match="exp.yaml:3: transform d2t_to_absolute: .* already holds absolute ids, "
                                        "not offsets; remove the transform"):
        checkpoint.prepare(spec, tmp_path / "cache")


def test_the_experiment_may_name_d2t_to_absolute(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "exp.yaml").write_text(
        "name: e\nhosts: [h]\ntemplate: t.j2\n"
        "checkpoints:\n  - {name: draft, src: d, dest: /x, transform: [d2t_to_absolute]}\n")
    (found,) = checkpointdefs.read(specs.yamlfile.load(tmp_path / "exp.yaml"), tmp_path / "exp.yaml")
    assert found.transforms == ({"d2t_to_absolute": True},)
