"""`pytorch_model.bin` read without torch and without running its pickle: the real torch 2.13
files in tests/fixtures/drafts (written by make_bin.py), a zip64 form of one, and broken or hostile
archives, each refused with one plain reason."""

from __future__ import annotations

import asyncio
import io
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from orchestrator.engines import draftweights as preflight_weights
from orchestrator.engines import torchbin
from orchestrator.engines.hostfiles import HostFiles

FIXTURES = ROOT / "tests" / "fixtures" / "drafts"
HOT = np.array([3, 4, 5, 9, 10, 20, 21, 22, 30, 31, 40, 41, 42, 50, 51, 60])  # make_bin.py's kept ids
EXPECTED = {  # make_bin.py's tiny draft: SpecForge's key names, bf16 weights, int64 d2t, bool t2d
    "midlayer.self_attn.q_proj.weight": ("BF16", (8, 16)), "midlayer.self_attn.k_proj.weight": ("BF16", (4, 16)),
    "midlayer.self_attn.v_proj.weight": ("BF16", (4, 16)), "midlayer.self_attn.o_proj.weight": ("BF16", (8, 8)),
    "midlayer.mlp.gate_proj.weight": ("BF16", (16, 8)), "midlayer.mlp.up_proj.weight": ("BF16", (16, 8)),
    "midlayer.mlp.down_proj.weight": ("BF16", (8, 16)), "midlayer.input_layernorm.weight": ("BF16", (8,)),
    "midlayer.hidden_norm.weight": ("BF16", (8,)), "midlayer.post_attention_layernorm.weight": ("BF16", (8,)),
    "fc.weight": ("BF16", (8, 24)), "norm.weight": ("BF16", (8,)), "lm_head.weight": ("BF16", (16, 8)),
    "d2t": ("I64", (16,)), "t2d": ("BOOL", (64,)),
}


def read(path: Path) -> preflight_weights.DraftWeights:
    """The draft folder holding `path` as its only weight file, read as the preflight reads a host."""
    return asyncio.run(preflight_weights.read(HostFiles(None, {"/d": path.parent}), "/d"))


def folder_with(tmp_path: Path, data: bytes) -> Path:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "pytorch_model.bin").write_bytes(data)
    return tmp_path / "d" / "pytorch_model.bin"


def test_a_real_torch_save_file_gives_its_names_dtypes_shapes_and_vocabulary():
    found = read(FIXTURES / "tiny-bin" / "pytorch_model.bin")
    assert found.unread is None and found.files == 1
    assert {k: (t.dtype, t.shape) for k, t in found.tensors.items()} == EXPECTED
    assert np.array_equal(found.vocab["d2t"], HOT - np.arange(16))
    assert np.array_equal(np.flatnonzero(found.vocab["t2d"]), HOT)


def zip64(data: bytes) -> bytes:
    """The archive as torch writes one past 4 GiB: its plain end record maxed out, so that only the
    zip64 record (which torch writes, with its locator, even for small files) tells where the
    directory is."""
    at = data.rfind(torchbin.END_RECORD)
    assert data[at - 20 : at - 16] == torchbin.END64_LOCATOR
    end = struct.pack("<4sHHHHIIH", torchbin.END_RECORD, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:at] + end


def test_a_zip64_archive_reads_the_same(tmp_path):
    data = zip64((FIXTURES / "tiny-bin" / "pytorch_model.bin").read_bytes())
    path = folder_with(tmp_path, data)
    assert len(zipfile.ZipFile(path).namelist()) > 10  # a valid archive to Python's own reader too
    found = read(path)
    assert {k: (t.dtype, t.shape) for k, t in found.tensors.items()} == EXPECTED
    assert np.array_equal(found.vocab["d2t"], HOT - np.arange(16))


def test_a_strided_view_decodes_as_torch_lays_it_out():
    storage = torchbin.Storage("0", "F32", 16)
    view = torchbin.Tensor(storage, offset=1, shape=(3, 2), stride=(4, 2), dtype="F32")
    values = np.arange(16, dtype="<f4").tobytes()
    assert torchbin.decode(view, values).tolist() == [[1, 3], [5, 7], [9, 11]]
    with pytest.raises(torchbin.Unreadable, match="past its storage"):
        torchbin.decode(torchbin.Tensor(storage, 10, (3, 2), (4, 2), "F32"), values)


class _Call:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def archive(pkl: bytes, compress: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compress) as z:
        z.writestr("archive/data.pkl", pkl)
    return out.getvalue()


@pytest.mark.parametrize("data, words", [
    (archive(pickle.dumps({"x": _Call(eval, "1")}, protocol=2)), "names __builtin__.eval, which a state dict never needs"),
    (archive(pickle.dumps([1, 2], protocol=2)), "it holds a list, not a state dict"),
    (archive(pickle.dumps({"epoch": 3}, protocol=2)), "no tensors at its top level"),
    (archive(b"\x80\x02garbage"), "does not unpickle"),
    (archive(pickle.dumps({}, protocol=2), zipfile.ZIP_DEFLATED), "is compressed"),
    ((FIXTURES / "tiny-bin" / "pytorch_model.bin").read_bytes()[:-30], "no zip end-of-directory record"),
    (b"\x00" * 64, "not a torch.save zip archive"),
])
def test_a_file_that_cannot_be_read_safely_says_why_in_one_line(tmp_path, data, words):
    found = read(folder_with(tmp_path, data))
    assert words in found.unread and found.tensors == {} and "\n" not in found.unread


def test_safetensors_win_over_bin_and_training_files_are_not_weights(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "training_args.bin").write_bytes(b"\x80\x02}q\x00.")  # a trainer's pickle, never read
    (tmp_path / "d" / "pytorch_model.bin").write_bytes((FIXTURES / "tiny-bin" / "pytorch_model.bin").read_bytes())
    found = asyncio.run(preflight_weights.read(HostFiles(None, {"/d": tmp_path / "d"}), "/d"))
    assert found.files == 1 and found.unread is None and set(found.tensors) == set(EXPECTED)
    from orchestrator.engines import safetensors

    safetensors.write_file(tmp_path / "d" / "model.safetensors", None, [("fc.weight", np.zeros((2, 6), np.float16))], {})
    found = asyncio.run(preflight_weights.read(HostFiles(None, {"/d": tmp_path / "d"}), "/d"))
    assert set(found.tensors) == {"fc.weight"} and found.files == 1  # as SGLang: safetensors when there are any
