"""Reading a draft's safetensors files with numpy (the format: 8-byte header length, JSON header,
raw little-endian tensors)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def read(folder: Path) -> list[tuple[str, np.ndarray]]:
    """Every tensor of every *.safetensors file in `folder`, in file then header order."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise RuntimeError(f"Cannot find any model weights with `{folder}`")
    out = []
    for path in files:
        data = path.read_bytes()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        header.pop("__metadata__", None)
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            raw = data[8 + length + begin:8 + length + end]
            out.append((name, np.frombuffer(raw, dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
                        .reshape(entry["shape"]).astype(np.float64 if entry["dtype"].startswith("F") else None)))
    return out
