"""The safetensors format, read and written without torch: an 8-byte little-endian header length,
a JSON header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the
raw tensor bytes (offsets are relative to the end of the header).

Pure apart from `read_header_file` / `read_tensor_file` / `write_file`, which take local paths.
Tensor bytes are copied as they are, so dtypes numpy lacks (BF16, F8) survive a rename untouched.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PREFIX = 8
MAX_HEADER = 100 * 2**20  # the format's own limit on the JSON header
NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "BOOL": np.bool_,
}
DTYPE_NAMES = {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}
COPY_CHUNK = 8 * 2**20


class FormatError(ValueError):
    """The bytes are not a safetensors file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # relative to the data section
    end: int


@dataclass(frozen=True)
class Header:
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int  # absolute offset of the data section in the file

    def keys(self) -> list[str]:
        return list(self.tensors)


def header_length(prefix: bytes, where: str = "") -> int:
    """The JSON header's length from the file's first 8 bytes."""
    if len(prefix) < PREFIX:
        raise FormatError(f"{where}: {len(prefix)} bytes; a safetensors file starts with an 8-byte header length")
    (length,) = struct.unpack("<Q", prefix[:PREFIX])
    if length == 0 or length > MAX_HEADER:
        raise FormatError(f"{where}: header length {length} is not plausible; not a safetensors file")
    return length


def parse_header(data: bytes, where: str = "") -> Header:
    """`data` = the first 8 + header-length bytes of a file (more is fine)."""
    length = header_length(data, where)
    raw = data[PREFIX : PREFIX + length]
    if len(raw) < length:
        raise FormatError(f"{where}: truncated header ({len(raw)} of {length} bytes)")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{where}: header is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise FormatError(f"{where}: header is not a JSON object")
    metadata = body.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in body.items():
        try:
            begin, end = entry["data_offsets"]
            tensors[name] = TensorInfo(name, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), int(begin), int(end))
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"{where}: tensor {name!r} has no valid dtype/shape/data_offsets") from None
    return Header(tensors, {str(k): str(v) for k, v in metadata.items()}, PREFIX + length)


def decode(info: TensorInfo, raw: bytes) -> np.ndarray:
    """A tensor's bytes -> a numpy array (little-endian, as the format stores it)."""
    if info.dtype not in NUMPY_DTYPES:
        raise FormatError(f"tensor {info.name}: dtype {info.dtype} has no numpy equivalent")
    dtype = np.dtype(NUMPY_DTYPES[info.dtype]).newbyteorder("<")
    if len(raw) != info.end - info.begin:
        raise FormatError(f"tensor {info.name}: expected {info.end - info.begin} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(info.shape)


def encode(value: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    """A numpy array -> (dtype name, shape, little-endian bytes)."""
    array = np.ascontiguousarray(value)
    if array.dtype not in DTYPE_NAMES:
        raise FormatError(f"numpy dtype {array.dtype} cannot be stored in safetensors here")
    name = DTYPE_NAMES[array.dtype]
    return name, tuple(array.shape), array.astype(array.dtype.newbyteorder("<")).tobytes()


def header_bytes(entries: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str]) -> bytes:
    """The 8-byte length and padded JSON header for (name, dtype, shape, nbytes) in data order."""
    body: dict = {}
    offset = 0
    for name, dtype, shape, size in entries:
        body[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        body["__metadata__"] = metadata
    raw = json.dumps(body, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


# -- local files --------------------------------------------------------------------------------


def read_header_file(path: Path) -> Header:
    with open(path, "rb") as handle:
        prefix = handle.read(PREFIX)
        length = header_length(prefix, str(path))
        return parse_header(prefix + handle.read(length), str(path))


def read_tensor_file(path: Path, name: str, header: Header | None = None) -> np.ndarray:
    """One tensor, read by its offset (the rest of the file is not read)."""
    header = header or read_header_file(path)
    info = header.tensors[name]
    with open(path, "rb") as handle:
        handle.seek(header.data_start + info.begin)
        return decode(info, handle.read(info.end - info.begin))


def write_file(path: Path, source: Path | None, plan: list[tuple[str, TensorInfo | np.ndarray]],
               metadata: dict[str, str]) -> None:
    """Write `plan` in order: each entry is (new name, a TensorInfo of `source` whose bytes are copied
    in chunks, or an array to encode). Written to `path` directly; the caller renames it."""
    entries, arrays = [], {}
    for name, item in plan:
        if isinstance(item, TensorInfo):
            entries.append((name, item.dtype, item.shape, item.end - item.begin))
        else:
            dtype, shape, raw = encode(item)
            arrays[name] = raw
            entries.append((name, dtype, shape, len(raw)))
    src_header = read_header_file(source) if source is not None else None
    with open(path, "wb") as out, (open(source, "rb") if source is not None else open(os.devnull, "rb")) as src:
        out.write(header_bytes(entries, metadata))
        for name, item in plan:
            if not isinstance(item, TensorInfo):
                out.write(arrays[name])
                continue
            assert src_header is not None
            src.seek(src_header.data_start + item.begin)
            left = item.end - item.begin
            while left:
                chunk = src.read(min(COPY_CHUNK, left))
                if not chunk:
                    raise FormatError(f"{source}: file ends inside tensor {item.name}")
                out.write(chunk)
                left -= len(chunk)
        out.flush()
        os.fsync(out.fileno())
