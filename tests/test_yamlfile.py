"""Anything but a sane UTF-8 YAML mapping is one clear line naming the file (and line)."""

from __future__ import annotations

import pytest

from orchestrator.core import yamlfile
from orchestrator.errors import SpecError


@pytest.mark.parametrize("name, data, message", [
    ("binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00", r"binary.yaml: is a binary file, not YAML"),
    ("latin1.yaml", "name: caf\u00e9\n".encode("latin-1"), r"latin1.yaml:1: not UTF-8 text \(byte 0xe9\)"),
    ("empty.yaml", b"", r"empty.yaml:1: the file is empty"),
    ("comments.yaml", b"# nothing yet\n", r"comments.yaml:1: the file is empty"),
    ("tabs.yaml", b"name: x\nparams:\n\ttp_size: 8\n", r"tabs.yaml:3: YAML syntax error: .*indent with spaces, not tabs"),
    ("list.yaml", b"- a\n- b\n", r"list.yaml:1: expected a mapping of keys at the top level, got list"),
    ("twice.yaml", b"name: a\nname: b\n", r"twice.yaml:2: key 'name' is written twice"),
    ("control.yaml", b"name: a\x07b\n", r"control.yaml:1: character '\\x07' is not allowed in YAML; remove it"),
])
def test_bad_files(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(SpecError, match=message):
        yamlfile.load(path)


def test_a_folder_and_a_huge_file_are_refused_without_reading(tmp_path):
    with pytest.raises(SpecError, match="is a folder, not a YAML file"):
        yamlfile.load(tmp_path)
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as handle:
        handle.truncate(50 << 20)  # sparse: 50 MB that would take a while to parse
    with pytest.raises(SpecError, match=r"huge.yaml: 52428800 bytes is too big"):
        yamlfile.load(huge)


def test_a_misspelled_key_gets_a_suggestion():
    data = yamlfile.loads("name: x\nworklaod: {}\n", "e.yaml")
    with pytest.raises(SpecError, match=r"e.yaml:2: unknown key 'worklaod' in the experiment; did you mean 'workload'\?"):
        yamlfile.check_keys(data, {"name", "workload", "params"}, "the experiment")
