"""Issue 24, item 5: a patch target reached through a folder symlink that leaves the package is refused
like `..`, before anything on the host changes."""

from __future__ import annotations

import json
import shutil

from support.cli import orch_main
from support.corpus import build
from support.files import modes_snapshot


def test_a_patch_target_through_a_folder_link_out_of_the_package_is_refused(host, tmp_path):
    workdir, places = host
    [package] = [p for p in workdir.rglob("sglang") if p.is_dir() and (p / "srt").is_dir()
                 and "__pycache__" not in p.parts]
    models = package / "srt" / "models"
    elsewhere = tmp_path / "elsewhere-models"
    shutil.move(models, elsewhere)
    models.symlink_to(elsewhere)
    try:
        project = build({"args": []}, tmp_path, places)
        before, outside = modes_snapshot(workdir), {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()}
        code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
        shown = f"exit {code}\nstdout:\n{out}\nstderr:\n{err}\n{crash or ''}"
        assert crash is None and "Traceback" not in out + err, shown
        assert code == 2, shown
        said = " ".join((out + err).split())
        assert f"leads to {elsewhere}/llama_eagle3.py, outside the package folder {package.resolve()} (through a symlink)" in said, shown
        assert modes_snapshot(workdir) == before, shown
        assert {p.name: p.read_bytes() for p in elsewhere.iterdir() if p.is_file()} == outside
    finally:
        models.unlink()
        shutil.move(elsewhere, models)


def test_a_patched_file_that_is_a_symlink_stays_one_after_the_run(host, tmp_path):
    workdir, places = host
    [package] = [p for p in workdir.rglob("sglang") if p.is_dir() and (p / "srt").is_dir()
                 and "__pycache__" not in p.parts]
    models = package / "srt" / "models"
    link, real = models / "llama_eagle3.py", models / "llama_eagle3_real.py"
    link.rename(real)
    link.symlink_to(real.name)
    try:
        project = build({"args": []}, tmp_path, places)
        original = real.read_bytes()
        code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
        shown = f"exit {code}\nstdout:\n{out}\nstderr:\n{err}\n{crash or ''}"
        assert crash is None and code == 0, shown
        assert link.is_symlink() and link.readlink().as_posix() == real.name, shown
        assert real.read_bytes() == original and not real.is_symlink()
        record = json.loads(orch_main(project, ["show", "last", "--json"])[1])
        assert [p["file"] for p in record["patches"]] == [str(real)], record["patches"]  # the link never replaced
    finally:
        link.unlink()
        real.rename(link)
