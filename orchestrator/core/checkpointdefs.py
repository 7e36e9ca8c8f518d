"""An experiment's `checkpoints:`: local folders pushed to each run's host, after their transforms."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError

from . import readers, yamlfile
from .yamlfile import Located


@dataclass(frozen=True)
class CheckpointDef:
    """A local folder pushed to `dest` on each run's host, after its transforms (see checkpoint.py)."""

    name: str
    src: Path
    dest: str  # may hold `{{ host.* }}`; rendered per host
    where: str
    transforms: tuple[dict[str, Any], ...] = ()


TRANSFORMS = ("rename_keys", "d2t_to_offsets", "d2t_to_absolute")  # d2t_to_absolute makes a fault


def read(data: Located, path: Path) -> tuple[CheckpointDef, ...]:
    """`checkpoints:` a list of {name, src (local folder, relative to the experiment), dest, transform}."""
    items = data.get("checkpoints") or []
    if not isinstance(items, list):
        raise SpecError(f"{data.where('checkpoints')}: `checkpoints` must be a list of {{name, src, dest}}")
    found: dict[str, CheckpointDef] = {}
    for item in items:
        body = yamlfile.require_mapping(item, data.where("checkpoints"), "a checkpoint")
        where = body.where()
        yamlfile.check_keys(body, {"name", "src", "dest", "transform"}, "checkpoint")
        name, src, dest = body.get("name"), body.get("src"), body.get("dest")
        if not (isinstance(name, str) and name and isinstance(src, str) and src and isinstance(dest, str) and dest):
            raise SpecError(f"{where}: a checkpoint needs `name`, `src` (a local folder) and `dest` (a host path)")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in found:
            raise SpecError(f"{where}: checkpoint name {name!r} must be a unique identifier (templates use checkpoints.{name})")
        folder = Path(os.path.abspath(path.parent / src))
        if not readers.is_dir(folder):
            raise SpecError(f"{body.where('src')}: checkpoint '{name}': src {folder} is not a folder")
        found[name] = CheckpointDef(name, folder.resolve(), dest, where, _transforms(body, name))
    return tuple(found.values())


def _transforms(body: Located, name: str) -> tuple[dict[str, Any], ...]:
    items = body.get("transform") or []
    where = body.where("transform")
    if not isinstance(items, list):
        raise SpecError(f"{where}: checkpoint '{name}': `transform` must be a list, e.g. [d2t_to_offsets]")
    result: list[dict[str, Any]] = []
    for item in items:
        kind, value = item, None
        if isinstance(item, dict) and len(item) == 1:
            kind, value = next(iter(item.items()))
        if kind not in TRANSFORMS:
            raise SpecError(f"{where}: checkpoint '{name}': unknown transform {item!r}; known: {', '.join(TRANSFORMS)}")
        if kind == "rename_keys":
            if not isinstance(value, dict) or not value or not all(isinstance(k, str) and k and isinstance(v, str)
                                                                  for k, v in value.items()):
                raise SpecError(f"{where}: checkpoint '{name}': rename_keys needs a prefix map, "
                                f"e.g. {{\"layers.0.\": \"midlayer.\"}}")
            result.append({"rename_keys": {str(k): str(v) for k, v in value.items()}})
        else:
            result.append({kind: True})
    return tuple(result)
