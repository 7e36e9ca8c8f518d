"""A `torch.save` checkpoint (`pytorch_model.bin`) read without torch and without running its
pickle: the tensors' names, dtypes and shapes, and the bytes of the few small ones asked for.

The format since torch 1.6 is a zip archive (entries stored, not compressed): `<name>/data.pkl`
pickles the state dict, each tensor as `torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)` with its storage a persistent id `('storage', torch.FloatStorage, key, location,
numel)` whose bytes are the entry `<name>/data/<key>`. A restricted unpickler builds inert records
from the handful of globals a state dict needs and refuses every other one, so nothing in the file
is ever called.

Pure: every function takes bytes already read (the archive's tail, its central directory, one
entry) and says which range to read next; where the bytes come from is the caller's business.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
from dataclasses import dataclass

import numpy as np

from .safetensors import NUMPY_DTYPES, TensorInfo

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTO = b"\x80"
END_RECORD = b"PK\x05\x06"
END64_LOCATOR = b"PK\x06\x07"
END64_RECORD = b"PK\x06\x06"
CENTRAL = b"PK\x01\x02"
TAIL = 22 + 65535 + 20  # the end record, its longest comment, and the zip64 locator before it
LOCAL_HEADER = 30
HEADER_SLACK = 256  # torch pads each entry's extra field to 64-byte alignment; this covers it
MAX_PICKLE = 256 * 2**20
STORAGE_DTYPES = {
    "FloatStorage": "F32", "DoubleStorage": "F64", "HalfStorage": "F16", "BFloat16Storage": "BF16",
    "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
    "ByteStorage": "U8", "BoolStorage": "BOOL", "UntypedStorage": "U8",
}
TORCH_DTYPES = {
    "float32": "F32", "float": "F32", "float64": "F64", "double": "F64", "float16": "F16", "half": "F16",
    "bfloat16": "BF16", "int64": "I64", "long": "I64", "int32": "I32", "int": "I32", "int16": "I16",
    "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
REBUILDERS = ("_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter", "_rebuild_parameter_with_state")


class Unreadable(ValueError):
    """The file cannot be read as a state dict; the message says why, plainly."""


@dataclass(frozen=True)
class Entry:
    name: str
    offset: int  # of its local header
    size: int
    compressed: int
    method: int  # 0: stored


@dataclass(frozen=True)
class Storage:
    key: str
    dtype: str  # safetensors' names: F32, BF16, I64, BOOL ...
    numel: int


@dataclass(frozen=True)
class Tensor:
    storage: Storage
    offset: int  # in elements of the storage
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class DType:
    name: str


def kind(head: bytes) -> str:
    """'zip' (torch >= 1.6), 'legacy' (the older pickle stream) or 'unknown', from the first bytes."""
    if head.startswith(ZIP_MAGIC):
        return "zip"
    return "legacy" if head.startswith(PICKLE_PROTO) else "unknown"


def directory_span(tail: bytes, file_size: int) -> tuple[int, int] | int:
    """(offset, length) of the central directory, from the file's last bytes; or, for a zip64
    archive whose record lies before `tail`, the absolute offset of that record to read next."""
    at = tail.rfind(END_RECORD)
    if at < 0 or len(tail) - at < 22:
        raise Unreadable("no zip end-of-directory record: the file is truncated or not a torch checkpoint")
    _, _, _, _, count, size, offset, _ = struct.unpack("<IHHHHIIH", tail[at : at + 22])
    if 0xFFFFFFFF not in (size, offset) and count != 0xFFFF:
        return offset, size
    locator = at - 20
    if locator < 0 or tail[locator : locator + 4] != END64_LOCATOR:
        raise Unreadable("a zip64 archive without its locator record: the file is truncated")
    (record,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
    start = file_size - len(tail)
    if record < start:
        return record
    return zip64_span(tail[record - start :])


def zip64_span(record: bytes) -> tuple[int, int]:
    """(offset, length) of the central directory from a zip64 end record."""
    if not record.startswith(END64_RECORD) or len(record) < 56:
        raise Unreadable("a broken zip64 end record: the file is truncated")
    size, offset = struct.unpack("<QQ", record[40:56])
    return offset, size


def entries(directory: bytes) -> dict[str, Entry]:
    """The archive's entries from its central directory."""
    found, at = {}, 0
    while directory[at : at + 4] == CENTRAL:
        method, = struct.unpack("<H", directory[at + 10 : at + 12])
        compressed, size, name_len, extra_len, comment_len = struct.unpack("<IIHHH", directory[at + 20 : at + 34])
        (offset,) = struct.unpack("<I", directory[at + 42 : at + 46])
        name = directory[at + 46 : at + 46 + name_len].decode("utf-8", errors="replace")
        extra = directory[at + 46 + name_len : at + 46 + name_len + extra_len]
        size, compressed, offset = _zip64_fields(extra, size, compressed, offset)
        found[name] = Entry(name, offset, size, compressed, method)
        at += 46 + name_len + extra_len + comment_len
    if not found:
        raise Unreadable("the zip central directory is empty or unreadable")
    return found


def _zip64_fields(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """Sizes and offset past 4 GiB live in the zip64 extra field, in this order, when maxed out."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack("<HH", extra[at : at + 4])
        if tag == 1:
            values, pos = [], at + 4
            for current in (size, compressed, offset):
                if current == 0xFFFFFFFF and pos + 8 <= at + 4 + length:
                    values.append(struct.unpack("<Q", extra[pos : pos + 8])[0])
                    pos += 8
                else:
                    values.append(current)
            return values[0], values[1], values[2]
        at += 4 + length
    return size, compressed, offset


def pickle_entry(found: dict[str, Entry]) -> Entry:
    """The `<name>/data.pkl` entry; its folder prefixes every storage entry."""
    for name, entry in found.items():
        if name.endswith("data.pkl") and name.count("/") == 1:
            return entry
    raise Unreadable("no <name>/data.pkl in the archive: not a torch.save checkpoint")


def storage_entry(found: dict[str, Entry], pkl: Entry, storage: Storage) -> Entry:
    name = pkl.name[: -len("data.pkl")] + f"data/{storage.key}"
    if name not in found:
        raise Unreadable(f"storage {storage.key} of the state dict is missing from the archive")
    return found[name]


def byteorder_entry(found: dict[str, Entry], pkl: Entry) -> Entry | None:
    return found.get(pkl.name[: -len("data.pkl")] + "byteorder")


def entry_span(entry: Entry) -> tuple[int, int]:
    """What to read for an entry: its local header (with slack for the extra field) and its data."""
    if entry.method != 0:
        raise Unreadable(f"{entry.name} is compressed (method {entry.method}); torch.save stores entries uncompressed")
    return entry.offset, LOCAL_HEADER + len(entry.name.encode()) + HEADER_SLACK + entry.size


def entry_data(entry: Entry, raw: bytes) -> bytes:
    """An entry's bytes from what `entry_span` read."""
    if raw[:4] != ZIP_MAGIC:
        raise Unreadable(f"{entry.name}: no local header where the directory says")
    name_len, extra_len = struct.unpack("<HH", raw[26:30])
    start = LOCAL_HEADER + name_len + extra_len
    data = raw[start : start + entry.size]
    if len(data) != entry.size:
        raise Unreadable(f"{entry.name}: the file ends inside the entry (truncated)")
    return data


# -- the pickle, unpickled without calling anything from it ----------------------------------------


def _rebuild(storage, offset, shape, stride, *rest):
    dtype = next((r.name for r in rest if isinstance(r, DType)), storage.dtype)  # v3 names the dtype
    return Tensor(storage, int(offset), tuple(int(d) for d in shape), tuple(int(s) for s in stride), dtype)


def _parameter(data, *_rest):
    return data


class _Restricted(pickle.Unpickler):
    """Builds records for the globals a state dict needs; any other global is refused by name."""

    def find_class(self, module: str, name: str):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils" and name in REBUILDERS:
            return _parameter if "parameter" in name else _rebuild
        if module in ("torch", "torch.storage") and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        if module == "torch" and name in TORCH_DTYPES:
            return DType(TORCH_DTYPES[name])
        raise Unreadable(f"its pickle names {module}.{name}, which a state dict never needs; refused, nothing run")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], str)):
            raise Unreadable(f"its pickle has an unknown persistent id {str(pid)[:60]}")
        _, dtype, key, _location, numel = pid
        return Storage(str(key), dtype, int(numel))


def state_dict(pkl: bytes) -> dict[str, Tensor]:
    """The tensors of a `data.pkl`, by name, built as inert records."""
    if len(pkl) > MAX_PICKLE:
        raise Unreadable(f"its data.pkl is {len(pkl)} bytes, far more than a state dict needs")
    try:
        top = _Restricted(io.BytesIO(pkl)).load()
    except Unreadable:
        raise
    except Exception as exc:  # a malformed stream: any pickle error, said plainly
        raise Unreadable(f"its data.pkl does not unpickle: {type(exc).__name__}: {exc}") from None
    if not isinstance(top, dict):
        raise Unreadable(f"it holds a {type(top).__name__}, not a state dict")
    tensors = {str(k): v for k, v in top.items() if isinstance(v, Tensor)}
    if not tensors:
        raise Unreadable("no tensors at its top level (a training checkpoint rather than a state dict?)")
    return tensors


def infos(tensors: dict[str, Tensor]) -> dict[str, TensorInfo]:
    """Name, dtype and shape of each tensor, as the safetensors reader gives them (no offsets)."""
    return {name: TensorInfo(name, t.dtype, t.shape, 0, 0) for name, t in tensors.items()}


def decode(tensor: Tensor, storage: bytes, byteorder: str = "little") -> np.ndarray:
    """A tensor's values from its storage entry's bytes (numpy dtypes only)."""
    if tensor.dtype not in NUMPY_DTYPES:
        raise Unreadable(f"dtype {tensor.dtype} has no numpy equivalent")
    dtype = np.dtype(NUMPY_DTYPES[tensor.dtype]).newbyteorder("<" if byteorder == "little" else ">")
    values = np.frombuffer(storage, dtype=dtype)
    end = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride)) + 1
    if any(n == 0 for n in tensor.shape):
        return np.zeros(tensor.shape, dtype=dtype)
    if tensor.offset < 0 or end > len(values):
        raise Unreadable(f"a tensor reaches past its storage ({end} > {len(values)} elements)")
    size = dtype.itemsize
    view = np.lib.stride_tricks.as_strided(values[tensor.offset :], tensor.shape, tuple(s * size for s in tensor.stride))
    return np.array(view)
