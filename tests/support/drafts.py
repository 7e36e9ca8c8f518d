"""Draft checkpoints a test pushes: broken ones made from the rehearsal's healthy draft, and an
experiment changed to push one as its draft model."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import ROOT
from orchestrator.engines import safetensors


def broken_drafts(folder: Path) -> dict[str, Path]:
    """Drafts made from the rehearsal's healthy one: fc for two aux layers, and no lm_head."""
    subprocess.run([sys.executable, str(ROOT / "orchestrator/rehearsal/trees/sglang/make_checkpoints.py"), str(folder / "made")], check=True)
    healthy = folder / "made" / "eagle3-draft"
    header = safetensors.read_header_file(healthy / "model.safetensors")
    tensors = {n: safetensors.read_tensor_file(healthy / "model.safetensors", n, header) for n in header.tensors}
    variants = {
        "fc2": {**tensors, "fc.weight": np.ascontiguousarray(tensors["fc.weight"][:, :128])},
        "nohead": {k: v for k, v in tensors.items() if k != "lm_head.weight"},
    }
    out = {}
    for name, values in variants.items():
        (folder / name).mkdir()
        shutil.copy(healthy / "config.json", folder / name / "config.json")
        safetensors.write_file(folder / name / "model.safetensors", None, list(values.items()), {"format": "pt"})
        out[name] = folder / name
    return out


def with_checkpoint(spec: Path, src: Path, transform: str = "") -> None:
    """The experiment pushes `src` as checkpoint `draft` and uses it as the draft model."""
    text = spec.read_text().replace(
        'draft_model_path: "{{ host.rehearsal }}/checkpoints/eagle3-draft"', 'draft_model_path: "{{ checkpoints.draft }}"')
    text += f'\ncheckpoints:\n  - name: draft\n    src: {src}\n    dest: "{{{{ host.workdir }}}}/ckpt/draft"\n'
    spec.write_text(text + (f"    transform: {transform}\n" if transform else ""))
