"""Checkpoints of an experiment: transformed (never in place) into a content-addressed local cache,
then pushed to each run's host; the run records source hash, transforms, result and manifest hash.

Transforms:
    rename_keys: {"layers.0.": "midlayer."}   prefix map on safetensors keys (and the shard index)
    d2t_to_offsets                            absolute target ids in `d2t` -> offsets (d2t[i] - i)
    d2t_to_absolute                           the inverse: offsets -> absolute ids (d2t[i] + i); it makes
                                              the fault a draft converted the wrong way carries
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import push
from orchestrator.engines.eagle3 import d2t_form
from orchestrator.engines import safetensors
from orchestrator.errors import SpecError
from orchestrator.core.spec import CheckpointDef
from orchestrator.remote import Connection

INDEX_NAME = "model.safetensors.index.json"
D2T_FORMS = ("offsets", "absolute")  # each d2t transform converts from the other form


@dataclass(frozen=True)
class Prepared:
    """A checkpoint ready to push: `folder` is `src` itself, or the cached transformed copy."""

    name: str
    folder: Path
    source_hash: str
    transforms: tuple[dict[str, Any], ...]
    result_hash: str


def prepare(checkpoint: CheckpointDef, cache: Path | None = None) -> Prepared:
    """Apply the checkpoint's transforms once; the same source + transforms reuse the cached result."""
    root = cache or push.cache_root()
    source = push.local_manifest(checkpoint.src, root).digest
    if not checkpoint.transforms:
        return Prepared(checkpoint.name, checkpoint.src, source, (), source)
    store = root / "checkpoints"
    key = hashlib.sha256((source + json.dumps(checkpoint.transforms, sort_keys=True)).encode()).hexdigest()
    index = store / "by-input" / key
    if index.is_file():
        result = index.read_text().strip()
        if (store / result).is_dir():
            return Prepared(checkpoint.name, store / result, source, checkpoint.transforms, result)
    store.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".making-", dir=store))
    try:
        apply_all(checkpoint.src, work, checkpoint.transforms, checkpoint.where)
        result = push.local_manifest(work, root).digest
        final = store / result
        if final.is_dir():
            shutil.rmtree(work)  # the same bytes were made before from another input
        else:
            os.replace(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(result + "\n")
    return Prepared(checkpoint.name, final, source, checkpoint.transforms, result)


def apply_all(src: Path, out: Path, transforms: tuple[dict[str, Any], ...], where: str) -> None:
    """Write `src` with `transforms` applied into the empty folder `out`."""
    renames: dict[str, str] = {}
    d2t_to: str | None = None  # the form d2t is rewritten into: "offsets" or "absolute"
    for transform in transforms:
        if "rename_keys" in transform:
            renames.update(transform["rename_keys"])
        for form in D2T_FORMS:
            if f"d2t_to_{form}" in transform:
                d2t_to = form
    target_vocab = _target_vocab(src)
    found_d2t = False
    for here, dirs, names in os.walk(src, followlinks=True):  # as push.local_manifest, which checked the links
        dirs.sort()
        for name in sorted(names):
            source = Path(here) / name
            target = out / source.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".safetensors"):
                found_d2t |= _rewrite_shard(source, target, renames, d2t_to, target_vocab, where)
            elif name == INDEX_NAME and renames:
                _rewrite_index(source, target, renames)
            else:
                shutil.copyfile(source, target)
    if d2t_to and not found_d2t:
        raise SpecError(f"{where}: transform d2t_to_{d2t_to}: no tensor named d2t in {src}")


def rename(name: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _target_vocab(src: Path) -> int | None:
    try:
        config = json.loads((src / "config.json").read_text())
    except (OSError, ValueError):
        return None
    vocab: int | None = config.get("vocab_size")  # a Hugging Face config's vocabulary size is an int
    return vocab


def _rewrite_shard(source: Path, target: Path, renames: dict[str, str], d2t_to: str | None,
                   target_vocab: int | None, where: str) -> bool:
    header = safetensors.read_header_file(source)
    plan: list[tuple[str, Any]] = []
    names = set()
    for info in header.tensors.values():
        new = rename(info.name, renames)
        if new in names:
            raise SpecError(f"{where}: rename_keys maps two tensors of {source.name} to {new}; fix the prefix map")
        names.add(new)
        plan.append((new, info))
    found = False
    if d2t_to and "d2t" in header.tensors:
        found = True
        d2t = safetensors.read_tensor_file(source, "d2t", header).astype(np.int64)
        t2d = safetensors.read_tensor_file(source, "t2d", header) if "t2d" in header.tensors else None
        vocab = len(t2d) if t2d is not None else target_vocab
        form = d2t_form(d2t, int(vocab or 2**62), t2d)
        wanted = D2T_FORMS[D2T_FORMS.index(d2t_to) - 1]  # the form the transform converts from
        if form != wanted:
            said = {"offsets": "offsets", "absolute": "absolute ids"}
            raise SpecError(f"{where}: transform d2t_to_{d2t_to}: d2t in {source} already holds "
                            f"{said.get(form, form + ' values')}, not {said[wanted]}; remove the transform")
        step = -np.arange(len(d2t)) if d2t_to == "offsets" else np.arange(len(d2t))
        values = (d2t + step).astype(np.dtype(safetensors.NUMPY_DTYPES[header.tensors["d2t"].dtype]))
        plan = [(n, values if n == rename("d2t", renames) else item) for n, item in plan]
    safetensors.write_file(target, source, plan, header.metadata)
    return found


def _rewrite_index(source: Path, target: Path, renames: dict[str, str]) -> None:
    index = json.loads(source.read_text())
    index["weight_map"] = {rename(k, renames): v for k, v in index.get("weight_map", {}).items()}
    target.write_text(json.dumps(index, indent=2) + "\n")


async def push_for_run(checkpoints: tuple[CheckpointDef, ...], conn: Connection, dests: dict[str, str],
                       progress: Callable[[str], push.Progress] | None = None) -> list[tuple[Prepared, push.PushResult]]:
    """Prepare and push every checkpoint to its rendered `dest` on the run's host; `progress(name)`
    gives each push its progress callback."""
    done = []
    for checkpoint in checkpoints:
        try:
            prepared = await asyncio.to_thread(prepare, checkpoint)
        except (FileNotFoundError, safetensors.FormatError) as exc:
            raise SpecError(f"{checkpoint.where}: checkpoint '{checkpoint.name}': {exc}") from None
        bar = progress(checkpoint.name) if progress else None
        # a transformed copy's files take their modes from the user's folder, whatever the cache holds
        result = await push.push(conn, prepared.folder, dests[checkpoint.name], progress=bar,
                                 modes_from=checkpoint.src if prepared.folder != checkpoint.src else None)
        done.append((prepared, result))
    return done
