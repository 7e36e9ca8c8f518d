"""Runs with different patch sets on one host at once: the second gets its own patched copy of the
engine's package on its PYTHONPATH (`host/overlay.py`), the installed files stay untouched; a run
whose patch is not in a package waits for the host to drain (`run/slots.py`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, free_port
from support.cli import orch
from support.files import sglang_tree, shipped, snapshot
from support.specs import runs, window

from orchestrator.core.inventory import Host
from orchestrator.errors import OrchError
from orchestrator.core.spec import PatchDef, RunPlan
from orchestrator.host import overlay
from orchestrator.remote.local import LocalConnection
from orchestrator.run.slots import Slots

ANCHOR = "hidden_states = forward_batch.spec_info.hidden_states"


def mark(variant: str) -> dict:
    """A patch that prints which variant's patch set the server imported, once."""
    return {"file": "sglang:srt/models/llama_eagle3.py", "find": ANCHOR, "insert_after": (
        'if not getattr(self, "_orch_mark", False):\n'
        "    self._orch_mark = True\n"
        f'    print("[EAGLE3-DEBUG] patch_set={variant}", flush=True)\n')}


def test_two_tp4_runs_with_different_patch_sets_run_at_once_each_seeing_only_its_own(project, tmp_path):
    spec = yaml.safe_load((ROOT / "experiments" / "eagle_debug.yaml").read_text())
    spec["params"]["tp_size"] = 4
    spec["workload"] = {"requests": 8, "max_new_tokens": 48, "concurrency": 4}  # short: the servers' overlap is the point
    spec["patches"].update({"mark-story": mark("story"), "mark-fixed": mark("fixed")})
    for name in ("story", "fixed"):
        spec["variants"][name]["patches"].append(f"mark-{name}")
    path = project / "experiments" / "overlay.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = orch(project, "run", str(path), "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    story, fixed = runs(project)
    assert [r["status"] for r in (story, fixed)] == ["succeeded", "succeeded"]
    assert {r["env"]["CUDA_VISIBLE_DEVICES"] for r in (story, fixed)} == {"0,1,2,3", "4,5,6,7"}
    assert story["params"]["port"] != fixed["params"]["port"]
    (a_up, a_down), (b_up, b_down) = window(story), window(fixed)
    assert a_up < b_down and b_up < a_down, "the two servers were never up at once"
    for run, own in ((story, "story"), (fixed, "fixed")):
        seen = {d["fields"]["patch_set"] for d in run["debug_lines"] if "patch_set" in d["fields"]}
        assert seen == {own}, (run["variant"], seen)
        assert all(p["state"] == "reverted" for p in run["patches"])
    # the first patched the installed files (the journal); the second, started meanwhile, its own copy
    assert "isolated" not in {e["kind"] for e in story["events"]}
    [isolated] = [e for e in fixed["events"] if e["kind"] == "isolated"]
    site = f"{fixed['params']['patched_site']}"
    assert site in isolated["message"] and "installed files untouched" in isolated["message"]
    assert fixed["env"]["PYTHONPATH"].split(":")[0] == site and f"export PYTHONPATH={site}:" in fixed["command"]
    assert all(p["file"].startswith(site + "/sglang/") for p in fixed["patches"])
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
    assert not list((project / "host" / "runs").glob("*/site")), "a patched copy was left behind"


def plan(variant: str, *targets: str) -> RunPlan:
    patches = tuple(PatchDef(name=f"{variant}-{i}", file=t, find="x", where="test.yaml") for i, t in enumerate(targets))
    return RunPlan("e", variant, {"tp_size": 4}, {}, patches, {}, 0, ())


def test_a_run_whose_patch_is_outside_any_package_waits_for_the_host_to_drain():
    slots = Slots(Host(name="h", transport="local", gpus=8))
    first = slots.lease(plan("a", "sglang:srt/models/llama.py"))
    assert first is not None and not first.isolated  # the first run patches the installed files
    assert slots.lease(plan("outside", "/opt/site/config.py")) is None  # no copy can hold it: it waits
    other = slots.lease(plan("b", "sglang:srt/models/kimi_k25.py"))
    assert other is not None and other.isolated and other.plan(plan("b")).params["patched_site"] == "{{ run.dir }}/site"
    slots.release(first)
    slots.release(other)
    alone = slots.lease(plan("outside", "/opt/site/config.py"))  # the host drained: it patches in place
    assert alone is not None and not alone.isolated
    assert slots.lease(plan("b", "sglang:srt/models/kimi_k25.py")) is None  # no copy keeps out an absolute path


def test_a_copy_links_every_installed_file_and_holds_its_own_patched_ones(tmp_path):
    """On real files: the copy's patched file is its own (its stale bytecode link gone), the rest
    link to the installed files, and removing the copy leaves the installed tree as it was."""
    installed = tmp_path / "lib" / "pkg"
    (installed / "sub" / "__pycache__").mkdir(parents=True)
    (installed / "__init__.py").write_text("from .sub import mod\n")
    (installed / "sub" / "__init__.py").write_text("")
    (installed / "sub" / "mod.py").write_text("WHO = 'installed'\n")
    (installed / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")
    before = snapshot(tmp_path / "lib")
    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path)))
    site = str(tmp_path / "run" / "site")
    copy = asyncio.run(overlay.build(conn, site, {"pkg": str(installed)},
                                     {str(installed / "sub" / "mod.py"): b"WHO = 'patched'\n"}))
    own = tmp_path / "run" / "site" / "pkg" / "sub" / "mod.py"
    assert copy.files == {str(installed / "sub" / "mod.py"): str(own)}
    assert own.read_text() == "WHO = 'patched'\n" and not own.is_symlink()
    assert (own.parent / "__init__.py").is_symlink() and not (own.parent / "__pycache__" / "mod.cpython-311.pyc").exists()
    assert not (own.parent).is_symlink()  # real folders: Python's bytecode writes stay in the copy
    assert snapshot(tmp_path / "lib") == before
    assert (installed / "sub" / "__pycache__" / "mod.cpython-311.pyc").read_bytes() == b"stale"
    seen = subprocess.run([sys.executable, "-c", "import pkg; print(pkg.mod.WHO, pkg.mod.__file__)"], text=True,
                          capture_output=True, env={"PYTHONPATH": f"{site}:{tmp_path / 'lib'}"}, check=True).stdout.split()
    assert seen == ["patched", str(own)]  # imported from the copy, relative imports included
    asyncio.run(overlay.remove(conn, site))
    assert not (tmp_path / "run" / "site").exists() and snapshot(tmp_path / "lib") == before


def test_a_file_vanishing_while_the_copy_is_made_gets_the_tree_walked_again(tmp_path, monkeypatch):
    """Another run's patch is written beside its target and renamed onto it; a walk of the tree
    that meets the vanished name fails (here: a `cp` first on PATH failing its first walk, as GNU
    cp does then): the copy is made by the next walk, and a host whose every walk fails still gets
    the last walk's error."""
    import os
    import shutil

    installed = tmp_path / "lib" / "pkg"
    installed.mkdir(parents=True)
    (installed / "mod.py").write_text("WHO = 'installed'\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    failing = tools / "cp"
    failing.write_text(f"#!/bin/sh\nif [ ! -e {tmp_path}/walked ] || [ -e {tmp_path}/always ]; then touch {tmp_path}/walked\n"
                       f"  echo \"cp: cannot stat '$3/.mod.py.x.orch-tmp': No such file or directory\" >&2; exit 1; fi\n"
                       f"exec {shutil.which('cp')} \"$@\"\n")
    failing.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path)))
    site = str(tmp_path / "run" / "site")
    asyncio.run(overlay.build(conn, site, {"pkg": str(installed)}, {}))
    assert (tmp_path / "walked").exists() and (tmp_path / "run" / "site" / "pkg" / "mod.py").is_symlink()
    (tmp_path / "always").touch()
    with pytest.raises(OrchError, match=r"could not build the run's patched copy of pkg .*\.mod\.py\.x\.orch-tmp"):
        asyncio.run(overlay.build(conn, str(tmp_path / "run2" / "site"), {"pkg": str(installed)}, {}))
