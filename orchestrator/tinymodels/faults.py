"""Fault copies of the fitting models: each a mistake that costs hours on a real cluster. Made through
orch's own checkpoint transforms where one exists (so the fault is the one a user's transform list
would make); the two with no transform are written here, from the fitting copy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orchestrator.host import checkpoint

from .settings import Settings

# name -> what it is, what to serve it with, orch's transforms (None: written here), and what the real
# engine (the 0.32.0 CPU build, num_speculative_tokens 3) did with it when this was written
FAULTS: dict[str, dict] = {
    "draft-absolute-d2t": {
        "fault": "d2t holds absolute target ids, not offsets (the engine reads target id = i + d2t[i])",
        "serve": {"model": "target", "draft": "draft-absolute-d2t"},
        "transforms": [{"d2t_to_absolute": True}],
        "measured": "crash at the first request: compute_logits raises IndexError 'index 515 is out of bounds "
                    "for dimension 0 with size 512' (Worker failed with error ..., EngineDeadError, HTTP 500)",
    },
    "draft-layers0": {
        "fault": "the decoder layer's keys named layers.0.* instead of SpecForge's midlayer.*",
        "serve": {"model": "target", "draft": "draft-layers0"},
        "transforms": [{"rename_keys": {"midlayer.": "layers.0."}}],
        "measured": "no fault on this engine: its loader renames midlayer. to layers.0., so both namings "
                    "load; accept length 4.00 as the fitting draft (a fault for loaders that read one name)",
    },
    "draft-fc-mismatch": {
        "fault": "fc.weight is [H, 2H]: it takes two aux hidden states, the config and the target give three",
        "serve": {"model": "target", "draft": "draft-fc-mismatch"},
        "transforms": None,
        "measured": "crash at start-up, loading the draft: AssertionError 'Tried to load weights of size "
                    "torch.Size([256, 512])to a parameter of size torch.Size([256, 768])'",
    },
    "target-2layer": {
        "fault": "a 2-layer target (the fitting target's first two layers): the draft's aux layers "
                 "(2, 4, 5 by the engine's default for 8 layers; 2, 1, -1 for 2) do not all exist",
        "serve": {"model": "target-2layer", "draft": "draft"},
        "transforms": None,
        "measured": "crash at the first request: RuntimeError \"shape '[-1, 768]' is invalid for input of "
                    "size 2560\" (two hidden states of 256 reach an fc that takes three)",
    },
}


def make(settings: Settings, folder: Path) -> dict[str, str]:
    """Write every fault beside `folder`/target and `folder`/draft, and faults.json; the names made."""
    draft, target = folder / "draft", folder / "target"
    for name, fault in FAULTS.items():
        out = folder / name
        out.mkdir()
        if fault["transforms"] is not None:
            checkpoint.apply_all(draft, out, tuple(fault["transforms"]), f"tiny model fault {name}")
        elif name == "draft-fc-mismatch":
            _narrow_fc(draft, out, settings.hidden_size * 2)
        elif name == "target-2layer":
            _first_layers(target, out, 2)
    (folder / "faults.json").write_text(json.dumps(FAULTS, indent=2) + "\n")
    return {name: name for name in FAULTS} | {"faults": "faults.json"}


def _narrow_fc(draft: Path, out: Path, width: int) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(draft / "model.safetensors"))
    tensors["fc.weight"] = tensors["fc.weight"][:, :width].contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _copy_all_but(draft, out, {"model.safetensors"})


def _first_layers(target: Path, out: Path, layers: int) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(target / "model.safetensors"))
    kept = {name: t for name, t in tensors.items()
            if not name.startswith("model.layers.") or int(name.split(".")[2]) < layers}
    save_file(kept, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((target / "config.json").read_text())
    config["num_hidden_layers"] = layers
    for key in ("layer_types",):  # per-layer lists, where transformers writes them, must shrink too
        if isinstance(config.get(key), list):
            config[key] = config[key][:layers]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _copy_all_but(target, out, {"model.safetensors", "config.json"})


def _copy_all_but(src: Path, out: Path, skip: set[str]) -> None:
    for path in sorted(src.iterdir()):
        if path.is_file() and path.name not in skip:
            shutil.copyfile(path, out / path.name)
