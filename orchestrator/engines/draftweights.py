"""The draft's weights as the preflight reads them on the host: names, dtypes and shapes of every
tensor, and the small `d2t`/`t2d` in full, from the files SGLang would load (its `*.safetensors`,
else its `*.bin`), by ranged reads; a torch `.bin` is never unpickled by torch (see torchbin.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from orchestrator.engines import safetensors, torchbin
from orchestrator.engines.safetensors import TensorInfo
from orchestrator.errors import PreflightError

VOCAB_TENSORS = ("d2t", "t2d")
NOT_WEIGHTS = ("training_args.bin", "optimizer.bin")  # what SGLang's loader leaves out of a *.bin folder
MAX_VOCAB_BYTES = 64 * 2**20  # a d2t/t2d beyond this is not a vocabulary map; its shape is checked, not its values


class Files(Protocol):
    async def read_range(self, path: str, offset: int, length: int) -> bytes: ...
    async def size(self, path: str) -> int: ...
    async def names(self, folder: str, suffix: str) -> list[str]: ...


@dataclass
class DraftWeights:
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    vocab: dict[str, np.ndarray] = field(default_factory=dict)
    files: int = 0
    unread: str | None = None  # why they could not be read, said plainly


async def read(files: Files, folder: str) -> DraftWeights:
    """SGLang loads `*.safetensors` when the folder has any, else `*.bin`: so does this."""
    names = await files.names(folder, ".safetensors")
    if names:
        found = DraftWeights(files=len(names))
        for name in names:
            await _safetensors(files, f"{folder}/{name}", found)
        return found
    bins = [n for n in await files.names(folder, ".bin") if not n.endswith(NOT_WEIGHTS)]
    found = DraftWeights(files=len(bins))
    for name in bins:
        try:
            await _torch_bin(files, f"{folder}/{name}", found)
        except torchbin.Unreadable as exc:
            return DraftWeights(files=len(bins), unread=f"{folder}/{name}: {exc}")
    return found


async def _safetensors(files: Files, path: str, found: DraftWeights) -> None:
    prefix = await files.read_range(path, 0, safetensors.PREFIX)
    try:
        length = safetensors.header_length(prefix, path)
        header = safetensors.parse_header(prefix + await files.read_range(path, safetensors.PREFIX, length), path)
    except safetensors.FormatError as exc:
        raise PreflightError(f"preflight: {exc}; re-export the checkpoint") from None
    found.tensors.update(header.tensors)
    for key in VOCAB_TENSORS:
        info = header.tensors.get(key)
        if info is not None and info.end - info.begin <= MAX_VOCAB_BYTES:
            raw = await files.read_range(path, header.data_start + info.begin, info.end - info.begin)
            found.vocab[key] = safetensors.decode(info, raw)


async def _torch_bin(files: Files, path: str, found: DraftWeights) -> None:
    """The archive's tail (end record, usually the whole directory), `data.pkl`, then d2t/t2d."""
    form = torchbin.kind(await files.read_range(path, 0, 8))
    if form != "zip":
        raise torchbin.Unreadable("the legacy (before torch 1.6) torch.save format, which only running its pickle "
                                  "reads" if form == "legacy" else "not a torch.save zip archive")
    size = await files.size(path)
    start = max(0, size - torchbin.TAIL)
    tail = await files.read_range(path, start, size - start)
    span: Any = torchbin.directory_span(tail, size)
    if isinstance(span, int):
        span = torchbin.zip64_span(await files.read_range(path, span, 56))
    offset, length = span
    directory = tail[offset - start : offset - start + length] if offset >= start else \
        await files.read_range(path, offset, length)
    entries = torchbin.entries(directory)
    pkl = torchbin.pickle_entry(entries)
    tensors = torchbin.state_dict(await _entry(files, path, pkl))
    found.tensors.update(torchbin.infos(tensors))
    order = "little"
    marker = torchbin.byteorder_entry(entries, pkl)
    if marker is not None:
        order = (await _entry(files, path, marker)).decode(errors="replace").strip() or order
    for key in VOCAB_TENSORS:
        tensor = tensors.get(key)
        if tensor is not None:
            storage = torchbin.storage_entry(entries, pkl, tensor.storage)
            if storage.size <= MAX_VOCAB_BYTES:
                found.vocab[key] = torchbin.decode(tensor, await _entry(files, path, storage), order)


async def _entry(files: Files, path: str, entry: torchbin.Entry) -> bytes:
    offset, length = torchbin.entry_span(entry)
    return torchbin.entry_data(entry, await files.read_range(path, offset, length))
