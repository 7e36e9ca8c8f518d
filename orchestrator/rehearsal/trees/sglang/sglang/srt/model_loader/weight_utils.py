"""Reading safetensors files without the safetensors package."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from sglang.srt import _torch as torch

DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_, "U8": np.uint8}


def safetensors_weights_iterator(files: list[Path]):
    """Yield (name, tensor) for every tensor in the files, in file order."""
    for file in files:
        raw = Path(file).read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + header_len])
        base = 8 + header_len
        entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
        for name, entry in entries:
            if entry["dtype"] not in DTYPES:
                raise ValueError(f"{file}: tensor {name} has unsupported dtype {entry['dtype']}")
            start, end = entry["data_offsets"]
            dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
            array = np.frombuffer(raw, dtype=dtype, count=(end - start) // dtype.itemsize, offset=base + start)
            yield name, torch.tensor(array.reshape(entry["shape"]).astype(DTYPES[entry["dtype"]]))


def weight_files(model_path: str) -> list[Path]:
    return sorted(Path(model_path).glob("*.safetensors"))
