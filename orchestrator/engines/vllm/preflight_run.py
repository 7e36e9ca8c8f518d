"""The I/O half of the vLLM EAGLE-3 preflight: the launch command's `--speculative-config` (read
from the rendered command, whatever wrote it: a param, a literal, an `extra_args` flag), the target's and draft's
config.json, the draft's tensor names and shapes and its d2t (ranged reads, the same reader as
SGLang's preflight) and the host's vLLM source, handed to the pure `preflight.check`.

`findings_for` is what `VllmEngine.preflight` answers; `run/preflight.py` stores and judges them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from orchestrator.engines import checkpaths, tokenizers
from orchestrator.engines.command import Command
from orchestrator.engines.finding import ERROR, INFO, Finding, acknowledged
from orchestrator.engines.hostfiles import HostFiles
from orchestrator.engines.draftweights import read as read_weights
from orchestrator.host.session import HostSession, package_version

from . import hostside, preflight, source
from .flags import SPEC_FLAG

__all__ = ["findings_for", "speculative_config"]


async def findings_for(session: HostSession, launch: Command, overlay: Mapping[str, Path] | None,
                       allow: tuple[str, ...]) -> list[Finding]:
    """Every finding for one run's launch command on one host (`flags.command_of`); errors whose
    code is in `allow` come back marked allowed. A run without a speculative config has only its
    paths to check."""
    spec = speculative_config(launch)
    model_path = launch.get("model")
    files = HostFiles(session.conn, dict(overlay) if overlay else None)
    missing = await checkpaths.missing(files, {"the model": model_path,
                                               f"{SPEC_FLAG} model": spec.get("model") if spec else None})
    if missing:
        return acknowledged(missing, allow)
    if spec is None or not isinstance(spec.get("model"), str) or not model_path:
        return []
    target = await _config(files, str(model_path))
    draft = await _config(files, str(spec["model"]))
    if isinstance(target, Finding) or isinstance(draft, Finding):
        return acknowledged([f for f in (target, draft) if isinstance(f, Finding)], allow)
    where = await hostside.folder(session)
    if where is None:
        return [Finding(INFO, "source-unread", f"no {hostside.PACKAGE} package under {session.host.python}",
                        "the EAGLE-3 checks read the host's vLLM source; nothing was checked",
                        "install vLLM in the host's python (or set the host's `python:`)")]
    weights = await read_weights(files, str(spec["model"]))
    found = []
    if weights.unread:
        found.append(Finding(INFO, "draft-weights-unchecked", f"the draft's weights were not read: {weights.unread}",
                             "the key, fc and d2t checks need the tensor names and shapes", "store the draft as "
                             "safetensors to have them checked"))
    facts = preflight.Facts(
        await package_version(session.conn, where, hostside.VERSION_FILES),
        await _sources(session, where, target), spec, target, draft,
        {name: info.shape for name, info in weights.tensors.items()}, weights.vocab.get("d2t"))
    own_tokenizer = await tokenizers.check(files, str(model_path), str(spec["model"])) if same_vocabulary(spec) else []
    return acknowledged([*found, *preflight.check(facts), *own_tokenizer], allow)


def same_vocabulary(spec: Mapping[str, object]) -> bool:
    """Whether the draft must speak the target's tokenizer: vLLM gives a draft the target's tokenizer
    unless `use_heterogeneous_vocab` (0.32.0 config/speculative.py: the draft_model method loads the
    draft's own and translates), where another tokenizer is the point, not a fault."""
    return not spec.get("use_heterogeneous_vocab")


def speculative_config(launch: Command) -> dict[str, object] | None:
    """The JSON the command passes as --speculative-config (the last one, as argparse keeps it);
    None without one, or when it is not a JSON object (the flag check reports that)."""
    value = launch.get("speculative_config")
    if not isinstance(value, str):
        return None
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


async def _sources(session: HostSession, where: str, target: dict[str, object]) -> dict[str, str]:
    """The speculative config, the registry, the draft loader, then the target class's module (the
    registry names it)."""
    base = await hostside.model_sources(session, ())
    every, _ = source.registry(base.get(source.REGISTRY))
    archs = target.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    if arch not in every:
        return base
    return {**base, **await hostside.read_sources(session, where, (f"{source.MODELS}{every[arch][0]}.py",))}


async def _config(files: HostFiles, folder: str) -> dict[str, object] | Finding:
    try:
        data = json.loads(await files.read(f"{folder}/config.json"))
    except FileNotFoundError:
        return Finding(INFO, "not-a-folder", f"{folder}/config.json not found on the host",
                       "the checkpoint checks read config.json; a hub id or a missing folder is not checked",
                       "point the path at a checkpoint folder on the host")
    except ValueError as exc:
        return Finding(ERROR, "config-invalid", f"{folder}/config.json is not JSON: {exc}",
                       "vLLM cannot load the model", "fix or re-export config.json")
    return data if isinstance(data, dict) else {}
