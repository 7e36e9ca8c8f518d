"""The I/O half of the EAGLE-3 preflight: reads config.json files, safetensors headers (a ranged
read of the first bytes only), the `d2t`/`t2d` tensors and the host's SGLang source over any
Connection, then hands them to the pure `engines.sglang.preflight`.

`gate` is the one call a run makes: findings stored with the run, errors stop it (exit 2)
before any patch or launch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from . import shell
from .session import package_dir, sglang_version
from .engines.sglang import preflight, safetensors
from .engines.sglang.preflight import Capture, Facts, Finding
from .errors import SpecError
from .spec import PatchDef

SPECULATIVE = ("EAGLE3", "EAGLE")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BASE_DEPTH = 4  # how far up a target class's bases the capture method is looked for
VOCAB_TENSORS = ("d2t", "t2d")


class PreflightError(SpecError):
    """The preflight found errors: the run would fail, or silently measure nothing."""


class HostFiles:
    """Reads on the host; paths under an `overlay` key are read from that local folder instead
    (for `orch check` before a checkpoint has been pushed)."""

    def __init__(self, conn: Any, overlay: dict[str, Path] | None = None):
        self.conn = conn
        self.overlay = overlay or {}

    def _local(self, path: str) -> Path | None:
        for prefix, folder in self.overlay.items():
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return folder / path[len(prefix):].lstrip("/")
        return None

    async def read(self, path: str) -> bytes:
        local = self._local(path)
        return local.read_bytes() if local is not None else await self.conn.read_file(path)

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        local = self._local(path)
        if local is not None:
            with open(local, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        return (await self.conn.run(shell.read_range(path, offset, length))).stdout

    async def names(self, folder: str, suffix: str) -> list[str]:
        local = self._local(folder)
        if local is not None:
            return sorted(p.name for p in local.glob(f"*{suffix}") if p.is_file())
        return sorted(n for n in (await self.conn.run(shell.list_named(folder, suffix))).out.splitlines() if n)


async def findings_for(conn: Any, host: Any, params: dict[str, Any], env: dict[str, str],
                       patches: tuple[PatchDef, ...], overlay: dict[str, Path] | None = None,
                       packages: dict[str, str] | None = None) -> list[Finding]:
    """Every finding for one run's rendered params on one host."""
    draft_path, model_path = params.get("draft_model_path"), params.get("model_path")
    if str(params.get("speculative_algorithm") or "").upper() not in SPECULATIVE or not draft_path or not model_path:
        return []
    files = HostFiles(conn, overlay)
    target_cfg = await _config(files, str(model_path))
    draft_cfg = await _config(files, str(draft_path))
    if isinstance(target_cfg, Finding) or isinstance(draft_cfg, Finding):
        return [f for f in (target_cfg, draft_cfg) if isinstance(f, Finding)]
    sglang = await package_dir(conn, host, packages if packages is not None else {})
    version = layout_source = None
    if sglang:
        version = await sglang_version(conn, sglang)
        layout_source = await _text(files, f"{sglang}/srt/models/llama_eagle3.py")
    tensors, vocab = await _draft_tensors(files, str(draft_path))
    arch = (target_cfg.get("architectures") or [None])[0]
    capture = await _capture(conn, files, sglang, arch, patches) if sglang and arch else None
    facts = Facts(version, preflight.draft_layout(layout_source, version), str(model_path), target_cfg,
                  str(draft_path), draft_cfg, tensors, vocab.get("d2t"), vocab.get("t2d"), capture, params, env)
    return preflight.check(facts)


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


async def _text(files: HostFiles, path: str) -> str | None:
    try:
        return (await files.read(path)).decode(errors="replace")
    except (FileNotFoundError, PermissionError):
        return None


async def _draft_tensors(files: HostFiles, folder: str) -> tuple[dict[str, safetensors.TensorInfo], dict[str, np.ndarray]]:
    """Every tensor's name/dtype/shape from the shards' headers; `d2t`/`t2d` read whole (they are small)."""
    tensors: dict[str, safetensors.TensorInfo] = {}
    vocab: dict[str, np.ndarray] = {}
    for name in await files.names(folder, ".safetensors"):
        path = f"{folder}/{name}"
        prefix = await files.read_range(path, 0, safetensors.PREFIX)
        try:
            length = safetensors.header_length(prefix, path)
            header = safetensors.parse_header(prefix + await files.read_range(path, safetensors.PREFIX, length), path)
        except safetensors.FormatError as exc:
            raise PreflightError(f"preflight: {exc}; re-export the checkpoint") from None
        tensors.update(header.tensors)
        for key in VOCAB_TENSORS:
            info = header.tensors.get(key)
            if info is not None:
                raw = await files.read_range(path, header.data_start + info.begin, info.end - info.begin)
                vocab[key] = safetensors.decode(info, raw)
    return tensors, vocab


async def _capture(conn: Any, files: HostFiles, sglang: str, arch: str, patches: tuple[PatchDef, ...]) -> Capture:
    """Does the target class, or a base class, define set_eagle3_layers_to_capture? Scanned as text."""
    models = f"{sglang}/srt/models"
    name, first_file, depth = arch, None, 0
    pending = [arch]
    seen: set[str] = set()
    while pending and depth <= BASE_DEPTH:
        name = pending.pop(0)
        if name in seen or not IDENTIFIER.match(name):
            continue
        seen.add(name)
        found = (await conn.run(shell.files_defining_class(models, name))).out.split()
        for path in found:
            text = await _text(files, path) or ""
            exists, has_method, bases = preflight.class_facts(text, name)
            if not exists:
                continue
            relative = path[len(sglang) + 1:]
            first_file = first_file or relative
            if has_method:
                return Capture(arch, first_file, True)
            pending.extend(bases)
            break
        depth += 1
    if first_file is None:
        return Capture(arch, None, None)
    adding = tuple(p.name for p in patches if p.file.endswith(first_file)
                   and f"def {preflight.CAPTURE_METHOD}" in (p.text or p.diff or ""))
    return Capture(arch, first_file, False, adding)


async def gate(spec: Any, plan: Any, session: Any, store: Any, run: Any, report: Any, context: dict[str, Any]) -> None:
    """The run's preflight: findings stored and reported; errors raise before any patch or launch."""
    from .store import FindingRow

    label = f"{plan.variant}@{session.host.name}"
    if not getattr(spec, "preflight", True):
        store.event(run, "preflight-skipped", "orch run --no-preflight: checkpoint checks skipped")
        report(label, "preflight skipped (--no-preflight)")
        return
    findings = await findings_for(session.conn, session.host, context["params"], context["env"], plan.patches,
                                  packages=session.packages)
    store.add(*(FindingRow(run_id=run.id, **f.as_json()) for f in findings))
    for f in findings:
        report(label, f"preflight {f.severity.upper()}: {f.what}\nwhy: {f.why}\nfix: {f.fix}")
    bad = preflight.errors(findings)
    if bad:
        raise PreflightError(f"preflight: {len(bad)} error(s) in the checkpoints of {label}: {bad[0].what}; "
                             f"fix: {bad[0].fix} (`orch run --no-preflight` runs anyway)")
    store.event(run, "preflight", f"{len(findings)} finding(s), no errors")
