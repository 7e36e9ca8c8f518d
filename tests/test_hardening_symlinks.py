"""Issue 24, item 6: symlinks in a checkpoint folder. A link inside the folder is pushed as what it points
to; one that leaves the folder is refused with one line before anything moves."""

from __future__ import annotations

import os

import pytest

from orchestrator.errors import SpecError
from orchestrator.host import push


def _checkpoint(tmp_path):
    folder = tmp_path / "draft"
    (folder / "shards").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "shards" / "model.safetensors").write_bytes(b"weights")
    return folder


def test_a_link_inside_the_folder_is_pushed_as_what_it_points_to(tmp_path):
    folder = _checkpoint(tmp_path)
    os.symlink("shards/model.safetensors", folder / "model.safetensors")
    os.symlink("shards", folder / "more")
    manifest = push.local_manifest(folder, tmp_path / "cache")
    by_path = {e.path: e for e in manifest.entries}
    assert by_path["model.safetensors"].sha256 == by_path["shards/model.safetensors"].sha256
    assert "more/model.safetensors" in by_path  # a folder link is walked, not skipped


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_link_leaving_the_folder_is_refused_in_one_line(tmp_path, kind):
    folder = _checkpoint(tmp_path)
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "id_ed25519").write_text("not for the host")
    os.symlink(outside / "id_ed25519" if kind == "file" else outside, folder / "leak")
    with pytest.raises(SpecError) as raised:
        push.local_manifest(folder, tmp_path / "cache")
    message = str(raised.value)
    assert "leak: a symlink to" in message and "outside the checkpoint folder" in message and "\n" not in message


def test_a_folder_link_to_its_own_parent_is_refused_not_walked_forever(tmp_path):
    folder = _checkpoint(tmp_path)
    os.symlink("..", folder / "shards" / "loop")
    with pytest.raises(SpecError, match="a symlink to its own parent folder"):
        push.local_manifest(folder, tmp_path / "cache")
