"""The I/O half of the EAGLE-3 preflight: reads config.json files, the draft's weights (tensor
names and shapes by ranged reads, see engines/draftweights.py) and the host's installed SGLang source
(see preflight_source.py) over any Connection, then hands them to the pure `engines.sglang.preflight`.

`findings_for` is what the engine's `preflight` answers; `run/preflight.py` stores and judges them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.engines import checkpaths, draftweights as preflight_weights, tokenizers
from orchestrator.engines.hostfiles import HostFiles

from . import preflight_source
from orchestrator.host.session import package_dir, package_version
from . import PACKAGE, VERSION_FILES
from . import preflight
from .preflight import Facts, Finding
from .source import EMBED_HEAD, METHOD
from orchestrator.core.spec import PatchDef

SPECULATIVE = ("EAGLE3", "EAGLE", "NEXTN")  # NEXTN runs as EAGLE

__all__ = ["findings_for"]


async def findings_for(conn: Any, host: Any, params: dict[str, Any], env: dict[str, str],
                       patches: tuple[PatchDef, ...], overlay: dict[str, Path] | None = None,
                       packages: dict[str, str] | None = None, allow: tuple[str, ...] = ()) -> list[Finding]:
    """Every finding for one run's launch command on one host; `params` are the command's options
    by their SGLang destination (`model_path`, `speculative_draft_model_path`,
    `speculative_algorithm`, ...: `flags.command_of`), never the experiment's param names. Errors
    whose code is in `allow` come back marked allowed."""
    draft_path, model_path = params.get("speculative_draft_model_path"), params.get("model_path")
    files = HostFiles(conn, overlay)
    missing = await checkpaths.missing(files, {"--model-path": model_path, "--speculative-draft-model-path": draft_path})
    if missing:
        return preflight.acknowledged(missing, allow)
    if str(params.get("speculative_algorithm") or "").upper() not in SPECULATIVE or not draft_path or not model_path:
        return []
    target_cfg = await _config(files, str(model_path))
    draft_cfg = await _config(files, str(draft_path))
    if isinstance(target_cfg, Finding) or isinstance(draft_cfg, Finding):
        return preflight.acknowledged([f for f in (target_cfg, draft_cfg) if isinstance(f, Finding)], allow)
    sglang = await package_dir(conn, host, packages if packages is not None else {}, PACKAGE)
    version = src = sources = target = capture = embed_head = None
    if sglang:
        version = await package_version(conn, sglang, VERSION_FILES)
        src, sources, target = await preflight_source.host_source(
            conn, sglang, _archs(target_cfg), _archs(draft_cfg))
        if target:
            capture = await preflight_source.capture(conn, sglang, src.registry, sources, target, patches, METHOD)
        if target and src.embed_head_call:  # asked only where the host's speculative worker calls it
            embed_head = await preflight_source.capture(conn, sglang, src.registry, sources, target, patches,
                                                        EMBED_HEAD)
    weights = await preflight_weights.read(files, str(draft_path))
    layout_source = (sources or {}).get(preflight_source.LLAMA_EAGLE3)
    facts = Facts(version, preflight.draft_layout(layout_source, version), str(model_path), target_cfg,
                  str(draft_path), draft_cfg, weights.tensors, weights.vocab.get("d2t"), weights.vocab.get("t2d"),
                  capture, params, env, src, weights.unread, weights.files, embed_head)
    own_tokenizer = await tokenizers.check(files, str(model_path), str(draft_path))
    return preflight.acknowledged([*preflight.check(facts), *own_tokenizer], allow)


def _archs(config: dict[str, Any]) -> list[str]:
    names = config.get("architectures")
    return [str(n) for n in names] if isinstance(names, list) else []


async def _config(files: HostFiles, folder: str) -> dict[str, Any] | Finding:
    try:
        data = json.loads(await files.read(f"{folder}/config.json"))
    except FileNotFoundError:
        return Finding(preflight.INFO, "not-a-folder", f"{folder}/config.json not found on the host",
                       "the checkpoint checks read config.json; a hub id or a missing folder is not checked",
                       "point the path at a checkpoint folder on the host")
    except ValueError as exc:
        return Finding(preflight.ERROR, "config-invalid", f"{folder}/config.json is not JSON: {exc}",
                       "SGLang cannot load the model", "fix or re-export config.json")
    return data if isinstance(data, dict) else {}
